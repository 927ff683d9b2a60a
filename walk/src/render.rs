//! The results of runtime primitives (composites, meta, snapshots, rewinds, random bytes) as
//! pure functions of the action, its children's results and the inputs it recorded. The
//! executor builds its results with these; `aido replay playback` calls the same functions
//! with what the journal recorded.

use aido_actions::meta::SessionHistory;
use aido_actions::{Condition, Effect, Failure, Outcome};
use aido_journal::{Event, Record, SessionId};
use serde_json::{Value, json};

use crate::snapshot;

/// A child's output wrapped by its composite; the text is the output as JSON.
pub fn wrapped(mut done: Outcome, f: impl FnOnce(Value) -> Value) -> Outcome {
    let output = std::mem::take(&mut done.output);
    done.output = f(output);
    done.text = done.output.to_string();
    done
}

/// One finished step of a pipeline, as its output lists it.
pub fn pipeline_step(step: usize, primitive: &str, output: &Value) -> Value {
    json!({"step": step, "primitive": primitive, "ok": true, "output": output})
}

/// The failure of a pipeline whose step `step` (at `label`) failed with `cause`.
pub fn pipeline_failed(
    label: &str,
    step: usize,
    primitive: &str,
    steps: &[Value],
    cause: &Failure,
) -> Failure {
    Failure {
        code: cause.code.clone(),
        message: format!("{label} ({primitive}) failed: {}", cause.message),
        details: Some(
            json!({"leaf": label, "completed_steps": step, "steps": steps, "cause": cause}),
        ),
    }
}

/// A finished pipeline's output and text (effects and inputs are its steps').
pub fn pipeline_done(done: &mut Outcome, steps: Vec<Value>) {
    let total = steps.len();
    done.output = json!({"steps": steps, "completed_steps": total});
    done.text = format!("{total} steps completed");
}

/// try whose action succeeded.
pub fn try_succeeded(done: Outcome) -> Outcome {
    wrapped(done, |o| json!({"succeeded": true, "output": o}))
}

/// try whose action failed; `fallback` is the fallback's output when there was one.
pub fn try_failed(done: &mut Outcome, error: &Failure, fallback: Option<Value>) {
    done.output = match fallback {
        Some(f) => json!({"succeeded": false, "error": error, "fallback": f}),
        None => json!({"succeeded": false, "error": error}),
    };
    done.text = done.output.to_string();
}

/// if, once its condition was answered and the branch (if any) ran.
pub fn if_done(holds: bool, branch: Option<(&str, Outcome)>) -> Outcome {
    match branch {
        Some((label, done)) => wrapped(
            done,
            |o| json!({"condition": holds, "branch": label, "output": o}),
        ),
        None => Outcome::from_output(json!({"condition": holds, "branch": null})),
    }
}

/// assert, once its condition was answered.
pub fn assert_done(
    condition: &Condition,
    message: Option<&str>,
    holds: bool,
) -> Result<Outcome, Failure> {
    if holds {
        return Ok(Outcome::from_output(json!({"holds": true})));
    }
    let message = message.unwrap_or("the condition does not hold");
    Err(Failure::from(crate::error::RuntimeError::AssertionFailed {
        message: message.to_owned(),
    })
    .with_details(json!({"condition": condition})))
}

/// The answer of simulate or policy_check (what the policy engine said) as a result.
pub fn answered(value: Value) -> Outcome {
    Outcome::from_output(value)
}

/// random_bytes, from the bytes drawn (hex).
pub fn random_bytes(count: u32, hex: &str) -> Outcome {
    Outcome {
        text: hex.to_owned(),
        output: json!({"count": count, "hex": hex}),
        ..Outcome::default()
    }
}

/// How many records session_history reads to show `limit` actions.
pub fn history_window(h: &SessionHistory) -> (usize, usize) {
    let limit = h
        .limit
        .unwrap_or(SessionHistory::LIMIT_DEFAULT)
        .clamp(1, SessionHistory::LIMIT_MAX) as usize;
    // Each action is a proposal plus at most two more records; read enough to see them.
    (limit, limit * 4 + 8)
}

/// session_history, from the records it read (the newest `history_window` ones before
/// `before_seq`).
pub fn session_history(session: SessionId, records: &[Record], limit: usize) -> Outcome {
    let mut actions: Vec<serde_json::Value> = Vec::new();
    for r in records {
        match &r.event {
            Event::ActionProposed {
                action, verdict, ..
            } => {
                let status = if verdict.is_deny() {
                    "denied"
                } else {
                    "pending"
                };
                let mut entry = json!({"seq": r.seq, "time_ms": r.time_ms, "primitive": action.primitive(),
                                           "class": action.class(), "verdict": verdict.name(), "status": status});
                if let aido_actions::Verdict::Deny { code, .. } = verdict {
                    entry["code"] = json!(code);
                }
                actions.push(entry);
            }
            Event::ActionCompleted {
                proposal,
                duration_ms,
                outcome,
            } => {
                if let Some(e) = actions.iter_mut().find(|e| e["seq"] == *proposal) {
                    e["status"] = json!("completed");
                    e["duration_ms"] = json!(duration_ms);
                    e["effects"] = json!(outcome.effects.len());
                }
            }
            Event::ActionFailed {
                proposal, failure, ..
            } => {
                if let Some(e) = actions.iter_mut().find(|e| e["seq"] == *proposal) {
                    e["status"] = json!("failed");
                    e["code"] = json!(failure.code);
                }
            }
            Event::ConfirmAnswered {
                proposal,
                answer,
                by,
                ..
            } => {
                if let Some(e) = actions.iter_mut().find(|e| e["seq"] == *proposal) {
                    e["confirmation"] = json!(answer);
                    if let Some(by) = by {
                        e["confirmed_by"] = json!(by);
                    }
                }
            }
            Event::CallRejected { tool, code, .. } => {
                actions.push(
                    json!({"seq": r.seq, "time_ms": r.time_ms, "primitive": tool,
                                        "verdict": "none", "status": "rejected", "code": code}),
                );
            }
            Event::Rewound { to_seq, branch, .. } => {
                actions.push(json!({"seq": r.seq, "time_ms": r.time_ms, "primitive": "rewind",
                                        "verdict": "none", "status": "rewound", "to_seq": to_seq, "branch": branch}));
            }
            Event::WorkdirChanged { cwd, source } => {
                actions.push(json!({"seq": r.seq, "time_ms": r.time_ms, "primitive": "workdir",
                                        "verdict": "none", "status": "changed", "cwd": cwd, "source": source}));
            }
            Event::SessionStarted { .. }
            | Event::SessionResumed { .. }
            | Event::BodyRestarted { .. }
            | Event::BodyFailed { .. }
            | Event::HandleLost { .. }
            | Event::EventsDelivered { .. }
            | Event::SessionEnded { .. }
            | Event::Pruned { .. }
            | Event::Collected { .. }
            | Event::SnapshotTaken { .. } => {}
        }
    }
    let gone = aido_journal::timeline::abandoned(records);
    for a in actions.iter_mut() {
        if let Some(branch) = a["seq"].as_u64().and_then(|s| gone.get(&s)) {
            a["abandoned_by_rewind"] = json!(branch);
        }
    }
    let skip = actions.len().saturating_sub(limit);
    let actions: Vec<_> = actions.into_iter().skip(skip).collect();
    Outcome {
        text: history_text(&actions),
        output: json!({"session": session, "actions": actions}),
        ..Outcome::default()
    }
}

/// session_history's text: a line per action.
fn history_text(actions: &[serde_json::Value]) -> String {
    actions
        .iter()
        .map(|a| {
            format!(
                "#{} {} {} {}",
                a["seq"],
                a["primitive"].as_str().unwrap_or(""),
                a["verdict"].as_str().unwrap_or(""),
                a["status"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The seq of workspace snapshot `id`'s snapshot_taken record.
pub fn snapshot_seq(records: &[Record], id: &str) -> Option<u64> {
    records.iter().find_map(|r| match &r.event {
        Event::SnapshotTaken { snapshot, .. } if snapshot == id => Some(r.seq),
        _ => None,
    })
}

/// create_snapshot's output: the store's answer, the machines saved with it, the seq of its
/// record and the label.
pub fn snapshot_taken(
    store: &snapshot::Taken,
    machines: &[String],
    seq: u64,
    label: Option<&str>,
) -> Value {
    let mut store = snapshot::to_value(store);
    store["machines"] = json!(machines);
    store["seq"] = json!(seq);
    if let Some(label) = label {
        store["label"] = json!(label);
    }
    store
}

/// restore_snapshot, from the store's answer and the machines it put back (absent in records
/// from before restores covered machines).
pub fn snapshot_restored(
    store: &snapshot::Restored,
    snapshot: &str,
    records: &[Record],
    machines: Option<&[String]>,
) -> Outcome {
    let mut store = snapshot::to_value(store);
    if let Some(m) = machines {
        store["machines"] = json!(m);
    }
    let mut done = Outcome::from_output(store);
    done.effects.push(Effect::SnapshotRestored {
        snapshot: snapshot.to_owned(),
        taken_at: snapshot_seq(records, snapshot).unwrap_or(0),
    });
    done
}

/// list_snapshots, from the store's list and the records naming each snapshot's seq.
pub fn snapshots_listed(listed: &[snapshot::Listed], records: &[Record]) -> Outcome {
    let list: Vec<Value> = listed
        .iter()
        .map(|item| {
            let mut shown = snapshot::to_value(item);
            shown["seq"] = json!(snapshot_seq(records, &item.id));
            shown
        })
        .collect();
    Outcome::from_output(json!({"snapshots": list}))
}

/// A safe_change whose steps or checks failed: the failure, and what became of the
/// automatic restore (`Err` holds why the restore failed too).
pub fn safe_change_failed(mut failure: Failure, id: &str, restore: Result<(), &str>) -> Failure {
    match restore {
        Ok(()) => {
            failure.message = format!(
                "{}; the workspace was restored to snapshot {id}",
                failure.message
            );
            if let Some(d) = failure.details.as_mut() {
                d["restored"] = json!(id);
            }
        }
        Err(why) => {
            failure.message = format!(
                "{}; restoring snapshot {id} ALSO failed: {why}",
                failure.message
            );
        }
    }
    failure
}

/// safe_change whose steps and checks all passed.
pub fn safe_change_done(mut done: Outcome, taken: Value, id: &str, count: usize) -> Outcome {
    let steps = done.output["steps"].take();
    done.output = json!({"snapshot": taken, "steps": steps, "restored": false});
    done.text = format!("{count} steps and checks passed; snapshot {id} kept");
    done
}

/// What a rewind did, for its result.
pub struct Rewound<'a> {
    /// The seq the agent named.
    pub to_seq: u64,
    /// It was a `before_seq`: that action was undone too.
    pub undo_target: bool,
    /// The rewind's proposal.
    pub proposal: u64,
    /// Its plan (branch, snapshot, steps).
    pub plan: &'a crate::rewind::RewindPlan,
    /// The filesystem body's answer to applying them.
    pub applied: snapshot::Applied,
    /// The machines restored.
    pub machines: &'a [String],
    /// The seq of its rewound record.
    pub rewound_at: u64,
}

/// rewind's result.
pub fn rewound(r: &Rewound) -> Outcome {
    let (branch, steps) = (r.plan.branch, r.plan.steps.len());
    let method = if r.plan.snapshot.is_some() {
        "snapshot"
    } else {
        "undo"
    };
    let cut = r.plan.cut;
    let undone: Vec<Value> = r
        .plan
        .undone
        .iter()
        .map(|(seq, primitive)| json!({"seq": seq, "primitive": primitive}))
        .collect();
    let named = if r.undo_target {
        "before_seq"
    } else {
        "to_seq"
    };
    let mut output = json!({"branch": branch, "method": method, "snapshot": r.plan.snapshot, "machines": r.machines,
                        "kept_through": cut, "undone": undone,
                        "steps": steps, "applied": r.applied.applied, "rewound_at": r.rewound_at,
                        "abandoned": [cut + 1, r.proposal - 1]});
    output[named] = json!(r.to_seq);
    let list = r
        .plan
        .undone
        .iter()
        .map(|(seq, p)| format!("{seq} {p}"))
        .collect::<Vec<_>>();
    let undone_text = if list.is_empty() {
        "no action undone".to_owned()
    } else {
        format!("undid {}", list.join(", "))
    };
    Outcome {
        text: format!(
            "rewound to just after record {cut} by {method} ({steps} steps): {undone_text}; records {}..{} are branch {branch}",
            cut + 1,
            r.proposal - 1,
        ),
        output,
        // The rewind's own effect, for replay: the workspace now equals its state at the cut.
        effects: vec![Effect::RewoundTo { seq: cut }],
        ..Outcome::default()
    }
}

/// The result of a restore or rewind a crash interrupted and the next start finished, from
/// its plan's length and the filesystem body's answer to applying it.
pub fn recovered(recovered: snapshot::Recovered) -> Outcome {
    Outcome {
        text: "interrupted by a crash; finished when aido started again".into(),
        output: json!({"recovered": true, "steps": recovered.steps, "applied": recovered.applied.applied}),
        ..Outcome::default()
    }
}
