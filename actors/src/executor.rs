//! Walking an action tree. Composites and meta primitives are handled here; filesystem leaves
//! go to the filesystem body. Every change a leaf made is carried up, so a composite's record
//! (completed or failed) lists all of them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aido_actions::meta::SessionHistory;
use aido_actions::snapshot::RandomBytes;
use aido_actions::{Action, Body, Condition, Effect, Failure, Input, Outcome};
use aido_journal::{Event, SessionId};
use aido_policy::{FsResolver, SessionContext};
use ractor::rpc::CallResult;
use serde_json::json;

use crate::fs::{Executed, FsMsg, SnapshotOp, Step};
use crate::recovery::Recovery;
use crate::runtime::Shared;
use crate::session::Hooks;
use crate::vm::VmMsg;

/// A failed subtree and what it changed before failing.
pub(crate) struct Failed {
    pub(crate) failure: Failure,
    pub(crate) partial: Executed,
}

impl From<Failure> for Failed {
    fn from(failure: Failure) -> Self {
        Self {
            failure,
            partial: Executed::default(),
        }
    }
}

pub(crate) struct Executor<'a> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SessionId,
    /// The seq of the proposal being run.
    pub(crate) proposal: u64,
    pub(crate) ctx: &'a SessionContext,
    pub(crate) hooks: &'a Hooks,
}

type Walk<'a> = Pin<Box<dyn Future<Output = Result<Executed, Failed>> + Send + 'a>>;

fn absorb(into: &mut Executed, from: Executed) {
    into.outcome.effects.extend(from.outcome.effects);
    into.outcome.inputs.extend(from.outcome.inputs);
    into.blobs.extend(from.blobs);
}

fn crashed(shared: &Shared) -> Failure {
    let why = shared
        .last_crash
        .lock()
        .ok()
        .and_then(|l| l.clone())
        .unwrap_or_else(|| "it stopped".into());
    Failure::new(
        "body_crashed",
        format!("the filesystem body crashed ({why}); it was restarted, so try again"),
    )
}

impl Executor<'_> {
    pub(crate) fn exec<'b>(&'b self, action: &'b Action, at: String) -> Walk<'b> {
        Box::pin(async move {
            if self.hooks.cancel.is_cancelled() {
                return Err(Failure::new("cancelled", "the call was cancelled").into());
            }
            match action.body() {
                Body::Filesystem => return self.body(action).await.map_err(Failed::from),
                Body::Machine => return self.vm(action).await.map_err(Failed::from),
                Body::Runtime => {}
            }
            match action {
                Action::Pipeline(p) => self.pipeline(&p.steps, &at).await,
                Action::Try(t) => {
                    let first = self.exec(&t.action, join(&at, "action")).await;
                    match (first, &t.fallback) {
                        (Ok(done), _) => {
                            Ok(wrap(done, |o| json!({"succeeded": true, "output": o})))
                        }
                        (Err(failed), Some(fallback)) => {
                            let mut done = failed.partial;
                            let output = match self.exec(fallback, join(&at, "fallback")).await {
                                Ok(f) => {
                                    let o = f.outcome.output.clone();
                                    absorb(&mut done, f);
                                    o
                                }
                                Err(f2) => {
                                    absorb(&mut done, f2.partial);
                                    return Err(Failed {
                                        failure: f2.failure,
                                        partial: done,
                                    });
                                }
                            };
                            done.outcome.output = json!({"succeeded": false, "error": failed.failure, "fallback": output});
                            done.outcome.text = done.outcome.output.to_string();
                            Ok(done)
                        }
                        (Err(failed), None) => {
                            let mut done = failed.partial;
                            done.outcome.output =
                                json!({"succeeded": false, "error": failed.failure});
                            done.outcome.text = done.outcome.output.to_string();
                            Ok(done)
                        }
                    }
                }
                Action::If(i) => {
                    let holds = self.evaluate(&i.condition).await?;
                    let branch = if holds {
                        Some((&i.then, "then"))
                    } else {
                        i.otherwise.as_ref().map(|e| (e, "else"))
                    };
                    match branch {
                        Some((b, label)) => {
                            let done = self.exec(b, join(&at, label)).await?;
                            Ok(wrap(
                                done,
                                |o| json!({"condition": holds, "branch": label, "output": o}),
                            ))
                        }
                        None => Ok(Executed::new(Outcome::from_output(
                            json!({"condition": holds, "branch": null}),
                        ))),
                    }
                }
                Action::Assert(a) => {
                    if self.evaluate(&a.condition).await? {
                        Ok(Executed::new(Outcome::from_output(json!({"holds": true}))))
                    } else {
                        let message = a
                            .message
                            .clone()
                            .unwrap_or_else(|| "the condition does not hold".into());
                        Err(Failure::new("assertion_failed", message)
                            .with_details(json!({"condition": a.condition}))
                            .into())
                    }
                }
                Action::Simulate(s) => {
                    let sim = self
                        .shared
                        .policy
                        .simulate(&s.action, self.ctx, &FsResolver);
                    Ok(Executed::new(Outcome::from_output(
                        serde_json::to_value(sim).unwrap_or_default(),
                    )))
                }
                Action::PolicyCheck(p) => {
                    let verdict = self
                        .shared
                        .policy
                        .evaluate(&p.action, self.ctx, &FsResolver);
                    Ok(Executed::new(Outcome::from_output(
                        json!({"verdict": verdict}),
                    )))
                }
                Action::SessionHistory(h) => self.history(h).map_err(Failed::from),
                Action::CreateSnapshot(c) => {
                    let (output, _) = self.take_snapshot(c.label.as_deref()).await?;
                    Ok(Executed::new(Outcome::from_output(output)))
                }
                Action::RestoreSnapshot(r) => self
                    .restore_snapshot(&r.snapshot)
                    .await
                    .map_err(Failed::from),
                Action::ListSnapshots(_) => self.list_snapshots().await.map_err(Failed::from),
                Action::DeleteSnapshot(d) => {
                    let output = self
                        .snapshot_op(SnapshotOp::Delete {
                            id: d.snapshot.clone(),
                        })
                        .await?;
                    Ok(Executed::new(Outcome::from_output(output)))
                }
                Action::RandomBytes(r) => {
                    if r.count == 0 || r.count > RandomBytes::COUNT_MAX {
                        return Err(Failure::new(
                            "invalid_arguments",
                            format!("count must be 1 to {}", RandomBytes::COUNT_MAX),
                        )
                        .into());
                    }
                    let mut bytes = vec![0u8; r.count as usize];
                    self.shared.clock.random(&mut bytes);
                    let hex = hex::encode(&bytes);
                    let mut done = Executed::new(Outcome {
                        text: hex.clone(),
                        output: json!({"count": r.count, "hex": hex}),
                        ..Outcome::default()
                    });
                    done.outcome.inputs.push(Input::Random { hex });
                    Ok(done)
                }
                Action::SafeChange(c) => self.safe_change(&c.steps, &c.validate, &at).await,
                Action::Rewind(r) => self.rewind(r.to_seq).await.map_err(Failed::from),
                // Routed to their bodies above.
                _ => Err(Failure::new(
                    "wrong_body",
                    format!("{} is not run by the executor", action.primitive()),
                )
                .into()),
            }
        })
    }

    async fn pipeline(&self, steps: &[Action], at: &str) -> Result<Executed, Failed> {
        let total = steps.len() as u64;
        let mut done = Executed::default();
        let mut outputs = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            if let Some(p) = &self.hooks.progress {
                p.report(
                    i as u64,
                    total,
                    format!("step {} of {total}: {}", i + 1, step.primitive()),
                );
            }
            let label = join(at, &format!("steps[{i}]"));
            match self.exec(step, label.clone()).await {
                Ok(one) => {
                    outputs.push(json!({"step": i, "primitive": step.primitive(), "ok": true, "output": one.outcome.output}));
                    absorb(&mut done, one);
                }
                Err(failed) => {
                    absorb(&mut done, failed.partial);
                    let failure = Failure {
                        code: failed.failure.code.clone(),
                        message: format!(
                            "{label} ({}) failed: {}",
                            step.primitive(),
                            failed.failure.message
                        ),
                        details: Some(
                            json!({"leaf": label, "completed_steps": i, "steps": outputs, "cause": failed.failure}),
                        ),
                    };
                    return Err(Failed {
                        failure,
                        partial: done,
                    });
                }
            }
        }
        if let Some(p) = &self.hooks.progress {
            p.report(total, total, "done".into());
        }
        done.outcome.output = json!({"steps": outputs, "completed_steps": total});
        done.outcome.text = format!("{total} steps completed");
        Ok(done)
    }

    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(
            self.shared.config_limits().action_timeout_ms,
        ))
    }

    /// Ask a body and wait, at most the action timeout: a crashed or stuck body is a coded
    /// failure for the call in flight, never a hang.
    async fn ask<M: ractor::Message, T: Send + 'static>(
        &self,
        body: Option<ractor::ActorRef<M>>,
        name: &str,
        msg: impl FnOnce(ractor::RpcReplyPort<Result<T, Failure>>) -> M,
    ) -> Result<T, Failure> {
        let body = body.ok_or_else(|| crashed(&self.shared))?;
        match body.call(msg, self.timeout()).await {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => Err(Failure::new(
                "body_timeout",
                format!("the {name} body did not answer within action_timeout_ms"),
            )),
            Ok(CallResult::SenderError) | Err(_) => Err(crashed(&self.shared)),
        }
    }

    async fn body(&self, action: &Action) -> Result<Executed, Failure> {
        let (session, cancel) = (self.ctx.clone(), self.hooks.cancel.clone());
        self.ask(self.shared.fs(), "filesystem", |reply| FsMsg::Run {
            action: Box::new(action.clone()),
            session,
            cancel,
            reply,
        })
        .await
    }

    async fn vm(&self, action: &Action) -> Result<Executed, Failure> {
        self.ask(self.shared.vm(), "VM", |reply| VmMsg::Run {
            action: Box::new(action.clone()),
            reply,
        })
        .await
    }

    /// Ask the VM body something about all its machines.
    async fn vm_all(
        &self,
        msg: impl FnOnce(ractor::RpcReplyPort<Result<Vec<String>, Failure>>) -> VmMsg,
    ) -> Result<Vec<String>, Failure> {
        self.ask(self.shared.vm(), "VM", msg).await
    }

    /// The machines snapshotted with workspace snapshot `id` in this session.
    fn machines_of(&self, id: &str) -> Vec<String> {
        self.records()
            .unwrap_or_default()
            .into_iter()
            .find_map(|r| match r.event {
                Event::SnapshotTaken {
                    snapshot, machines, ..
                } if snapshot == id => Some(machines),
                _ => None,
            })
            .unwrap_or_default()
    }

    async fn evaluate(&self, condition: &Condition) -> Result<bool, Failed> {
        let session = self.ctx.clone();
        self.ask(self.shared.fs(), "filesystem", |reply| FsMsg::Evaluate {
            condition: condition.clone(),
            session,
            reply,
        })
        .await
        .map_err(Failed::from)
    }

    fn history(&self, h: &SessionHistory) -> Result<Executed, Failure> {
        let limit = h
            .limit
            .unwrap_or(SessionHistory::LIMIT_DEFAULT)
            .clamp(1, SessionHistory::LIMIT_MAX) as usize;
        // Each action is a proposal plus at most two more records; read enough to see them.
        let window = limit * 4 + 8;
        let records = self
            .shared
            .journal
            .records(self.session, 1, h.before_seq, window, true)
            .map_err(|e| Failure::new(e.code(), e.to_string()))?;
        let mut actions: Vec<serde_json::Value> = Vec::new();
        for r in &records {
            match &r.event {
                Event::ActionProposed { action, verdict } => {
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
                    proposal, answer, ..
                } => {
                    if let Some(e) = actions.iter_mut().find(|e| e["seq"] == *proposal) {
                        e["confirmation"] = json!(answer);
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
                Event::SessionStarted { .. }
                | Event::SessionResumed { .. }
                | Event::BodyRestarted { .. }
                | Event::SessionEnded { .. }
                | Event::SnapshotTaken { .. } => {}
            }
        }
        let gone = aido_journal::timeline::abandoned(&records);
        for a in actions.iter_mut() {
            if let Some(branch) = a["seq"].as_u64().and_then(|s| gone.get(&s)) {
                a["abandoned_by_rewind"] = json!(branch);
            }
        }
        let skip = actions.len().saturating_sub(limit);
        let actions: Vec<_> = actions.into_iter().skip(skip).collect();
        let text = actions
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
            .join("\n");
        Ok(Executed::new(Outcome {
            text,
            output: json!({"session": self.session, "actions": actions}),
            ..Outcome::default()
        }))
    }
}

impl Executor<'_> {
    async fn snapshot_op(&self, op: SnapshotOp) -> Result<serde_json::Value, Failure> {
        let session = self.ctx.clone();
        self.ask(self.shared.fs(), "filesystem", |reply| FsMsg::Snapshot {
            op,
            session,
            reply,
        })
        .await
    }

    async fn record(&self, event: Event) -> Result<u64, Failure> {
        let now = self.shared.clock.now_ms();
        self.shared
            .journal
            .append(self.session, now, event)
            .await
            .map(|a| a.seq)
            .map_err(|e| Failure::new(e.code(), e.to_string()))
    }

    fn records(&self) -> Result<Vec<aido_journal::Record>, Failure> {
        self.shared
            .journal
            .all_records(self.session)
            .map_err(|e| Failure::new(e.code(), e.to_string()))
    }

    /// Take a snapshot and journal it; returns the output and the snapshot id.
    async fn take_snapshot(
        &self,
        label: Option<&str>,
    ) -> Result<(serde_json::Value, String), Failure> {
        let mut tag = [0u8; 3];
        self.shared.clock.random(&mut tag);
        let id = format!(
            "{}-{}-{}",
            &self.session.to_string()[..12],
            self.proposal,
            hex::encode(tag)
        );
        let created_ms = self.shared.clock.now_ms();
        let mut output = self
            .snapshot_op(SnapshotOp::Create {
                id: id.clone(),
                created_ms,
            })
            .await?;
        // Running machines are snapshotted under the same id, so going back here puts them
        // back too.
        let machines = self
            .vm_all(|reply| VmMsg::SnapshotAll {
                id: id.clone(),
                reply,
            })
            .await?;
        output["machines"] = json!(machines);
        let event = Event::SnapshotTaken {
            snapshot: id.clone(),
            backend: output["backend"].as_str().unwrap_or_default().to_owned(),
            workspace: output["workspace"].as_str().unwrap_or_default().to_owned(),
            proposal: self.proposal,
            machines,
        };
        let seq = self.record(event).await?;
        output["seq"] = json!(seq);
        if let Some(label) = label {
            output["label"] = json!(label);
        }
        Ok((output, id))
    }

    async fn restore_snapshot(&self, snapshot: &str) -> Result<Executed, Failure> {
        let taken_at = self
            .records()?
            .iter()
            .find_map(|r| match &r.event {
                Event::SnapshotTaken { snapshot: s, .. } if s == snapshot => Some(r.seq),
                _ => None,
            })
            .unwrap_or(0);
        let steps = vec![Step::Restore {
            snapshot: snapshot.to_owned(),
        }];
        let marker = Recovery::begin(&self.shared, self.session, self.proposal, &steps, None)?;
        let output = self
            .snapshot_op(SnapshotOp::Restore {
                id: snapshot.to_owned(),
            })
            .await?;
        marker.finish();
        let mut done = Executed::new(Outcome::from_output(output));
        done.outcome.effects.push(Effect::SnapshotRestored {
            snapshot: snapshot.to_owned(),
            taken_at,
        });
        Ok(done)
    }

    async fn list_snapshots(&self) -> Result<Executed, Failure> {
        let listed = self.snapshot_op(SnapshotOp::List).await?;
        let records = self.records()?;
        let mut list = listed.as_array().cloned().unwrap_or_default();
        for item in list.iter_mut() {
            let id = item["id"].as_str().unwrap_or_default().to_owned();
            let seq = records.iter().find_map(|r| match &r.event {
                Event::SnapshotTaken { snapshot, .. } if *snapshot == id => Some(r.seq),
                _ => None,
            });
            item["seq"] = json!(seq);
        }
        Ok(Executed::new(Outcome::from_output(
            json!({"snapshots": list}),
        )))
    }

    async fn safe_change(
        &self,
        steps: &[Action],
        validate: &[Action],
        at: &str,
    ) -> Result<Executed, Failed> {
        let (taken, id) = self.take_snapshot(Some("safe_change")).await?;
        let all: Vec<Action> = steps.iter().chain(validate.iter()).cloned().collect();
        match self.pipeline(&all, at).await {
            Ok(mut done) => {
                let steps = done.outcome.output["steps"].take();
                done.outcome.output = json!({"snapshot": taken, "steps": steps, "restored": false});
                done.outcome.text =
                    format!("{} steps and checks passed; snapshot {id} kept", all.len());
                Ok(done)
            }
            Err(failed) => {
                let mut partial = failed.partial;
                let mut failure = failed.failure;
                match self.restore_snapshot(&id).await {
                    Ok(r) => {
                        partial.outcome.effects.extend(r.outcome.effects);
                        failure.message = format!(
                            "{}; the workspace was restored to snapshot {id}",
                            failure.message
                        );
                        if let Some(d) = failure.details.as_mut() {
                            d["restored"] = json!(id);
                        }
                    }
                    Err(e) => {
                        failure.message = format!(
                            "{}; restoring snapshot {id} ALSO failed: {}",
                            failure.message, e.message
                        );
                    }
                }
                Err(Failed { failure, partial })
            }
        }
    }

    /// Rewind the session to just after `to_seq`.
    async fn rewind(&self, to_seq: u64) -> Result<Executed, Failure> {
        let records = self.records()?;
        let plan = rewind_plan(&records, to_seq, self.proposal)?;
        let method = if plan.snapshot.is_some() {
            "snapshot"
        } else {
            "undo"
        };
        let blobs = fetch_blobs(&self.shared.journal, &plan.steps)?;
        let marker = Recovery::begin(
            &self.shared,
            self.session,
            self.proposal,
            &plan.steps,
            Some((to_seq, plan.branch, plan.snapshot.clone())),
        )?;
        let applied = self
            .snapshot_op(SnapshotOp::Apply {
                steps: plan.steps.clone(),
                blobs,
            })
            .await?;
        // Machines go back to the same snapshot (their state is not replayed step by step: the
        // journal holds their inputs, not their memory).
        let machines = match &plan.snapshot {
            Some(id) => {
                let machines = self.machines_of(id);
                if machines.is_empty() {
                    Vec::new()
                } else {
                    self.vm_all(|reply| VmMsg::RestoreAll {
                        id: id.clone(),
                        machines,
                        reply,
                    })
                    .await?
                }
            }
            None => Vec::new(),
        };
        let event = Event::Rewound {
            to_seq,
            proposal: self.proposal,
            branch: plan.branch,
            method: method.into(),
            snapshot: plan.snapshot.clone(),
            recovered: false,
        };
        let rewound_at = self.record(event).await?;
        marker.finish();
        let output = json!({"to_seq": to_seq, "branch": plan.branch, "method": method, "snapshot": plan.snapshot, "machines": machines,
                            "steps": plan.steps.len(), "applied": applied["applied"], "rewound_at": rewound_at,
                            "abandoned": [to_seq + 1, self.proposal - 1]});
        let mut done = Executed::new(Outcome {
            text: format!(
                "rewound to seq {to_seq} by {method} ({} steps); records {}..{} are branch {}",
                plan.steps.len(),
                to_seq + 1,
                self.proposal - 1,
                plan.branch
            ),
            output,
            ..Outcome::default()
        });
        // The rewind's own effect, for replay: the workspace now equals its state at to_seq.
        done.outcome.effects.push(Effect::RewoundTo { seq: to_seq });
        Ok(done)
    }
}

/// The bytes of every blob the steps write.
pub(crate) fn fetch_blobs(
    journal: &aido_journal::Journal,
    steps: &[Step],
) -> Result<HashMap<String, Vec<u8>>, Failure> {
    let mut blobs = HashMap::new();
    for step in steps {
        if let Step::Write { blob, .. } = step
            && !blobs.contains_key(blob)
        {
            let bytes = journal
                .blob(blob)
                .map_err(|e| Failure::new(e.code(), e.to_string()))?
                .ok_or_else(|| {
                    Failure::new("blob_missing", format!("the journal has no blob {blob}"))
                })?;
            blobs.insert(blob.clone(), bytes);
        }
    }
    Ok(blobs)
}

/// What a rewind will do.
pub(crate) struct RewindPlan {
    pub(crate) steps: Vec<Step>,
    pub(crate) snapshot: Option<String>,
    pub(crate) branch: u32,
}

/// The changes a record made (effects of outcomes, complete or partial).
fn effects_of(record: &aido_journal::Record) -> Vec<Effect> {
    match &record.event {
        Event::ActionCompleted { outcome, .. } => outcome.effects.clone(),
        Event::ActionFailed { effects, .. } => effects.clone(),
        _ => Vec::new(),
    }
}

/// Plan a rewind to just after `to_seq` for the rewind proposed at `proposal`: restore the
/// newest live snapshot at or before `to_seq` and redo the live changes after it; with no
/// snapshot, undo the live changes after `to_seq`, newest first, from their `before` blobs.
pub(crate) fn rewind_plan(
    records: &[aido_journal::Record],
    to_seq: u64,
    proposal: u64,
) -> Result<RewindPlan, Failure> {
    if to_seq == 0 || to_seq >= proposal {
        return Err(Failure::new(
            "rewind_target_invalid",
            format!(
                "to_seq must be between 1 and {}",
                proposal.saturating_sub(1)
            ),
        ));
    }
    let gone = aido_journal::timeline::abandoned(records);
    if gone.contains_key(&to_seq) {
        return Err(Failure::new(
            "rewind_target_abandoned",
            format!("seq {to_seq} is on an abandoned branch"),
        ));
    }
    let live: Vec<&aido_journal::Record> = records
        .iter()
        .filter(|r| !gone.contains_key(&r.seq) && r.seq < proposal)
        .collect();
    let branch = records
        .iter()
        .filter(|r| matches!(r.event, Event::Rewound { .. }))
        .count() as u32
        + 1;
    let snapshot = live.iter().rev().find_map(|r| match &r.event {
        Event::SnapshotTaken { snapshot, .. } if r.seq <= to_seq => Some((r.seq, snapshot.clone())),
        _ => None,
    });
    let mut steps = Vec::new();
    match &snapshot {
        Some((taken, id)) => {
            steps.push(Step::Restore {
                snapshot: id.clone(),
            });
            for r in live.iter().filter(|r| r.seq > *taken && r.seq <= to_seq) {
                for effect in effects_of(r) {
                    steps.extend(redo(&effect)?);
                }
            }
        }
        None => {
            for r in live.iter().rev().filter(|r| r.seq > to_seq) {
                for effect in effects_of(r).iter().rev() {
                    steps.extend(undo(effect)?);
                }
            }
        }
    }
    Ok(RewindPlan {
        steps,
        snapshot: snapshot.map(|(_, id)| id),
        branch,
    })
}

fn redo(effect: &Effect) -> Result<Vec<Step>, Failure> {
    Ok(match effect {
        Effect::FileWritten { path, blob, .. } => vec![Step::Write {
            path: path.clone(),
            blob: blob.clone(),
        }],
        Effect::Moved { from, to } => vec![Step::Move {
            from: from.clone(),
            to: to.clone(),
        }],
        Effect::DirCreated { path } => vec![Step::Mkdir { path: path.clone() }],
        Effect::FileRemoved { path, .. } => vec![Step::Remove { path: path.clone() }],
        Effect::SnapshotRestored { snapshot, .. } => vec![Step::Restore {
            snapshot: snapshot.clone(),
        }],
        // An earlier rewind on the live timeline: the records it abandoned are not on the
        // timeline being replayed, so the state before it already equals the state at its
        // target, and there is nothing to do.
        Effect::RewoundTo { .. } => Vec::new(),
    })
}

fn undo(effect: &Effect) -> Result<Vec<Step>, Failure> {
    Ok(match effect {
        Effect::FileWritten {
            path,
            before: Some(b),
            ..
        } => vec![Step::Write {
            path: path.clone(),
            blob: b.clone(),
        }],
        Effect::FileWritten {
            path, before: None, ..
        } => vec![Step::Remove { path: path.clone() }],
        Effect::Moved { from, to } => vec![Step::Move {
            from: to.clone(),
            to: from.clone(),
        }],
        Effect::DirCreated { path } => vec![Step::Remove { path: path.clone() }],
        Effect::FileRemoved {
            path,
            before: Some(b),
        } => vec![Step::Write {
            path: path.clone(),
            blob: b.clone(),
        }],
        Effect::FileRemoved { path, before: None } => {
            return Err(Failure::new(
                "rewind_needs_snapshot",
                format!(
                    "the removal of {path} kept no contents; take a snapshot to rewind past it"
                ),
            ));
        }
        // Walking the live timeline backwards, the state before an earlier rewind is the
        // state at its target (what it abandoned is not on this timeline): nothing to undo.
        Effect::RewoundTo { .. } => Vec::new(),
        Effect::SnapshotRestored { .. } => {
            return Err(Failure::new(
                "rewind_needs_snapshot",
                "a snapshot restore cannot be undone without an earlier snapshot",
            ));
        }
    })
}

fn wrap(mut done: Executed, f: impl FnOnce(serde_json::Value) -> serde_json::Value) -> Executed {
    let output = std::mem::take(&mut done.outcome.output);
    done.outcome.output = f(output);
    done.outcome.text = done.outcome.output.to_string();
    done
}

fn join(at: &str, label: &str) -> String {
    if at.is_empty() {
        label.to_owned()
    } else {
        format!("{at}.{label}")
    }
}
