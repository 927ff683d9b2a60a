//! Process primitives: commands run confined in aido's sandbox (`aido-sandbox`), with the
//! policy's write walls as the only writable roots and its deny globs hidden.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Run one command confined: no network, the host read-only except the policy's write roots,
/// the deny globs hidden, a cleared environment. Give `argv`, or `shell` (run as
/// `/bin/sh -c SHELL`), not both. It runs over a copy-on-write layer of the write roots; when
/// it ends its file changes are judged by the walls and applied as journaled effects (a rewind
/// undoes them), or refused all together naming the paths; with `dry_run` they are returned,
/// not applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommand {
    /// The program and its arguments (`argv[0]` is looked up in `PATH`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// A shell command line, run with `/bin/sh -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// The working directory (default the session's); it must be inside the walls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables set for the command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Text written to the command's standard input, which is then closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Wall-clock bound in ms (default 10000, at most 600000); past it the whole tree is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Standard output kept, in bytes (default and most 64 KiB; the rest is counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_bytes_max: Option<usize>,
    /// Standard error kept, in bytes (default and most 64 KiB; the rest is counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_bytes_max: Option<usize>,
    /// Run the command over a copy-on-write layer of the write roots and return what it
    /// changed (files created, changed and removed, with unified diffs of text files) without
    /// applying any of it: the host tree is left exactly as it was.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

impl RunCommand {
    /// Default wall-clock bound.
    pub const TIMEOUT_MS_DEFAULT: u64 = 10_000;
    /// Largest wall-clock bound.
    pub const TIMEOUT_MS_MAX: u64 = 600_000;
    /// Default and largest output kept per stream (it is journaled inline, twice: as the
    /// recorded input and in the result).
    pub const OUTPUT_BYTES_MAX: usize = 64 << 10;

    /// The argv to run: `argv`, or `/bin/sh -c shell`. None when both or neither are given.
    pub fn command_line(&self) -> Option<Vec<String>> {
        match (&self.shell, self.argv.is_empty()) {
            (Some(shell), true) => Some(vec!["/bin/sh".into(), "-c".into(), shell.clone()]),
            (None, false) => Some(self.argv.clone()),
            _ => None,
        }
    }

    /// The working directory as given (`.` is the session's).
    pub fn cwd_given(&self) -> &str {
        self.cwd.as_deref().unwrap_or(".")
    }
}

impl Touches for RunCommand {
    fn touches(&self, out: &mut Vec<Access>) {
        // The command starts there; what it may write is bounded by the sandbox's writable
        // roots, which are the policy's write walls.
        out.push(Access::read(self.cwd_given()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_or_shell_never_both() {
        let mut run: RunCommand =
            serde_json::from_value(serde_json::json!({"shell": "echo hi"})).unwrap();
        assert_eq!(run.command_line().unwrap(), ["/bin/sh", "-c", "echo hi"]);
        run.argv = vec!["true".into()];
        assert_eq!(run.command_line(), None);
        run.shell = None;
        assert_eq!(run.command_line().unwrap(), ["true"]);
        run.argv.clear();
        assert_eq!(run.command_line(), None);
    }
}
