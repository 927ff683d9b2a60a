//! The workspace's snapshots, restores and the replay or undo of journaled changes, as the
//! filesystem body runs them.

use std::collections::HashMap;
use std::path::Path;

use aido_actions::{AccessKind, Failure};
use aido_policy::SessionContext;
use aido_snapshots::{Backend, SnapshotError, Store};
use serde_json::{Value, json};

use aido_walk::Step;
use aido_walk::snapshot as answer;

use super::error::FsError;
use super::walls::hook::{self, Op};
use super::walls::{self, Missing, Replace, Walls};
use aido_walk::fs::render::NewContents;

/// A snapshot operation for the body.
pub enum SnapshotOp {
    /// Take a snapshot.
    Create {
        /// Its id.
        id: String,
        /// The clock's time.
        created_ms: u64,
    },
    /// Restore one.
    Restore {
        /// Its id.
        id: String,
    },
    /// List them.
    List,
    /// Delete one.
    Delete {
        /// Its id.
        id: String,
    },
    /// Run rewind steps in order.
    Apply {
        /// The steps.
        steps: Vec<Step>,
        /// Blob bytes by hash.
        blobs: HashMap<String, Vec<u8>>,
    },
}

fn failure(e: SnapshotError) -> Failure {
    Failure::from(e)
}

fn backend(name: &str) -> Option<Backend> {
    match name {
        "btrfs_subvolume" => Some(Backend::BtrfsSubvolume),
        "reflink" => Some(Backend::Reflink),
        "copy" => Some(Backend::Copy),
        _ => None,
    }
}

/// The body's snapshot side: the store is opened on first use (probing the backend writes a
/// file beside the workspace, which a session that never snapshots should not pay for).
#[derive(Default)]
pub struct Snapshots {
    store: Option<Store>,
}

impl Snapshots {
    fn store(&mut self, walls: &Walls, aido_home: &Path) -> Result<&Store, Failure> {
        if self.store.is_none() {
            let policy = &walls.policy;
            let workspace = policy.workspace();
            let wanted = backend(&policy.config().snapshots.backend);
            let store = Store::open_with(&workspace, aido_home, wanted).map_err(failure)?;
            tracing::info!(workspace = %workspace.display(), backend = %store.backend(), why = store.why(), "snapshot store open");
            self.store = Some(store);
        }
        self.store.as_ref().ok_or_else(|| {
            Failure::from(aido_walk::error::RuntimeError::Internal {
                why: "the snapshot store did not open".into(),
            })
        })
    }

    pub fn run(
        &mut self,
        op: SnapshotOp,
        walls: &Walls,
        session: &SessionContext,
        aido_home: &Path,
        store: &aido_journal::BlobStore,
    ) -> Result<Value, Failure> {
        match op {
            SnapshotOp::Create { id, created_ms } => {
                let store = self.store(walls, aido_home)?;
                let s = store.create(&id, created_ms).map_err(failure)?;
                Ok(answer::to_value(&answer::Taken {
                    snapshot: s.id,
                    backend: s.backend.name().to_owned(),
                    files: s.files,
                    bytes: s.bytes,
                    workspace: store.workspace().display().to_string(),
                    why: store.why().to_owned(),
                }))
            }
            SnapshotOp::Restore { id } => {
                let stats = self
                    .store(walls, aido_home)?
                    .restore(&id)
                    .map_err(failure)?;
                // A btrfs restore swaps the workspace directory itself: old handles are stale.
                walls.forget_dirs();
                Ok(answer::to_value(&answer::Restored {
                    snapshot: id,
                    stats: json!(stats),
                }))
            }
            SnapshotOp::List => {
                let list = self.store(walls, aido_home)?.list().map_err(failure)?;
                let listed: Vec<answer::Listed> = list
                    .into_iter()
                    .map(|s| answer::Listed {
                        id: s.id,
                        backend: s.backend.name().to_owned(),
                        created_ms: s.created_ms,
                        files: s.files,
                        bytes: s.bytes,
                    })
                    .collect();
                Ok(answer::to_value(&listed))
            }
            SnapshotOp::Delete { id } => {
                self.store(walls, aido_home)?.delete(&id).map_err(failure)?;
                Ok(answer::to_value(&answer::Deleted { deleted: id }))
            }
            SnapshotOp::Apply { steps, blobs } => {
                let total = steps.len();
                for step in steps {
                    self.step(step, &blobs, walls, session, aido_home, store)?;
                }
                Ok(answer::to_value(&answer::Applied { applied: total }))
            }
        }
    }

    #[allow(clippy::too_many_lines)]
    fn step(
        &mut self,
        step: Step,
        blobs: &HashMap<String, Vec<u8>>,
        walls: &Walls,
        session: &SessionContext,
        aido_home: &Path,
        store: &aido_journal::BlobStore,
    ) -> Result<(), Failure> {
        // Every path is judged again: a rewind under a stricter policy must not write outside
        // today's walls.
        let check = |path: &str, kind| walls.check(path, kind, session).map_err(Failure::from);
        let io = |op, path: &str, e| Failure::from(FsError::io(op, path, e));
        match step {
            Step::Restore { snapshot } => {
                self.run(
                    SnapshotOp::Restore { id: snapshot },
                    walls,
                    session,
                    aido_home,
                    store,
                )?;
            }
            Step::Write {
                path,
                blob,
                mtime_ns,
            } => {
                let target = check(&path, AccessKind::Write)?;
                hook::call(Op::Write, &target.resolved);
                let bytes = blobs.get(&blob).ok_or_else(|| {
                    Failure::from(aido_walk::error::RuntimeError::BlobMissing {
                        blob: blob.clone(),
                    })
                })?;
                walls
                    .write_atomic(&target, session, &NewContents::new(bytes), true, None)
                    .map_err(Failure::from)?;
                if let Some(mtime_ns) = mtime_ns {
                    walls.set_mtime(&target, mtime_ns).map_err(Failure::from)?;
                }
            }
            Step::Remove { path } => {
                let target = check(&path, AccessKind::Delete)?;
                hook::call(Op::Remove, &target.resolved);
                walls.remove(&target).map_err(Failure::from)?;
            }
            Step::Move { from, to } => {
                let source = check(&from, AccessKind::Delete)?;
                let target = check(&to, AccessKind::Write)?;
                hook::call(Op::Move, &source.resolved);
                hook::call(Op::Move, &target.resolved);
                let mut made = Vec::new();
                // Nothing at the source (or a directory above it missing): nothing to move.
                let Some(from_dir) = walls
                    .parent(&source, Missing::Absent, &mut made)
                    .map_err(Failure::from)?
                else {
                    return Ok(());
                };
                match rustix::fs::statat(
                    &from_dir.dir,
                    from_dir.name.as_os_str(),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                ) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::NOENT) => return Ok(()),
                    Err(e) => return Err(io("stat", &from, e.into())),
                }
                let to_dir = walls
                    .parent(&target, Missing::Create, &mut made)
                    .map_err(Failure::from)?
                    .ok_or_else(|| Failure::from(FsError::NotFound { path: to.clone() }))?;
                walls::move_entry(
                    &from_dir.dir,
                    &from_dir.name,
                    &to_dir.dir,
                    &to_dir.name,
                    Replace::Yes,
                    &source.resolved,
                )
                .map_err(Failure::from)?;
            }
            Step::Mkdir { path } => {
                let target = check(&path, AccessKind::Write)?;
                hook::call(Op::Mkdir, &target.resolved);
                walls.make_dirs(&target).map_err(Failure::from)?;
            }
            Step::Link {
                path,
                target: points_to,
            } => {
                // The entry itself: a link there is replaced, never followed.
                let target = check(&path, AccessKind::Delete)?;
                hook::call(Op::Write, &target.resolved);
                walls
                    .make_link(&target, &points_to)
                    .map_err(Failure::from)?;
            }
            Step::Chmod { path, mode } => {
                let target = check(&path, AccessKind::Write)?;
                hook::call(Op::Write, &target.resolved);
                walls
                    .set_mode(&target, session, mode)
                    .map_err(Failure::from)?;
            }
            Step::Changes {
                parts,
                forward,
                checked,
            } => {
                let cx = super::changeset::Cx {
                    walls,
                    session,
                    store,
                    space: None,
                    faults: None,
                };
                super::changeset::run_parts(&cx, &parts, forward, checked)
                    .map_err(Failure::from)?;
            }
            Step::RemoveDir { path } => {
                let target = check(&path, AccessKind::Delete)?;
                let dir = walls.root_dir(&target.root).map_err(Failure::from)?;
                match dir.remove_dir(&target.rel) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    // Not empty (or not a directory any more): something the journal does not
                    // know of is in it, and it stays.
                    Err(e)
                        if e.kind() == std::io::ErrorKind::DirectoryNotEmpty
                            || e.raw_os_error() == Some(20) =>
                    {
                        tracing::warn!(
                            path,
                            "a directory a rewind would remove holds files the journal does not know of; kept"
                        );
                    }
                    Err(e) => return Err(io("remove directory", &path, e)),
                }
            }
        }
        Ok(())
    }
}
