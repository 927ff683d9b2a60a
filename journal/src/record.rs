use aido_actions::{Action, Failure, Outcome, Verdict};
use serde::{Deserialize, Serialize};

/// The record format version, written in every record.
///
/// - 1: the first format.
/// - 2: an effect's `before` says what was there (`"absent"`, `"not_kept"`, or the hash of the
///   kept contents) instead of leaving it out for both "nothing" and "not kept"; writes record
///   the directories they created; `rewound` records name the record they cut after (`cut`),
///   since rewinding to an action keeps that action. Format 1 records are read as format 2
///   ([`upgrade`]).
/// - 3: retention can remove a session's older records: a `pruned` record names the last one
///   removed and its hash, which the first record kept names as its `prev`; a `collected`
///   record says what a retention run removed. Formats 1 and 2 are read as they were (they
///   hold neither); an aido that reads only format 2 refuses format 3 records with
///   `journal_format_unsupported` instead of misreading them.
pub const FORMAT_VERSION: u16 = 3;

/// Read a record of an older format as the current one. Format 1 left `before` out both for a
/// file that did not exist and for contents it did not keep: a write whose recorded input says
/// it created the file had nothing before it; any other stays "not kept", so undoing it is
/// refused instead of deleting a file that was there.
pub fn upgrade(record: &mut Record) {
    if record.v >= 2 {
        return;
    }
    let (effects, inputs) = match &mut record.event {
        Event::ActionCompleted { outcome, .. } => (&mut outcome.effects, &outcome.inputs),
        Event::ActionFailed {
            effects, inputs, ..
        } => (effects, &*inputs),
        _ => return,
    };
    for effect in effects.iter_mut() {
        if let aido_actions::Effect::FileWritten { path, before, .. } = effect
            && *before == aido_actions::Before::NotKept
            && inputs.iter().any(|i| {
                matches!(i, aido_actions::Input::Written { path: p, created: true, .. } if p == path)
            })
        {
            *before = aido_actions::Before::Absent;
        }
    }
}

/// A session's id: 16 bytes, shown as 32 lowercase hex digits. The first 6 bytes are the start
/// time in milliseconds, so ids sort by age.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId([u8; 16]);

impl SessionId {
    /// From raw bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
    /// The raw bytes (the key prefix of the session's records).
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
    /// Parse 32 hex digits.
    pub fn parse(text: &str) -> Option<Self> {
        let bytes = hex::decode(text).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).ok_or_else(|| serde::de::Error::custom("a session id is 32 hex digits"))
    }
}

/// What happened. One variant per kind of record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A session began.
    SessionStarted {
        /// The MCP client's name and version, when it gave them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<String>,
        /// The working directory relative paths resolve against.
        cwd: String,
        /// The aido version that ran it.
        runtime: String,
        /// The capability grant the session runs under (its id, never its token).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<String>,
    },
    /// A person (or another process) continued an existing session, e.g. `aido replay rewind`.
    SessionResumed {
        /// Who resumed it.
        client: String,
    },
    /// The directory relative paths resolve against changed for the rest of the session (the
    /// client's first MCP root, say); what-if judges the later actions from it.
    WorkdirChanged {
        /// The new working directory (absolute).
        cwd: String,
        /// Why: `mcp_roots` for the client's roots.
        source: String,
    },
    /// An agent asked for an action and the policy judged it.
    ActionProposed {
        /// The action, as parsed.
        action: Action,
        /// The chain's verdict.
        verdict: Verdict,
        /// For a host call of a script: the seq of the script call's proposal (the action
        /// runs as that call's child, judged and journaled on its own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<u64>,
    },
    /// A human answered a confirmation for the action proposed at `proposal`.
    ConfirmAnswered {
        /// The seq of the ActionProposed record.
        proposal: u64,
        /// Whether it may run.
        approved: bool,
        /// accepted, declined, cancelled, timeout or unavailable.
        answer: String,
        /// The id of the question every surface was shown (`q-` and 16 hex digits), if it
        /// was stored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        question: Option<String>,
        /// Who answered: the surface and the person; `None` when nobody did (a timeout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<aido_actions::human::Answerer>,
    },
    /// The action proposed at `proposal` finished.
    ActionCompleted {
        /// The seq of the ActionProposed record.
        proposal: u64,
        /// What it returned and changed.
        outcome: Outcome,
        /// How long it ran.
        duration_ms: u64,
    },
    /// The action proposed at `proposal` failed, was refused, or was cancelled.
    ActionFailed {
        /// The seq of the ActionProposed record.
        proposal: u64,
        /// Why.
        failure: Failure,
        /// Changes made before it failed (a pipeline's earlier steps), so the journal still
        /// knows every change to the world.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        effects: Vec<aido_actions::Effect>,
        /// The inputs it read before failing (a confirmation's answer, what its leaves saw,
        /// the failing leaf's failure), so playback can reproduce the failure too. Empty when
        /// nothing ran (a refused confirmation, an interrupted action).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        inputs: Vec<aido_actions::Input>,
        /// How long it ran.
        duration_ms: u64,
    },
    /// A tool call that never became an action: unknown primitive, malformed or oversized
    /// arguments. Kept so the journal shows everything an agent tried.
    CallRejected {
        /// The tool name the agent called.
        tool: String,
        /// The stable code.
        code: String,
        /// What was wrong.
        message: String,
    },
    /// A snapshot of the workspace was taken; it holds the state after every record before
    /// this one.
    SnapshotTaken {
        /// The snapshot id.
        snapshot: String,
        /// btrfs_subvolume, reflink or copy.
        backend: String,
        /// The workspace it is of.
        workspace: String,
        /// The action that took it.
        proposal: u64,
        /// Running machines snapshotted with it (disk and memory, under the same id), so a
        /// rewind to here puts them back too.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        machines: Vec<String>,
    },
    /// The session was rewound: the records after `cut` and before `proposal` (the rewind
    /// action) are an abandoned branch from here on.
    Rewound {
        /// The seq the agent named: the action kept (`to_seq`), or with `undo_target` the
        /// action undone too (`before_seq`).
        to_seq: u64,
        /// The last record kept: the files are as they were just after it. For `to_seq` of an
        /// action, its outcome record; absent in format 1, where it was `to_seq` itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut: Option<u64>,
        /// `to_seq` was a `before_seq`: that action was undone too.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        undo_target: bool,
        /// The rewind action's proposal.
        proposal: u64,
        /// Which branch this starts (1 for the first rewind).
        branch: u32,
        /// `snapshot` (restore, then replay changes) or `undo` (reverse changes).
        method: String,
        /// The snapshot restored, for method `snapshot`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        /// True when finished at start-up after a crash interrupted it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        recovered: bool,
    },
    /// A body crashed and its supervisor restarted it.
    BodyRestarted {
        /// Which body.
        body: String,
        /// The panic or error that stopped it.
        reason: String,
    },
    /// A body failed more often than its restart budget allows (or could not be spawned
    /// again) and is stopped for good; calls to it get `body_failed`.
    BodyFailed {
        /// Which body.
        body: String,
        /// The panic or error that stopped it last.
        reason: String,
        /// Restarts within the window before it was stopped.
        restarts: u32,
        /// Why it is stopped.
        why: String,
    },
    /// A background command (`run_command` with `background`) of an earlier aido process was
    /// found at start-up without its process: it died with it, and the file changes its layer
    /// held were never applied (the layer is removed).
    HandleLost {
        /// The handle.
        handle: String,
        /// The session that started it (32 hex digits). Not `session`: a record's own
        /// session is a field of the record beside its event.
        started_in: String,
        /// The seq of the proposal that started it.
        proposal: u64,
        /// Its command line.
        argv: Vec<String>,
        /// Entries of its layer discarded (files, directories, removals).
        changes_discarded: u64,
    },
    /// A batch of file changes delivered to a subscription of this session (subscribe or
    /// watch_and_react): what the agent was told, or, for a reaction, what it was not run for
    /// and why (`refused`: a coded refusal before the firing was judged).
    EventsDelivered {
        /// The subscription's id.
        subscription: String,
        /// The seq of the subscribe or watch_and_react proposal.
        proposal: u64,
        /// The changed paths, in the order first seen.
        changes: Vec<aido_actions::events::Change>,
        /// Events dropped since the last batch: the bounded queue was full.
        #[serde(default, skip_serializing_if = "is_zero")]
        lagged: u64,
        /// Why a reaction did not fire for these changes (`watch_rate_limited`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    /// The session ended.
    SessionEnded {
        /// Why (client closed, shutdown).
        reason: String,
    },
    /// Retention removed this session's records up to `through_seq` (`aido gc`, or the
    /// default retention a runtime runs at start). The records after it chain on from
    /// `hash`: the first record kept names it as its `prev`, and verify checks that. Rewinding
    /// to a removed record is refused with `rewind_target_pruned`.
    Pruned {
        /// The last record removed.
        through_seq: u64,
        /// Its hash (hex): the `prev` of the first record kept.
        hash: String,
        /// Rewinds among the removed records, so the branches of later rewinds keep their
        /// numbers.
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        rewinds: u32,
        /// Which rule removed them (`older_than`).
        reason: String,
    },
    /// A retention run (`aido gc`, or the default retention at start) removed what this
    /// lists. Journaled in a session of its own.
    Collected {
        /// What ran it: `aido gc`, or `aido mcp` / `aido serve` at start.
        trigger: String,
        /// What went.
        summary: Collected,
    },
}

/// What one retention run removed, as its `collected` record keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collected {
    /// Sessions removed whole.
    pub sessions_removed: u64,
    /// Sessions whose older records were removed (each now holds a `pruned` record).
    pub sessions_cut: u64,
    /// Records removed, whole sessions and cuts together.
    pub records_removed: u64,
    /// Blobs removed from sled (the `blobs` and `chunked` trees).
    pub blobs_removed: u64,
    /// Object files removed.
    pub objects_removed: u64,
    /// Workspace snapshots removed.
    pub snapshots_removed: u64,
    /// Lines removed from the audit files.
    pub audit_lines_removed: u64,
    /// Bytes on disk the run gave back (measured).
    pub bytes_freed: u64,
    /// The sessions removed whole, at most
    /// [`COLLECTED_SESSIONS_LISTED_MAX`](crate::retention::COLLECTED_SESSIONS_LISTED_MAX) of
    /// them (the count is `sessions_removed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<SessionId>,
    /// What it left alone and why, by code (a shard a running aido holds, a live session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// Something a retention run left alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// What: a shard's directory, a session id, an audit file, a snapshot.
    pub what: String,
    /// The stable code saying why (`journal_locked`, `retention_session_live`, ...).
    pub code: String,
    /// Details for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Event {
    /// For a `rewound` record, the last record it kept (format 1 kept `to_seq`).
    pub fn rewound_cut(&self) -> Option<u64> {
        match self {
            Self::Rewound { to_seq, cut, .. } => Some(cut.unwrap_or(*to_seq)),
            _ => None,
        }
    }

    /// The snake_case kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SessionStarted { .. } => "session_started",
            Self::ActionProposed { .. } => "action_proposed",
            Self::ConfirmAnswered { .. } => "confirm_answered",
            Self::ActionCompleted { .. } => "action_completed",
            Self::ActionFailed { .. } => "action_failed",
            Self::SessionResumed { .. } => "session_resumed",
            Self::WorkdirChanged { .. } => "workdir_changed",
            Self::CallRejected { .. } => "call_rejected",
            Self::SnapshotTaken { .. } => "snapshot_taken",
            Self::Rewound { .. } => "rewound",
            Self::BodyRestarted { .. } => "body_restarted",
            Self::HandleLost { .. } => "handle_lost",
            Self::BodyFailed { .. } => "body_failed",
            Self::EventsDelivered { .. } => "events_delivered",
            Self::SessionEnded { .. } => "session_ended",
            Self::Pruned { .. } => "pruned",
            Self::Collected { .. } => "collected",
        }
    }
}

/// One journal entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`FORMAT_VERSION`] when written.
    pub v: u16,
    /// Its session.
    pub session: SessionId,
    /// Its place in the session, from 1, without gaps.
    pub seq: u64,
    /// When it was appended, milliseconds since the epoch (from the runtime's clock facade).
    pub time_ms: u64,
    /// blake3 (hex) of the previous record of the session; 64 zeros for seq 1.
    pub prev: String,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
    /// blake3 (hex) of this record as stored. Not part of the hashed bytes.
    #[serde(skip)]
    pub hash: String,
}

/// The `prev` of a session's first record.
pub const GENESIS: [u8; 32] = [0; 32];

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}
