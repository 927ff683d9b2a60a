//! One function per filesystem primitive. Each reads what it needs from the world, records
//! what it read as [`Input`]s (contents go to the journal's blob store, named by hash), and
//! builds its result with the pure functions of [`super::render`], the same ones playback
//! calls with the recorded inputs.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use aido_actions::fs::{
    ApplyPatch, Checksum, EditFile, Encoding, FileInfo, HashAlgorithm, MoveToTrash, PatchSet,
    ReadFile, ReadFiles, RestoreFromTrash, StatFiles, WriteFile,
};
use aido_actions::safety::Validate;
use aido_actions::{AccessKind, Condition, Failure, Input, Meta};
use aido_policy::{Limits, SessionContext};
use tokio_util::sync::CancellationToken;

use super::error::FsError;
use super::render::{self, FileFacts, NewContents, Replaced, Seen};
use super::trash;
use super::walls::hook::{self, Op};
use super::walls::{self, Keep, Missing, Replace, Target, Walls};
use aido_call::clock::Clock;
use aido_walk::Executed;

/// Bytes read per step when streaming (hashing, counting lines).
const STREAM_CHUNK_BYTES: usize = 64 * 1024;

pub struct Ctx<'a> {
    pub walls: &'a Walls,
    /// How writes keep what they replace.
    pub keep: Keep<'a>,
    pub session: &'a SessionContext,
    pub limits: &'a Limits,
    pub cancel: &'a CancellationToken,
    pub clock: &'a dyn Clock,
    pub trash: &'a Path,
}

/// Record that the body read `bytes` from `path`: the input names them, the blob store keeps
/// them (once, however often they are read).
fn saw_file(exec: &mut Executed, path: &str, bytes: &[u8]) {
    let blob = render::blob_name(bytes);
    exec.outcome.inputs.push(Input::File {
        path: path.to_owned(),
        blob: blob.clone(),
    });
    exec.blobs.push((blob, bytes.to_vec()));
}

impl Ctx<'_> {
    pub(super) fn check(&self, path: &str, kind: AccessKind) -> Result<Target, FsError> {
        self.walls.check(path, kind, self.session)
    }

    /// Read a whole file (at most read_bytes_max) and record it.
    pub(super) fn read(&self, target: &Target, exec: &mut Executed) -> Result<Vec<u8>, FsError> {
        let bytes = self
            .walls
            .read_all(target, self.session, self.limits.read_bytes_max)?;
        saw_file(exec, &target.shown(), &bytes);
        Ok(bytes)
    }

    /// Metadata of a path, recorded.
    fn stat(&self, target: &Target, exec: &mut Executed) -> Result<Option<Meta>, FsError> {
        let meta = self.walls.metadata(target)?.map(|m| {
            let kind = if m.is_dir() {
                "dir"
            } else if m.is_file() {
                "file"
            } else {
                "other"
            };
            let modified_ms = m
                .modified()
                .ok()
                .and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as u64);
            let mode = cap_std::fs::PermissionsExt::mode(&m.permissions()) & 0o7777;
            Meta {
                kind: kind.into(),
                size: m.len(),
                mode: format!("{mode:o}"),
                modified_ms,
            }
        });
        exec.outcome.inputs.push(Input::Stat {
            path: target.shown(),
            meta: meta.clone(),
        });
        Ok(meta)
    }

    /// Stream a file into its facts. A file of at most read_bytes_max is recorded whole; a
    /// larger one only by its facts (the journal does not keep files of any size).
    fn facts(
        &self,
        target: &Target,
        sha256: bool,
        exec: &mut Executed,
    ) -> Result<FileFacts, FsError> {
        let shown = target.shown();
        let mut file = self.walls.open_read(target, self.session)?;
        let mut buf = vec![0u8; STREAM_CHUNK_BYTES];
        let mut facts = render::Facts::new(sha256);
        let mut kept: Option<Vec<u8>> = Some(Vec::new());
        loop {
            if self.cancel.is_cancelled() {
                return Err(FsError::Cancelled);
            }
            let n = file
                .read(&mut buf)
                .map_err(|e| FsError::io("read", &shown, e))?;
            if n == 0 {
                break;
            }
            facts.update(&buf[..n]);
            if let Some(k) = kept.as_mut() {
                if (k.len() + n) as u64 > self.limits.read_bytes_max {
                    kept = None;
                } else {
                    k.extend_from_slice(&buf[..n]);
                }
            }
        }
        let facts = facts.finish(&shown);
        match kept {
            Some(bytes) => saw_file(exec, &shown, &bytes),
            None => exec.outcome.inputs.push(Input::Streamed {
                path: shown,
                facts: serde_json::to_value(&facts).unwrap_or_default(),
            }),
        }
        Ok(facts)
    }

    /// Write, keep both contents for the journal, and record what the write replaced.
    pub(super) fn write(
        &self,
        target: &Target,
        bytes: &[u8],
        create_parents: bool,
        exec: &mut Executed,
    ) -> Result<Replaced, FsError> {
        self.write_timed(target, bytes, create_parents, None, exec)
    }

    /// [`Self::write`], the file given `mtime_ns` (nanoseconds since the epoch) when set.
    pub(super) fn write_timed(
        &self,
        target: &Target,
        bytes: &[u8],
        create_parents: bool,
        mtime_ns: Option<i64>,
        exec: &mut Executed,
    ) -> Result<Replaced, FsError> {
        let new = NewContents::new(bytes).with_mtime(mtime_ns);
        let written = self.walls.write_atomic(
            target,
            self.session,
            &new,
            create_parents,
            Some(&self.keep),
        )?;
        let before = written.before.map(|kept| {
            if let Some(b) = kept.bytes {
                exec.blobs.push((kept.hash.clone(), b));
            }
            kept.hash
        });
        let blob = new.blob().to_owned();
        exec.blobs.push((blob.clone(), bytes.to_vec()));
        let replaced = Replaced {
            mtime_ns: written.mtime_ns,
            before_mtime_ns: written.before_mtime_ns,
            blob,
            path: target.shown(),
            created: written.created,
            before,
            dirs: written
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
        };
        exec.outcome.inputs.push(replaced.input());
        Ok(replaced)
    }
}

/// The result built from what was recorded so far.
pub(super) fn finish(mut exec: Executed, outcome: aido_actions::Outcome) -> Executed {
    let inputs = std::mem::take(&mut exec.outcome.inputs);
    exec.outcome = outcome;
    exec.outcome.inputs = inputs;
    exec
}

pub fn read_file(cx: &Ctx, a: &ReadFile) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let shown = target.shown();
    let mut exec = Executed::default();
    if a.encoding == Encoding::Base64 || (a.offset.is_none() && a.limit.is_none()) {
        let bytes = cx.read(&target, &mut exec)?;
        let outcome = render::read_file(a, &shown, &bytes)?;
        return Ok(finish(exec, outcome));
    }
    // A window of lines: stream, so a window of a huge file costs only the window, and keep
    // only the window's lines for the journal.
    let file = cx.walls.open_read(&target, cx.session)?;
    let first = a.offset.unwrap_or(1).max(1);
    let limit = a.limit.unwrap_or(u64::MAX);
    let mut reader = BufReader::new(file);
    let (mut content, mut line, mut taken, mut truncated) = (Vec::new(), 0u64, 0u64, false);
    let mut buf = Vec::new();
    loop {
        if cx.cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| FsError::io("read", &shown, e))?;
        if n == 0 {
            break;
        }
        line += 1;
        if line < first {
            continue;
        }
        if taken == limit {
            truncated = true;
            break;
        }
        if buf.contains(&0) || std::str::from_utf8(&buf).is_err() {
            return Err(FsError::Binary { path: shown });
        }
        if (content.len() + buf.len()) as u64 > cx.limits.read_bytes_max {
            truncated = true;
            break;
        }
        content.extend_from_slice(&buf);
        taken += 1;
    }
    exec.outcome.inputs.push(Input::Lines {
        path: shown.clone(),
        blob: render::blob_name(&content),
        more: truncated,
    });
    let outcome = render::read_window(a, &shown, &content, truncated)?;
    exec.blobs.push((render::blob_name(&content), content));
    Ok(finish(exec, outcome))
}

pub fn read_files(cx: &Ctx, a: &ReadFiles) -> Result<Executed, FsError> {
    let mut exec = Executed::default();
    let mut entries = Vec::new();
    let mut budget = cx.limits.read_bytes_max;
    for path in &a.paths {
        if cx.cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        let one = cx.check(path, AccessKind::Read).and_then(|t| {
            let bytes = cx.walls.read_all(&t, cx.session, budget)?;
            Ok((t.shown(), bytes))
        });
        match one {
            Ok((shown, bytes)) => {
                saw_file(&mut exec, &shown, &bytes);
                // Only text counts against the budget (binary files are refused).
                if render::is_text(&bytes) {
                    budget -= bytes.len() as u64;
                }
                entries.push(Ok((shown, bytes)));
            }
            Err(e) => {
                let failure = Failure::from(e);
                exec.outcome.inputs.push(Input::Refused {
                    failure: failure.clone(),
                });
                entries.push(Err(failure));
            }
        }
    }
    let outcome = render::read_files(a, &entries);
    Ok(finish(exec, outcome))
}

pub fn write_file(cx: &Ctx, a: &WriteFile) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    let bytes = render::write_file_bytes(a)?;
    let mut exec = Executed::default();
    let replaced = cx.write_timed(&target, &bytes, a.create_parents, a.mtime_ns, &mut exec)?;
    Ok(finish(exec, render::write_file(&bytes, &replaced)))
}

/// Write a change worked out in memory (unless it is a dry run) and finish its result.
fn write_change(
    cx: &Ctx,
    target: &Target,
    change: render::Change,
    dry_run: bool,
    mut exec: Executed,
) -> Result<Executed, FsError> {
    let replaced = if dry_run {
        None
    } else {
        Some(cx.write(target, &change.new, false, &mut exec)?)
    };
    let outcome = change.done(replaced.as_ref());
    Ok(finish(exec, outcome))
}

pub fn edit_file(cx: &Ctx, a: &EditFile) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    if a.old_string.is_empty() {
        return Err(FsError::EditEmpty);
    }
    let mut exec = Executed::default();
    let old = cx.read(&target, &mut exec)?;
    let change = render::edit_file(a, &target.shown(), &old)?;
    write_change(cx, &target, change, a.dry_run, exec)
}

pub fn apply_patch(cx: &Ctx, a: &ApplyPatch) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    let mut exec = Executed::default();
    let old = cx.read(&target, &mut exec)?;
    let change = render::apply_patch(a, &target.shown(), &old)?;
    write_change(cx, &target, change, a.dry_run, exec)
}

pub fn patch_set(cx: &Ctx, a: &PatchSet) -> Result<Executed, FsError> {
    // Check and apply everything in memory first: nothing is written if any patch fails. Each
    // patch's file is read (and recorded) even when an earlier patch changed it, so playback
    // sees one read per patch.
    let mut exec = Executed::default();
    let mut targets = Vec::new();
    let mut reads = Vec::new();
    for p in &a.patches {
        let target = cx.check(&p.path, AccessKind::Write)?;
        let bytes = cx.read(&target, &mut exec)?;
        reads.push((target.shown(), bytes));
        targets.push(target);
    }
    let (writes, mut outcome) = render::patch_set(a, &reads)?;
    if !a.dry_run {
        let mut done: Vec<(&Target, &Vec<u8>)> = Vec::new();
        for (target, ((_, new), (_, old))) in targets.iter().zip(writes.iter().zip(reads.iter())) {
            match cx.write(target, new, false, &mut exec) {
                Ok(replaced) => outcome.effects.extend(replaced.effects()),
                Err(e) => {
                    // Put back what was written, newest first.
                    for (t, old) in done.iter().rev() {
                        let _ = cx.walls.write_atomic(
                            t,
                            cx.session,
                            &NewContents::new(old),
                            false,
                            None,
                        );
                    }
                    return Err(FsError::PatchSetRolledBack {
                        path: target.shown(),
                        reason: e.to_string(),
                    });
                }
            }
            done.push((target, old));
        }
    }
    Ok(finish(exec, outcome))
}

pub fn stat_files(cx: &Ctx, a: &StatFiles) -> Result<Executed, FsError> {
    let mut exec = Executed::default();
    let mut seen = Vec::new();
    for path in &a.paths {
        let target = cx.check(path, AccessKind::Read)?;
        let meta = cx.stat(&target, &mut exec)?;
        seen.push((target.shown(), meta));
    }
    Ok(finish(exec, render::stat_files(&seen)))
}

pub fn checksum(cx: &Ctx, a: &Checksum) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let mut exec = Executed::default();
    let facts = cx.facts(&target, a.algorithm == HashAlgorithm::Sha256, &mut exec)?;
    let outcome = render::checksum(&target.shown(), a.algorithm, &facts);
    Ok(finish(exec, outcome))
}

pub fn file_info(cx: &Ctx, a: &FileInfo) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let mut exec = Executed::default();
    let facts = cx.facts(&target, false, &mut exec)?;
    Ok(finish(exec, render::file_info(&target.shown(), &facts)))
}

pub fn move_to_trash(cx: &Ctx, a: &MoveToTrash) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Delete)?;
    let shown = target.shown();
    // The entry itself: a link goes as a link.
    if cx.walls.entry_metadata(&target)?.is_none() {
        return Err(FsError::NotFound { path: shown });
    }
    if cx.trash.starts_with(&target.resolved) {
        return Err(FsError::Trash {
            path: shown,
            reason: "the trash itself is inside it".into(),
        });
    }
    hook::call(Op::Trash, &target.resolved);
    // From here on, everything goes through handles: the directory the check named, opened
    // from the root without following links, and the entry in it, never its path again.
    let parent = cx
        .walls
        .parent(&target, Missing::Absent, &mut Vec::new())?
        .ok_or_else(|| FsError::NotFound {
            path: shown.clone(),
        })?;
    let held = match walls::open_dir(&parent.dir, &parent.name) {
        Ok(dir) => {
            refuse_denied_inside(cx, &dir, &target.resolved, 0, &mut 0)?;
            Some(rustix::fs::fstat(&dir).map_err(|e| FsError::io("stat", &shown, e.into()))?)
        }
        // A file, or a symlink (swapped in or not): the entry itself goes, never its target.
        Err(e) if walls::is_swapped(&e) => None,
        // A directory that cannot be looked into is not trashed unchecked.
        Err(e) => return Err(FsError::io("list", &shown, e)),
    };
    let trash = trash::Trash::open(cx.trash, true)?.ok_or_else(|| FsError::Trash {
        path: shown.clone(),
        reason: "the trash cannot be made".into(),
    })?;
    // The directory checked is the one that goes (not one put in its place meanwhile).
    if let Some(held) = held {
        let now = rustix::fs::statat(
            &parent.dir,
            parent.name.as_os_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| FsError::io("stat", &shown, e.into()))?;
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino) {
            return Err(FsError::ChangedDuringCheck {
                path: shown.clone(),
                now: "another entry".into(),
            });
        }
    }
    let now = cx.clock.now_ms();
    let slot = trash.reserve(&target.resolved, now)?;
    if let Err(e) = walls::move_entry(
        &parent.dir,
        &parent.name,
        trash.files(),
        std::ffi::OsStr::new(&slot.name),
        Replace::No,
        &target.resolved,
    ) {
        trash.forget(&slot);
        return Err(e);
    }
    let (item, info) = (
        slot.files.display().to_string(),
        slot.info.display().to_string(),
    );
    let mut exec = Executed::default();
    exec.outcome.inputs.push(Input::Clock { unix_ms: now });
    exec.outcome.inputs.push(Input::Trash {
        path: shown.clone(),
        item: item.clone(),
        info: Some(info.clone()),
    });
    Ok(finish(exec, render::move_to_trash(&shown, &item, &info)))
}

/// Most entries looked at when checking a directory before it is trashed.
const TRASH_WALK_ENTRIES_MAX: usize = 200_000;

/// A directory holding a denied path (a `.ssh`, a `.env`) cannot be trashed as a whole. The
/// walk goes through handles: `dir` is the directory held open, each subdirectory is opened
/// from it without following links, and at most [`walls::TREE_DEPTH_MAX`] are held at once.
/// `path` is where `dir` is (the names the deny globs judge); `seen` counts entries.
fn refuse_denied_inside(
    cx: &Ctx,
    dir: &cap_std::fs::Dir,
    path: &Path,
    depth: usize,
    seen: &mut usize,
) -> Result<(), FsError> {
    let shown = path.display().to_string();
    if depth >= walls::TREE_DEPTH_MAX {
        return Err(FsError::TreeTooLarge {
            path: shown,
            what: "directories deep",
            max: walls::TREE_DEPTH_MAX,
        });
    }
    // Names first, so one listing is open at a time.
    let mut names = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| FsError::io("list", &shown, e))?
        .flatten()
    {
        *seen += 1;
        if *seen > TRASH_WALK_ENTRIES_MAX {
            return Err(FsError::Trash {
                path: shown,
                reason: format!("more than {TRASH_WALK_ENTRIES_MAX} entries to check"),
            });
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        names.push((entry.file_name(), is_dir));
    }
    for (name, is_dir) in names {
        let inner = path.join(&name);
        if let Some(pattern) = cx.walls.policy.denied_by_pattern(&inner) {
            return Err(FsError::Denied {
                gate: aido_actions::verdict::Gate::DenyPatterns,
                code: "path_denied_by_pattern",
                reason: format!(
                    "{} holds {} which matches the deny pattern {pattern}",
                    top(path, depth).display(),
                    inner.display()
                ),
            });
        }
        if is_dir {
            let sub = walls::open_dir(dir, &name).map_err(|e| FsError::ChangedDuringCheck {
                path: inner.display().to_string(),
                now: format!("not a directory any more ({e})"),
            })?;
            refuse_denied_inside(cx, &sub, &inner, depth + 1, seen)?;
        }
    }
    Ok(())
}

/// The directory `depth` levels above `path` (the one being trashed, for messages).
fn top(path: &Path, depth: usize) -> &Path {
    path.ancestors().nth(depth).unwrap_or(path)
}

pub fn restore_from_trash(cx: &Ctx, a: &RestoreFromTrash) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    let shown = target.shown();
    if cx.walls.metadata(&target)?.is_some() || target.resolved.symlink_metadata().is_ok() {
        return Err(FsError::RestoreTargetExists { path: shown });
    }
    let not_in_trash = || FsError::NotInTrash {
        path: shown.clone(),
    };
    let trash = trash::Trash::open(cx.trash, false)?.ok_or_else(not_in_trash)?;
    let slot = trash.find(&target.resolved)?.ok_or_else(not_in_trash)?;
    hook::call(Op::Restore, &target.resolved);
    // Missing directories above it are made one by one from the root's handle, and the item
    // goes into the one the check named, by handle.
    let mut made = Vec::new();
    let moved = cx
        .walls
        .parent(&target, Missing::Create, &mut made)
        .and_then(|parent| {
            let parent = parent.ok_or_else(|| FsError::NotFound {
                path: shown.clone(),
            })?;
            walls::move_entry(
                trash.files(),
                std::ffi::OsStr::new(&slot.name),
                &parent.dir,
                &parent.name,
                Replace::No,
                &target.resolved,
            )
        });
    match moved {
        Ok(()) => {}
        Err(e) => {
            // Directories made for a restore that did not happen are not left behind.
            if let Ok(root) = cx.walls.root_dir(&target.root) {
                for dir in made.iter().rev() {
                    if let Ok(rel) = dir.strip_prefix(&target.root) {
                        let _ = root.remove_dir(rel);
                    }
                }
            }
            return Err(match e {
                FsError::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::AlreadyExists =>
                {
                    FsError::RestoreTargetExists { path: shown }
                }
                e => e,
            });
        }
    }
    trash.forget(&slot);
    let from = slot.files.display().to_string();
    let mut exec = Executed::default();
    exec.outcome.inputs.push(Input::Trash {
        path: shown.clone(),
        item: from.clone(),
        info: None,
    });
    Ok(finish(exec, render::restore_from_trash(&shown, &from)))
}

pub fn validate(cx: &Ctx, a: &Validate) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let mut exec = Executed::default();
    let bytes = cx.read(&target, &mut exec)?;
    let outcome = render::validate(a, &target.shown(), &bytes)?;
    Ok(finish(exec, outcome))
}

/// Answer a condition; every path in it is checked as a read, and what each leaf saw is
/// recorded in `exec`.
pub fn evaluate(cx: &Ctx, c: &Condition, exec: &mut Executed) -> Result<bool, FsError> {
    render::evaluate(c, 0, &mut |leaf| {
        let seen = match leaf {
            Condition::FileExists { path } => {
                let target = cx.check(path, AccessKind::Read)?;
                Seen::Exists(cx.stat(&target, exec)?.is_some())
            }
            Condition::FileContains { path, .. } => {
                let target = cx.check(path, AccessKind::Read)?;
                Seen::Bytes(target.shown(), cx.read(&target, exec)?)
            }
            Condition::ChecksumEquals {
                path, algorithm, ..
            } => {
                let target = cx.check(path, AccessKind::Read)?;
                Seen::Facts(cx.facts(&target, *algorithm == HashAlgorithm::Sha256, exec)?)
            }
            _ => Seen::Exists(false),
        };
        render::leaf_holds(leaf, &seen)
    })
}
