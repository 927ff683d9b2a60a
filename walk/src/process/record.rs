//! What the process body journals of a command, as types: the body builds these and records
//! them serialized as its `Input::Answer { from: "process" }`; the renderers of
//! [`crate::process`] read the same types back, live and in playback, so a field one side
//! writes and the other reads is checked by the compiler instead of matched by its string.
//!
//! The JSON is exactly what the body recorded before these types existed (the journal is the
//! contract): fields that a command's record has had since `run_command` was first journaled
//! are required, fields added later are optional and absent when unset, as they were. The
//! parts the walk only passes through from the sandbox (its profile, resource use and egress
//! records, whose types live in `aido-sandbox`, which the walk does not depend on) are kept
//! as JSON values.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a command ended (the sandbox's `Exit`, journaled as `{"kind", "value"}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// The timeout passed and the sandbox killed the whole tree.
    TimedOut,
}

impl Exit {
    /// The result's `exit_code`, `signal` and `timed_out`.
    pub fn parts(self) -> (Option<i32>, Option<i32>, bool) {
        match self {
            Exit::Code(code) => (Some(code), None, false),
            Exit::Signal(signal) => (None, Some(signal), false),
            Exit::TimedOut => (None, None, true),
        }
    }
}

/// One variable of a command's environment as the journal keeps it: its value, or, when its
/// name looks secret ([`super::is_secret_name`]), only the value's blake3. The one way to
/// make one from a value is [`EnvValue::journaled`], so a record cannot hold a secret value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvValue {
    /// A value whose name does not look secret, as it was.
    Kept(String),
    /// A secret-looking variable's value, hashed.
    Hashed {
        /// The blake3 of the value (hex).
        blake3: String,
    },
}

impl EnvValue {
    /// What the journal keeps of `name` = `value`.
    pub fn journaled(name: &str, value: &str) -> Self {
        if super::is_secret_name(name) {
            EnvValue::Hashed {
                blake3: blake3::hash(value.as_bytes()).to_hex().to_string(),
            }
        } else {
            EnvValue::Kept(value.to_owned())
        }
    }
}

/// A command as asked, before it runs: the part of the record every command has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandStart {
    /// The command line.
    pub argv: Vec<String>,
    /// Its working directory (lossy UTF-8).
    pub cwd: String,
    /// Its environment (secret-looking values hashed).
    pub env: BTreeMap<String, EnvValue>,
    /// The size of its standard input.
    pub stdin_bytes: usize,
    /// Its timeout.
    pub timeout_ms: u64,
    /// The sandbox's profile as serialized (`{"confinement": "none"}` for an unconfined run).
    pub profile: Value,
}

impl CommandStart {
    /// A command's start, its environment made journal-safe with [`EnvValue::journaled`].
    pub fn new<'a>(
        argv: Vec<String>,
        cwd: &Path,
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
        (stdin_bytes, timeout_ms): (usize, u64),
        profile: Value,
    ) -> Self {
        CommandStart {
            argv,
            cwd: cwd.to_string_lossy().into_owned(),
            env: env
                .into_iter()
                .map(|(name, value)| (name.clone(), EnvValue::journaled(name, value)))
                .collect(),
            stdin_bytes,
            timeout_ms,
            profile,
        }
    }
}

/// How a finished command ended and what it printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandEnded {
    /// How it ended.
    pub exit: Exit,
    /// Its kept standard output (lossy UTF-8).
    pub stdout: String,
    /// Its kept standard error (lossy UTF-8).
    pub stderr: String,
    /// Every byte it wrote to standard output.
    pub stdout_bytes_total: u64,
    /// Every byte it wrote to standard error.
    pub stderr_bytes_total: u64,
    /// Standard output was cut.
    pub stdout_truncated: bool,
    /// Standard error was cut.
    pub stderr_truncated: bool,
    /// From the spawn to the end of the tree.
    pub duration_ms: u64,
    /// The sandbox's `Usage` as serialized.
    pub usage: Value,
    /// The cgroup hierarchy that held its limits, if any.
    pub cgroup: Option<String>,
    /// Its connections through the egress proxy (the sandbox's `EgressRecord`s), if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<Value>,
    /// Their totals (the sandbox's `EgressTotals`), when it had a proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_totals: Option<Value>,
}

/// Which `/tmp` a command had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tmp {
    /// The session's, shared by its commands (not journaled, not rewound).
    Session,
    /// A private tmpfs of its own.
    Command,
}

/// The session's shared network namespace, when a command ran in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionNetwork {
    /// The namespace, as `/proc/PID/ns/net` names it (`net:[inode]`).
    pub session_namespace: String,
}

/// Why a command ran without the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unconfined {
    /// The policy's setting that allowed it, and the refusal it answered.
    pub why: String,
}

/// One change of a dry run, as its result shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeShown {
    /// The path changed.
    pub path: String,
    /// What the change is.
    #[serde(flatten)]
    pub kind: ChangeKind,
    /// The code the walls, the deny globs or the journal would refuse it with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// What a dry run's change is, tagged `change`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new file.
    FileCreated(FileShown),
    /// A file whose contents or mode changed.
    FileChanged(FileShown),
    /// A new directory.
    DirCreated {
        /// Its mode, in octal.
        mode: String,
    },
    /// A directory whose mode changed.
    ModeChanged {
        /// The new mode, in octal.
        mode: String,
        /// The old one.
        before: String,
    },
    /// A new symbolic link.
    LinkCreated {
        /// Where it points.
        target: String,
    },
    /// A removed file or link.
    Removed,
    /// A removed directory.
    DirRemoved,
    /// Something the journal cannot hold (a fifo, a device, an overlay redirect).
    Unsupported {
        /// What it is.
        what: String,
    },
}

/// A file a dry run created or changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileShown {
    /// Its mode, in octal.
    pub mode: String,
    /// Its size.
    pub bytes: u64,
    /// A unified diff against the host's file, when both are text and it fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The diff did not fit in the budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diff_truncated: bool,
    /// A side is not text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
}

/// `run_command`'s record (not background): what [`super::command_ran`] renders.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// The command as asked.
    #[serde(flatten)]
    pub start: CommandStart,
    /// How it ended.
    #[serde(flatten)]
    pub ended: CommandEnded,
    /// Which `/tmp` it had (absent in journals before the session's `/tmp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<Tmp>,
    /// The session's network namespace, when it ran in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<SessionNetwork>,
    /// Its file changes are journaled effects (`true`), are not (`false`: it ran unconfined),
    /// or it changed nothing it could apply (absent: a dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_changes_journaled: Option<bool>,
    /// It ran without the sandbox, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfined: Option<Unconfined>,
    /// A dry run: what it changed in its throwaway layer.
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub dry_run: Option<DryRun>,
}

/// What a dry run changed in its layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DryRun {
    /// Always `true` (the record's marker of a dry run).
    pub dry_run: bool,
    /// The changes, as shown.
    pub changes: Vec<ChangeShown>,
    /// Some diffs did not fit.
    pub diff_truncated: bool,
}

impl CommandRecord {
    /// A record from its parts, with nothing optional set.
    pub fn new(start: CommandStart, ended: CommandEnded) -> Self {
        CommandRecord {
            start,
            ended,
            tmp: None,
            network: None,
            file_changes_journaled: None,
            unconfined: None,
            dry_run: None,
        }
    }
}

/// A background command's start record: what [`super::handle_started`] renders, and the
/// first half of its stop's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandleStart {
    /// The command as asked.
    #[serde(flatten)]
    pub start: CommandStart,
    /// Its handle (`h12`).
    pub handle: String,
    /// Always `true`.
    pub background: bool,
    /// It has a terminal.
    pub pty: bool,
    /// Its servers reached from the host's loopback (`127.0.0.1:PORT`), when it asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed: Vec<String>,
    /// Which `/tmp` it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<Tmp>,
    /// The network namespace it made for its session, when it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<SessionNetwork>,
}

/// Where a background command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandleStatus {
    /// It runs, or its output is still being read.
    Running,
    /// It ended and all its output was read.
    Exited,
    /// stop_handle collected it.
    Stopped,
}

/// How stop_handle stopped a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    /// It had ended by itself.
    AlreadyEnded,
    /// It ended on TERM.
    Term,
    /// It was killed after the grace.
    Kill,
}

/// How a background command ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandleEnd {
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Its timeout killed it.
    pub timed_out: bool,
    /// From the spawn to the end.
    pub duration_ms: u64,
}

/// The sandbox lost track of a background command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleFailure {
    /// The sandbox's code.
    pub code: String,
    /// Its message.
    pub message: String,
}

/// A background command's output buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferStats {
    /// Bytes kept.
    pub buffer_bytes: usize,
    /// Most bytes kept.
    pub buffer_bytes_max: usize,
    /// Frames dropped, oldest first.
    pub dropped_frames: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// Every byte read from standard output.
    pub stdout_bytes_total: u64,
    /// Every byte read from standard error.
    pub stderr_bytes_total: u64,
    /// Every byte read from the terminal.
    pub pty_bytes_total: u64,
}

/// A background command's state: part of check_handle's and list_handles' answers, and of
/// stop_handle's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandleState {
    /// Where it is.
    pub state: HandleStatus,
    /// How it ended, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub end: Option<HandleEnd>,
    /// Its connections through its egress proxy, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<Value>,
    /// Their totals, when it has a proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_totals: Option<Value>,
    /// The sandbox lost track of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<HandleFailure>,
    /// How stop_handle stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StoppedBy>,
    /// Its output buffer.
    #[serde(flatten)]
    pub buffer: BufferStats,
}

/// stop_handle's record: the start's record, the final state, and whether its file changes
/// were applied as journaled effects (`false` when an earlier stop took them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandleStop {
    /// What started it.
    #[serde(flatten)]
    pub start: HandleStart,
    /// How it stopped.
    #[serde(flatten)]
    pub state: HandleState,
    /// Its changes were applied with this stop.
    pub file_changes_journaled: bool,
}

/// A record as JSON, for the journal. Every field is a string, a number, a bool, a map with
/// string keys or JSON already, so this cannot fail; the `Null` branch is never taken.
pub fn to_value(record: &impl Serialize) -> Value {
    serde_json::to_value(record).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{changes_applied, command_ran, handle_started, handle_stopped};
    use serde_json::json;

    /// Records and results journaled by `aido exec` and `aido mcp` before the records were
    /// typed (a command with file changes, a dry run with a secret in its environment, a
    /// background command's start and its two stops), paths made neutral.
    const JOURNALED: &str = include_str!("../../tests/data/process_records.json");

    fn journaled() -> Vec<Value> {
        serde_json::from_str::<Vec<Value>>(JOURNALED).unwrap()
    }

    /// Renders `record` as its kind, typed, and checks it serializes back to exactly the JSON
    /// it was read from.
    fn typed_and_rendered(record: &Value) -> aido_actions::Outcome {
        fn round<T: Serialize + serde::de::DeserializeOwned>(record: &Value) -> T {
            let typed: T = serde_json::from_value(record.clone()).unwrap();
            assert_eq!(to_value(&typed), *record, "the record's JSON changed");
            typed
        }
        if record.get("state").is_some() {
            handle_stopped(&round::<HandleStop>(record))
        } else if record.get("background").is_some() {
            handle_started(&round::<HandleStart>(record))
        } else {
            command_ran(&round::<CommandRecord>(record))
        }
    }

    #[test]
    fn records_journaled_before_the_types_read_back_and_render_the_same() {
        let cases = journaled();
        assert_eq!(cases.len(), 5);
        for case in cases {
            let mut done = typed_and_rendered(&case["record"]);
            assert_eq!(done.text, case["text"], "{}", case["record"]["argv"]);
            if !case["applied"].is_null() {
                changes_applied(&mut done, &case["applied"]);
            }
            assert_eq!(done.output, case["output"], "{}", case["record"]["argv"]);
        }
    }

    #[test]
    fn a_record_from_before_the_sessions_tmp_and_applied_changes_still_renders() {
        let mut record = journaled()[0]["record"].clone();
        let fields = record.as_object_mut().unwrap();
        fields.remove("tmp");
        fields.remove("file_changes_journaled");
        let done = typed_and_rendered(&record);
        assert_eq!(done.output["file_changes_journaled"], false);
        assert_eq!(done.output["exit_code"], 3);
    }

    #[test]
    fn an_unconfined_record_says_why_and_gives_no_hint() {
        let mut record = journaled()[0]["record"].clone();
        record["profile"] = json!({"confinement": "none"});
        record["unconfined"] = json!({"why": "[processes] unconfined = \"always\""});
        record["file_changes_journaled"] = json!(false);
        record["stderr"] = json!("curl: (6) Could not resolve host: example.com\n");
        let done = typed_and_rendered(&record);
        assert_eq!(
            done.output["unconfined"]["why"],
            record["unconfined"]["why"]
        );
        assert!(done.output.get("hint").is_none());
        record.as_object_mut().unwrap().remove("unconfined");
        assert_eq!(
            typed_and_rendered(&record).output["hint"],
            crate::process::NO_NETWORK_HINT
        );
    }

    #[test]
    fn a_secret_environment_value_is_only_ever_its_hash() {
        let env = BTreeMap::from([
            ("API_KEY".to_owned(), "hunter2".to_owned()),
            ("MODE".to_owned(), "fast".to_owned()),
        ]);
        let start = CommandStart::new(
            vec!["true".into()],
            Path::new("/"),
            &env,
            (0, 1_000),
            Value::Null,
        );
        let value = to_value(&start);
        assert!(!value.to_string().contains("hunter2"));
        assert_eq!(value["env"]["MODE"], "fast");
        assert_eq!(
            value["env"]["API_KEY"]["blake3"],
            blake3::hash(b"hunter2").to_hex().to_string()
        );
    }

    #[test]
    fn exits_read_as_journaled() {
        for (exit, parts) in [
            (json!({"kind": "code", "value": 3}), (Some(3), None, false)),
            (
                json!({"kind": "signal", "value": 9}),
                (None, Some(9), false),
            ),
            (json!({"kind": "timed_out"}), (None, None, true)),
        ] {
            let typed: Exit = serde_json::from_value(exit.clone()).unwrap();
            assert_eq!(typed.parts(), parts);
            assert_eq!(json!(typed), exit);
        }
    }
}
