use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aido_actions::{Condition, Failure, FsAction};
use aido_policy::{Limits, PolicyEngine, SessionContext};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio_util::sync::CancellationToken;

use aido_walk::Executed;

use super::ops::{self, Ctx};
use super::walls::Walls;
use crate::clock::Clock;
use crate::error::RuntimeError;
use crate::faults::Faults;
use crate::ticket::Ticket;

/// The filesystem body actor. Stateless between messages apart from cached root handles and
/// the snapshot store, so a restart loses nothing.
///
/// Its work is blocking file I/O, so it never runs on the async workers: each call becomes a
/// task that takes the body's gate (shared for actions and conditions, exclusive for snapshot
/// operations, which must see and leave the workspace whole), checks its [`Ticket`] (a call
/// whose deadline passed while it waited never runs), and runs on the blocking pool. One slow
/// snapshot therefore holds back other calls on this workspace, never the runtime's workers or
/// other sessions' non-filesystem work. A panic in the work fails the actor, so the supervisor
/// restarts it and the call in flight gets `body_crashed`.
#[derive(Clone, Copy, Debug)]
pub struct FsBody;

/// What the body is built from; kept by the supervisor to build a fresh body after a crash.
#[derive(Clone)]
pub struct FsBodyArgs {
    /// The compiled policy, for the body's own checks.
    pub policy: Arc<PolicyEngine>,
    /// Named limits.
    pub limits: Limits,
    /// The runtime's clock.
    pub clock: Arc<dyn Clock>,
    /// The home trash directory.
    pub trash: PathBuf,
    /// Fault injection (tests and the seeded simulation).
    pub faults: Arc<Faults>,
    /// AIDO_HOME (the copy backend's object store lives there).
    pub aido_home: PathBuf,
    /// The journal's blob store, where large previous contents are streamed.
    pub blobs: aido_journal::BlobStore,
    /// The journal's directory (its disk keeps `journal_free_bytes_min` free).
    pub journal_dir: PathBuf,
}

/// What the work of every call shares.
pub(crate) struct Core {
    args: FsBodyArgs,
    walls: Walls,
    snapshots: Mutex<super::snapshot::Snapshots>,
}

/// The body's state.
pub struct FsState {
    core: Arc<Core>,
    /// Shared for actions and conditions, exclusive for snapshot operations.
    gate: Arc<tokio::sync::RwLock<()>>,
}

/// Messages to the filesystem body.
pub enum FsMsg {
    /// Run one filesystem leaf.
    Run {
        /// The leaf.
        action: Box<FsAction>,
        /// The session it runs for.
        session: SessionContext,
        /// Cancelled when the agent cancels the call.
        cancel: CancellationToken,
        /// Where its writes say what they are about to do (the proposal's intents).
        intents: Option<super::intent::Intents>,
        /// Its deadline and state.
        ticket: Ticket,
        /// The answer.
        reply: RpcReplyPort<Result<Executed, Failure>>,
    },
    /// A snapshot operation on the workspace.
    Snapshot {
        /// What to do.
        op: super::snapshot::SnapshotOp,
        /// The session it runs for.
        session: SessionContext,
        /// Its deadline and state.
        ticket: Ticket,
        /// The answer.
        reply: RpcReplyPort<Result<serde_json::Value, Failure>>,
    },
    /// Answer a condition.
    Evaluate {
        /// The condition.
        condition: Condition,
        /// The session it runs for.
        session: SessionContext,
        /// Its deadline and state.
        ticket: Ticket,
        /// The answer, with what the condition's leaves saw (as inputs and blobs).
        reply: RpcReplyPort<Result<(bool, Executed), Failure>>,
    },
    /// Read the end of a file the walls allow (read_logs): at most `window` bytes, from a
    /// line start.
    Tail {
        /// The path as given.
        path: String,
        /// Most bytes read, counted from the end.
        window: u64,
        /// The session it runs for.
        session: SessionContext,
        /// Its deadline and state.
        ticket: Ticket,
        /// The resolved path, the bytes, and whether the file holds more before them.
        reply: RpcReplyPort<Result<super::tools::Tail, Failure>>,
    },
    /// Stage a change set: every content and before-image into the journal's blob store,
    /// the entries into parts, all durable; nothing in the workspace changes.
    Stage {
        /// The changes, in the order the command's layer listed them.
        changes: Vec<super::changeset::CommandChange>,
        /// Most bytes one file may hold.
        file_bytes_max: u64,
        /// The session it runs for.
        session: SessionContext,
        /// Its deadline and state.
        ticket: Ticket,
        /// The staged change set.
        reply: RpcReplyPort<Result<super::changeset::Staged, Failure>>,
    },
    /// Apply a staged change set (all or nothing); the caller has written its recovery
    /// marker.
    Commit {
        /// What [`FsMsg::Stage`] answered.
        staged: Box<super::changeset::Staged>,
        /// The session it runs for.
        session: SessionContext,
        /// Its deadline and state.
        ticket: Ticket,
        /// What was applied, as a result shows it, and the staged set back.
        reply: RpcReplyPort<
            Result<(super::changeset::Applied, Box<super::changeset::Staged>), Failure>,
        >,
    },
    /// A call's work panicked: the body fails, and its supervisor restarts it.
    Crashed {
        /// The panic's message.
        why: String,
    },
}

/// The failure of a call whose deadline passed before the body took it.
fn not_taken() -> Failure {
    RuntimeError::BodyTimeout {
        body: "filesystem",
        timeout_ms: 0,
    }
    .into()
}

pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

impl FsState {
    /// Run `work` on the blocking pool, behind the gate, if its ticket is still valid when its
    /// turn comes; `commits` says whether it changes the world (then it commits its ticket
    /// before it starts, so the caller waits for it past its deadline).
    ///
    /// When the gate is free and no fault delays the call, the work goes to the blocking pool
    /// at once and answers from there; otherwise a task waits for the gate first.
    fn spawn<T: Send + 'static>(
        &self,
        myself: ActorRef<FsMsg>,
        exclusive: bool,
        commits: bool,
        ticket: Ticket,
        reply: RpcReplyPort<Result<T, Failure>>,
        work: impl FnOnce(&Core) -> Result<T, Failure> + Send + 'static,
    ) {
        let (core, gate) = (self.core.clone(), self.gate.clone());
        let delay = core.args.faults.before_start();
        let free = match (delay, exclusive) {
            (Some(_), _) => None,
            (None, true) => gate.clone().try_write_owned().ok().map(Turn::Exclusive),
            (None, false) => gate.clone().try_read_owned().ok().map(Turn::Shared),
        };
        if let Some(turn) = free
            && core.args.faults.after_start().is_none()
        {
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                if !ticket.start() || (commits && !ticket.commit()) {
                    let _ = reply.send(Err(not_taken()));
                    return;
                }
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if core.args.faults.take_panic_in_work() {
                        panic!("injected fault: the filesystem body panics in its work");
                    }
                    work(&core)
                }));
                match ran {
                    Ok(result) => {
                        let _ = reply.send(result);
                    }
                    Err(payload) => {
                        // The reply is dropped: the caller sees the crash.
                        drop(reply);
                        let _ = myself.cast(FsMsg::Crashed {
                            why: panic_text(payload.as_ref()),
                        });
                    }
                }
            });
            return;
        }
        tokio::spawn(async move {
            let _turn = if exclusive {
                Turn::Exclusive(gate.write_owned().await)
            } else {
                Turn::Shared(gate.read_owned().await)
            };
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            if !ticket.start() || (commits && !ticket.commit()) {
                let _ = reply.send(Err(not_taken()));
                return;
            }
            if let Some(delay) = core.args.faults.after_start() {
                tokio::time::sleep(delay).await;
            }
            let joined = tokio::task::spawn_blocking(move || {
                if core.args.faults.take_panic_in_work() {
                    panic!("injected fault: the filesystem body panics in its work");
                }
                work(&core)
            })
            .await;
            match joined {
                Ok(result) => {
                    let _ = reply.send(result);
                }
                Err(e) => {
                    let why = match e.try_into_panic() {
                        Ok(payload) => panic_text(payload.as_ref()),
                        Err(e) => e.to_string(),
                    };
                    // The reply is dropped: the caller sees the crash.
                    drop(reply);
                    let _ = myself.cast(FsMsg::Crashed { why });
                }
            }
        });
    }
}

/// A call's turn at the gate, held until its work is done.
enum Turn {
    Shared(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>),
}

impl Actor for FsBody {
    type Msg = FsMsg;
    type State = FsState;
    type Arguments = FsBodyArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: FsBodyArgs,
    ) -> Result<FsState, ActorProcessingErr> {
        let walls = Walls::new(args.policy.clone());
        Ok(FsState {
            core: Arc::new(Core {
                args,
                walls,
                snapshots: Mutex::new(super::snapshot::Snapshots::new()),
            }),
            gate: Arc::new(tokio::sync::RwLock::new(())),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: FsMsg,
        state: &mut FsState,
    ) -> Result<(), ActorProcessingErr> {
        if state.core.args.faults.take_panic() {
            panic!("injected fault: the filesystem body panics on this message");
        }
        match msg {
            FsMsg::Run {
                action,
                session,
                cancel,
                intents,
                ticket,
                reply,
            } => {
                let commits = action.class().mutates();
                state.spawn(myself, false, commits, ticket, reply, move |core| {
                    let mut cx = ctx(core, &session, &cancel);
                    cx.keep.intents = intents.as_ref();
                    let result = run(&cx, &action).map_err(Failure::from);
                    if let Some(delay) = core.args.faults.after_work() {
                        std::thread::sleep(delay);
                    }
                    result
                });
            }
            FsMsg::Snapshot {
                op,
                session,
                ticket,
                reply,
            } => {
                let reads = matches!(op, super::snapshot::SnapshotOp::List);
                state.spawn(myself, !reads, !reads, ticket, reply, move |core| {
                    let mut snapshots = core.snapshots.lock().map_err(|_| {
                        Failure::from(RuntimeError::Internal {
                            why: "the snapshot store's lock is poisoned".into(),
                        })
                    })?;
                    snapshots.run(
                        op,
                        &core.walls,
                        &session,
                        &core.args.aido_home,
                        &core.args.blobs,
                    )
                });
            }
            FsMsg::Evaluate {
                condition,
                session,
                ticket,
                reply,
            } => {
                state.spawn(myself, false, false, ticket, reply, move |core| {
                    let never = CancellationToken::new();
                    let cx = ctx(core, &session, &never);
                    let mut seen = Executed::default();
                    ops::evaluate(&cx, &condition, &mut seen)
                        .map(|holds| (holds, seen))
                        .map_err(Failure::from)
                });
            }
            FsMsg::Tail {
                path,
                window,
                session,
                ticket,
                reply,
            } => {
                state.spawn(myself, false, false, ticket, reply, move |core| {
                    super::tools::tail(&core.walls, &session, &path, window).map_err(Failure::from)
                });
            }
            FsMsg::Stage {
                changes,
                file_bytes_max,
                session,
                ticket,
                reply,
            } => {
                state.spawn(myself, false, true, ticket, reply, move |core| {
                    let cx = super::changeset::Cx {
                        walls: &core.walls,
                        session: &session,
                        store: &core.args.blobs,
                        space: Some((
                            &core.args.journal_dir,
                            core.args.limits.journal_free_bytes_min,
                        )),
                        faults: Some(&core.args.faults),
                    };
                    super::changeset::stage(&cx, changes, file_bytes_max).map_err(Failure::from)
                });
            }
            FsMsg::Commit {
                staged,
                session,
                ticket,
                reply,
            } => {
                state.spawn(myself, false, true, ticket, reply, move |core| {
                    let cx = super::changeset::Cx {
                        walls: &core.walls,
                        session: &session,
                        store: &core.args.blobs,
                        space: None,
                        faults: Some(&core.args.faults),
                    };
                    super::changeset::apply(&cx, &staged)
                        .map(|applied| (applied, staged))
                        .map_err(Failure::from)
                });
            }
            FsMsg::Crashed { why } => return Err(why.into()),
        }
        Ok(())
    }
}

fn ctx<'a>(core: &'a Core, session: &'a SessionContext, cancel: &'a CancellationToken) -> Ctx<'a> {
    Ctx {
        walls: &core.walls,
        keep: super::walls::Keep {
            store: &core.args.blobs,
            max: core.args.limits.blob_bytes_max,
            journal_dir: &core.args.journal_dir,
            free_min: core.args.limits.journal_free_bytes_min,
            intents: None,
        },
        session,
        limits: &core.args.limits,
        cancel,
        clock: core.args.clock.as_ref(),
        trash: &core.args.trash,
    }
}

/// Every filesystem primitive: the `actions!` table's group, matched without a wildcard, so a
/// new one does not compile until it is handled here.
fn run(cx: &Ctx, action: &FsAction) -> Result<Executed, super::FsError> {
    match action {
        FsAction::ReadFile(a) => ops::read_file(cx, a),
        FsAction::ReadFiles(a) => ops::read_files(cx, a),
        FsAction::WriteFile(a) => ops::write_file(cx, a),
        FsAction::EditFile(a) => ops::edit_file(cx, a),
        FsAction::ApplyPatch(a) => ops::apply_patch(cx, a),
        FsAction::PatchSet(a) => ops::patch_set(cx, a),
        FsAction::StatFiles(a) => ops::stat_files(cx, a),
        FsAction::FileInfo(a) => ops::file_info(cx, a),
        FsAction::Checksum(a) => ops::checksum(cx, a),
        FsAction::MoveToTrash(a) => ops::move_to_trash(cx, a),
        FsAction::RestoreFromTrash(a) => ops::restore_from_trash(cx, a),
        FsAction::Validate(a) => ops::validate(cx, a),
        FsAction::Diff(a) => super::tools::diff(cx, a),
        FsAction::RenderTemplate(a) => super::tools::render_template(cx, a),
    }
}

/// The home trash for a home directory.
pub fn home_trash(home: &std::path::Path) -> PathBuf {
    super::trash::home_trash(home)
}
