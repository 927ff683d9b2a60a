//! The result of `run_command` as a pure function of what the process body recorded: the body
//! records one `Input::Answer { from: "process", value }` (the command line, the working
//! directory, the environment with secret-looking values hashed, the sandbox profile, the exit,
//! the kept output, the duration and the resource use) and builds its result with
//! [`command_ran`]; playback calls the same function with the recorded value, so it reproduces
//! the result without spawning anything.

use aido_actions::Outcome;
use serde_json::{Value, json};

pub use record::{
    CommandEnded, CommandRecord, CommandStart, EnvValue, Exit, HandleStart, HandleState, HandleStop,
};

/// The records, typed.
pub mod record;

/// Who answers in the recorded input.
pub const ANSWERED_BY: &str = "process";

/// Who answers the second recorded input of a command whose changes were applied: the
/// filesystem body, with what it applied and the effects it made.
pub const APPLIED_BY: &str = "command_changes";

/// The recorded answer of an apply: the changes as shown to the agent (`{"applied": [the
/// first few], "total", "counts", "truncated"}`), and the effects.
pub fn applied_answer(shown: Value, effects: Vec<aido_actions::Effect>) -> Value {
    json!({"applied": shown, "effects": effects})
}

/// A command's result once its changes were applied: they are listed (the first few by name,
/// with the total and a count per kind), and their effects are the action's (so rewind undoes
/// them and verify re-derives them).
pub fn changes_applied(outcome: &mut Outcome, answer: &Value) {
    match &answer["applied"] {
        // Journals before change sets recorded the whole list.
        Value::Array(list) => {
            outcome.output["changes"] = Value::Array(list.clone());
            outcome.output["changes_total"] = json!(list.len());
        }
        shown => {
            outcome.output["changes"] = shown["applied"].clone();
            outcome.output["changes_total"] = shown["total"].clone();
            outcome.output["changes_counts"] = shown["counts"].clone();
            if shown["truncated"] == json!(true) {
                outcome.output["changes_truncated"] = json!(true);
            }
        }
    }
    if let Ok(effects) =
        serde_json::from_value::<Vec<aido_actions::Effect>>(answer["effects"].clone())
    {
        outcome.effects.extend(effects);
    }
}

pub use aido_toolbelt::redact::is_secret_name;

/// What a command without network that failed to resolve a name is told.
pub const NO_NETWORK_HINT: &str = "this command has no network (only its own loopback): names \
    do not resolve and connections fail inside it. The policy's [processes] egress = \
    [\"host:443\"] opens hosts through aido's egress proxy.";

/// Whether a command's output says a name did not resolve (curl, pip, npm, git, Python, Go).
fn failed_to_resolve(ended: &CommandEnded) -> bool {
    const SAID: [&str; 7] = [
        "Could not resolve host",
        "Temporary failure in name resolution",
        "Name or service not known",
        "getaddrinfo",
        "EAI_AGAIN",
        "ENOTFOUND",
        "no such host",
    ];
    [&ended.stdout, &ended.stderr]
        .iter()
        .any(|text| SAID.iter().any(|said| text.contains(said)))
}

/// The result of a finished command, from its record.
pub fn command_ran(record: &CommandRecord) -> Outcome {
    let (start, ended) = (&record.start, &record.ended);
    let (exit_code, signal, timed_out) = ended.exit.parts();
    let mut output = json!({
        "argv": start.argv,
        "cwd": start.cwd,
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": timed_out,
        "stdout": ended.stdout,
        "stderr": ended.stderr,
        "stdout_bytes_total": ended.stdout_bytes_total,
        "stderr_bytes_total": ended.stderr_bytes_total,
        "stdout_truncated": ended.stdout_truncated,
        "stderr_truncated": ended.stderr_truncated,
        "duration_ms": ended.duration_ms,
        "usage": ended.usage,
        "file_changes_journaled": record.file_changes_journaled == Some(true),
    });
    // The session's shared network namespace, when it ran in one (a background command's).
    if let Some(network) = &record.network {
        output["network"] = json!(network);
    }
    // Its connections through the egress proxy, admitted and refused, and their totals.
    with_egress(&mut output, &ended.egress, ended.egress_totals.as_ref());
    // Run without the sandbox, as the policy allowed, and why.
    if let Some(unconfined) = &record.unconfined {
        output["unconfined"] = json!(unconfined);
    } else if ended.egress.is_empty() && failed_to_resolve(ended) {
        // A command without network that tried to reach one: say why it failed, and how to
        // give it some (its tools only say they could not resolve a name).
        output["hint"] = json!(NO_NETWORK_HINT);
    }
    // A dry run: what the command changed in its throwaway layer.
    if let Some(dry) = &record.dry_run {
        output["dry_run"] = json!(true);
        output["changes"] = json!(dry.changes);
        output["diff_truncated"] = json!(dry.diff_truncated);
    }
    Outcome::from_output(output)
}

/// `egress` and `egress_totals` in `output`, when there are some.
fn with_egress(output: &mut Value, egress: &[Value], totals: Option<&Value>) {
    if !egress.is_empty() {
        output["egress"] = json!(egress);
    }
    if let Some(totals) = totals {
        output["egress_totals"] = totals.clone();
    }
}

/// A background command's start, from its record: its handle and what runs.
pub fn handle_started(record: &HandleStart) -> Outcome {
    let mut output = json!({
        "handle": record.handle,
        "background": true,
        "argv": record.start.argv,
        "cwd": record.start.cwd,
        "pty": record.pty,
        "timeout_ms": record.start.timeout_ms,
    });
    // Its servers reached from the host's loopback, as `http://127.0.0.1:PORT`.
    if !record.exposed.is_empty() {
        output["exposed"] = json!(record.exposed);
    }
    Outcome::from_output(output)
}

/// check_handle, write_stdin and list_handles: the recorded answer is the result (the frames
/// exactly as the live call served them), so playback needs nothing else.
pub fn handle_answered(answer: &Value) -> Outcome {
    Outcome::from_output(answer.clone())
}

/// stop_handle, from its record: how the command ended and was stopped, what its output
/// amounted to; its applied changes are added by [`changes_applied`] as for run_command.
pub fn handle_stopped(record: &HandleStop) -> Outcome {
    let (state, buffer) = (&record.state, &record.state.buffer);
    let end = state.end.as_ref();
    let mut output = json!({
        "handle": record.start.handle,
        "argv": record.start.start.argv,
        "state": state.state,
        "stopped_by": state.stopped_by,
        "exit_code": end.and_then(|end| end.exit_code),
        "signal": end.and_then(|end| end.signal),
        "timed_out": end.map(|end| end.timed_out),
        "duration_ms": end.map(|end| end.duration_ms),
        "stdout_bytes_total": buffer.stdout_bytes_total,
        "stderr_bytes_total": buffer.stderr_bytes_total,
        "pty_bytes_total": buffer.pty_bytes_total,
        "dropped_frames": buffer.dropped_frames,
        "dropped_bytes": buffer.dropped_bytes,
        "file_changes_journaled": record.file_changes_journaled,
    });
    if let Some(failed) = &state.failed {
        output["failed"] = json!(failed);
    }
    // Every connection it tried through its egress proxy, when it had one, and their totals.
    with_egress(&mut output, &state.egress, state.egress_totals.as_ref());
    Outcome::from_output(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_recognised() {
        for name in [
            "API_KEY",
            "github_token",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "LANG", "HOME"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
