//! Process primitives: commands run confined in aido's sandbox (`aido-sandbox`), with the
//! policy's write walls as the only writable roots and its deny globs hidden.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Run one command confined, as the user's shell would but in aido's sandbox. Give `argv`, or
/// `shell` (run as `/bin/sh -c SHELL`), not both. Defaults: 10 s timeout (at most 600 s; a
/// background one 1 h, at most a day), 64 KiB of stdout and of stderr kept (the rest counted),
/// no network but a loopback shared with the session's background commands (the policy's
/// `[processes] egress` opens hosts through a proxy), `/tmp` shared by the session's commands
/// and removed when the session ends (not journaled; `private_tmp` gives a command its own),
/// `cwd` and relative paths at the session's directory. The
/// environment is the user's as the policy's `env_inherit` passes it (PATH, HOME, locale,
/// toolchain homes; never a secret-looking name). The host is read-only but for the policy's
/// write roots, the deny globs hidden. The command writes into a copy-on-write layer; when it
/// ends its file changes are judged by the walls and applied as journaled effects (a rewind
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
    /// The working directory (default the session's; `~` and `$HOME` are the user's home);
    /// it must be inside the walls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables set for the command, over the inherited ones; `~` and `$HOME` in a value
    /// mean the user's home.
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
    /// Start the command in the background and return a handle at once (read its output with
    /// check_handle, feed it with write_stdin, end it with stop_handle, which applies its file
    /// changes). `timeout_ms` then defaults to an hour and may be up to a day.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// With `background`: give the command a pseudo-terminal (24 rows, 80 columns) as its
    /// input, output and controlling terminal; its output and errors come as one stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pty: bool,
    /// Give the command a `/tmp` of its own (an empty tmpfs, gone when it ends) instead of
    /// the session's, which its commands share and which is removed when the session ends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private_tmp: bool,
    /// With `background`: ports its servers listen on (at 127.0.0.1 inside) to reach from the
    /// host's 127.0.0.1 at the same port, for a person's browser, while it runs. Each must be
    /// listed in the policy's `[processes] expose_ports` (none by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_ports: Vec<u16>,
}

impl RunCommand {
    /// Default wall-clock bound.
    pub const TIMEOUT_MS_DEFAULT: u64 = 10_000;
    /// Largest wall-clock bound.
    pub const TIMEOUT_MS_MAX: u64 = 600_000;
    /// Default and largest output kept per stream (it is journaled inline, twice: as the
    /// recorded input and in the result).
    pub const OUTPUT_BYTES_MAX: usize = 64 << 10;
    /// Default wall-clock bound of a background command.
    pub const BACKGROUND_TIMEOUT_MS_DEFAULT: u64 = 3_600_000;
    /// Largest wall-clock bound of a background command.
    pub const BACKGROUND_TIMEOUT_MS_MAX: u64 = 86_400_000;

    /// The argv to run: `argv`, or `/bin/sh -c shell`. None when both or neither are given.
    pub fn command_line(&self) -> Option<Vec<String>> {
        match (&self.shell, self.argv.is_empty()) {
            (Some(shell), true) => Some(vec!["/bin/sh".into(), "-c".into(), shell.clone()]),
            (None, false) => Some(self.argv.clone()),
            _ => None,
        }
    }

    /// The working directory as given (`.` is the session's), a leading `$HOME` or `${HOME}`
    /// spelled `~` (the user's home, as every path aido judges).
    pub fn cwd_given(&self) -> std::borrow::Cow<'_, str> {
        let given = self.cwd.as_deref().unwrap_or(".");
        for spelled in ["${HOME}", "$HOME"] {
            if let Some(rest) = given.strip_prefix(spelled)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return format!("~{rest}").into();
            }
        }
        given.into()
    }
}

impl Touches for RunCommand {
    fn touches(&self, out: &mut Vec<Access>) {
        // The command starts there; what it may write is bounded by the sandbox's writable
        // roots, which are the policy's write walls.
        out.push(Access::read(self.cwd_given().as_ref()));
    }
}

/// Read a background command's output from a cursor: the frames (each `{seq, stream, t_ms,
/// text}`) from `cursor` on, within `bytes_max`, with `next_cursor` for the next call; with
/// `wait_ms`, wait up to that long (at most 8000) for a frame or the end when there is none
/// yet. Also its state (running, exited with its exit, stopped), and how much the bounded
/// buffer dropped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckHandle {
    /// The handle run_command returned.
    pub handle: String,
    /// The first frame wanted (default 0: the oldest kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// How long to wait for new output when there is none, in ms (default 0, at most 8000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Most output bytes returned (default and most 64 KiB; at least one frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_max: Option<usize>,
}

impl CheckHandle {
    /// The longest long-poll.
    pub const WAIT_MS_MAX: u64 = 8_000;
    /// Default and largest output returned by one call.
    pub const BYTES_MAX: usize = 64 << 10;
}

/// Write text to a background command's standard input (or its terminal), and with `close`
/// close it afterwards (on a terminal: send end-of-file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteStdin {
    /// The handle.
    pub handle: String,
    /// The text (at most 64 KiB).
    #[serde(default)]
    pub text: String,
    /// Close the input after the text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

impl WriteStdin {
    /// Most bytes written by one call.
    pub const TEXT_BYTES_MAX: usize = 64 << 10;
}

/// Stop a background command: SIGTERM to its whole process tree, SIGKILL after `grace_ms`
/// (default 2000, at most 30000) to whatever is left; a command that already ended is only
/// collected. Its file changes are then judged and applied as journaled effects (or refused
/// whole), as a finished run_command's are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopHandle {
    /// The handle.
    pub handle: String,
    /// How long TERM has before KILL, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

impl StopHandle {
    /// Default grace between TERM and KILL.
    pub const GRACE_MS_DEFAULT: u64 = 2_000;
    /// Longest grace.
    pub const GRACE_MS_MAX: u64 = 30_000;
}

/// The background commands of this aido (running, ended, stopped) and those lost when an
/// earlier aido process ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListHandles {}

/// Handles name no path: what a background command may touch was judged when it started.
macro_rules! touches_nothing {
    ($($ty:ty),*) => {$(
        impl Touches for $ty {
            fn touches(&self, _out: &mut Vec<Access>) {}
        }
    )*};
}
touches_nothing!(CheckHandle, WriteStdin, StopHandle, ListHandles);

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
