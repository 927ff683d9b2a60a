//! What a record names. A blob can be named in many places — a `$blob` reference of a long
//! string, an effect's contents and before-image, an input's file, a change set's parts, an
//! answer's screenshot or template loads — and more will come. So a record marks every
//! string (and object key) of exactly 64 hex digits it holds, wherever it is: a superset of
//! what it names (a record's own `prev` is left out; other hashes that name no blob cost a
//! mark and nothing else). Change sets are the one indirection: their entries are in parts,
//! blobs of JSON lines, so a `changes` effect (or rewind step) has its parts read and their
//! entries' contents marked.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::blobs::BlobStore;
use crate::pins::decode;

use super::{MARKS_MAX, RetentionError};

/// Hashes marked, with the bound.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    pub(crate) set: HashSet<[u8; 32]>,
}

impl Marks {
    pub(crate) fn add(&mut self, hash: [u8; 32]) -> Result<(), RetentionError> {
        if self.set.len() >= MARKS_MAX && !self.set.contains(&hash) {
            return Err(RetentionError::MarksMax { max: MARKS_MAX });
        }
        self.set.insert(hash);
        Ok(())
    }

    pub(crate) fn contains(&self, hash: &[u8; 32]) -> bool {
        self.set.contains(hash)
    }
}

/// Call `name` for every 64-hex string and key in a stored record (its header's `prev` left
/// out), and push the parts of every change set it holds.
pub(crate) fn references(
    stored: &Value,
    name: &mut dyn FnMut([u8; 32]),
    parts: &mut Vec<[u8; 32]>,
) {
    match stored {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "prev" {
                    continue;
                }
                walk(value, name, parts);
            }
        }
        other => walk(other, name, parts),
    }
}

fn walk(value: &Value, name: &mut dyn FnMut([u8; 32]), parts: &mut Vec<[u8; 32]>) {
    match value {
        Value::String(s) => {
            if let Some(hash) = decode(s) {
                name(hash);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, name, parts)),
        Value::Object(map) => {
            let changes = map.get("effect").and_then(Value::as_str) == Some("changes")
                || map.get("step").and_then(Value::as_str) == Some("changes");
            if changes && let Some(Value::Array(list)) = map.get("parts") {
                parts.extend(list.iter().filter_map(Value::as_str).filter_map(decode));
            }
            for (key, v) in map {
                if let Some(hash) = decode(key) {
                    name(hash);
                }
                walk(v, name, parts);
            }
        }
        _ => {}
    }
}

/// Mark what the entries of change-set `parts` name (before and after contents). A part
/// that is not in `store`, does not hash to its name or does not decode is an error naming
/// it: what it names cannot be known.
pub(crate) fn expand_parts(
    stores: &[&BlobStore],
    parts: &[[u8; 32]],
    marks: &mut Marks,
) -> Result<(), String> {
    for part in parts {
        let name = hex::encode(part);
        let mut found = None;
        for store in stores {
            if let Some(bytes) = store.get(&name).map_err(|e| e.to_string())? {
                found = Some(bytes);
                break;
            }
        }
        let bytes = found.ok_or_else(|| format!("change set part {name} is not stored"))?;
        if *blake3::hash(&bytes).as_bytes() != *part {
            return Err(format!("change set part {name} does not hash to its name"));
        }
        for entry in aido_actions::changes::decode_part(&bytes)? {
            for node in [&entry.before, &entry.after] {
                if let Some(hash) = node.blob().and_then(decode) {
                    marks.add(hash).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    Ok(())
}

/// Most bytes of one recovery marker or intent read for marks; a larger file is read for its
/// hex names only up to this, and its shard is not swept.
pub(crate) const MARKER_BYTES_MAX: u64 = 256 << 20;

/// Mark everything the recovery markers and intents beside a shard name (a restore, rewind or
/// change set cut short by a crash is finished at the next start from them, and a write's
/// intent names the contents it kept): JSON is walked like a record; anything else has its
/// 64-hex runs marked. Returns the parts to expand and whether every file was read whole.
pub(crate) fn recovery_marks(
    dir: &Path,
    marks: &mut Marks,
    parts: &mut Vec<[u8; 32]>,
) -> Result<bool, RetentionError> {
    let mut whole = true;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(RetentionError::io("read", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| RetentionError::io("read", dir, e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| RetentionError::io("stat", &path, e))?;
        if kind.is_dir() {
            whole &= recovery_marks(&path, marks, parts)?;
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let mut bytes = Vec::new();
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            // Removed meanwhile: its action finished and its record names what it named.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RetentionError::io("read", &path, e)),
        };
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MARKER_BYTES_MAX + 1),
            &mut bytes,
        )
        .map_err(|e| RetentionError::io("read", &path, e))?;
        if bytes.len() as u64 > MARKER_BYTES_MAX {
            whole = false;
        }
        let mut failed = None;
        let mut name = |hash| {
            if let Err(e) = marks.add(hash) {
                failed = Some(e);
            }
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => walk(&value, &mut name, parts),
            Err(_) => hex_runs(&bytes, &mut name),
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(whole)
}

/// Every run of exactly 64 hex digits in `bytes`.
fn hex_runs(bytes: &[u8], name: &mut dyn FnMut([u8; 32])) {
    let mut start = 0;
    while start < bytes.len() {
        let len = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if len == 64
            && let Some(hash) = std::str::from_utf8(&bytes[start..start + 64])
                .ok()
                .and_then(decode)
        {
            name(hash);
        }
        start += len.max(1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn every_hash_anywhere_is_named_and_change_sets_give_their_parts() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let c = "c".repeat(64);
        let d = "d".repeat(64);
        let stored = json!({
            "prev": "e".repeat(64),
            "outcome": {"effects": [
                {"effect": "file_written", "blob": a, "before": "absent"},
                {"effect": "changes", "parts": [b], "entries": 3, "bytes": 9}
            ]},
            "deep": [{"answer": {"screens": {c.clone(): 1}}}],
            "text": {"$blob": d},
            "short": "abc",
        });
        let mut named = Vec::new();
        let mut parts = Vec::new();
        references(&stored, &mut |h| named.push(hex::encode(h)), &mut parts);
        named.sort();
        assert_eq!(named, vec![a, b.clone(), c, d]);
        assert_eq!(parts.iter().map(hex::encode).collect::<Vec<_>>(), vec![b]);

        let mut runs = Vec::new();
        let text = format!("x{}y{}0", "1".repeat(64), "2".repeat(65));
        hex_runs(text.as_bytes(), &mut |h| runs.push(h));
        assert_eq!(runs, vec![[0x11; 32]], "a run of 65 is not a name");
    }
}
