//! Reading a session back for people and tools: a timeline a person can follow (verdicts,
//! outcomes, confirmations, restarts), the JSON-lines export for jq and log shippers, and the
//! verification report.
//!
//! ```
//! use aido_journal::{CommitMode, Event, Journal, Limits, SessionId};
//! let dir = tempfile::tempdir().unwrap();
//! let j = Journal::open(dir.path(), Limits::default(), CommitMode::Group).unwrap();
//! let s = SessionId::from_bytes([1; 16]);
//! j.append_blocking(s, 0, Event::SessionStarted { client: None, cwd: "/w".into(), runtime: "t".into(), grant: None }).unwrap();
//! let text = aido_replay::timeline(&j.all_records(s).unwrap(), false);
//! assert!(text.contains("session started"));
//! ```

/// Re-deriving a session's files from its records, and diffs between seqs.
pub mod derive;
/// Reproducing recorded results from the records alone.
pub mod playback;
/// Holding the journal's tree against the live workspace (`verify --tree`).
pub mod tree;
/// What another policy would have said.
pub mod whatif;

use std::io::Write;

use aido_actions::Verdict;
use aido_journal::{Event, Record, VerifyReport};

/// Terminal colours, used only when asked (stdout is a terminal).
struct Paint(bool);

impl Paint {
    fn wrap(&self, code: &str, text: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn green(&self, t: &str) -> String {
        self.wrap("32", t)
    }
    fn red(&self, t: &str) -> String {
        self.wrap("31", t)
    }
    fn yellow(&self, t: &str) -> String {
        self.wrap("33", t)
    }
    fn dim(&self, t: &str) -> String {
        self.wrap("2", t)
    }
}

fn clock(time_ms: u64) -> String {
    let s = time_ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        time_ms % 1000
    )
}

/// The file changes `effects` stand for: a change set counts each of its entries (a command's
/// 1,700 files are 1,700 changes, not one), every other effect one.
fn changes_in(effects: &[aido_actions::Effect]) -> u64 {
    effects
        .iter()
        .map(|effect| match effect {
            aido_actions::Effect::Changes { entries, .. } => *entries,
            _ => 1,
        })
        .sum()
}

fn short(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', "⏎");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

/// A session as lines a person can read: one line per record.
#[allow(clippy::too_many_lines)]
pub fn timeline(records: &[Record], colour: bool) -> String {
    let p = Paint(colour);
    let mut out = String::new();
    let gone = aido_journal::timeline::abandoned(records);
    for r in records {
        // Records a rewind abandoned are marked with their branch, and dimmed.
        let branch = match gone.get(&r.seq) {
            Some(b) => p.dim(&format!("b{b}│")),
            None => "  │".to_owned(),
        };
        let head = format!("{:>5} {branch} {}  ", r.seq, p.dim(&clock(r.time_ms)));
        let line = match &r.event {
            Event::SessionStarted {
                client,
                cwd,
                runtime,
                grant,
            } => {
                let under = grant
                    .as_ref()
                    .map(|g| format!(" under grant {g}"))
                    .unwrap_or_default();
                format!(
                    "session started by {} in {cwd} ({runtime}){under}",
                    client.as_deref().unwrap_or("an unknown client")
                )
            }
            Event::ActionProposed {
                action, verdict, ..
            } => {
                let args = serde_json::to_value(action).map(|mut v| {
                    if let Some(o) = v.as_object_mut() {
                        o.remove("type");
                    }
                    v.to_string()
                });
                let judged = match verdict {
                    Verdict::Allow => p.green("allow"),
                    Verdict::Confirm { gate, reason, .. } => {
                        p.yellow(&format!("confirm ({gate}: {reason})"))
                    }
                    Verdict::Deny {
                        gate,
                        code,
                        reason,
                        leaf,
                    } => p.red(&format!(
                        "DENY {code} by {gate}{}: {reason}",
                        leaf.as_ref()
                            .map(|l| format!(" at {l}"))
                            .unwrap_or_default()
                    )),
                };
                format!(
                    "{} [{}] {}  → {judged}",
                    action.primitive(),
                    action.class(),
                    short(&args.unwrap_or_default(), 100)
                )
            }
            Event::ConfirmAnswered {
                proposal,
                approved,
                answer,
                by,
                ..
            } => {
                let said = if *approved {
                    p.green(answer)
                } else {
                    p.red(answer)
                };
                match by {
                    Some(by) => format!("  human answered #{proposal}: {said} by {}", by.words()),
                    None => format!("  human answered #{proposal}: {said}"),
                }
            }
            Event::ActionCompleted {
                proposal,
                outcome,
                duration_ms,
            } => {
                let effects = match changes_in(&outcome.effects) {
                    0 => String::new(),
                    n => format!(", {n} change(s)"),
                };
                format!(
                    "  #{proposal} {} in {duration_ms} ms{effects}: {}",
                    p.green("completed"),
                    short(&outcome.text, 80)
                )
            }
            Event::ActionFailed {
                proposal,
                failure,
                effects,
                ..
            } => {
                let kept = match changes_in(effects) {
                    0 => String::new(),
                    n => format!(" ({n} change(s) kept)"),
                };
                format!(
                    "  #{proposal} {} [{}]{kept}: {}",
                    p.red("failed"),
                    failure.code,
                    short(&failure.message, 80)
                )
            }
            Event::CallRejected {
                tool,
                code,
                message,
            } => p.red(&format!(
                "rejected call to {tool:?} [{code}]: {}",
                short(message, 80)
            )),
            Event::SessionResumed { client } => p.yellow(&format!("session resumed by {client}")),
            Event::WorkdirChanged { cwd, source } => {
                p.yellow(&format!("working directory now {cwd} (from {source})"))
            }
            Event::SnapshotTaken {
                snapshot,
                backend,
                workspace,
                ..
            } => p.yellow(&format!("snapshot {snapshot} of {workspace} ({backend})")),
            Event::Rewound {
                to_seq,
                cut,
                undo_target,
                proposal,
                branch,
                method,
                snapshot,
                recovered,
            } => p.yellow(&format!(
                "REWOUND {} seq {to_seq} by {method}{}{}: records {}..{} are now branch {branch}",
                if *undo_target { "to before" } else { "to" },
                snapshot
                    .as_ref()
                    .map(|s| format!(" from snapshot {s}"))
                    .unwrap_or_default(),
                if *recovered {
                    " (finished after a crash)"
                } else {
                    ""
                },
                cut.unwrap_or(*to_seq) + 1,
                proposal - 1
            )),
            Event::BodyRestarted { body, reason } => {
                p.yellow(&format!("{body} body restarted after: {reason}"))
            }
            Event::BodyFailed {
                body, reason, why, ..
            } => p.red(&format!("{body} body STOPPED: {why} (last: {reason})")),
            Event::HandleLost {
                handle,
                started_in,
                proposal,
                argv,
                changes_discarded,
            } => p.yellow(&format!(
                "background command {handle} LOST with its aido process (started by seq {proposal} of session {}: {}); {changes_discarded} layer entries never applied",
                short(started_in, 12),
                short(&argv.join(" "), 60)
            )),
            Event::EventsDelivered {
                subscription,
                proposal,
                changes,
                lagged,
                refused,
            } => {
                let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
                let lagged = if *lagged > 0 {
                    format!(", {lagged} dropped")
                } else {
                    String::new()
                };
                let refused = refused
                    .as_ref()
                    .map(|code| format!(" (reaction refused [{code}])"))
                    .unwrap_or_default();
                p.yellow(&format!(
                    "events for {subscription} of #{proposal}: {}{lagged}{refused}",
                    short(&paths.join(" "), 80)
                ))
            }
            Event::SessionEnded { reason } => format!("session ended: {}", short(reason, 80)),
            Event::Pruned {
                through_seq,
                reason,
                ..
            } => p.yellow(&format!(
                "PRUNED by retention ({reason}): records up to seq {through_seq} removed; the chain goes on from the next one"
            )),
            Event::Collected { trigger, summary } => p.yellow(&format!(
                "retention run by {trigger}: {} session(s) removed, {} cut, {} record(s), {} blob(s), {} object(s), {} snapshot(s), {} audit line(s); {} bytes freed",
                summary.sessions_removed,
                summary.sessions_cut,
                summary.records_removed,
                summary.blobs_removed,
                summary.objects_removed,
                summary.snapshots_removed,
                summary.audit_lines_removed,
                summary.bytes_freed
            )),
        };
        out.push_str(&head);
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A record as one JSON object, its hash included.
pub fn record_json(record: &Record) -> serde_json::Value {
    let mut value = serde_json::to_value(record).unwrap_or_default();
    if let Some(o) = value.as_object_mut() {
        o.insert("hash".into(), record.hash.clone().into());
    }
    value
}

/// Write a session as JSON lines, one record a line.
pub fn export_jsonl(records: &[Record], out: &mut dyn Write) -> std::io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut *out, &record_json(r))?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// What `aido replay verify` prints.
pub fn verify_text(session: &str, report: &VerifyReport) -> String {
    match &report.broken {
        None => match report.pruned_through {
            None => format!(
                "session {session}: {} records, chain intact, head {}",
                report.records, report.head
            ),
            Some(through) => format!(
                "session {session}: {} records after retention's cut through seq {through}, chain intact from the cut, head {}",
                report.records, report.head
            ),
        },
        Some(b) => format!(
            "session {session}: BROKEN at seq {}: {} ({} records before it check out)",
            b.seq, b.reason, report.records
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_set_counts_each_of_its_entries() {
        let effects = vec![
            aido_actions::Effect::DirCreated {
                path: "/w/d".into(),
            },
            aido_actions::Effect::Changes {
                parts: vec!["ab".into()],
                entries: 1674,
                bytes: 10,
            },
        ];
        assert_eq!(changes_in(&effects), 1675);
        assert_eq!(changes_in(&[]), 0);
    }
}
