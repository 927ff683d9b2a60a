//! A command's file changes, taken over as ordinary effects. The process body runs a command
//! over a copy-on-write layer of the write roots and reads back what it changed; the changes
//! come here and are made the way every filesystem primitive makes its changes: each path
//! checked by the walls again, written atomically through the root's handle with what it
//! replaced kept for the journal (`FileWritten`, `FileRemoved` with before-images,
//! `DirCreated`). So a rewind undoes a command exactly as it undoes `write_file`.
//!
//! All or nothing: a step that fails puts back what the earlier steps changed, newest first,
//! and the call fails with nothing applied.

use std::path::PathBuf;

use aido_actions::{AccessKind, Before, Effect};
use serde_json::{Value, json};

use super::error::FsError;
use super::ops::Ctx;
use super::render::{self, NewContents};
use super::walls::Target;
use aido_walk::Executed;

/// One change a command made, as the process body read it from its layer.
#[derive(Clone, Debug)]
pub enum CommandChange {
    /// A regular file was created, or its contents or mode changed.
    File {
        /// The host path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Where its new contents are (in the layer, aido's own directory).
        contents: PathBuf,
    },
    /// A directory was created, or an existing one's permission bits changed.
    Dir {
        /// The host path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A file was removed.
    Removed {
        /// The host path.
        path: PathBuf,
    },
    /// A directory was removed, after everything in it (listed before it).
    RemovedDir {
        /// The host path.
        path: PathBuf,
    },
    /// A symbolic link was made (whatever was at its path was removed first, its own change).
    Link {
        /// The host path of the link.
        path: PathBuf,
        /// What it points at, as written in it.
        target: String,
    },
}

/// What a step changed, to put it back if a later step fails.
enum Undo {
    /// A file was written: the blob the write kept of what it replaced, or `None` if it
    /// was created.
    Written(Target, Option<String>),
    /// A directory was made.
    Dir(Target),
    /// A file was removed: its bytes and bits.
    Removed(Target, Vec<u8>, Option<u32>),
    /// A directory was removed, with its bits.
    DirRemoved(Target, Option<u32>),
    /// The bits of a file or directory were set: the ones it had.
    Mode(Target, u32),
    /// A symbolic link was removed: what it pointed at.
    LinkRemoved(Target, String),
    /// A symbolic link was made.
    LinkCreated(Target),
}

/// Apply `changes` in order. The result's output lists what was applied; its effects and
/// blobs are the journal's.
pub(crate) fn apply(cx: &Ctx, changes: &[CommandChange]) -> Result<Executed, FsError> {
    let mut exec = Executed::default();
    let mut undo: Vec<Undo> = Vec::new();
    let mut applied: Vec<Value> = Vec::new();
    for change in changes {
        match step(cx, change, &mut exec, &mut undo) {
            Ok(shown) => applied.push(shown),
            Err(e) => {
                put_back(cx, undo, &exec.blobs);
                return Err(FsError::CommandChangesRolledBack {
                    path: path_of(change).display().to_string(),
                    reason: e.to_string(),
                });
            }
        }
    }
    exec.outcome.output = json!({ "applied": applied });
    Ok(exec)
}

fn path_of(change: &CommandChange) -> &PathBuf {
    match change {
        CommandChange::File { path, .. }
        | CommandChange::Dir { path, .. }
        | CommandChange::Removed { path }
        | CommandChange::RemovedDir { path }
        | CommandChange::Link { path, .. } => path,
    }
}

fn step(
    cx: &Ctx,
    change: &CommandChange,
    exec: &mut Executed,
    undo: &mut Vec<Undo>,
) -> Result<Value, FsError> {
    match change {
        CommandChange::File {
            path,
            mode,
            contents,
        } => {
            let shown = path.display().to_string();
            let target = cx.check(&shown, AccessKind::Write)?;
            let bytes = read_layer(contents, &shown, cx.limits.blob_bytes_max)?;
            // The write keeps what it replaces (for the journal): a failed apply puts that back.
            let replaced = cx.write(&target, &bytes, true, exec)?;
            undo.push(Undo::Written(target.clone(), replaced.before.clone()));
            exec.outcome.effects.extend(replaced.effects());
            // The bits the command gave it: a replaced file kept its own through the write, a
            // new one got a new file's; a difference is an effect of its own.
            let moded = mode_to(cx, &target, *mode, exec, undo)?;
            Ok(json!({
                "change": if replaced.created { "file_created" } else { "file_changed" },
                "path": shown,
                "bytes": bytes.len(),
                "mode": format!("{:04o}", mode & 0o7777),
                "mode_changed": moded,
            }))
        }
        CommandChange::Dir { path, mode } => {
            let shown = path.display().to_string();
            let target = cx.check(&shown, AccessKind::Write)?;
            if cx.walls.metadata(&target)?.is_some_and(|m| m.is_dir()) {
                // It was there: only its bits can have changed.
                let before = mode_to(cx, &target, *mode, exec, undo)?;
                return Ok(match before {
                    Some(before) => json!({
                        "change": "mode_changed", "path": shown,
                        "mode": format!("{:04o}", mode & 0o7777), "before": before,
                    }),
                    None => json!({"change": "dir_exists", "path": shown}),
                });
            }
            cx.walls.make_dirs(&target)?;
            undo.push(Undo::Dir(target.clone()));
            exec.outcome.effects.push(Effect::DirCreated {
                path: shown.clone(),
            });
            mode_to(cx, &target, *mode, exec, undo)?;
            Ok(
                json!({"change": "dir_created", "path": shown, "mode": format!("{:04o}", mode & 0o7777)}),
            )
        }
        CommandChange::Removed { path } => {
            let shown = path.display().to_string();
            let target = cx.check(&shown, AccessKind::Delete)?;
            // A link goes as a link (what it pointed at is kept), never read through.
            if let Some(points_to) = cx.walls.link_target(&target)? {
                cx.walls.remove(&target)?;
                undo.push(Undo::LinkRemoved(target, points_to.clone()));
                exec.outcome.effects.push(Effect::LinkRemoved {
                    path: shown.clone(),
                    target: points_to.clone(),
                });
                return Ok(json!({"change": "link_removed", "path": shown, "target": points_to}));
            }
            let bytes = cx
                .walls
                .read_all(&target, cx.session, cx.limits.blob_bytes_max)?;
            let mode = mode_of(cx, &target)?;
            let blob = render::blob_name(&bytes);
            cx.walls.remove(&target)?;
            exec.blobs.push((blob.clone(), bytes.clone()));
            undo.push(Undo::Removed(target, bytes, mode));
            exec.outcome.effects.push(Effect::FileRemoved {
                path: shown.clone(),
                before: Before::Kept(blob),
                mode,
            });
            Ok(json!({"change": "removed", "path": shown}))
        }
        CommandChange::RemovedDir { path } => {
            let shown = path.display().to_string();
            let target = cx.check(&shown, AccessKind::Delete)?;
            let mode = mode_of(cx, &target)?;
            let dir = cx.walls.root_dir(&target.root)?;
            // Empty by now (its entries came first); anything else in it makes this fail.
            dir.remove_dir(&target.rel)
                .map_err(|e| FsError::io("rmdir", &shown, e))?;
            undo.push(Undo::DirRemoved(target, mode));
            exec.outcome.effects.push(Effect::DirRemoved {
                path: shown.clone(),
                mode,
            });
            Ok(json!({"change": "dir_removed", "path": shown}))
        }
        CommandChange::Link {
            path,
            target: points_to,
        } => {
            let shown = path.display().to_string();
            let target = cx.check(&shown, AccessKind::Write)?;
            // Nothing is there by now (a replaced entry's removal came first): a link that is
            // already there is replaced, anything else refuses the step.
            cx.walls.make_link(&target, points_to)?;
            undo.push(Undo::LinkCreated(target));
            exec.outcome.effects.push(Effect::LinkCreated {
                path: shown.clone(),
                target: points_to.clone(),
            });
            Ok(json!({"change": "link_created", "path": shown, "target": points_to}))
        }
    }
}

/// The permission bits of what is at `target`, if anything.
fn mode_of(cx: &Ctx, target: &Target) -> Result<Option<u32>, FsError> {
    use cap_std::fs::PermissionsExt;
    Ok(cx
        .walls
        .metadata(target)?
        .map(|m| m.permissions().mode() & 0o7777))
}

/// Give what is at `target` the bits `mode`; when they differ from the ones it had, that is a
/// `ModeChanged` effect (and an undo). The old bits, formatted, when they changed.
fn mode_to(
    cx: &Ctx,
    target: &Target,
    mode: u32,
    exec: &mut Executed,
    undo: &mut Vec<Undo>,
) -> Result<Option<String>, FsError> {
    let mode = mode & 0o7777;
    let before = cx.walls.set_mode(target, cx.session, mode)?;
    match before {
        Some(before) if before != mode => {
            undo.push(Undo::Mode(target.clone(), before));
            exec.outcome.effects.push(Effect::ModeChanged {
                path: target.shown(),
                mode,
                before,
            });
            Ok(Some(format!("{before:04o}")))
        }
        _ => Ok(None),
    }
}

/// A file of the layer: aido's own directory, never the agent's, read up to `max` bytes.
fn read_layer(contents: &std::path::Path, shown: &str, max: u64) -> Result<Vec<u8>, FsError> {
    let size = std::fs::symlink_metadata(contents)
        .map_err(|e| FsError::io("stat", shown, e))?
        .len();
    if size > max {
        return Err(FsError::TooLarge {
            path: shown.to_owned(),
            bytes: size,
            max,
        });
    }
    std::fs::read(contents).map_err(|e| FsError::io("read", shown, e))
}

/// Put back what the applied steps changed, newest first (best effort: the call fails anyway).
/// A replaced file's bytes are the blob its write kept: in `blobs` (small ones travel with the
/// record) or already in the journal's blob store (large ones are streamed there).
fn put_back(cx: &Ctx, undo: Vec<Undo>, blobs: &[(String, Vec<u8>)]) {
    let kept = |hash: &str| -> Result<Vec<u8>, FsError> {
        if let Some((_, bytes)) = blobs.iter().find(|(h, _)| h == hash) {
            return Ok(bytes.clone());
        }
        cx.keep
            .store
            .get(hash)
            .ok()
            .flatten()
            .ok_or_else(|| FsError::io("read", hash, std::io::Error::other("blob not kept")))
    };
    let rewrite = |target: &Target, old: &[u8]| {
        cx.walls
            .write_atomic(target, cx.session, &NewContents::new(old), true, None)
            .map(|_| ())
    };
    let chmod = |target: &Target, mode: Option<u32>| match mode {
        Some(mode) => cx.walls.set_mode(target, cx.session, mode).map(drop),
        None => Ok(()),
    };
    for step in undo.into_iter().rev() {
        let result = match &step {
            Undo::Written(target, Some(hash)) => kept(hash).and_then(|old| rewrite(target, &old)),
            Undo::Removed(target, old, mode) => {
                rewrite(target, old).and_then(|()| chmod(target, *mode))
            }
            Undo::Written(target, None) => cx.walls.remove(target),
            Undo::DirRemoved(target, mode) => cx
                .walls
                .make_dirs(target)
                .and_then(|()| chmod(target, *mode)),
            Undo::Mode(target, mode) => chmod(target, Some(*mode)),
            Undo::LinkRemoved(target, points_to) => cx.walls.make_link(target, points_to),
            Undo::LinkCreated(target) => cx.walls.remove(target),
            Undo::Dir(target) => cx.walls.root_dir(&target.root).and_then(|dir| {
                dir.remove_dir(&target.rel)
                    .map_err(|e| FsError::io("rmdir", &target.shown(), e))
            }),
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "cannot put back a command's change after a failed apply");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use aido_policy::{Environment, FsResolver, Layered, PolicyEngine, SessionContext, Source};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::fs::walls::{Keep, Walls};

    /// A step that fails puts back every earlier one, newest first: a replaced file gets its
    /// old bytes back, a created one and a created directory go, a removed one returns.
    #[test]
    fn a_failing_step_puts_back_every_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (home, layer) = (base.join("home"), base.join("layer"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&layer).unwrap();
        std::fs::write(home.join("kept.txt"), "old\n").unwrap();
        std::fs::write(home.join("gone.txt"), "bye\n").unwrap();
        std::fs::write(layer.join("kept.txt"), "new\n").unwrap();
        std::fs::write(layer.join("made.txt"), "made\n").unwrap();
        let text = format!("workdir = \"{}\"\n", home.display());
        let config = Layered::from_layers(&[(Source::File("test".into()), &text)])
            .unwrap()
            .config;
        let env = Environment {
            home: home.clone(),
            aido_home: base.join("aido"),
        };
        let policy = Arc::new(PolicyEngine::new(&config, &env, &FsResolver).unwrap());
        let journal = aido_journal::Journal::open(
            &base.join("aido/journal"),
            aido_journal::Limits::default(),
            aido_journal::CommitMode::Group,
        )
        .unwrap();
        let store = journal.blob_store();
        let walls = Walls::new(policy);
        let session = SessionContext::new(home.clone());
        let cancel = CancellationToken::new();
        let clock = crate::clock::FixedClock::default();
        let cx = Ctx {
            walls: &walls,
            keep: Keep {
                store: &store,
                max: config.limits.blob_bytes_max,
                journal_dir: journal.path(),
                free_min: 0,
                intents: None,
            },
            session: &session,
            limits: &config.limits,
            cancel: &cancel,
            clock: &clock,
            trash: &base.join("trash"),
        };
        let file = |name: &str, contents: &str| CommandChange::File {
            path: home.join(name),
            mode: 0o644,
            contents: layer.join(contents),
        };
        let changes = [
            file("kept.txt", "kept.txt"),
            CommandChange::Dir {
                path: home.join("d"),
                mode: 0o755,
            },
            file("d/made.txt", "made.txt"),
            CommandChange::Removed {
                path: home.join("gone.txt"),
            },
            // Its contents are not in the layer: this step fails.
            file("broken.txt", "missing"),
        ];
        let error = apply(&cx, &changes).unwrap_err();
        assert_eq!(error.code(), "command_changes_rolled_back", "{error}");
        assert_eq!(
            std::fs::read_to_string(home.join("kept.txt")).unwrap(),
            "old\n"
        );
        assert_eq!(
            std::fs::read_to_string(home.join("gone.txt")).unwrap(),
            "bye\n"
        );
        assert!(!home.join("d").exists(), "the made directory and file go");
        assert!(!home.join("broken.txt").exists());
        // Without the failing step every change is applied, each an effect.
        let done = apply(&cx, &changes[..4]).unwrap();
        assert_eq!(
            std::fs::read_to_string(home.join("kept.txt")).unwrap(),
            "new\n"
        );
        assert!(!home.join("gone.txt").exists());
        assert_eq!(done.outcome.effects.len(), 4, "{:?}", done.outcome.effects);
    }
}
