//! list_processes: the commands aido started (its background handles) and, when the policy's
//! `[processes] host_visible` allows it (the policy refuses `host` otherwise, coded
//! `host_processes_hidden`), the host's processes from /proc with only the fields
//! `host_fields` names. An environment is never read; argv is shown with secret-looking
//! arguments redacted. The answer is recorded, so playback shows the same list.

use aido_actions::Failure;
use aido_actions::events::ListProcesses;
use serde_json::{Value, json};

use super::ProcessError;
use super::actor::ProcessBodyArgs;

/// The answer of list_processes.
pub fn list(args: &ProcessBodyArgs, list: &ListProcesses) -> Result<Value, Failure> {
    let mut out = json!({
        "aido_pid": std::process::id(),
        "started": args.handles.processes(),
    });
    if list.host {
        let config = &args.policy.config().processes;
        // The chain refused it already; the body does not trust that alone.
        if !config.host_visible {
            return Err(Failure::new(
                aido_actions::DenyCode::HostProcessesHidden.code(),
                "[processes] host_visible is false",
            ));
        }
        let limit = list
            .limit
            .unwrap_or(ListProcesses::LIMIT_MAX)
            .min(ListProcesses::LIMIT_MAX);
        let (host, more) = host(&config.host_fields, limit)?;
        out["host"] = json!(host);
        out["host_fields"] = json!(config.host_fields);
        out["host_more"] = json!(more);
    }
    Ok(out)
}

/// The host's processes in pid order, at most `limit`, each with `fields`; whether more were
/// left out.
fn host(fields: &[String], limit: usize) -> Result<(Vec<Value>, bool), Failure> {
    let entries = std::fs::read_dir("/proc")
        .map_err(|e| Failure::from(ProcessError::ProcUnreadable { why: e.to_string() }))?;
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let more = pids.len() > limit;
    let wants = |f: &str| fields.iter().any(|x| x == f);
    let listed = pids
        .into_iter()
        .take(limit)
        // A process that ended while the list was read is left out.
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let comm = &stat[open + 1..close];
            let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let mut p = serde_json::Map::new();
            if wants("pid") {
                p.insert("pid".into(), json!(pid));
            }
            if wants("ppid") {
                p.insert("ppid".into(), json!(rest.get(1)?.parse::<u32>().ok()?));
            }
            if wants("state") {
                p.insert("state".into(), json!(rest.first()?));
            }
            if wants("comm") {
                p.insert("comm".into(), json!(comm));
            }
            if wants("start_ticks") {
                p.insert(
                    "start_ticks".into(),
                    json!(rest.get(19)?.parse::<u64>().ok()?),
                );
            }
            if wants("uid") {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let uid = status
                    .lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|u| u.parse::<u32>().ok());
                p.insert("uid".into(), json!(uid));
            }
            if wants("argv") {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let argv: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| aido_walk::tools::redact::redact(&String::from_utf8_lossy(a)))
                    .collect();
                p.insert("argv".into(), json!(argv));
            }
            Some(Value::Object(p))
        })
        .collect();
    Ok((listed, more))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_processes_show_only_the_fields_asked_for_and_never_an_environment() {
        let fields = vec!["pid".to_owned(), "comm".to_owned(), "argv".to_owned()];
        let (listed, _) = host(&fields, ListProcesses::LIMIT_MAX).unwrap();
        let me = std::process::id();
        let mine = listed
            .iter()
            .find(|p| p["pid"] == json!(me))
            .expect("this test's own process is listed");
        let keys: Vec<&String> = mine.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["argv", "comm", "pid"]);
        assert!(
            listed
                .iter()
                .all(|p| p.get("env").is_none() && p.get("ppid").is_none())
        );
        let (one, more) = host(&fields, 1).unwrap();
        assert_eq!(one.len(), 1);
        assert!(more, "a host has more than one process");
    }
}
