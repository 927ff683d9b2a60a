use serde::{Deserialize, Serialize};

/// What a successful action returns, and what the journal keeps of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// A short text for the agent (for read_file, the file's text).
    pub text: String,
    /// Structured output (MCP `structuredContent`).
    pub output: serde_json::Value,
    /// Changes made to the world, in order, with enough to redo or undo them from blobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<Effect>,
    /// Images for the agent (MCP image content), e.g. a screenshot. Journaled like any
    /// output (the bytes go to the blob store).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// Every nondeterministic input the body saw, so playback can reproduce the result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Input>,
}

impl Outcome {
    /// An outcome with only structured output; its text is the output as JSON.
    pub fn from_output(output: serde_json::Value) -> Self {
        let text = output.to_string();
        Self {
            text,
            output,
            effects: Vec::new(),
            images: Vec::new(),
            inputs: Vec::new(),
        }
    }
}

/// An image in a result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The media type (`image/png`).
    pub mime: String,
    /// The bytes, base64.
    pub base64: String,
}

/// What a path held before a change, as the journal knows it. Undoing the change puts this
/// back: nothing ([`Before::Absent`]), or the kept contents ([`Before::Kept`]). A change whose
/// previous contents were not kept ([`Before::NotKept`]) cannot be undone, and undoing it is
/// refused with a code naming its record; aido itself never makes one (a write whose previous
/// contents it cannot keep is refused before it runs), but journals of format 1 hold them.
///
/// In a record it is the `before` field: a blake3 hash (hex) for kept contents, `"absent"`, or
/// `"not_kept"`; a record of format 1 without the field decodes as `NotKept` (its file may
/// have existed) unless the journal knows from the action's inputs that it was created.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Before {
    /// Nothing was at the path.
    Absent,
    /// The previous contents, by blake3 (hex), in the journal's blob store.
    Kept(String),
    /// Something was there and the journal did not keep it.
    #[default]
    NotKept,
}

impl Before {
    /// The kept contents' hash, if any.
    pub fn kept(&self) -> Option<&str> {
        match self {
            Self::Kept(h) => Some(h),
            Self::Absent | Self::NotKept => None,
        }
    }

    /// From what a write found: created (nothing there), or the hash it kept.
    pub fn of(created: bool, kept: Option<&str>) -> Self {
        match (created, kept) {
            (true, _) => Self::Absent,
            (false, Some(h)) => Self::Kept(h.to_owned()),
            (false, None) => Self::NotKept,
        }
    }
}

const BEFORE_ABSENT: &str = "absent";
const BEFORE_NOT_KEPT: &str = "not_kept";

impl Serialize for Before {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Absent => s.serialize_str(BEFORE_ABSENT),
            Self::NotKept => s.serialize_str(BEFORE_NOT_KEPT),
            Self::Kept(h) => s.serialize_str(h),
        }
    }
}

impl<'de> Deserialize<'de> for Before {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        Ok(match text.as_deref() {
            None | Some(BEFORE_NOT_KEPT) => Self::NotKept,
            Some(BEFORE_ABSENT) => Self::Absent,
            Some(_) => Self::Kept(text.unwrap_or_default()),
        })
    }
}

/// One change to the world. Paths are resolved absolute paths; `blob` and kept `before`s are
/// blake3 hashes (hex) of contents stored in the journal's blob store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// A file now holds the blob's bytes; `before` is what was at its path.
    FileWritten {
        /// Resolved path.
        path: String,
        /// Hash of the new contents.
        blob: String,
        /// What was there before.
        #[serde(default)]
        before: Before,
        /// The new file's modification time, nanoseconds since the epoch (a redo gives it
        /// back); absent in records from before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mtime_ns: Option<i64>,
        /// The replaced file's modification time (an undo gives it back).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before_mtime_ns: Option<i64>,
    },
    /// A file or directory was moved.
    Moved {
        /// Where it was.
        from: String,
        /// Where it is now.
        to: String,
    },
    /// A directory was created (it did not exist; undoing the change removes it again).
    DirCreated {
        /// Resolved path.
        path: String,
    },
    /// The workspace was made equal to a snapshot (taken at seq `taken_at`).
    SnapshotRestored {
        /// The snapshot id.
        snapshot: String,
        /// The seq of its snapshot_taken record.
        taken_at: u64,
    },
    /// The session was rewound: the workspace now equals its state just after `seq`.
    RewoundTo {
        /// The seq it went back to.
        seq: u64,
    },
    /// An empty directory was removed (what it held was removed first, each entry its own
    /// effect); undoing it makes the directory again.
    DirRemoved {
        /// Resolved path.
        path: String,
        /// Its permission bits, when recorded: undoing the removal gives them back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    /// A file was removed; `before` is what it held.
    FileRemoved {
        /// Resolved path.
        path: String,
        /// What it held.
        #[serde(default)]
        before: Before,
        /// Its permission bits, when recorded: undoing the removal gives them back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    /// A symbolic link was removed (the link, never what it points at); undoing it makes the
    /// link again.
    LinkRemoved {
        /// Resolved path (of the link itself).
        path: String,
        /// What it pointed at, as written in it.
        target: String,
    },
    /// A symbolic link was made (by a command); undoing it removes the link. What it points
    /// at is judged where it is used: every later action resolves the link and is judged on
    /// where it really leads.
    LinkCreated {
        /// Resolved path (of the link itself).
        path: String,
        /// What it points at, as written in it.
        target: String,
    },
    /// A file's or directory's permission bits changed (a command's `chmod`, or a file it
    /// created with bits other than a new file gets); undoing it sets `before` again.
    ModeChanged {
        /// Resolved path.
        path: String,
        /// The bits now (`0o7777` at most).
        mode: u32,
        /// The bits it had.
        before: u32,
    },
    /// A change set (a command's file changes, an artifact save): every path it changed with
    /// what it held before and after, in `parts` (blobs of JSON-lines entries, see
    /// [`crate::changes`]), applied in order; undoing it puts every `before` back, newest first.
    Changes {
        /// The parts, by blake3 (hex), in order.
        parts: Vec<String>,
        /// Entries in all the parts.
        entries: u64,
        /// Bytes of new contents in all the parts.
        bytes: u64,
    },
}

/// A nondeterministic input an action saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    /// The wall clock, in milliseconds since the Unix epoch.
    Clock {
        /// Milliseconds since the epoch.
        unix_ms: u64,
    },
    /// Bytes from the operating system's random source.
    Random {
        /// The bytes, hex.
        hex: String,
    },
    /// A human's answer to a confirmation.
    HumanAnswer {
        /// Whether the human approved.
        approved: bool,
    },
    /// A whole file as the body read it. The bytes are in the journal's blob store under
    /// `blob` (stored once however often they are read).
    File {
        /// The resolved path.
        path: String,
        /// blake3 (hex) of the bytes read.
        blob: String,
    },
    /// A window of a file's lines as the body read them: the lines, each with its newline, are
    /// in the blob store; `more` when the window stopped before the end of the file.
    Lines {
        /// The resolved path.
        path: String,
        /// blake3 (hex) of the lines read.
        blob: String,
        /// The window stopped early (its line limit or the read budget).
        more: bool,
    },
    /// A file too large to keep in the journal: the facts the body derived while streaming
    /// it (a digest, a size, a line count), which are all the result was built from.
    Streamed {
        /// The resolved path.
        path: String,
        /// The derived facts, as the primitive defines them.
        facts: serde_json::Value,
    },
    /// What a path was when the body looked at it; `meta` is absent when nothing was there.
    Stat {
        /// The resolved path.
        path: String,
        /// Kind, size, mode and modification time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<Meta>,
    },
    /// What a write found at its path before replacing it.
    Written {
        /// The resolved path.
        path: String,
        /// The file did not exist.
        created: bool,
        /// blake3 (hex) of the replaced contents, when the journal kept them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<String>,
        /// Directories the write created above the file (`create_parents`), outermost first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dirs: Vec<String>,
        /// The new file's modification time, nanoseconds since the epoch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mtime_ns: Option<i64>,
        /// The replaced file's modification time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before_mtime_ns: Option<i64>,
    },
    /// Where the trash put an item (`to`, with its `.trashinfo` file `info`) or where it found
    /// one to restore (`from`).
    Trash {
        /// The item's original (resolved) path.
        path: String,
        /// The item's place in the trash.
        item: String,
        /// Its `.trashinfo` file, when the item was trashed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        info: Option<String>,
    },
    /// The answer of another part of the runtime the result was built from: the policy engine
    /// (`policy`), the snapshot store (`snapshots`), the VM body (`machines`).
    Answer {
        /// Who answered.
        from: String,
        /// What it answered.
        value: serde_json::Value,
    },
    /// The seq the journal gave a record this action appended (a snapshot_taken, a rewound).
    Appended {
        /// The record's seq.
        seq: u64,
    },
    /// The newest record of this session a read of its own history saw.
    JournalHead {
        /// That record's seq.
        seq: u64,
    },
    /// One of several paths was refused and the action went on (read_files).
    Refused {
        /// The failure for that path.
        failure: Failure,
    },
    /// A leaf failed: the failure as it was observed, and the only input the leaf records. A
    /// composite that carried on (try) built its result from it.
    Failed {
        /// The failure.
        failure: Failure,
    },
    /// A composite was cancelled before it started (nothing under it ran).
    Cancelled,
}

/// A path's metadata as `stat_files` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// `file`, `dir` or `other`.
    pub kind: String,
    /// Bytes.
    pub size: u64,
    /// Permission bits, octal.
    pub mode: String,
    /// Modification time, milliseconds since the epoch, when the filesystem keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_ms: Option<u64>,
}

pub use aido_codes::Failure;
