use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aido_actions::{Condition, Failure, FsAction};
use aido_call::{Body, Calls, Reply, Turn};
use aido_policy::{Limits, PolicyEngine, SessionContext};
use tokio_util::sync::CancellationToken;

use aido_walk::Executed;

use super::ops::{self, Ctx};
use super::walls::Walls;
use aido_call::clock::Clock;
use aido_call::faults::Faults;
use aido_walk::error::RuntimeError;

/// The filesystem body. Stateless between messages apart from cached root handles and the
/// snapshot store, so a restart loses nothing.
///
/// Its work is blocking file I/O, so it never runs on the async workers: each call goes to
/// the blocking pool through [`Calls::blocking`] after its turn at the body's gate (shared for
/// actions and conditions, exclusive for snapshot operations, which must see and leave the
/// workspace whole); a call whose deadline passed while it waited never runs. One slow
/// snapshot therefore holds back other calls on this workspace, never the runtime's workers or
/// other sessions' non-filesystem work.
pub struct FsBody {
    core: Arc<Core>,
}

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
pub struct Core {
    args: FsBodyArgs,
    walls: Walls,
    snapshots: Mutex<super::snapshot::Snapshots>,
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
        /// The answer.
        reply: Reply<Executed>,
    },
    /// A snapshot operation on the workspace.
    Snapshot {
        /// What to do.
        op: super::snapshot::SnapshotOp,
        /// The session it runs for.
        session: SessionContext,
        /// The answer.
        reply: Reply<serde_json::Value>,
    },
    /// Answer a condition.
    Evaluate {
        /// The condition.
        condition: Condition,
        /// The session it runs for.
        session: SessionContext,
        /// The answer, with what the condition's leaves saw (as inputs and blobs).
        reply: Reply<(bool, Executed)>,
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
        /// The resolved path, the bytes, and whether the file holds more before them.
        reply: Reply<super::tools::Tail>,
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
        /// The staged change set.
        reply: Reply<super::changeset::Staged>,
    },
    /// Apply a staged change set (all or nothing); the caller has written its recovery
    /// marker.
    Commit {
        /// What [`FsMsg::Stage`] answered.
        staged: Box<super::changeset::Staged>,
        /// The session it runs for.
        session: SessionContext,
        /// What was applied, as a result shows it, and the staged set back.
        reply: Reply<(super::changeset::Applied, Box<super::changeset::Staged>)>,
    },
}

impl Body for FsBody {
    const NAME: &'static str = "filesystem";
    type Args = FsBodyArgs;
    type Msg = FsMsg;

    async fn build(args: FsBodyArgs) -> Result<Self, String> {
        let walls = Walls::new(args.policy.clone());
        Ok(FsBody {
            core: Arc::new(Core {
                args,
                walls,
                snapshots: Mutex::new(super::snapshot::Snapshots::default()),
            }),
        })
    }

    /// Every call runs on the blocking pool: actions and conditions beside each other,
    /// snapshot operations alone (they must see and leave the workspace whole).
    #[allow(clippy::too_many_lines)]
    async fn handle(&mut self, msg: FsMsg, calls: &Calls) {
        let core = self.core.clone();
        match msg {
            FsMsg::Run {
                action,
                session,
                cancel,
                intents,
                reply,
            } => {
                let commits = action.class().mutates();
                calls.blocking(reply, Turn::Shared, commits, move |_| {
                    let mut cx = ctx(&core, &session, &cancel);
                    cx.keep.intents = intents.as_ref();
                    let result = run(&cx, &action).map_err(Failure::from);
                    if let Some(delay) = core.args.faults.after_work() {
                        std::thread::sleep(delay);
                    }
                    result
                });
            }
            FsMsg::Snapshot { op, session, reply } => {
                let reads = matches!(op, super::snapshot::SnapshotOp::List);
                let turn = if reads { Turn::Shared } else { Turn::Exclusive };
                calls.blocking(reply, turn, !reads, move |_| {
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
                reply,
            } => {
                calls.blocking(reply, Turn::Shared, false, move |_| {
                    let never = CancellationToken::new();
                    let cx = ctx(&core, &session, &never);
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
                reply,
            } => {
                calls.blocking(reply, Turn::Shared, false, move |_| {
                    super::tools::tail(&core.walls, &session, &path, window).map_err(Failure::from)
                });
            }
            FsMsg::Stage {
                changes,
                file_bytes_max,
                session,
                reply,
            } => {
                calls.blocking(reply, Turn::Shared, true, move |_| {
                    super::changeset::stage(
                        &change_cx(&core, &session, true),
                        changes,
                        file_bytes_max,
                    )
                    .map_err(Failure::from)
                });
            }
            FsMsg::Commit {
                staged,
                session,
                reply,
            } => {
                calls.blocking(reply, Turn::Shared, true, move |_| {
                    super::changeset::apply(&change_cx(&core, &session, false), &staged)
                        .map(|applied| (applied, staged))
                        .map_err(Failure::from)
                });
            }
        }
    }
}

/// A change set's context; `staging` keeps `journal_free_bytes_min` free on the journal's disk.
fn change_cx<'a>(
    core: &'a Core,
    session: &'a SessionContext,
    staging: bool,
) -> super::changeset::Cx<'a> {
    super::changeset::Cx {
        walls: &core.walls,
        session,
        store: &core.args.blobs,
        space: staging.then_some((
            core.args.journal_dir.as_path(),
            core.args.limits.journal_free_bytes_min,
        )),
        faults: Some(&core.args.faults),
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
