//! The live world: the walk (`aido_walk::walk`, shared with playback) asks it to run each leaf.
//! Filesystem and machine leaves go to their bodies; the runtime's own primitives (policy
//! answers, history, snapshots, rewinds, random bytes) run here. Every change a leaf made is
//! carried up by the walk, so a composite's record (completed or failed) lists all of them.

use std::convert::Infallible;

use aido_actions::meta::SessionHistory;
use aido_actions::snapshot::{RandomBytes, RewindTarget};
use aido_actions::{
    Action, ArtifactAction, BrowserAction, Condition, DesktopAction, Effect, Failure, FsAction,
    GatewayAction, HumanAction, Input, MemoryAction, NetAction, Outcome, ProcessAction,
    RuntimeAction, ScriptAction, SearchAction, VmAction,
};
use aido_journal::Event;
use aido_policy::FsResolver;
use aido_walk::walk::Answer;
use aido_walk::{Executed, Failed, World, rewind_cut, rewind_plan};
use serde_json::json;

#[cfg(feature = "prim-browser")]
use crate::browser::BrowserMsg;
use crate::call::Call;
#[cfg(feature = "prim-desktop")]
use crate::desktop::DesktopMsg;
use crate::error::{RewindError, RuntimeError};
use crate::fs::intent::Intents;
use crate::fs::{FsMsg, SnapshotOp, Step};
#[cfg(feature = "prim-gateway")]
use crate::gateway::GatewayMsg;
#[cfg(feature = "prim-memory")]
use crate::memory::{MemoryCall, MemoryMsg};
#[cfg(feature = "prim-net")]
use crate::net::NetMsg;
#[cfg(feature = "prim-process")]
use crate::process::ProcessMsg;
use crate::recovery::{Recovery, RewindMark, fetch_blobs};
use crate::render;
#[cfg(feature = "prim-search")]
use crate::search::SearchMsg;
#[cfg(feature = "prim-vm")]
use crate::vm::VmMsg;
use aido_call::{Body, Reply, Slot};
#[cfg(feature = "prim-gateway")]
use std::sync::Arc;

/// A family's leaf: its body's call when this build holds the family (the cargo feature
/// `$feature`), else `primitive_not_built`. The policy's `bodies` gate refuses an unbuilt
/// family's action first; this answers the same if anything reaches here.
macro_rules! family {
    ($feature:literal, $body:ident, $action:ident, $run:expr) => {{
        #[cfg(feature = $feature)]
        let answer = $run;
        #[cfg(not(feature = $feature))]
        let answer = {
            let _ = $action;
            Err(crate::families::not_built(aido_actions::Body::$body))
        };
        answer
    }};
}

/// The live world over one call: a type of the runtime's own, so the walk's [`World`] (and
/// the runtime's primitives) can be implemented for the [`Call`] it wraps.
pub(crate) struct Live<'a>(pub(crate) Call<'a>);

impl<'a> std::ops::Deref for Live<'a> {
    type Target = Call<'a>;

    fn deref(&self) -> &Call<'a> {
        &self.0
    }
}

impl Live<'_> {
    /// Walk `action` through the live bodies.
    pub(crate) async fn exec(&mut self, action: &Action) -> Result<Executed, Failed> {
        match aido_walk::walk(self, action, String::new()).await {
            Ok(walked) => walked,
            Err(never) => match never {},
        }
    }
}

/// The live world: bodies change files and machines, and every leaf records what it read.
impl World for Live<'_> {
    /// The live world always answers (a failure is an answer).
    type Stop = Infallible;

    fn interrupted(&mut self, _action: &Action, leaf: bool) -> Option<Failed> {
        if !self.hooks.cancel.is_cancelled() {
            return None;
        }
        let failure: Failure = RuntimeError::Cancelled.into();
        Some(if leaf {
            Failed::leaf(failure)
        } else {
            // Recorded, so playback knows that nothing under it ran.
            let mut partial = Executed::default();
            partial.outcome.inputs.push(Input::Cancelled);
            Failed { failure, partial }
        })
    }

    fn progress(&mut self, done: u64, total: u64, what: String) {
        if let Some(p) = &self.hooks.progress {
            p.report(done, total, what);
        }
    }

    async fn filesystem(&mut self, action: FsAction) -> Answer<Executed, Infallible> {
        Ok(self.body(action).await)
    }

    async fn machine(&mut self, action: VmAction) -> Answer<Executed, Infallible> {
        Ok(family!("prim-vm", Machine, action, self.vm(action).await))
    }

    async fn process(&mut self, action: ProcessAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-process",
            Process,
            action,
            Live::process(self, action).await
        ))
    }

    async fn runtime(&mut self, action: RuntimeAction) -> Answer<Executed, Infallible> {
        Ok(Live::runtime(self, action).await)
    }

    async fn human(&mut self, action: HumanAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-human",
            Human,
            action,
            Live::human(self, action).await
        ))
    }

    async fn memory(&mut self, action: MemoryAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-memory",
            Memory,
            action,
            Live::memory(self, action).await
        ))
    }

    async fn search(&mut self, action: SearchAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-search",
            Search,
            action,
            Live::search(self, action).await
        ))
    }

    async fn net(&mut self, action: NetAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-net",
            Net,
            action,
            Live::net(self, action).await
        ))
    }

    async fn desktop(&mut self, action: DesktopAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-desktop",
            Desktop,
            action,
            Live::desktop(self, action).await
        ))
    }

    async fn browser(&mut self, action: BrowserAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-browser",
            Browser,
            action,
            Live::browser(self, action).await
        ))
    }

    async fn gateway(&mut self, action: GatewayAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-gateway",
            Gateway,
            action,
            Live::gateway(self, action).await
        ))
    }

    async fn script(&mut self, action: ScriptAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-script",
            Script,
            action,
            Live::script(self, action).await
        ))
    }

    async fn artifact(&mut self, action: ArtifactAction) -> Answer<Executed, Infallible> {
        Ok(family!(
            "prim-artifact",
            Artifact,
            action,
            Live::artifact(self, action).await
        ))
    }

    async fn condition(&mut self, condition: &Condition) -> Answer<(bool, Executed), Infallible> {
        Ok(self.evaluate(condition).await)
    }

    async fn take_snapshot(&mut self, label: &str) -> Answer<(Executed, String), Infallible> {
        Ok(Live::take_snapshot(self, Some(label)).await)
    }

    async fn restore_snapshot(&mut self, snapshot: &str) -> Answer<Executed, Infallible> {
        Ok(Live::restore_snapshot(self, snapshot).await)
    }
}

impl Live<'_> {
    /// A primitive of the runtime itself (the policy's answers, the journal, snapshots,
    /// rewinds, recorded randomness).
    async fn runtime(&self, action: RuntimeAction) -> Result<Executed, Failure> {
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
            RuntimeAction::SessionHistory(h) => self.history(h),
            RuntimeAction::CreateSnapshot(c) => {
                let (taken, _) = self.take_snapshot(c.label.as_deref()).await?;
                Ok(taken)
            }
            RuntimeAction::RestoreSnapshot(r) => self.restore_snapshot(&r.snapshot).await,
            RuntimeAction::ListSnapshots(_) => self.list_snapshots().await,
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
                    }));
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
                self.rewind(target).await
            }
            RuntimeAction::ReadLogs(r) => crate::logs::read_logs(self, r).await,
            RuntimeAction::GrantMint(_)
            | RuntimeAction::GrantRevoke(_)
            | RuntimeAction::GrantList(_) => crate::grants::run(self, &action).await,
        }
    }

    /// Ask a body and wait, at most the action timeout for it to take the call (see
    /// [`Slot::ask`]).
    async fn ask<B: Body, T: Send + 'static>(
        &self,
        body: &Slot<B>,
        msg: impl FnOnce(Reply<T>) -> B::Msg,
    ) -> Result<T, Failure> {
        body.ask(self.shared.action_timeout(), msg).await
    }

    async fn body(&self, action: FsAction) -> Result<Executed, Failure> {
        let (session, cancel) = (self.ctx.clone(), self.hooks.cancel.clone());
        // A write says what it is about to do before it renames (see `fs::intent`).
        let intents = action.class().mutates().then(|| {
            self.shared.marked(self.session, self.proposal);
            Intents::of(self.shared.journal.path(), self.session, self.proposal)
        });
        self.ask(&self.shared.bodies.fs, |reply| FsMsg::Run {
            action: Box::new(action),
            session,
            cancel,
            intents,
            reply,
        })
        .await
    }

    /// Run a command in the process body.
    #[cfg(feature = "prim-process")]
    async fn process(&self, action: ProcessAction) -> Result<Executed, Failure> {
        // Subscriptions need the session and the surface's notifier: they run here.
        let answer = match &action {
            ProcessAction::Subscribe(s) => Some(crate::events::subscribe(self, s)?),
            ProcessAction::WatchAndReact(w) => Some(crate::events::watch(self, w)?),
            ProcessAction::Unsubscribe(u) => {
                Some(self.shared.events.remove(self.session, &u.subscription)?)
            }
            ProcessAction::ListSubscriptions(_) => Some(self.shared.events.list(self.session)),
            _ => None,
        };
        if let Some(answer) = answer {
            return Ok(recorded(
                aido_walk::process::handle_answered(&answer),
                aido_walk::process::ANSWERED_BY,
                answer,
            ));
        }
        let session = self.ctx.clone();
        let origin = crate::process::Origin {
            session: self.session.to_string(),
            proposal: self.proposal,
            now_ms: self.shared.clock.now_ms(),
        };
        let ran: crate::process::Ran = self
            .ask(&self.shared.bodies.process, |reply| ProcessMsg::Run {
                action: Box::new(action),
                session,
                origin,
                reply,
            })
            .await?;
        let mut done = ran.executed;
        let Some(mut pending) = ran.pending else {
            return Ok(done);
        };
        // The command's changes, every one admitted: staged whole into the journal, then made
        // by the filesystem body (before-images kept), all or nothing.
        let changes = std::mem::take(&mut pending.changes);
        let ctx = self
            .ctx
            .with_admitted(std::mem::take(&mut pending.admitted));
        let applied = crate::change_sets::apply(
            &self.shared,
            self.session,
            self.proposal,
            &ctx,
            changes,
            pending.file_bytes_max,
        )
        .await?;
        // The layer holding the changes' contents goes only now.
        drop(pending);
        let answer = aido_walk::process::applied_answer(applied.shown, applied.effects);
        aido_walk::process::changes_applied(&mut done.outcome, &answer);
        done.outcome.inputs.push(Input::Answer {
            from: aido_walk::process::APPLIED_BY.into(),
            value: answer,
        });
        Ok(done)
    }

    /// Run an artifact primitive (see [`crate::artifact`]).
    #[cfg(feature = "prim-artifact")]
    async fn artifact(&self, action: ArtifactAction) -> Result<Executed, Failure> {
        crate::artifact::run(self, action).await
    }

    /// Run a script primitive (see [`crate::script`]).
    #[cfg(feature = "prim-script")]
    async fn script(&self, action: ScriptAction) -> Result<Executed, Failure> {
        crate::script::run(self, action).await
    }

    /// Ask a human.
    #[cfg(feature = "prim-human")]
    async fn human(&self, action: HumanAction) -> Result<Executed, Failure> {
        crate::human::run(self, action).await
    }

    /// Ask the memory body. The clock it is given and its answer are the result's inputs;
    /// the result is rendered from them, as playback renders it.
    #[cfg(feature = "prim-memory")]
    async fn memory(&self, action: MemoryAction) -> Result<Executed, Failure> {
        let now_ms = self.shared.clock.now_ms();
        let call = MemoryCall {
            session: self.session.to_string(),
            proposal: self.proposal,
            project: project_key(self.shared.policy.workdir()),
        };
        let asked = action.clone();
        let answer = self
            .ask(&self.shared.bodies.memory, |reply| MemoryMsg::Run {
                action: Box::new(asked),
                call,
                now_ms,
                reply,
            })
            .await?;
        let mut done = Executed::new(aido_walk::memory::render(&action, &answer));
        done.outcome.inputs.extend([
            Input::Clock { unix_ms: now_ms },
            Input::Answer {
                from: aido_walk::memory::ANSWER_FROM.into(),
                value: answer,
            },
        ]);
        Ok(done)
    }

    /// Ask the search body. What it found is the result's input; the result is rendered from
    /// it, as playback renders it (playback never reads the tree).
    #[cfg(feature = "prim-search")]
    async fn search(&self, action: SearchAction) -> Result<Executed, Failure> {
        let session = self.ctx.clone();
        let asked = action.clone();
        let answer = self
            .ask(&self.shared.bodies.search, |reply| SearchMsg::Run {
                action: Box::new(asked),
                session,
                reply,
            })
            .await?;
        Ok(recorded(
            aido_walk::search::render(&action, &answer),
            aido_walk::search::ANSWER_FROM,
            answer,
        ))
    }

    #[cfg(feature = "prim-net")]
    /// Ask the net body. What the network answered is the result's input; the result is
    /// rendered from it, as playback renders it (playback sends nothing).
    async fn net(&self, action: NetAction) -> Result<Executed, Failure> {
        let asked = action.clone();
        let answer = self
            .ask(&self.shared.bodies.net, |reply| NetMsg::Run {
                action: Box::new(asked),
                reply,
            })
            .await?;
        Ok(recorded(
            aido_walk::net::render(&action, &answer),
            aido_walk::net::ANSWER_FROM,
            answer,
        ))
    }

    /// Ask the desktop body. Its answer (backend, target window, redacted arguments, the
    /// screenshot's PNG) is the result's input; the result is rendered from it, as playback
    /// renders it.
    #[cfg(feature = "prim-desktop")]
    async fn desktop(&self, action: DesktopAction) -> Result<Executed, Failure> {
        let session = self.ctx.clone();
        let asked = action.clone();
        let answer = self
            .ask(&self.shared.bodies.desktop, |reply| DesktopMsg::Run {
                action: Box::new(asked),
                session,
                reply,
            })
            .await?;
        Ok(recorded(
            aido_walk::desktop::render(&action, &answer),
            aido_walk::desktop::ANSWER_FROM,
            answer,
        ))
    }

    /// Ask the browser body. Its answer (the page's typed answer and every connection the page
    /// made through the egress proxy) is the result's input; the result is rendered from it,
    /// as playback renders it (playback opens no browser).
    #[cfg(feature = "prim-browser")]
    async fn browser(&self, action: BrowserAction) -> Result<Executed, Failure> {
        let asked = action.clone();
        let mut answer = self
            .ask(&self.shared.bodies.browser, |reply| BrowserMsg::Run {
                action: Box::new(asked),
                session: self.session.to_string(),
                context: self.ctx.clone(),
                reply,
            })
            .await?;
        crate::browser_downloads::land(
            &self.shared,
            self.session,
            self.proposal,
            self.ctx,
            &mut answer,
        )
        .await;
        Ok(recorded(
            aido_walk::browser::render(&action, &answer),
            aido_walk::browser::ANSWER_FROM,
            answer,
        ))
    }

    /// Ask the gateway body. The server's whole result is the result's input; the result is
    /// rendered from it, as playback renders it (playback starts no server). The server's
    /// progress and questions go to the call's own surface.
    #[cfg(feature = "prim-gateway")]
    async fn gateway(&self, action: GatewayAction) -> Result<Executed, Failure> {
        let GatewayAction::DownstreamCall(call) = action.clone();
        let upstream = Arc::new(crate::gateway_relay::Relay {
            progress: self.hooks.progress.clone(),
            asker: self.hooks.asker.clone(),
        });
        let answer = self
            .ask(&self.shared.bodies.gateway, |reply| GatewayMsg::Run {
                call: Box::new(call),
                upstream,
                reply,
            })
            .await?;
        Ok(recorded(
            aido_walk::downstream::render(&action, &answer),
            aido_walk::downstream::ANSWER_FROM,
            answer,
        ))
    }

    #[cfg(feature = "prim-vm")]
    async fn vm(&self, action: VmAction) -> Result<Executed, Failure> {
        self.ask(&self.shared.bodies.vm, |reply| VmMsg::Run {
            action: Box::new(action),
            reply,
        })
        .await
    }

    /// Ask the VM body something about all its machines.
    #[cfg(feature = "prim-vm")]
    async fn vm_all(
        &self,
        msg: impl FnOnce(Reply<Vec<String>>) -> VmMsg,
    ) -> Result<Vec<String>, Failure> {
        self.ask(&self.shared.bodies.vm, msg).await
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
    async fn evaluate(&self, condition: &Condition) -> Result<(bool, Executed), Failure> {
        let session = self.ctx.clone();
        self.ask(&self.shared.bodies.fs, |reply| FsMsg::Evaluate {
            condition: condition.clone(),
            session,
            reply,
        })
        .await
    }

    fn history(&self, h: &SessionHistory) -> Result<Executed, Failure> {
        let (limit, window) = render::history_window(h);
        let records = self
            .shared
            .journal
            .records(self.session, 1, h.before_seq, window, true)
            .map_err(Failure::from)?;
        // The records read are the newest `window` up to the last one seen: that seq is all
        // playback needs to read the same ones.
        let head = records.last().map_or(0, |r| r.seq);
        let mut done = Executed::new(render::session_history(self.session, &records, limit));
        done.outcome.inputs.push(Input::JournalHead { seq: head });
        Ok(done)
    }
}

impl Live<'_> {
    async fn snapshot_op(&self, op: SnapshotOp) -> Result<serde_json::Value, Failure> {
        let session = self.ctx.clone();
        self.ask(&self.shared.bodies.fs, |reply| FsMsg::Snapshot {
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
            .map_err(Failure::from)
    }

    fn records(&self) -> Result<Vec<aido_journal::Record>, Failure> {
        self.shared
            .journal
            .all_records(self.session)
            .map_err(Failure::from)
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
        let machines = self.snapshot_machines(&id).await?;
        let taken: aido_walk::snapshot::Taken = aido_walk::snapshot::read(&output)?;
        let event = Event::SnapshotTaken {
            snapshot: id.clone(),
            backend: taken.backend.clone(),
            workspace: taken.workspace.clone(),
            proposal: self.proposal,
            machines: machines.clone(),
        };
        let seq = self.record(event).await?;
        let mut done = Executed::new(Outcome::from_output(render::snapshot_taken(
            &taken, &machines, seq, label,
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
                value: json!(machines),
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
        let machines = self.restore_machines(snapshot).await?;
        marker.finish();
        let mut done = Executed::new(render::snapshot_restored(
            &aido_walk::snapshot::read(&output)?,
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
                value: json!(machines),
            },
        ]);
        Ok(done)
    }

    async fn list_snapshots(&self) -> Result<Executed, Failure> {
        let listed = self.snapshot_op(SnapshotOp::List).await?;
        let records = self.records()?;
        let mut done = Executed::new(render::snapshots_listed(
            &aido_walk::snapshot::read::<Vec<_>>(&listed)?,
            &records,
        ));
        done.outcome.inputs.push(Input::Answer {
            from: "snapshots".into(),
            value: listed,
        });
        Ok(done)
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
        let applied_count = aido_walk::snapshot::read(&applied)?;
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
        let mut done = Executed::new(render::rewound(&render::Rewound {
            to_seq,
            undo_target,
            proposal: self.proposal,
            plan: &plan,
            applied: applied_count,
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
                value: json!(machines),
            },
            Input::Appended { seq: rewound_at },
        ]);
        Ok(done)
    }

    /// Snapshot every running machine under workspace snapshot `id`; their names.
    #[cfg(feature = "prim-vm")]
    async fn snapshot_machines(&self, id: &str) -> Result<Vec<String>, Failure> {
        self.vm_all(|reply| VmMsg::SnapshotAll {
            id: id.to_owned(),
            reply,
        })
        .await
    }

    /// Put the machines snapshotted with workspace snapshot `id` back to it.
    #[cfg(feature = "prim-vm")]
    async fn restore_machines(&self, id: &str) -> Result<Vec<String>, Failure> {
        let machines = self.machines_of(id)?;
        if machines.is_empty() {
            return Ok(Vec::new());
        }
        self.vm_all(|reply| VmMsg::RestoreAll {
            id: id.to_owned(),
            machines,
            reply,
        })
        .await
    }
}

/// What the runtime does without the VM family: there are no machines to snapshot.
impl Live<'_> {
    /// No machines run in a build without them.
    #[cfg(not(feature = "prim-vm"))]
    async fn snapshot_machines(&self, _id: &str) -> Result<Vec<String>, Failure> {
        Ok(Vec::new())
    }

    /// A snapshot that holds machines (taken by a build with them) cannot be fully restored.
    #[cfg(not(feature = "prim-vm"))]
    async fn restore_machines(&self, id: &str) -> Result<Vec<String>, Failure> {
        if self.machines_of(id)?.is_empty() {
            return Ok(Vec::new());
        }
        Err(crate::families::not_built(aido_actions::Body::Machine))
    }
}

/// A result rendered from a body's answer, with that answer recorded as its input (what
/// playback renders the same result from).
fn recorded(outcome: Outcome, from: &str, answer: serde_json::Value) -> Executed {
    let mut done = Executed::new(outcome);
    done.outcome.inputs.push(Input::Answer {
        from: from.into(),
        value: answer,
    });
    done
}

/// A result that is another part of the runtime's answer, recorded as the input it is.
fn answered(from: &str, value: serde_json::Value) -> Executed {
    recorded(render::answered(value.clone()), from, value)
}

/// The `project` scope's key: the first 16 bytes of the blake3 of the project root, so every
/// session and process working in one root shares its project memories, and the key says
/// nothing of the path.
#[cfg(feature = "prim-memory")]
fn project_key(root: &std::path::Path) -> String {
    let hash = blake3::hash(root.as_os_str().as_encoded_bytes());
    hex::encode(&hash.as_bytes()[..16])
}
