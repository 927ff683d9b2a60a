use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aido_actions::{Action, Condition, Failure, Outcome};
use aido_policy::{Limits, PolicyEngine, SessionContext};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio_util::sync::CancellationToken;

use super::ops::{self, Ctx};
use super::walls::Walls;
use crate::clock::Clock;

/// What a body returns for one action: the outcome, and the bytes of every blob its effects
/// name, for the journal to keep.
#[derive(Clone, Debug, Default)]
pub struct Executed {
    /// What the agent sees and the journal records.
    pub outcome: Outcome,
    /// Contents named by the effects and inputs (new and previous file contents, what was
    /// read), each with its blake3 (hex), computed once where the bytes were.
    pub blobs: Vec<(String, Vec<u8>)>,
}

impl Executed {
    pub(crate) fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            blobs: Vec::new(),
        }
    }
}

/// The filesystem body actor. Stateless between messages apart from cached root handles, so a
/// restart loses nothing.
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
    /// Set to make the next message panic (fault injection for the supervision test).
    pub panic_next: Arc<AtomicBool>,
    /// AIDO_HOME (the copy backend's object store lives there).
    pub aido_home: PathBuf,
    /// The journal's blob store, where large previous contents are streamed.
    pub blobs: aido_journal::BlobStore,
    /// The journal's directory (its disk keeps `journal_free_bytes_min` free).
    pub journal_dir: PathBuf,
}

/// The body's state.
pub struct FsState {
    args: FsBodyArgs,
    walls: Walls,
    snapshots: super::snapshot::Snapshots,
}

/// Messages to the filesystem body.
pub enum FsMsg {
    /// Run one filesystem leaf.
    Run {
        /// The leaf.
        action: Box<Action>,
        /// The session it runs for.
        session: SessionContext,
        /// Cancelled when the agent cancels the call.
        cancel: CancellationToken,
        /// The answer.
        reply: RpcReplyPort<Result<Executed, Failure>>,
    },
    /// A snapshot operation on the workspace.
    Snapshot {
        /// What to do.
        op: super::snapshot::SnapshotOp,
        /// The session it runs for.
        session: SessionContext,
        /// The answer.
        reply: RpcReplyPort<Result<serde_json::Value, Failure>>,
    },
    /// Answer a condition.
    Evaluate {
        /// The condition.
        condition: Condition,
        /// The session it runs for.
        session: SessionContext,
        /// The answer, with what the condition's leaves saw (as inputs and blobs).
        reply: RpcReplyPort<Result<(bool, Executed), Failure>>,
    },
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
            args,
            walls,
            snapshots: super::snapshot::Snapshots::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: FsMsg,
        state: &mut FsState,
    ) -> Result<(), ActorProcessingErr> {
        if state.args.panic_next.swap(false, Ordering::SeqCst) {
            panic!("injected fault: the filesystem body panics on this message");
        }
        let never = CancellationToken::new();
        match msg {
            FsMsg::Run {
                action,
                session,
                cancel,
                reply,
            } => {
                let cx = ctx(state, &session, &cancel);
                let result = run(&cx, &action).map_err(Failure::from);
                let _ = reply.send(result);
            }
            FsMsg::Snapshot { op, session, reply } => {
                let FsState {
                    args,
                    walls,
                    snapshots,
                } = state;
                let _ = reply.send(snapshots.run(op, walls, &session, &args.aido_home));
            }
            FsMsg::Evaluate {
                condition,
                session,
                reply,
            } => {
                let cx = ctx(state, &session, &never);
                let mut seen = Executed::default();
                let answer = ops::evaluate(&cx, &condition, &mut seen).map(|holds| (holds, seen));
                let _ = reply.send(answer.map_err(Failure::from));
            }
        }
        Ok(())
    }
}

fn ctx<'a>(
    state: &'a FsState,
    session: &'a SessionContext,
    cancel: &'a CancellationToken,
) -> Ctx<'a> {
    Ctx {
        walls: &state.walls,
        keep: super::walls::Keep {
            store: &state.args.blobs,
            max: state.args.limits.blob_bytes_max,
            journal_dir: &state.args.journal_dir,
            free_min: state.args.limits.journal_free_bytes_min,
        },
        session,
        limits: &state.args.limits,
        cancel,
        clock: state.args.clock.as_ref(),
        trash: &state.args.trash,
    }
}

fn run(cx: &Ctx, action: &Action) -> Result<Executed, super::FsError> {
    match action {
        Action::ReadFile(a) => ops::read_file(cx, a),
        Action::ReadFiles(a) => ops::read_files(cx, a),
        Action::WriteFile(a) => ops::write_file(cx, a),
        Action::EditFile(a) => ops::edit_file(cx, a),
        Action::ApplyPatch(a) => ops::apply_patch(cx, a),
        Action::PatchSet(a) => ops::patch_set(cx, a),
        Action::StatFiles(a) => ops::stat_files(cx, a),
        Action::FileInfo(a) => ops::file_info(cx, a),
        Action::Checksum(a) => ops::checksum(cx, a),
        Action::MoveToTrash(a) => ops::move_to_trash(cx, a),
        Action::RestoreFromTrash(a) => ops::restore_from_trash(cx, a),
        Action::Validate(a) => ops::validate(cx, a),
        // The executor routes only filesystem actions here (Action::body); anything else is
        // answered with an error, which keeps the body total.
        _ => Err(super::FsError::WrongBody {
            primitive: action.primitive(),
        }),
    }
}

/// The home trash for a home directory.
pub fn home_trash(home: &std::path::Path) -> PathBuf {
    super::trash::home_trash(home)
}
