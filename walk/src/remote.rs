//! The results of `ssh_exec`, `run_in_sandbox` and `run_container_group` as pure functions of
//! what the process body recorded: one `Input::Answer { from: "process", value }` holding the
//! target (host, port, user, pinned host key fingerprint; or the image, the command, the
//! environment with secret-looking values hashed, the workspace mount and the confinement
//! profile), the output frames with their times, the kept output, the exit and what it cost.
//! The body renders its result with these functions and playback calls them with the recorded
//! value, so playback reproduces every result without connecting or spawning anything.

use aido_actions::Outcome;
use serde_json::{Value, json};

/// How a run ended, as result fields: `(exit_code, signal, timed_out)`.
fn ended(exit: &Value) -> (Value, Value, bool) {
    match exit["kind"].as_str() {
        Some("code") => (exit["value"].clone(), Value::Null, false),
        Some("signal") => (Value::Null, exit["value"].clone(), false),
        Some("timed_out") => (Value::Null, Value::Null, true),
        _ => (Value::Null, Value::Null, false),
    }
}

/// The output fields every run has, from its record.
fn ran(record: &Value) -> Value {
    let (exit_code, signal, timed_out) = ended(&record["exit"]);
    json!({
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": timed_out,
        "stdout": record["stdout"],
        "stderr": record["stderr"],
        "stdout_bytes_total": record["stdout_bytes_total"],
        "stderr_bytes_total": record["stderr_bytes_total"],
        "stdout_truncated": record["stdout_truncated"],
        "stderr_truncated": record["stderr_truncated"],
        "frames": record["frames"].as_array().map_or(0, Vec::len),
        "duration_ms": record["duration_ms"],
    })
}

/// ssh_exec's result: where it ran (the host key it was pinned to) and what it answered.
pub fn ssh_ran(record: &Value) -> Outcome {
    let mut output = ran(record);
    for key in ["host", "address", "port", "user", "host_key", "command"] {
        output[key] = record[key].clone();
    }
    Outcome::from_output(output)
}

/// One container's part of a result.
fn container(record: &Value) -> Value {
    let mut output = ran(record);
    for key in ["image", "argv", "mount", "workspace", "oom_killed"] {
        output[key] = record[key].clone();
    }
    output["pids_max"] = record["profile"]["pids_max"].clone();
    output["memory_bytes"] = record["profile"]["memory_bytes"].clone();
    output
}

/// run_in_sandbox's result.
pub fn container_ran(record: &Value) -> Outcome {
    Outcome::from_output(container(record))
}

/// run_container_group's result: one part per container, in the order given.
pub fn group_ran(record: &Value) -> Outcome {
    let containers: Vec<Value> = record["containers"]
        .as_array()
        .map(|all| all.iter().map(container).collect())
        .unwrap_or_default();
    Outcome::from_output(json!({
        "network": "pod loopback only",
        "containers": containers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_kind_renders() {
        let ran = ssh_ran(&json!({"exit": {"kind": "code", "value": 7}, "stdout": "x",
            "frames": [{"seq": 0}], "host": "build", "host_key": "SHA256:k"}));
        assert_eq!(ran.output["exit_code"], 7);
        assert_eq!(ran.output["frames"], 1);
        assert_eq!(ran.output["host_key"], "SHA256:k");
        let ran = ssh_ran(&json!({"exit": {"kind": "signal", "value": "KILL"}}));
        assert_eq!(ran.output["signal"], "KILL");
        let ran =
            container_ran(&json!({"exit": {"kind": "timed_out"}, "profile": {"pids_max": 9}}));
        assert_eq!(ran.output["timed_out"], true);
        assert_eq!(ran.output["pids_max"], 9);
        let group = group_ran(&json!({"containers": [{"exit": {"kind": "code", "value": 0}}, {}]}));
        assert_eq!(group.output["containers"].as_array().unwrap().len(), 2);
    }
}
