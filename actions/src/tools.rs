//! The agent's toolbelt of pure-ish helpers: `diff`, `render_template` and `read_logs`. Each
//! reads only what the walls and deny globs allow (a path is judged before it is opened; a
//! template's includes are judged one by one as they are loaded), is bounded by named limits,
//! and builds its result with a pure function of what it read (`aido_walk::tools`), so
//! playback reproduces it from the recorded inputs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Compare two files, or a file with a given text, as a unified diff. Binary files are said
/// to differ or not, never diffed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Diff {
    /// The original file (the `---` side).
    pub path: String,
    /// The file to compare it with (the `+++` side). Give this or `text`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_path: Option<String>,
    /// A text to compare the file with (at most 1 MiB). Give this or `other_path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1048576))]
    pub text: Option<String>,
    /// Unchanged lines shown around each change (default 3, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub context_lines: Option<u32>,
    /// Most lines of diff returned (default 2000, at most 20000); a longer diff is cut at a
    /// line boundary and the result says `truncated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20000))]
    pub lines_max: Option<u32>,
}

impl Diff {
    /// Longest `text`.
    pub const TEXT_BYTES_MAX: usize = 1 << 20;
    /// Default context.
    pub const CONTEXT_LINES_DEFAULT: u32 = 3;
    /// Most context.
    pub const CONTEXT_LINES_MAX: u32 = 100;
    /// Default line budget.
    pub const LINES_MAX_DEFAULT: u32 = 2000;
    /// Largest line budget.
    pub const LINES_MAX_MAX: u32 = 20_000;
}

impl Touches for Diff {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::read(&self.path));
        if let Some(other) = &self.other_path {
            out.push(Access::read(other));
        }
    }
}

/// Render a MiniJinja (Jinja2) template, sandboxed: no clock, no random, no environment;
/// `include`, `import` and `extends` load only files the walls and deny globs allow (names
/// relative to the template's directory, or to the session's for an inline template); the
/// work is bounded by fuel and the output by a size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RenderTemplate {
    /// The template's source (at most 256 KiB). Give this or `path`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub template: Option<String>,
    /// A template file. Give this or `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The variables (a JSON object, at most 256 KiB as JSON).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub context: serde_json::Map<String, serde_json::Value>,
    /// An undefined variable is an error (`template_undefined`) instead of empty text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
    /// The work allowed (MiniJinja fuel: about one unit per instruction, and about 64 bytes
    /// of memory per unit; default 100000, at most 2000000); a template that runs out is
    /// `template_fuel_exhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2000000))]
    pub fuel: Option<u64>,
    /// Most bytes of output (default 64 KiB, at most 1 MiB); more is `template_output_too_large`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1048576))]
    pub output_bytes_max: Option<u64>,
}

impl RenderTemplate {
    /// Longest inline template (and template file).
    pub const SOURCE_BYTES_MAX: usize = 256 << 10;
    /// Largest context, as JSON.
    pub const CONTEXT_BYTES_MAX: usize = 256 << 10;
    /// Default fuel.
    pub const FUEL_DEFAULT: u64 = 100_000;
    /// Most fuel.
    pub const FUEL_MAX: u64 = 2_000_000;
    /// Default output bound.
    pub const OUTPUT_BYTES_DEFAULT: u64 = 64 << 10;
    /// Largest output bound.
    pub const OUTPUT_BYTES_MAX: u64 = 1 << 20;
    /// Most templates one render may load (includes, imports, extends).
    pub const LOADS_MAX: usize = 32;
}

impl Touches for RenderTemplate {
    fn touches(&self, out: &mut Vec<Access>) {
        // Includes are named inside the template; the body judges each as it loads it.
        if let Some(path) = &self.path {
            out.push(Access::read(path));
        }
    }
}

/// What `read_logs` reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// aido's own log (`AIDO_HOME/logs/aido.log` and its rotated `aido.log.1`).
    #[default]
    Aido,
    /// A session's actions from the journal (this one unless `session` names another): seq,
    /// time, primitive and how it ended.
    Activity,
    /// A file the walls and deny globs allow (`path`).
    File,
}

/// Read logs: aido's own, this session's activity from the journal, or a file the policy
/// allows; the last lines, optionally only those since a time or matching a regex, within
/// line and byte caps. Secrets (values of secret-looking keys, bearer tokens, known key
/// shapes) are redacted before anything is matched or returned.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadLogs {
    /// `aido` (default), `activity` or `file`.
    #[serde(default)]
    pub source: LogSource,
    /// The file, for `source: file` (only then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// For `source: activity`: another session of this aido's journal (its id, as
    /// `aido replay sessions` shows it); default this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 32, max = 32))]
    pub session: Option<String>,
    /// The last this many lines that pass the filters (default 100, at most 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5000))]
    pub tail: Option<u32>,
    /// Only lines at or after this time (RFC 3339, `2026-12-01T14:00:00Z`); a line without a
    /// leading timestamp belongs to the line before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub since: Option<String>,
    /// Only lines matching this regex (Rust regex syntax, at most 512 bytes; linear time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub grep: Option<String>,
    /// Match `grep` ignoring case.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_case: bool,
    /// Most bytes of lines returned (default 32 KiB, at most 512 KiB); the newest lines are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 524288))]
    pub bytes_max: Option<u64>,
    /// How far back to look, in bytes from the end (default 1 MiB, at most 8 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8388608))]
    pub scan_bytes: Option<u64>,
}

impl ReadLogs {
    /// Default tail.
    pub const TAIL_DEFAULT: u32 = 100;
    /// Largest tail.
    pub const TAIL_MAX: u32 = 5000;
    /// Longest regex.
    pub const GREP_BYTES_MAX: usize = 512;
    /// Default output bound.
    pub const BYTES_DEFAULT: u64 = 32 << 10;
    /// Largest output bound.
    pub const BYTES_MAX: u64 = 512 << 10;
    /// Default look-back.
    pub const SCAN_BYTES_DEFAULT: u64 = 1 << 20;
    /// Largest look-back.
    pub const SCAN_BYTES_MAX: u64 = 8 << 20;

    /// The look-back asked for, clamped to its bounds (validation reports values over them).
    pub fn scan(&self) -> u64 {
        self.scan_bytes
            .unwrap_or(Self::SCAN_BYTES_DEFAULT)
            .clamp(1, Self::SCAN_BYTES_MAX)
    }
}

impl Touches for ReadLogs {
    fn touches(&self, out: &mut Vec<Access>) {
        // aido's own log and the journal are aido's, not the agent's: only a named file is
        // judged by the walls.
        if let Some(path) = &self.path {
            out.push(Access::read(path));
        }
    }
}
