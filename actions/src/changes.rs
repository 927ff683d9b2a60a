//! A change set: every path a command (or an artifact save) changed, journaled as one effect
//! ([`crate::Effect::Changes`]) of any size.
//!
//! Each [`Entry`] says what one path held before and holds after, as a [`Node`]: nothing, a
//! file (its contents by blake3, size, permission bits and modification time to the
//! nanosecond), a directory (bits, and its time where it is the command's), or a symbolic link.
//! Applying a change set makes every path hold its `after`, in order; undoing it makes every
//! path hold its `before`, newest first. Both are idempotent (a path already holding what it
//! should is left), so a crash in the middle is finished by running it again.
//!
//! The entries are not in the record: they are in *parts*, blobs of at most
//! [`PART_ENTRIES_MAX`] entries each (JSON lines), which the record names. So a change set of
//! 200,000 files is a record of a few kilobytes, and reading it back never holds more than one
//! part.

use serde::{Deserialize, Serialize};

/// Most entries in one part of a change set.
pub const PART_ENTRIES_MAX: usize = 4096;

/// What a path holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Node {
    /// Nothing.
    Absent,
    /// A regular file.
    File {
        /// blake3 (hex) of its contents, in the journal's blob store.
        blob: String,
        /// Its size.
        bytes: u64,
        /// Its permission bits (`0o777` at most: set-id bits never reach the host).
        mode: u32,
        /// Its modification time, nanoseconds since the epoch.
        mtime_ns: i64,
    },
    /// A directory.
    Dir {
        /// Its permission bits.
        mode: u32,
        /// Its modification time, set once everything in it is in place; `None` leaves it
        /// to whatever the changes in it make it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mtime_ns: Option<i64>,
    },
    /// A symbolic link.
    Link {
        /// What it points at, as written in it.
        target: String,
    },
}

impl Node {
    /// The contents' hash of a file.
    pub fn blob(&self) -> Option<&str> {
        match self {
            Node::File { blob, .. } => Some(blob),
            _ => None,
        }
    }

    /// True for [`Node::Absent`].
    pub fn is_absent(&self) -> bool {
        matches!(self, Node::Absent)
    }
}

/// One path of a change set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The resolved, absolute path.
    pub path: String,
    /// What it held.
    pub before: Node,
    /// What it holds.
    pub after: Node,
}

impl Entry {
    /// The change as results show it: `file_created`, `file_changed`, `times_changed`,
    /// `removed`, `dir_created`, `dir_removed`, `mode_changed`, `link_created`,
    /// `link_removed`.
    pub fn change(&self) -> &'static str {
        match (&self.before, &self.after) {
            (Node::Absent, Node::File { .. }) => "file_created",
            (
                Node::File {
                    blob: a, mode: m, ..
                },
                Node::File {
                    blob: b, mode: n, ..
                },
            ) if a == b && m == n => "times_changed",
            (_, Node::File { .. }) => "file_changed",
            (Node::Link { .. }, Node::Absent) => "link_removed",
            (Node::Dir { .. }, Node::Absent) => "dir_removed",
            (_, Node::Absent) => "removed",
            (Node::Dir { .. }, Node::Dir { .. }) => "mode_changed",
            (_, Node::Dir { .. }) => "dir_created",
            (_, Node::Link { .. }) => "link_created",
        }
    }
}

/// One part of a change set as stored: its entries as JSON lines.
pub fn encode_part(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 160);
    for entry in entries {
        // An entry is strings and numbers: serializing it cannot fail.
        if let Ok(line) = serde_json::to_vec(entry) {
            out.extend_from_slice(&line);
            out.push(b'\n');
        }
    }
    out
}

/// The entries of a stored part; a line that is not an entry is an error naming it.
pub fn decode_part(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_slice(line)
                .map_err(|e| format!("line {} of a change set part: {e}", n + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn parts_round_trip_and_changes_are_named() {
        let file = |blob: &str, mode| Node::File {
            blob: blob.into(),
            bytes: 3,
            mode,
            mtime_ns: -5,
        };
        let entries = vec![
            Entry {
                path: "/w/a".into(),
                before: Node::Absent,
                after: file("x", 0o644),
            },
            Entry {
                path: "/w/a".into(),
                before: file("x", 0o644),
                after: file("x", 0o644),
            },
            Entry {
                path: "/w/d".into(),
                before: Node::Dir {
                    mode: 0o755,
                    mtime_ns: None,
                },
                after: Node::Dir {
                    mode: 0o700,
                    mtime_ns: Some(1),
                },
            },
            Entry {
                path: "/w/l".into(),
                before: Node::Link { target: "a".into() },
                after: Node::Absent,
            },
        ];
        let back = decode_part(&encode_part(&entries)).unwrap();
        assert_eq!(back, entries);
        let names: Vec<_> = entries.iter().map(Entry::change).collect();
        assert_eq!(
            names,
            [
                "file_created",
                "times_changed",
                "mode_changed",
                "link_removed"
            ]
        );
        assert!(decode_part(b"{\"path\":1}\n").is_err());
    }
}
