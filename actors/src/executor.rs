//! Walking an action tree. Composites and meta primitives are handled here; filesystem leaves
//! go to the filesystem body. Every change a leaf made is carried up, so a composite's record
//! (completed or failed) lists all of them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aido_actions::meta::SessionHistory;
use aido_actions::snapshot::{RandomBytes, RewindTarget};
use aido_actions::{
    Action, Before, Condition, Effect, Failure, FsAction, Input, Outcome, Routed, RuntimeAction,
    SideEffectClass, TreeAction, VmAction,
};
use aido_journal::{Event, SessionId};
use aido_policy::{FsResolver, SessionContext};
use serde_json::json;

use crate::error::{RewindError, RuntimeError};
use crate::fs::{Executed, FsMsg, SnapshotOp, Step};
use crate::recovery::{Recovery, RewindMark};
use crate::render;
use crate::runtime::Shared;
use crate::session::Hooks;
use crate::ticket::Ticket;
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

impl Failed {
    /// A leaf's failure. It is observed, so it is recorded as the leaf's only input: what
    /// the leaf saw before failing is dropped, and playback finds the failure where the leaf
    /// would have recorded its first input.
    fn leaf(failure: Failure) -> Self {
        let mut partial = Executed::default();
        partial.outcome.inputs.push(Input::Failed {
            failure: failure.clone(),
        });
        Self { failure, partial }
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

fn crashed(shared: &Shared, body: &'static str) -> Failure {
    let why = shared
        .last_crash
        .lock()
        .ok()
        .and_then(|l| l.clone())
        .unwrap_or_else(|| "it stopped".into());
    RuntimeError::BodyCrashed { body, why }.into()
}

/// How long a caller waits, past its deadline, for a body that committed to a call (it is
/// changing the world, so its answer is what the journal must record) before it reports the
/// body stuck.
const BODY_STUCK_MS: u64 = 600_000;

/// Ask a body and wait: at most `timeout` for it to take the call (a call it has not taken by
/// then never runs), and for a call it committed to (it is changing the world), until it
/// answers, bounded by [`BODY_STUCK_MS`]. A crashed or stuck body is a coded failure for the
/// call in flight, never a hang.
pub(crate) async fn ask<M: ractor::Message, T: Send + 'static>(
    shared: &Shared,
    body: Result<ractor::ActorRef<M>, RuntimeError>,
    name: &'static str,
    timeout: Duration,
    msg: impl FnOnce(Ticket, ractor::RpcReplyPort<Result<T, Failure>>) -> M,
) -> Result<T, Failure> {
    let body = body.map_err(|e| match e {
        RuntimeError::BodyCrashed { .. } => crashed(shared, name),
        other => other.into(),
    })?;
    let ticket = Ticket::new(std::time::Instant::now() + timeout);
    let (tx, mut rx) = ractor::concurrency::oneshot();
    body.cast(msg(ticket.clone(), tx.into()))
        .map_err(|_| crashed(shared, name))?;
    match tokio::time::timeout(timeout, &mut rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(crashed(shared, name)),
        Err(_) if ticket.abandon() => Err(RuntimeError::BodyTimeout {
            body: name,
            timeout_ms: timeout.as_millis() as u64,
        }
        .into()),
        Err(_) => match tokio::time::timeout(Duration::from_millis(BODY_STUCK_MS), rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(crashed(shared, name)),
            Err(_) => Err(RuntimeError::BodyStuck {
                body: name,
                waited_ms: timeout.as_millis() as u64 + BODY_STUCK_MS,
            }
            .into()),
        },
    }
}

impl Executor<'_> {
    pub(crate) fn exec<'b>(&'b self, action: &'b Action, at: String) -> Walk<'b> {
        Box::pin(async move {
            let leaf = action.class() != SideEffectClass::Composite;
            if self.hooks.cancel.is_cancelled() {
                let failure: Failure = RuntimeError::Cancelled.into();
                return Err(if leaf {
                    Failed::leaf(failure)
                } else {
                    // Recorded, so playback knows that nothing under it ran.
                    let mut partial = Executed::default();
                    partial.outcome.inputs.push(Input::Cancelled);
                    Failed { failure, partial }
                });
            }
            // Every action goes to exactly one body; the table in `aido_actions` says which,
            // and each body matches its own actions without a wildcard.
            match action.clone().route() {
                Routed::Filesystem(a) => self.body(a).await.map_err(Failed::leaf),
                Routed::Machine(a) => self.vm(a).await.map_err(Failed::leaf),
                Routed::Runtime(a) => self
                    .runtime(a)
                    .await
                    .map_err(|failed| Failed::leaf(failed.failure)),
                Routed::Tree(t) => match self.tree(&t, at).await {
                    Err(failed) if leaf => Err(Failed::leaf(failed.failure)),
                    other => other,
                },
            }
        })
    }

    /// A composite (or assert's condition), walked here; its leaves are routed on.
    async fn tree(&self, action: &TreeAction, at: String) -> Result<Executed, Failed> {
        match action {
            TreeAction::Pipeline(p) => self.pipeline(&p.steps, &at).await,
            TreeAction::Try(t) => {
                let first = self.exec(&t.action, join(&at, "action")).await;
                match (first, &t.fallback) {
                    (Ok(done), _) => Ok(outcome(done, render::try_succeeded)),
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
                        render::try_failed(&mut done.outcome, &failed.failure, Some(output));
                        Ok(done)
                    }
                    (Err(failed), None) => {
                        let mut done = failed.partial;
                        render::try_failed(&mut done.outcome, &failed.failure, None);
                        Ok(done)
                    }
                }
            }
            TreeAction::If(i) => {
                let (holds, mut seen) = self.evaluate(&i.condition).await?;
                let branch = if holds {
                    Some((&i.then, "then"))
                } else {
                    i.otherwise.as_ref().map(|e| (e, "else"))
                };
                match branch {
                    Some((b, label)) => {
                        let done = match self.exec(b, join(&at, label)).await {
                            Ok(done) => done,
                            Err(failed) => {
                                absorb(&mut seen, failed.partial);
                                return Err(Failed {
                                    failure: failed.failure,
                                    partial: seen,
                                });
                            }
                        };
                        // The condition's inputs come first, then the branch's.
                        let mut done = done;
                        seen.outcome.inputs.append(&mut done.outcome.inputs);
                        seen.blobs.append(&mut done.blobs);
                        done.outcome.inputs = seen.outcome.inputs;
                        done.blobs = seen.blobs;
                        Ok(outcome(done, |o| render::if_done(holds, Some((label, o)))))
                    }
                    None => Ok(outcome(seen, |_| render::if_done(holds, None))),
                }
            }
            TreeAction::Assert(a) => {
                let (holds, seen) = self.evaluate(&a.condition).await?;
                let done = render::assert_done(&a.condition, a.message.as_deref(), holds)?;
                Ok(outcome(seen, |_| done))
            }
            TreeAction::SafeChange(c) => self.safe_change(&c.steps, &c.validate, &at).await,
        }
    }

    /// A primitive of the runtime itself (the policy's answers, the journal, snapshots,
    /// rewinds, recorded randomness).
    async fn runtime(&self, action: RuntimeAction) -> Result<Executed, Failed> {
        match &action {
            RuntimeAction::Simulate(s) => {
                let sim = self
                    .shared
                    .policy
                    .simulate(&s.action, self.ctx, &FsResolver);
                Ok(answered(
                    "policy",
                    serde_json::to_value(sim).unwrap_or_default(),
                ))
            }
            RuntimeAction::PolicyCheck(p) => {
                let verdict = self
                    .shared
                    .policy
                    .evaluate(&p.action, self.ctx, &FsResolver);
                Ok(answered("policy", json!({"verdict": verdict})))
            }
            RuntimeAction::SessionHistory(h) => self.history(h).map_err(Failed::from),
            RuntimeAction::CreateSnapshot(c) => {
                let (taken, _) = self.take_snapshot(c.label.as_deref()).await?;
                Ok(taken)
            }
            RuntimeAction::RestoreSnapshot(r) => self
                .restore_snapshot(&r.snapshot)
                .await
                .map_err(Failed::from),
            RuntimeAction::ListSnapshots(_) => self.list_snapshots().await.map_err(Failed::from),
            RuntimeAction::DeleteSnapshot(d) => {
                let output = self
                    .snapshot_op(SnapshotOp::Delete {
                        id: d.snapshot.clone(),
                    })
                    .await?;
                Ok(answered("snapshots", output))
            }
            RuntimeAction::RandomBytes(r) => {
                if r.count == 0 || r.count > RandomBytes::COUNT_MAX {
                    return Err(Failure::from(RuntimeError::InvalidArguments {
                        why: format!("count must be 1 to {}", RandomBytes::COUNT_MAX),
                    })
                    .into());
                }
                let mut bytes = vec![0u8; r.count as usize];
                self.shared.clock.random(&mut bytes);
                let hex = hex::encode(&bytes);
                let mut done = Executed::new(render::random_bytes(r.count, &hex));
                done.outcome.inputs.push(Input::Random { hex });
                Ok(done)
            }
            RuntimeAction::Rewind(r) => {
                let target = r.target().ok_or_else(|| {
                    Failure::from(RewindError::TargetInvalid {
                        why: "give exactly one of to_seq and before_seq".into(),
                    })
                })?;
                self.rewind(target).await.map_err(Failed::from)
            }
        }
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
                    outputs.push(render::pipeline_step(
                        i,
                        step.primitive(),
                        &one.outcome.output,
                    ));
                    absorb(&mut done, one);
                }
                Err(failed) => {
                    absorb(&mut done, failed.partial);
                    let failure = render::pipeline_failed(
                        &label,
                        i,
                        step.primitive(),
                        &outputs,
                        &failed.failure,
                    );
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
        render::pipeline_done(&mut done.outcome, outputs);
        Ok(done)
    }

    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(
            self.shared.config_limits().action_timeout_ms,
        ))
    }

    /// Ask a body and wait (see [`ask`]).
    async fn ask<M: ractor::Message, T: Send + 'static>(
        &self,
        body: Result<ractor::ActorRef<M>, RuntimeError>,
        name: &'static str,
        msg: impl FnOnce(Ticket, ractor::RpcReplyPort<Result<T, Failure>>) -> M,
    ) -> Result<T, Failure> {
        let timeout = self.timeout().unwrap_or(Duration::from_secs(120));
        ask(&self.shared, body, name, timeout, msg).await
    }

    async fn body(&self, action: FsAction) -> Result<Executed, Failure> {
        let (session, cancel) = (self.ctx.clone(), self.hooks.cancel.clone());
        self.ask(self.shared.fs(), "filesystem", |ticket, reply| FsMsg::Run {
            action: Box::new(action),
            session,
            cancel,
            ticket,
            reply,
        })
        .await
    }

    async fn vm(&self, action: VmAction) -> Result<Executed, Failure> {
        self.ask(self.shared.vm(), "VM", |ticket, reply| VmMsg::Run {
            action: Box::new(action),
            ticket,
            reply,
        })
        .await
    }

    /// Ask the VM body something about all its machines.
    async fn vm_all(
        &self,
        msg: impl FnOnce(Ticket, ractor::RpcReplyPort<Result<Vec<String>, Failure>>) -> VmMsg,
    ) -> Result<Vec<String>, Failure> {
        self.ask(self.shared.vm(), "VM", msg).await
    }

    /// The machines snapshotted with workspace snapshot `id` in this session. A journal that
    /// cannot be read is an error, never "no machines".
    fn machines_of(&self, id: &str) -> Result<Vec<String>, Failure> {
        Ok(self
            .records()?
            .into_iter()
            .find_map(|r| match r.event {
                Event::SnapshotTaken {
                    snapshot, machines, ..
                } if snapshot == id => Some(machines),
                _ => None,
            })
            .unwrap_or_default())
    }

    /// Answer a condition in the filesystem body; what its leaves saw comes back as inputs.
    /// A failure is recorded like a leaf's.
    async fn evaluate(&self, condition: &Condition) -> Result<(bool, Executed), Failed> {
        let session = self.ctx.clone();
        self.ask(self.shared.fs(), "filesystem", |ticket, reply| {
            FsMsg::Evaluate {
                condition: condition.clone(),
                session,
                ticket,
                reply,
            }
        })
        .await
        .map_err(Failed::leaf)
    }

    fn history(&self, h: &SessionHistory) -> Result<Executed, Failure> {
        let (limit, window) = render::history_window(h);
        let records = self
            .shared
            .journal
            .records(self.session, 1, h.before_seq, window, true)
            .map_err(|e| Failure::new(e.code(), e.to_string()))?;
        // The records read are the newest `window` up to the last one seen: that seq is all
        // playback needs to read the same ones.
        let head = records.last().map_or(0, |r| r.seq);
        let mut done = Executed::new(render::session_history(self.session, &records, limit));
        done.outcome.inputs.push(Input::JournalHead { seq: head });
        Ok(done)
    }
}

impl Executor<'_> {
    async fn snapshot_op(&self, op: SnapshotOp) -> Result<serde_json::Value, Failure> {
        let session = self.ctx.clone();
        self.ask(self.shared.fs(), "filesystem", |ticket, reply| {
            FsMsg::Snapshot {
                op,
                session,
                ticket,
                reply,
            }
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

    /// Take a snapshot and journal it; returns the result (with the inputs it was built from)
    /// and the snapshot id.
    async fn take_snapshot(&self, label: Option<&str>) -> Result<(Executed, String), Failure> {
        let mut tag = [0u8; 3];
        self.shared.clock.random(&mut tag);
        let id = format!(
            "{}-{}-{}",
            &self.session.to_string()[..12],
            self.proposal,
            hex::encode(tag)
        );
        let created_ms = self.shared.clock.now_ms();
        let output = self
            .snapshot_op(SnapshotOp::Create {
                id: id.clone(),
                created_ms,
            })
            .await?;
        // Running machines are snapshotted under the same id, so going back here puts them
        // back too.
        let machines = self
            .vm_all(|ticket, reply| VmMsg::SnapshotAll {
                id: id.clone(),
                ticket,
                reply,
            })
            .await?;
        let event = Event::SnapshotTaken {
            snapshot: id.clone(),
            backend: output["backend"].as_str().unwrap_or_default().to_owned(),
            workspace: output["workspace"].as_str().unwrap_or_default().to_owned(),
            proposal: self.proposal,
            machines: machines.clone(),
        };
        let seq = self.record(event).await?;
        let machines = json!(machines);
        let mut done = Executed::new(Outcome::from_output(render::snapshot_taken(
            output.clone(),
            &machines,
            seq,
            label,
        )));
        done.outcome.inputs.extend([
            Input::Random {
                hex: hex::encode(tag),
            },
            Input::Clock {
                unix_ms: created_ms,
            },
            Input::Answer {
                from: "snapshots".into(),
                value: output,
            },
            Input::Answer {
                from: "machines".into(),
                value: machines,
            },
            Input::Appended { seq },
        ]);
        Ok((done, id))
    }

    async fn restore_snapshot(&self, snapshot: &str) -> Result<Executed, Failure> {
        let records = self.records()?;
        let steps = vec![Step::Restore {
            snapshot: snapshot.to_owned(),
        }];
        let restored = Effect::SnapshotRestored {
            snapshot: snapshot.to_owned(),
            taken_at: render::snapshot_seq(&records, snapshot).unwrap_or(0),
        };
        let marker = Recovery::begin(
            &self.shared,
            self.session,
            self.proposal,
            &steps,
            None,
            vec![restored],
        )?;
        let output = self
            .snapshot_op(SnapshotOp::Restore {
                id: snapshot.to_owned(),
            })
            .await?;
        // The machines the snapshot covers go back with the files, as in a rewind.
        let machines = json!(self.restore_machines(snapshot).await?);
        marker.finish();
        let mut done = Executed::new(render::snapshot_restored(
            output.clone(),
            snapshot,
            &records,
            Some(&machines),
        ));
        done.outcome.inputs.extend([
            Input::Answer {
                from: "snapshots".into(),
                value: output,
            },
            Input::Answer {
                from: "machines".into(),
                value: machines,
            },
        ]);
        Ok(done)
    }

    async fn list_snapshots(&self) -> Result<Executed, Failure> {
        let listed = self.snapshot_op(SnapshotOp::List).await?;
        let records = self.records()?;
        let mut done = Executed::new(render::snapshots_listed(&listed, &records));
        done.outcome.inputs.push(Input::Answer {
            from: "snapshots".into(),
            value: listed,
        });
        Ok(done)
    }

    async fn safe_change(
        &self,
        steps: &[Action],
        validate: &[Action],
        at: &str,
    ) -> Result<Executed, Failed> {
        let (mut taken, id) = self.take_snapshot(Some("safe_change")).await?;
        let all: Vec<Action> = steps.iter().chain(validate.iter()).cloned().collect();
        match self.pipeline(&all, at).await {
            Ok(done) => {
                let output = std::mem::take(&mut taken.outcome.output);
                absorb(&mut taken, done.clone());
                taken.outcome = Outcome {
                    inputs: std::mem::take(&mut taken.outcome.inputs),
                    ..render::safe_change_done(done.outcome, output, &id, all.len())
                };
                Ok(taken)
            }
            Err(failed) => {
                let mut partial = taken;
                absorb(&mut partial, failed.partial);
                // The restore's answer (or its failure) is an input of the result.
                let failure = match self.restore_snapshot(&id).await {
                    Ok(r) => {
                        partial.outcome.effects.extend(r.outcome.effects);
                        partial.outcome.inputs.extend(r.outcome.inputs);
                        render::safe_change_failed(failed.failure, &id, Ok(()))
                    }
                    Err(e) => {
                        partial
                            .outcome
                            .inputs
                            .push(Input::Failed { failure: e.clone() });
                        render::safe_change_failed(failed.failure, &id, Err(&e.message))
                    }
                };
                Err(Failed { failure, partial })
            }
        }
    }

    /// Rewind the session as the agent asked (`to_seq` keeps that action, `before_seq`
    /// undoes it too).
    async fn rewind(&self, target: RewindTarget) -> Result<Executed, Failure> {
        let records = self.records()?;
        let cut = rewind_cut(&records, target, self.proposal)?;
        let plan = rewind_plan(&records, cut, self.proposal)?;
        let (to_seq, undo_target) = match target {
            RewindTarget::Keep(n) => (n, false),
            RewindTarget::Undo(n) => (n, true),
        };
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
            Some(RewindMark {
                to_seq,
                cut,
                undo_target,
                branch: plan.branch,
                snapshot: plan.snapshot.clone(),
            }),
            vec![Effect::RewoundTo { seq: cut }],
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
            Some(id) => self.restore_machines(id).await?,
            None => Vec::new(),
        };
        let event = Event::Rewound {
            to_seq,
            cut: Some(cut),
            undo_target,
            proposal: self.proposal,
            branch: plan.branch,
            method: method.into(),
            snapshot: plan.snapshot.clone(),
            recovered: false,
        };
        let rewound_at = self.record(event).await?;
        marker.finish();
        let machines = json!(machines);
        let mut done = Executed::new(render::rewound(&render::Rewound {
            to_seq,
            undo_target,
            proposal: self.proposal,
            plan: &plan,
            applied: &applied,
            machines: &machines,
            rewound_at,
        }));
        done.outcome.inputs.extend([
            Input::Answer {
                from: "snapshots".into(),
                value: applied,
            },
            Input::Answer {
                from: "machines".into(),
                value: machines,
            },
            Input::Appended { seq: rewound_at },
        ]);
        Ok(done)
    }

    /// Put the machines snapshotted with workspace snapshot `id` back to it.
    async fn restore_machines(&self, id: &str) -> Result<Vec<String>, Failure> {
        let machines = self.machines_of(id)?;
        if machines.is_empty() {
            return Ok(Vec::new());
        }
        self.vm_all(|ticket, reply| VmMsg::RestoreAll {
            id: id.to_owned(),
            machines,
            ticket,
            reply,
        })
        .await
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
                .ok_or_else(|| RuntimeError::BlobMissing { blob: blob.clone() })?;
            blobs.insert(blob.clone(), bytes);
        }
    }
    Ok(blobs)
}

/// What a rewind will do.
pub struct RewindPlan {
    /// The last record kept: the workspace becomes what it was just after it.
    pub cut: u64,
    /// The actions undone (their proposal seqs and primitives), oldest first.
    pub undone: Vec<(u64, &'static str)>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The snapshot it restores first, if any.
    pub snapshot: Option<String>,
    /// The branch number the abandoned records get.
    pub branch: u32,
}

/// The changes a record made (effects of outcomes, complete or partial).
fn effects_of(record: &aido_journal::Record) -> Vec<Effect> {
    match &record.event {
        Event::ActionCompleted { outcome, .. } => outcome.effects.clone(),
        Event::ActionFailed { effects, .. } => effects.clone(),
        _ => Vec::new(),
    }
}

/// The proposal an outcome record closes.
fn outcome_of(record: &aido_journal::Record) -> Option<u64> {
    match &record.event {
        Event::ActionCompleted { proposal, .. } | Event::ActionFailed { proposal, .. } => {
            Some(*proposal)
        }
        _ => None,
    }
}

fn invalid_target(proposal: u64, why: &str) -> Failure {
    RewindError::TargetInvalid {
        why: format!("{why}; seqs go from 1 to {}", proposal.saturating_sub(1)),
    }
    .into()
}

/// The last record a rewind keeps. Rewinding to an action's seq (the one its result carried)
/// keeps the action, like `git reset` to a commit: the cut is its outcome record. Any other
/// record is kept itself. `before_seq` undoes its action too: the cut is the record before it.
pub fn rewind_cut(
    records: &[aido_journal::Record],
    target: RewindTarget,
    proposal: u64,
) -> Result<u64, Failure> {
    let named = match target {
        RewindTarget::Keep(n) | RewindTarget::Undo(n) => n,
    };
    if named == 0 || named >= proposal {
        return Err(invalid_target(
            proposal,
            &format!("{named} is not an earlier record of this session"),
        ));
    }
    let gone = aido_journal::timeline::abandoned(records);
    if gone.contains_key(&named) {
        return Err(RewindError::TargetAbandoned { seq: named }.into());
    }
    let record = records.iter().find(|r| r.seq == named);
    let is_action = matches!(record.map(|r| &r.event), Some(Event::ActionProposed { .. }));
    // A refused action has no outcome: its proposal is its last record.
    let refused = matches!(
        record.map(|r| &r.event),
        Some(Event::ActionProposed { verdict, .. }) if verdict.is_deny()
    );
    match target {
        RewindTarget::Undo(_) if !is_action => Err(invalid_target(
            proposal,
            &format!("before_seq {named} does not name an action's proposal"),
        )),
        // The record before it is on a branch an earlier rewind abandoned: the action is that
        // rewind, and the state before it lies on the branch, not on the live timeline.
        RewindTarget::Undo(n) if gone.contains_key(&(n - 1)) => {
            Err(RewindError::UndoOfRewind { seq: n }.into())
        }
        RewindTarget::Undo(n) => Ok(n - 1),
        RewindTarget::Keep(n) if !is_action || refused => Ok(n),
        RewindTarget::Keep(n) => records
            .iter()
            .filter(|r| r.seq < proposal && !gone.contains_key(&r.seq))
            .find(|r| outcome_of(r) == Some(n))
            .map(|r| r.seq)
            .ok_or_else(|| RewindError::TargetRunning { seq: n }.into()),
    }
}

/// Plan a rewind that keeps the records up to `cut`, for the rewind proposed at `proposal`:
/// restore the newest live snapshot at or before `cut` and redo the live changes after it;
/// with no snapshot, undo the live changes after `cut`, newest first, from what they kept.
pub fn rewind_plan(
    records: &[aido_journal::Record],
    cut: u64,
    proposal: u64,
) -> Result<RewindPlan, Failure> {
    if cut >= proposal {
        return Err(invalid_target(
            proposal,
            &format!("{cut} is not before the rewind"),
        ));
    }
    let gone = aido_journal::timeline::abandoned(records);
    let live: Vec<&aido_journal::Record> = records
        .iter()
        .filter(|r| !gone.contains_key(&r.seq) && r.seq < proposal)
        .collect();
    // Every live action whose outcome (or, still unanswered, proposal) is after the cut is
    // undone. The rewind itself is not listed.
    let outcomes: HashMap<u64, u64> = live
        .iter()
        .filter_map(|r| outcome_of(r).map(|p| (p, r.seq)))
        .collect();
    let undone = live
        .iter()
        .filter_map(|r| match &r.event {
            Event::ActionProposed { action, .. } => Some((r.seq, action.primitive())),
            _ => None,
        })
        .filter(|(seq, _)| *seq > cut || outcomes.get(seq).is_some_and(|o| *o > cut))
        .collect();
    let branch = records
        .iter()
        .filter(|r| matches!(r.event, Event::Rewound { .. }))
        .count() as u32
        + 1;
    let snapshot = live.iter().rev().find_map(|r| match &r.event {
        Event::SnapshotTaken { snapshot, .. } if r.seq <= cut => Some((r.seq, snapshot.clone())),
        _ => None,
    });
    let mut steps = Vec::new();
    match &snapshot {
        Some((taken, id)) => {
            steps.push(Step::Restore {
                snapshot: id.clone(),
            });
            for r in live.iter().filter(|r| r.seq > *taken && r.seq <= cut) {
                for effect in effects_of(r) {
                    steps.extend(redo(&effect));
                }
            }
        }
        None => {
            // Undoing past a snapshot restore: the restore put the workspace back to the state
            // at that snapshot's seq, so the restore and every change between that seq and it
            // cancel out; undoing goes on from before the snapshot.
            let taken_at: HashMap<&str, u64> = live
                .iter()
                .filter_map(|r| match &r.event {
                    Event::SnapshotTaken { snapshot, .. } => Some((snapshot.as_str(), r.seq)),
                    _ => None,
                })
                .collect();
            let mut skip_after: Option<u64> = None;
            for r in live.iter().rev().filter(|r| r.seq > cut) {
                if skip_after.is_some_and(|taken| r.seq > taken) {
                    continue;
                }
                skip_after = None;
                for effect in effects_of(r).iter().rev() {
                    if let Effect::SnapshotRestored { snapshot, .. } = effect
                        && let Some(&taken) = taken_at.get(snapshot.as_str())
                        && taken > cut
                    {
                        skip_after = Some(taken);
                        break;
                    }
                    steps.extend(undo(effect, r.seq)?);
                }
            }
        }
    }
    Ok(RewindPlan {
        cut,
        undone,
        steps,
        snapshot: snapshot.map(|(_, id)| id),
        branch,
    })
}

fn redo(effect: &Effect) -> Vec<Step> {
    match effect {
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
    }
}

/// The steps that undo `effect`, recorded at `seq`.
fn undo(effect: &Effect, seq: u64) -> Result<Vec<Step>, Failure> {
    let not_kept = |path: &str| -> Failure {
        RewindError::NotKept {
            seq,
            path: path.to_owned(),
        }
        .into()
    };
    Ok(match effect {
        Effect::FileWritten { path, before, .. } | Effect::FileRemoved { path, before } => {
            match before {
                Before::Kept(b) => vec![Step::Write {
                    path: path.clone(),
                    blob: b.clone(),
                }],
                Before::Absent => vec![Step::Remove { path: path.clone() }],
                Before::NotKept => return Err(not_kept(path)),
            }
        }
        Effect::Moved { from, to } => vec![Step::Move {
            from: to.clone(),
            to: from.clone(),
        }],
        Effect::DirCreated { path } => vec![Step::RemoveDir { path: path.clone() }],
        // Walking the live timeline backwards, the state before an earlier rewind is the
        // state at its target (what it abandoned is not on this timeline): nothing to undo.
        Effect::RewoundTo { .. } => Vec::new(),
        Effect::SnapshotRestored { .. } => {
            return Err(RewindError::NeedsSnapshot { seq }.into());
        }
    })
}

/// Replace a result's outcome with `f` of it, keeping the inputs it recorded.
fn outcome(mut done: Executed, f: impl FnOnce(Outcome) -> Outcome) -> Executed {
    let inputs = std::mem::take(&mut done.outcome.inputs);
    done.outcome = f(std::mem::take(&mut done.outcome));
    done.outcome.inputs = inputs;
    done
}

/// A result that is another part of the runtime's answer, recorded as the input it is.
fn answered(from: &str, value: serde_json::Value) -> Executed {
    let mut done = Executed::new(render::answered(value.clone()));
    done.outcome.inputs.push(Input::Answer {
        from: from.into(),
        value,
    });
    done
}

fn join(at: &str, label: &str) -> String {
    if at.is_empty() {
        label.to_owned()
    } else {
        format!("{at}.{label}")
    }
}
