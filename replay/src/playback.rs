//! Playback: reproduce recorded results from the records alone and compare them byte for
//! byte. A result can be reproduced when everything it depended on is in the journal: the
//! contents of a file aido wrote earlier in the session (for read_file and checksum), or a
//! recorded input (random_bytes). Results that depended on the world outside the journal (a
//! file aido never wrote) are counted as not reproducible, never guessed.

use aido_actions::Action;
use aido_actions::fs::HashAlgorithm;
use aido_journal::{Event, Journal, Record};
use serde::Serialize;
use serde_json::Value;

use crate::derive::Derived;

/// A result playback could not reproduce.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    /// The completion record.
    pub seq: u64,
    /// The primitive.
    pub primitive: &'static str,
    /// What the record says.
    pub recorded: Value,
    /// What playback produced.
    pub reproduced: Value,
}

/// What playback found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Playback {
    /// Results reproduced byte for byte.
    pub reproduced: u64,
    /// Results that depend on state outside the journal.
    pub not_reproducible: u64,
    /// Results that came out different.
    pub mismatches: Vec<Mismatch>,
}

fn text_of(journal: &Journal, derived: &Derived, seq: u64, path: &str) -> Option<Vec<u8>> {
    let state = derived.state_at(seq);
    state
        .get(path)?
        .as_ref()
        .and_then(|h| journal.blob(h).ok().flatten())
}

/// Play the session back.
pub fn playback(journal: &Journal, records: &[Record], derived: &Derived) -> Playback {
    let mut out = Playback::default();
    let proposals: std::collections::HashMap<u64, &Action> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ActionProposed { action, .. } => Some((r.seq, action)),
            _ => None,
        })
        .collect();
    for r in records {
        let Event::ActionCompleted {
            proposal, outcome, ..
        } = &r.event
        else {
            continue;
        };
        let Some(action) = proposals.get(proposal) else {
            continue;
        };
        let recorded = &outcome.output;
        // The state the action saw: after every record before its completion.
        let seen = r.seq.saturating_sub(1);
        let reproduced: Option<Value> = match action {
            Action::RandomBytes(_) => outcome.inputs.iter().find_map(|i| match i {
                aido_actions::Input::Random { hex } => {
                    Some(serde_json::json!({"count": hex.len() / 2, "hex": hex}))
                }
                _ => None,
            }),
            Action::ReadFile(a)
                if a.offset.is_none()
                    && a.limit.is_none()
                    && a.encoding == aido_actions::fs::Encoding::Utf8 =>
            {
                let path = recorded["path"].as_str().unwrap_or_default();
                text_of(journal, derived, seen, path).and_then(|b| String::from_utf8(b).ok()).map(|content| {
                    let lines = content.lines().count();
                    serde_json::json!({"path": path, "content": content, "lines": lines, "offset": 1,
                                       "total_lines": lines, "truncated": false})
                })
            }
            // A change is reproduced from the contents it replaced (kept in the journal as the
            // effect's `before` blob) and the action's own arguments; the new contents must come
            // out as the blob the effect recorded.
            Action::WriteFile(a) if a.encoding == aido_actions::fs::Encoding::Utf8 => {
                match outcome.effects.as_slice() {
                    [aido_actions::Effect::FileWritten { path, blob, before }] => {
                        let same = blake3::hash(a.content.as_bytes()).to_hex().as_str() == blob;
                        same.then(|| serde_json::json!({"path": path, "bytes": a.content.len(), "created": before.is_none()}))
                    }
                    _ => None,
                }
            }
            Action::EditFile(a) => {
                let path = recorded["path"].as_str().unwrap_or_default().to_owned();
                let before = match outcome.effects.as_slice() {
                    [
                        aido_actions::Effect::FileWritten {
                            before: Some(b),
                            blob,
                            ..
                        },
                    ] => Some((b.clone(), Some(blob.clone()))),
                    [] if a.dry_run => derived
                        .state_at(seen)
                        .get(&path)
                        .cloned()
                        .flatten()
                        .map(|b| (b, None)),
                    _ => None,
                };
                before.and_then(|(b, after)| {
                    let old = String::from_utf8(journal.blob(&b).ok().flatten()?).ok()?;
                    let count = old.matches(&a.old_string).count();
                    let new = old.replace(&a.old_string, &a.new_string);
                    if let Some(after) = after
                        && blake3::hash(new.as_bytes()).to_hex().as_str() != after
                    {
                        return Some(serde_json::json!({"path": path, "new_contents_blob": blake3::hash(new.as_bytes()).to_hex().to_string()}));
                    }
                    let diff = diffy::create_patch(&old, &new).to_string();
                    Some(serde_json::json!({"path": path, "replacements": count, "diff": diff, "dry_run": a.dry_run}))
                })
            }
            Action::Checksum(a) => {
                let path = recorded["path"].as_str().unwrap_or_default();
                text_of(journal, derived, seen, path).map(|bytes| {
                    let (name, digest) = match a.algorithm {
                        HashAlgorithm::Blake3 => ("blake3", blake3::hash(&bytes).to_hex().to_string()),
                        HashAlgorithm::Sha256 => {
                            use sha2::Digest;
                            ("sha256", hex::encode(sha2::Sha256::digest(&bytes)))
                        }
                    };
                    serde_json::json!({"path": path, "algorithm": name, "digest": digest, "bytes": bytes.len()})
                })
            }
            _ => None,
        };
        match reproduced {
            None => out.not_reproducible += 1,
            Some(v) if serde_json::to_vec(&v).ok() == serde_json::to_vec(recorded).ok() => {
                out.reproduced += 1
            }
            Some(v) => out.mismatches.push(Mismatch {
                seq: r.seq,
                primitive: action.primitive(),
                recorded: recorded.clone(),
                reproduced: v,
            }),
        }
    }
    out
}
