//! Playback: reproduce every recorded result from the records alone and compare it byte for
//! byte. A body builds each result with a pure function of the action's arguments and the
//! inputs it read from the world, and records those inputs (file contents by blob hash,
//! metadata, the trash's answer, the clock, random bytes, other parts of the runtime's
//! answers). Playback walks the action tree with the executor's own walk (`aido_walk::walk`,
//! over a [`World`] whose leaves answer from the recorded inputs, in order) and calls the same
//! render functions (`aido_walk::fs::render`, `aido_walk::render`). A composite's result is a
//! function of its children's, built by the same code as when it ran.
//!
//! What cannot be reproduced is never guessed: results that depend on a guest machine's state
//! are counted as external, by primitive, with the reason; records written before inputs were
//! recorded are counted as not reproducible, with the reason.

use std::collections::BTreeMap;

use aido_actions::fs::{Encoding, HashAlgorithm};
use aido_actions::{
    Action, ArtifactAction, Body, BrowserAction, Condition, DesktopAction, Failure, FsAction,
    GatewayAction, HumanAction, Input, MemoryAction, Meta, NetAction, Outcome, ProcessAction,
    RuntimeAction, ScriptAction, SearchAction, VmAction,
};
use aido_journal::{Event, Journal, Record, SessionId};
use aido_walk::fs::FsError;
use aido_walk::fs::render::{self as fs_render, FileFacts, Replaced, Seen};
use aido_walk::render;
use aido_walk::walk::Answer;
use aido_walk::{Executed, Failed, World};
use serde::Serialize;
use serde_json::Value;

/// A result playback reproduced differently from the record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    /// The completion record.
    pub seq: u64,
    /// The primitive.
    pub primitive: &'static str,
    /// What the record says (text, output, effects, images).
    pub recorded: Value,
    /// What playback produced.
    pub reproduced: Value,
}

/// A result playback could not reproduce, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unplayable {
    /// The completion record.
    pub seq: u64,
    /// The primitive.
    pub primitive: &'static str,
    /// Why (e.g. the record predates recorded inputs).
    pub reason: String,
}

/// Results that depend on state outside aido, for one primitive.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct External {
    /// What the state is.
    pub reason: &'static str,
    /// How many results.
    pub count: u64,
}

/// What playback found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Playback {
    /// Results reproduced byte for byte.
    pub reproduced: u64,
    /// Results whose recorded inputs are incomplete (older records), with the reason.
    pub not_reproducible: Vec<Unplayable>,
    /// Results built from state outside aido (a guest machine's screen and memory), by the
    /// primitive that read it.
    pub external: BTreeMap<&'static str, External>,
    /// Results that came out different.
    pub mismatches: Vec<Mismatch>,
}

/// Why a machine primitive's result is outside the journal.
const GUEST_STATE: &str =
    "built from a guest machine's screen, memory and devices, which the journal does not hold";

/// Play the session back. `records` is the whole session, oldest first.
pub fn playback(journal: &Journal, records: &[Record]) -> Playback {
    let mut out = Playback::default();
    let proposals: std::collections::HashMap<u64, &Action> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ActionProposed { action, .. } => Some((r.seq, action)),
            _ => None,
        })
        .collect();
    let pruned_through = records.iter().rev().find_map(|r| match &r.event {
        Event::Pruned { through_seq, .. } => Some(*through_seq),
        _ => None,
    });
    for (index, r) in records.iter().enumerate() {
        // Completions, and failures of actions that ran (a refusal, a declined confirmation
        // or an interrupted action read nothing and recorded no inputs: nothing to reproduce).
        let (proposal, recorded_inputs, recorded) = match &r.event {
            Event::ActionCompleted {
                proposal, outcome, ..
            } => (proposal, &outcome.inputs, comparable(outcome)),
            Event::ActionFailed {
                proposal,
                failure,
                effects,
                inputs,
                ..
            } if !inputs.is_empty() => (proposal, inputs, failed(failure, effects)),
            _ => continue,
        };
        let Some(action) = proposals.get(proposal) else {
            out.not_reproducible.push(Unplayable {
                seq: r.seq,
                primitive: "unknown",
                reason: format!("no proposal record {proposal}"),
            });
            continue;
        };
        if let Some(machine) = machine_leaf(action) {
            let entry = out.external.entry(machine).or_insert(External {
                reason: GUEST_STATE,
                count: 0,
            });
            entry.count += 1;
            continue;
        }
        // A confirmation's answer is recorded first; it decided whether the action ran, not
        // what it returned.
        let inputs: Vec<&Input> = recorded_inputs
            .iter()
            .skip_while(|i| matches!(i, Input::HumanAnswer { .. }))
            .collect();
        let mut player = Player {
            journal,
            session: r.session,
            before: &records[..index],
            inputs: &inputs,
            next: 0,
            proposal: *proposal,
        };
        let played = if recorded["output"]["recovered"] == Value::Bool(true) {
            player.recovered()
        } else {
            at_once(aido_walk::walk(&mut player, action, String::new()))
        };
        // Ok: a result to compare with the record; Err: a mismatch whatever the record says.
        let reproduced = match played {
            Err(Missing::Unrecorded(reason)) => {
                out.not_reproducible.push(Unplayable {
                    seq: r.seq,
                    primitive: action.primitive(),
                    reason,
                });
                continue;
            }
            Err(Missing::Tampered(reason)) => Err(serde_json::json!({"input": reason})),
            Ok(Err(fail)) => Ok(failed(&fail.failure, &fail.partial.outcome.effects)),
            Ok(Ok(_)) if player.next < inputs.len() => {
                Err(serde_json::json!({"unused_inputs": inputs.len() - player.next}))
            }
            Ok(Ok(done)) => Ok(comparable(&done.outcome)),
        };
        match reproduced {
            Ok(same) if serde_json::to_vec(&same).ok() == serde_json::to_vec(&recorded).ok() => {
                out.reproduced += 1;
            }
            // Built from earlier records that retention has removed since: not a mismatch
            // of the record, a result that can no longer be rebuilt.
            Ok(_) if pruned_through.is_some() && reads_history(action) => {
                out.not_reproducible.push(Unplayable {
                    seq: r.seq,
                    primitive: action.primitive(),
                    reason: format!(
                        "it was built from earlier records of the session, and retention removed those up to seq {}",
                        pruned_through.unwrap_or_default()
                    ),
                });
            }
            Ok(reproduced) | Err(reproduced) => out.mismatches.push(Mismatch {
                seq: r.seq,
                primitive: action.primitive(),
                recorded,
                reproduced,
            }),
        }
    }
    out
}

/// What playback compares for a failure: the failure and the changes made before it.
fn failed(failure: &Failure, effects: &[aido_actions::Effect]) -> Value {
    serde_json::json!({"failure": failure, "effects": effects})
}

/// The part of a result playback compares: everything but the inputs it was built from.
fn comparable(o: &Outcome) -> Value {
    serde_json::json!({"text": o.text, "output": o.output, "effects": o.effects, "images": o.images})
}

/// True when an action tree holds a primitive whose result is built from the session's
/// earlier records (its history, its snapshots' records, a rewind's plan).
fn reads_history(action: &Action) -> bool {
    matches!(
        action.primitive(),
        "session_history" | "list_snapshots" | "restore_snapshot" | "rewind"
    ) || action
        .children()
        .into_iter()
        .any(|(_, child)| reads_history(child))
}

/// The first machine primitive in an action tree.
fn machine_leaf(action: &Action) -> Option<&'static str> {
    if action.body() == Body::Machine {
        return Some(action.primitive());
    }
    action
        .children()
        .into_iter()
        .find_map(|(_, child)| machine_leaf(child))
}

/// Why a result could not be played.
enum Missing {
    /// The inputs the result needs are not in the record.
    Unrecorded(String),
    /// A recorded input is damaged (a blob missing or not hashing to its name).
    Tampered(String),
}

/// A recorded answer read as the type its body journaled it as; one that does not read is a
/// damaged input, not one to render from anyway.
fn typed<T: serde::de::DeserializeOwned>(answer: Value, what: &str) -> Result<T, Missing> {
    serde_json::from_value(answer)
        .map_err(|error| Missing::Tampered(format!("the {what} does not read: {error}")))
}

/// Walks one completion's action tree over its recorded inputs.
struct Player<'a> {
    journal: &'a Journal,
    session: SessionId,
    /// The session's records before the completion: what the action could read of them.
    before: &'a [Record],
    inputs: &'a [&'a Input],
    next: usize,
    proposal: u64,
}

/// The next input must be of this shape.
macro_rules! pull {
    ($self:ident, $pattern:pat => $value:expr, $what:literal) => {
        match $self.pull($what)? {
            $pattern => $value,
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected {} but the record has {}",
                    $what,
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        }
    };
}

/// Return a leaf's failure as its answer.
macro_rules! leaf_try {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Ok(Err(Failure::from(e))),
        }
    };
}

/// A leaf's answer, played.
type Played = Answer<Outcome, Missing>;

impl Player<'_> {
    fn peek(&self) -> Option<&Input> {
        self.inputs.get(self.next).copied()
    }

    fn pull(&mut self, what: &str) -> Result<&Input, Missing> {
        let input =
            self.inputs.get(self.next).copied().ok_or_else(|| {
                Missing::Unrecorded(format!("the record has no input for {what}"))
            })?;
        self.next += 1;
        Ok(input)
    }

    /// Bytes of a recorded blob, checked against their name.
    fn blob(&self, hash: &str) -> Result<Vec<u8>, Missing> {
        let bytes = self
            .journal
            .blob(hash)
            .ok()
            .flatten()
            .ok_or_else(|| Missing::Tampered(format!("blob {hash} is missing")))?;
        if fs_render::blob_name(&bytes) != hash {
            return Err(Missing::Tampered(format!(
                "blob {hash} does not hash to its name"
            )));
        }
        Ok(bytes)
    }

    fn file(&mut self) -> Result<(String, Vec<u8>), Missing> {
        let (path, blob) =
            pull!(self, Input::File { path, blob } => (path.clone(), blob.clone()), "a file read");
        Ok((path, self.blob(&blob)?))
    }

    fn facts(&mut self, sha256: bool) -> Result<(String, FileFacts), Missing> {
        match self.pull("a file streamed")? {
            Input::File { path, blob } => {
                let (path, blob) = (path.clone(), blob.clone());
                let bytes = self.blob(&blob)?;
                let facts = fs_render::Facts::of(&path, &bytes, sha256);
                Ok((path, facts))
            }
            Input::Streamed { path, facts } => {
                let facts = serde_json::from_value(facts.clone())
                    .map_err(|e| Missing::Tampered(format!("streamed facts: {e}")))?;
                Ok((path.clone(), facts))
            }
            other => Err(Missing::Unrecorded(format!(
                "expected a file streamed but the record has {}",
                serde_json::to_string(other).unwrap_or_default()
            ))),
        }
    }

    fn stat(&mut self) -> Result<(String, Option<Meta>), Missing> {
        Ok(pull!(self, Input::Stat { path, meta } => (path.clone(), meta.clone()), "a stat"))
    }

    /// The next recorded write, of `new`.
    fn written(&mut self, new: &[u8]) -> Result<Replaced, Missing> {
        Ok(
            pull!(self, Input::Written { path, created, before, dirs, mtime_ns, before_mtime_ns } => Replaced {
            path: path.clone(),
            created: *created,
            before: before.clone(),
            dirs: dirs.clone(),
            blob: fs_render::blob_name(new),
            mtime_ns: *mtime_ns,
            before_mtime_ns: *before_mtime_ns,
        }, "a write"),
        )
    }

    fn answer(&mut self) -> Result<Value, Missing> {
        Ok(pull!(self, Input::Answer { value, .. } => value.clone(), "an answer"))
    }

    /// The VM body's answer to a restore, when the record has one (restores recorded before
    /// they covered machines have none).
    fn machines_answer(&mut self) -> Result<Option<Value>, Missing> {
        match self.peek() {
            Some(Input::Answer { from, .. }) if from == "machines" => self.answer().map(Some),
            _ => Ok(None),
        }
    }

    fn appended(&mut self) -> Result<u64, Missing> {
        Ok(pull!(self, Input::Appended { seq } => *seq, "an appended seq"))
    }

    /// The records the action could see when it appended the record at `seq`.
    fn records_before(&self, seq: u64) -> &[Record] {
        let end = self.before.partition_point(|r| r.seq < seq);
        &self.before[..end]
    }

    /// edit_file and apply_patch: the file read, the change computed from it, then the write
    /// (none for a dry run).
    fn change(
        &mut self,
        dry_run: bool,
        compute: impl FnOnce(&str, &[u8]) -> Result<fs_render::Change, FsError>,
    ) -> Played {
        let (path, old) = self.file()?;
        let change = leaf_try!(compute(&path, &old));
        let replaced = if dry_run {
            None
        } else {
            Some(self.written(&change.new)?)
        };
        Ok(Ok(change.done(replaced.as_ref())))
    }

    fn filesystem(&mut self, action: &FsAction) -> Played {
        Ok(Ok(match action {
            FsAction::ReadFile(a) => {
                if a.encoding == Encoding::Base64 || (a.offset.is_none() && a.limit.is_none()) {
                    let (path, bytes) = self.file()?;
                    leaf_try!(fs_render::read_file(a, &path, &bytes))
                } else {
                    let (path, blob, more) = pull!(self, Input::Lines { path, blob, more } => (path.clone(), blob.clone(), *more), "a window of lines");
                    let lines = self.blob(&blob)?;
                    leaf_try!(fs_render::read_window(a, &path, &lines, more))
                }
            }
            FsAction::ReadFiles(a) => {
                let mut entries = Vec::new();
                for _ in &a.paths {
                    match self.pull("a file read or refusal")? {
                        Input::Refused { failure } => entries.push(Err(failure.clone())),
                        Input::File { path, blob } => {
                            let (path, blob) = (path.clone(), blob.clone());
                            entries.push(Ok((path, self.blob(&blob)?)));
                        }
                        other => {
                            return Err(Missing::Unrecorded(format!(
                                "expected a file read but the record has {}",
                                serde_json::to_string(other).unwrap_or_default()
                            )));
                        }
                    }
                }
                fs_render::read_files(a, &entries)
            }
            FsAction::WriteFile(a) => {
                let bytes = leaf_try!(fs_render::write_file_bytes(a));
                let replaced = self.written(&bytes)?;
                fs_render::write_file(&bytes, &replaced)
            }
            FsAction::EditFile(a) => {
                return self.change(a.dry_run, |path, old| fs_render::edit_file(a, path, old));
            }
            FsAction::ApplyPatch(a) => {
                return self.change(a.dry_run, |path, old| fs_render::apply_patch(a, path, old));
            }
            FsAction::PatchSet(a) => {
                let mut reads = Vec::new();
                for _ in &a.patches {
                    reads.push(self.file()?);
                }
                let (writes, mut outcome) = leaf_try!(fs_render::patch_set(a, &reads));
                if !a.dry_run {
                    for (_, new) in &writes {
                        outcome.effects.extend(self.written(new)?.effects());
                    }
                }
                outcome
            }
            FsAction::StatFiles(a) => {
                let mut seen = Vec::new();
                for _ in &a.paths {
                    seen.push(self.stat()?);
                }
                fs_render::stat_files(&seen)
            }
            FsAction::FileInfo(_) => {
                let (path, facts) = self.facts(false)?;
                fs_render::file_info(&path, &facts)
            }
            FsAction::Checksum(a) => {
                let (path, facts) = self.facts(a.algorithm == HashAlgorithm::Sha256)?;
                fs_render::checksum(&path, a.algorithm, &facts)
            }
            FsAction::MoveToTrash(_) => {
                pull!(self, Input::Clock { .. } => (), "the clock");
                let (path, item, info) = pull!(self, Input::Trash { path, item, info } => (path.clone(), item.clone(), info.clone()), "the trash's answer");
                fs_render::move_to_trash(&path, &item, info.as_deref().unwrap_or_default())
            }
            FsAction::RestoreFromTrash(_) => {
                let (path, item) = pull!(self, Input::Trash { path, item, .. } => (path.clone(), item.clone()), "the trash's answer");
                fs_render::restore_from_trash(&path, &item)
            }
            FsAction::Validate(a) => {
                let (path, bytes) = self.file()?;
                leaf_try!(fs_render::validate(a, &path, &bytes))
            }
            FsAction::Diff(a) => return self.diff(a),
            FsAction::RenderTemplate(a) => return self.render_template(a),
        }))
    }

    /// diff: the first file read, then the second (or the given text).
    fn diff(&mut self, a: &aido_actions::tools::Diff) -> Played {
        use aido_walk::tools::diff::{Side, diff};
        let (path, old) = self.file()?;
        let (label, new) = match &a.other_path {
            Some(_) => self.file()?,
            None => (
                "text".to_owned(),
                a.text.clone().unwrap_or_default().into_bytes(),
            ),
        };
        let first = Side {
            label: &path,
            bytes: &old,
        };
        let second = Side {
            label: &label,
            bytes: &new,
        };
        Ok(Ok(leaf_try!(diff(a, first, second))))
    }

    /// render_template: the template file read (unless inline), then what its loader found;
    /// the render runs again over the recorded loads, never the disk.
    fn render_template(&mut self, a: &aido_actions::tools::RenderTemplate) -> Played {
        use aido_walk::tools::template::{INLINE_NAME, recorded_loader, render};
        let (name, source) = match &a.path {
            Some(_) => {
                let (path, bytes) = self.file()?;
                let source = String::from_utf8(bytes)
                    .map_err(|_| Missing::Tampered(format!("template {path} is not UTF-8")))?;
                (path, source)
            }
            None => (
                INLINE_NAME.to_owned(),
                a.template.clone().unwrap_or_default(),
            ),
        };
        let answer = self.answer()?;
        let mut loads = Vec::new();
        for load in answer["loads"].as_array().into_iter().flatten() {
            let name = load["name"].as_str().unwrap_or_default().to_owned();
            let found = match (load["path"].as_str(), load["blob"].as_str()) {
                (Some(path), Some(blob)) => {
                    let source = String::from_utf8(self.blob(blob)?)
                        .map_err(|_| Missing::Tampered(format!("include {path} is not UTF-8")))?;
                    Some((path.to_owned(), source))
                }
                _ => None,
            };
            loads.push((name, found));
        }
        Ok(Ok(leaf_try!(render(
            a,
            &name,
            &source,
            recorded_loader(loads)
        ))))
    }

    /// Answer a condition from its recorded leaves. `Err(Ok(failure))` is the condition's own
    /// failure (recorded); `Err(Err(missing))` means it cannot be played.
    fn holds(&mut self, c: &Condition) -> Result<Result<bool, Failure>, Missing> {
        if let Some(Input::Failed { failure }) = self.peek() {
            let failure = failure.clone();
            self.next += 1;
            return Ok(Err(failure));
        }
        let mut missing = None;
        let answer = fs_render::evaluate(c, 0, &mut |leaf| {
            let seen = match leaf {
                aido_actions::Condition::FileExists { .. } => {
                    self.stat().map(|(_, meta)| Seen::Exists(meta.is_some()))
                }
                aido_actions::Condition::FileContains { .. } => {
                    self.file().map(|(path, bytes)| Seen::Bytes(path, bytes))
                }
                aido_actions::Condition::ChecksumEquals { algorithm, .. } => self
                    .facts(*algorithm == HashAlgorithm::Sha256)
                    .map(|(_, f)| Seen::Facts(f)),
                _ => Ok(Seen::Exists(false)),
            };
            match seen {
                Ok(seen) => fs_render::leaf_holds(leaf, &seen),
                Err(m) => {
                    missing = Some(m);
                    Err(FsError::Cancelled)
                }
            }
        });
        if let Some(m) = missing {
            return Err(m);
        }
        Ok(answer.map_err(Failure::from))
    }

    /// create_snapshot's part: the id's random tag and time, the store's and the VM body's
    /// answers, and the seq of the snapshot_taken record.
    fn take_snapshot(&mut self, label: Option<&str>) -> Result<Value, Missing> {
        pull!(self, Input::Random { .. } => (), "the snapshot id's random tag");
        pull!(self, Input::Clock { .. } => (), "the snapshot's time");
        let store = typed(self.answer()?, "snapshot store's answer")?;
        let machines: Vec<String> = typed(self.answer()?, "machines' answer")?;
        let seq = self.appended()?;
        Ok(render::snapshot_taken(&store, &machines, seq, label))
    }

    fn runtime(&mut self, action: &RuntimeAction) -> Played {
        Ok(Ok(match action {
            RuntimeAction::Simulate(_)
            | RuntimeAction::PolicyCheck(_)
            | RuntimeAction::DeleteSnapshot(_)
            | RuntimeAction::GrantMint(_)
            | RuntimeAction::GrantRevoke(_)
            | RuntimeAction::GrantList(_) => render::answered(self.answer()?),
            RuntimeAction::SessionHistory(h) => {
                let head = pull!(self, Input::JournalHead { seq } => *seq, "the journal head");
                let (limit, window) = render::history_window(h);
                let seen = self.records_before(head + 1);
                let seen = &seen[seen.len().saturating_sub(window)..];
                render::session_history(self.session, seen, limit)
            }
            RuntimeAction::CreateSnapshot(c) => {
                Outcome::from_output(self.take_snapshot(c.label.as_deref())?)
            }
            RuntimeAction::RestoreSnapshot(r) => return self.restored(&r.snapshot),
            RuntimeAction::ListSnapshots(_) => {
                let listed: Vec<_> = typed(self.answer()?, "snapshot store's list")?;
                render::snapshots_listed(&listed, self.before)
            }
            RuntimeAction::Rewind(r) => {
                let applied = typed(self.answer()?, "rewind's applied steps")?;
                let machines: Vec<String> = typed(self.answer()?, "machines' answer")?;
                let rewound_at = self.appended()?;
                let record = self.before.iter().find(|rec| rec.seq == rewound_at);
                let (to_seq, cut, undo_target) = match record.map(|rec| &rec.event) {
                    Some(Event::Rewound {
                        to_seq,
                        cut: Some(cut),
                        undo_target,
                        ..
                    }) => (*to_seq, *cut, *undo_target),
                    Some(Event::Rewound { cut: None, .. }) => {
                        return Err(Missing::Unrecorded(
                            "a rewind of journal format 1 (before rewinding to an action kept it): its result was built by an older aido".into(),
                        ));
                    }
                    _ => {
                        return Err(Missing::Tampered(format!(
                            "the rewind's record {rewound_at} is not a rewound record"
                        )));
                    }
                };
                let _ = r;
                let plan =
                    aido_walk::rewind_plan(self.records_before(rewound_at), cut, self.proposal)
                        .map_err(|f| {
                            Missing::Tampered(format!(
                                "the rewind cannot be planned: {}",
                                f.message
                            ))
                        })?;
                render::rewound(&render::Rewound {
                    to_seq,
                    undo_target,
                    proposal: self.proposal,
                    plan: &plan,
                    applied,
                    machines: &machines,
                    rewound_at,
                })
            }
            RuntimeAction::RandomBytes(r) => {
                let hex = pull!(self, Input::Random { hex } => hex.clone(), "random bytes");
                render::random_bytes(r.count, &hex)
            }
            RuntimeAction::ReadLogs(a) => return self.read_logs(a),
        }))
    }

    /// read_logs: the redacted window that was read (a file's, or the activity the journal
    /// gave), filtered again by the same function.
    fn read_logs(&mut self, a: &aido_actions::tools::ReadLogs) -> Played {
        use aido_walk::tools::{logs, redact};
        let (label, text, more_before) = match self.pull("the lines read_logs read")? {
            Input::Lines { path, blob, more } => {
                let (path, blob, more) = (path.clone(), blob.clone(), *more);
                let text = String::from_utf8(self.blob(&blob)?)
                    .map_err(|_| Missing::Tampered(format!("the lines of {path} are not UTF-8")))?;
                (path, text, more)
            }
            Input::Answer { from, value } if from == logs::ACTIVITY_FROM => (
                value["label"].as_str().unwrap_or_default().to_owned(),
                value["text"].as_str().unwrap_or_default().to_owned(),
                value["more_before"].as_bool().unwrap_or_default(),
            ),
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the lines read_logs read but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        let read = logs::Read {
            label: &label,
            text: &text,
            more_before,
            redacted: redact::count(&text),
        };
        Ok(Ok(leaf_try!(logs::render(a, &read))))
    }

    /// A restore or rewind a crash interrupted, finished at the next start.
    fn recovered(&mut self) -> Result<Result<Executed, Failed>, Missing> {
        let value =
            pull!(self, Input::Answer { value, .. } => value.clone(), "the recovery's answer");
        Ok(Ok(Executed::new(render::recovered(typed(
            value,
            "recovery's answer",
        )?))))
    }

    /// A restore's answer (its failure, when the record has one instead).
    fn restored(&mut self, snapshot: &str) -> Played {
        if let Some(failure) = self.recorded_failure() {
            return Ok(Err(failure));
        }
        let store = typed(self.answer()?, "snapshot store's answer")?;
        let machines: Option<Vec<String>> = match self.machines_answer()? {
            Some(machines) => Some(typed(machines, "machines' answer")?),
            None => None,
        };
        Ok(Ok(render::snapshot_restored(
            &store,
            snapshot,
            self.before,
            machines.as_deref(),
        )))
    }

    /// The failure recorded next, taken, if the next input is one.
    /// Every child a script call's answer (or failure details) lists is in the journal
    /// before the call's outcome, proposed with this call as its parent, for that primitive.
    /// A child that never became an action (its arguments did not parse) has no seq.
    fn children_recorded(&self, answer: &Value) -> Result<(), Missing> {
        for (seq, primitive) in aido_walk::script::children(answer) {
            if seq == 0 {
                continue;
            }
            let found = self.before.iter().any(|r| {
                r.seq == seq
                    && matches!(&r.event, Event::ActionProposed { action, parent, .. }
                        if *parent == Some(self.proposal) && action.primitive() == primitive)
            });
            if !found {
                return Err(Missing::Tampered(format!(
                    "the script's host call {primitive} at seq {seq} has no proposal naming seq {} as its parent",
                    self.proposal
                )));
            }
        }
        Ok(())
    }

    fn recorded_failure(&mut self) -> Option<Failure> {
        match self.peek() {
            Some(Input::Failed { failure }) => {
                let failure = failure.clone();
                self.next += 1;
                Some(failure)
            }
            _ => None,
        }
    }
}

/// The recorded world: every leaf answers from the inputs its record holds, in order, with
/// the render functions the bodies used.
impl World for Player<'_> {
    type Stop = Missing;

    fn interrupted(&mut self, _action: &Action, leaf: bool) -> Option<Failed> {
        // A failed leaf recorded its failure as its only input; a composite cancelled before
        // it ran recorded that.
        if leaf {
            return self.recorded_failure().map(Failed::from);
        }
        match self.peek() {
            Some(Input::Cancelled) => {
                self.next += 1;
                Some(Failed::from(Failure::from(
                    aido_walk::RuntimeError::Cancelled,
                )))
            }
            _ => None,
        }
    }

    async fn filesystem(&mut self, action: FsAction) -> Answer<Executed, Missing> {
        Ok(Player::filesystem(self, &action)?.map(Executed::new))
    }

    async fn machine(&mut self, _action: VmAction) -> Answer<Executed, Missing> {
        Err(Missing::Unrecorded(GUEST_STATE.into()))
    }

    async fn process(&mut self, action: ProcessAction) -> Answer<Executed, Missing> {
        // Nothing is spawned: the result is rendered from what the process body recorded.
        let record = self.answer()?;
        let mut done = Executed::new(match action {
            ProcessAction::RunCommand(run) if run.background => {
                aido_walk::process::handle_started(&typed(record, "background command's start")?)
            }
            ProcessAction::RunCommand(_) => {
                aido_walk::process::command_ran(&typed(record, "command's record")?)
            }
            // The frames, the write, the list exactly as the live call answered.
            ProcessAction::CheckHandle(_)
            | ProcessAction::WriteStdin(_)
            | ProcessAction::ListHandles(_)
            | ProcessAction::ListProcesses(_)
            | ProcessAction::Subscribe(_)
            | ProcessAction::Unsubscribe(_)
            | ProcessAction::ListSubscriptions(_)
            // Its firings are actions of their own (children naming it), played back each.
            | ProcessAction::WatchAndReact(_) => aido_walk::process::handle_answered(&record),
            ProcessAction::StopHandle(_) => {
                aido_walk::process::handle_stopped(&typed(record, "stop's record")?)
            }
            // Nothing connects or runs: the host's and the containers' answers as recorded.
            ProcessAction::SshExec(_) => aido_walk::remote::ssh_ran(&record),
            ProcessAction::RunInSandbox(_) => aido_walk::remote::container_ran(&record),
            ProcessAction::RunContainerGroup(_) => aido_walk::remote::group_ran(&record),
        });
        // A command's file changes, applied by the filesystem body: listed, with their effects.
        if let Some(Input::Answer { from, .. }) = self.peek()
            && from == aido_walk::process::APPLIED_BY
        {
            let applied = self.answer()?;
            aido_walk::process::changes_applied(&mut done.outcome, &applied);
        }
        Ok(Ok(done))
    }

    /// What the search found, as recorded: the tree is never read again (it has changed
    /// since, and the recorded answer is what the agent saw).
    async fn search(&mut self, action: SearchAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("what the search found")? {
            Input::Answer { from, value } if from == aido_walk::search::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected what the search found but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::search::render(
            &action, &answer,
        ))))
    }

    async fn runtime(&mut self, action: RuntimeAction) -> Answer<Executed, Missing> {
        Ok(Player::runtime(self, &action)?.map(Executed::new))
    }

    /// The clock the store was given, then the store's answer: the database is never opened
    /// (other sessions and processes have changed it since).
    async fn memory(&mut self, action: MemoryAction) -> Answer<Executed, Missing> {
        pull!(self, Input::Clock { .. } => (), "the clock the memory store was given");
        let answer = match self.pull("the memory store's answer")? {
            Input::Answer { from, value } if from == aido_walk::memory::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the memory store's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::memory::render(
            &action, &answer,
        ))))
    }

    /// What the network answered, as recorded: nothing is sent again (the server may have
    /// changed, or be gone; the recorded exchange is what the agent saw).
    async fn net(&mut self, action: NetAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("what the network answered")? {
            Input::Answer { from, value } if from == aido_walk::net::ANSWER_FROM => value.clone(),
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected what the network answered but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::net::render(&action, &answer))))
    }

    /// What the script body answered: the script is not run again. Its host calls are child
    /// actions with records of their own, played back on their own; each child the answer
    /// lists must be in the journal before the call's outcome, proposed with this call as its
    /// parent and for the same primitive.
    async fn script(&mut self, action: ScriptAction) -> Answer<Executed, Missing> {
        // A call is a composite, so its failure is not taken by `interrupted`: it is its one
        // input here, and the children it had run are in its details.
        if let Some(failure) = self.recorded_failure() {
            let calls = failure.details.clone().unwrap_or_default();
            self.children_recorded(&calls)?;
            return Ok(Err(failure));
        }
        let answer = match self.pull("the script body's answer")? {
            Input::Answer { from, value } if from == aido_walk::script::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the script body's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        self.children_recorded(&answer)?;
        Ok(Ok(Executed::new(aido_walk::script::render(
            &action, &answer,
        ))))
    }

    /// What the artifact body answered (ids, hashes, the URL, the files a save wrote with
    /// their effects): no store is read and nothing is served.
    async fn artifact(&mut self, action: ArtifactAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("the artifact body's answer")? {
            Input::Answer { from, value } if from == aido_walk::artifact::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the artifact body's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::artifact::render(
            &action, &answer,
        ))))
    }

    /// What the desktop body answered (the window it drove, the PNG it saw): no display is
    /// opened and nothing is typed again.
    async fn desktop(&mut self, action: DesktopAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("the desktop body's answer")? {
            Input::Answer { from, value } if from == aido_walk::desktop::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the desktop body's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::desktop::render(
            &action, &answer,
        ))))
    }

    /// What the browser body answered (the page's answer, the connections it made): no
    /// browser is opened and no page is fetched again.
    async fn browser(&mut self, action: BrowserAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("the browser body's answer")? {
            Input::Answer { from, value } if from == aido_walk::browser::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the browser body's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::browser::render(
            &action, &answer,
        ))))
    }

    /// What the downstream server answered: no server is started and nothing is called.
    async fn gateway(&mut self, action: GatewayAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("the downstream's answer")? {
            Input::Answer { from, value } if from == aido_walk::downstream::ANSWER_FROM => {
                value.clone()
            }
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the downstream's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        Ok(Ok(Executed::new(aido_walk::downstream::render(
            &action, &answer,
        ))))
    }

    /// The person's recorded answer (or that nobody answered): nobody is asked again. A
    /// check_answer's answer carries its stored question; an ask's question is its own.
    async fn human(&mut self, action: HumanAction) -> Answer<Executed, Missing> {
        let answer = match self.pull("the human's answer")? {
            Input::Answer { from, value } if from == aido_walk::human::ANSWER_FROM => value.clone(),
            other => {
                return Err(Missing::Unrecorded(format!(
                    "expected the human's answer but the record has {}",
                    serde_json::to_string(other).unwrap_or_default()
                )));
            }
        };
        let question = match aido_walk::human::Question::of(&action) {
            Some(checked) => checked.map(|(q, _)| q).map_err(|e| {
                Missing::Tampered(format!("the recorded question does not check: {e}"))
            })?,
            None => serde_json::from_value(answer["question"].clone()).map_err(|e| {
                Missing::Tampered(format!("the recorded answer has no question: {e}"))
            })?,
        };
        Ok(aido_walk::human::render(&question, &answer).map(Executed::new))
    }

    async fn condition(&mut self, condition: &Condition) -> Answer<(bool, Executed), Missing> {
        Ok(self
            .holds(condition)?
            .map(|holds| (holds, Executed::default())))
    }

    async fn take_snapshot(&mut self, label: &str) -> Answer<(Executed, String), Missing> {
        if let Some(failure) = self.recorded_failure() {
            return Ok(Err(failure));
        }
        let taken = Player::take_snapshot(self, Some(label))?;
        let id = taken["snapshot"].as_str().unwrap_or_default().to_owned();
        Ok(Ok((Executed::new(Outcome::from_output(taken)), id)))
    }

    async fn restore_snapshot(&mut self, snapshot: &str) -> Answer<Executed, Missing> {
        Ok(self.restored(snapshot)?.map(Executed::new))
    }
}

/// Run a walk of the recorded world to its end. Its leaves never wait (they read records), so
/// the walk finishes in one poll; one that would wait is reported, never spun on.
fn at_once(
    walk: impl std::future::Future<Output = Result<Result<Executed, Failed>, Missing>>,
) -> Result<Result<Executed, Failed>, Missing> {
    let mut walk = std::pin::pin!(walk);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match walk.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(walked) => walked,
        std::task::Poll::Pending => Err(Missing::Unrecorded(
            "the recorded world waited for something (a bug in playback)".into(),
        )),
    }
}

impl Player<'_> {}
