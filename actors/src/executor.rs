//! Walking an action tree. Composites and meta primitives are handled here; filesystem leaves
//! go to the filesystem body. Every change a leaf made is carried up, so a composite's record
//! (completed or failed) lists all of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aido_actions::meta::SessionHistory;
use aido_actions::{Action, Condition, Failure, Outcome};
use aido_journal::{Event, SessionId};
use aido_policy::{FsResolver, SessionContext};
use ractor::rpc::CallResult;
use serde_json::json;

use crate::fs::{Executed, FsMsg};
use crate::runtime::Shared;
use crate::session::Hooks;

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
    pub(crate) ctx: &'a SessionContext,
    pub(crate) hooks: &'a Hooks,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<Executed, Failed>> + Send + 'a>>;

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
    pub(crate) fn exec<'b>(&'b self, action: &'b Action, at: String) -> Step<'b> {
        Box::pin(async move {
            if self.hooks.cancel.is_cancelled() {
                return Err(Failure::new("cancelled", "the call was cancelled").into());
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
                Action::ReadFile(_)
                | Action::ReadFiles(_)
                | Action::WriteFile(_)
                | Action::EditFile(_)
                | Action::ApplyPatch(_)
                | Action::PatchSet(_)
                | Action::StatFiles(_)
                | Action::FileInfo(_)
                | Action::Checksum(_)
                | Action::MoveToTrash(_)
                | Action::RestoreFromTrash(_)
                | Action::Validate(_) => self.body(action).await.map_err(Failed::from),
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

    async fn body(&self, action: &Action) -> Result<Executed, Failure> {
        let fs = self.shared.fs().ok_or_else(|| crashed(&self.shared))?;
        let call = fs
            .call(
                |reply| FsMsg::Run {
                    action: Box::new(action.clone()),
                    session: self.ctx.clone(),
                    cancel: self.hooks.cancel.clone(),
                    reply,
                },
                self.timeout(),
            )
            .await;
        match call {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => Err(Failure::new(
                "body_timeout",
                "the filesystem body did not answer within action_timeout_ms",
            )),
            Ok(CallResult::SenderError) | Err(_) => Err(crashed(&self.shared)),
        }
    }

    async fn evaluate(&self, condition: &Condition) -> Result<bool, Failed> {
        let fs = self.shared.fs().ok_or_else(|| crashed(&self.shared))?;
        let call = fs
            .call(
                |reply| FsMsg::Evaluate {
                    condition: condition.clone(),
                    session: self.ctx.clone(),
                    reply,
                },
                self.timeout(),
            )
            .await;
        match call {
            Ok(CallResult::Success(result)) => result.map_err(Failed::from),
            Ok(CallResult::Timeout) => Err(Failure::new(
                "body_timeout",
                "the filesystem body did not answer in time",
            )
            .into()),
            Ok(CallResult::SenderError) | Err(_) => Err(crashed(&self.shared).into()),
        }
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
                Event::SessionStarted { .. }
                | Event::BodyRestarted { .. }
                | Event::SessionEnded { .. } => {}
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
