//! One function per filesystem primitive. Each returns the outcome (output, effects) and the
//! blobs the journal must keep to redo or undo it.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use aido_actions::fs::{
    ApplyPatch, Checksum, EditFile, Encoding, FileInfo, HashAlgorithm, MoveToTrash, PatchSet,
    ReadFile, ReadFiles, RestoreFromTrash, StatFiles, WriteFile,
};
use aido_actions::safety::{Format, Validate};
use aido_actions::{AccessKind, Condition, Effect, Input, Outcome};
use aido_policy::{Limits, SessionContext};
use base64::Engine;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::actor::Executed;
use super::error::FsError;
use super::trash;
use super::walls::{Target, Walls};
use crate::clock::Clock;

/// Bytes read per step when streaming (hashing, counting lines).
const STREAM_CHUNK_BYTES: usize = 64 * 1024;

pub(crate) struct Ctx<'a> {
    pub(crate) walls: &'a Walls,
    pub(crate) session: &'a SessionContext,
    pub(crate) limits: &'a Limits,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) trash: &'a Path,
}

impl Ctx<'_> {
    fn check(&self, path: &str, kind: AccessKind) -> Result<Target, FsError> {
        self.walls.check(path, kind, self.session)
    }

    fn read_text(&self, target: &Target) -> Result<String, FsError> {
        let bytes = self
            .walls
            .read_all(target, self.session, self.limits.read_bytes_max)?;
        String::from_utf8(bytes).map_err(|_| FsError::Binary {
            path: target.shown(),
        })
    }

    /// Write and describe the change for the journal.
    fn write(
        &self,
        target: &Target,
        bytes: Vec<u8>,
        create_parents: bool,
        exec: &mut Executed,
    ) -> Result<bool, FsError> {
        let written = self.walls.write_atomic(
            target,
            self.session,
            &bytes,
            create_parents,
            self.limits.blob_bytes_max,
        )?;
        let blob = blake3::hash(&bytes).to_hex().to_string();
        let before = written.before.map(|b| {
            let h = blake3::hash(&b).to_hex().to_string();
            exec.blobs.push(b);
            h
        });
        exec.outcome.effects.push(Effect::FileWritten {
            path: target.shown(),
            blob,
            before,
        });
        exec.blobs.push(bytes);
        Ok(written.created)
    }
}

fn is_text(bytes: &[u8]) -> bool {
    !bytes[..bytes.len().min(8192)].contains(&0) && std::str::from_utf8(bytes).is_ok()
}

pub(crate) fn read_file(cx: &Ctx, a: &ReadFile) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let shown = target.shown();
    if a.encoding == Encoding::Base64 {
        let bytes = cx
            .walls
            .read_all(&target, cx.session, cx.limits.read_bytes_max)?;
        let content = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let output =
            json!({"path": shown, "encoding": "base64", "bytes": bytes.len(), "content": content});
        return Ok(Executed::new(Outcome {
            text: content,
            output,
            ..Outcome::default()
        }));
    }
    if a.offset.is_none() && a.limit.is_none() {
        let text = cx.read_text(&target)?;
        if !is_text(text.as_bytes()) {
            return Err(FsError::Binary { path: shown });
        }
        let lines = text.lines().count();
        let output = json!({"path": shown, "content": text, "lines": lines, "offset": 1, "total_lines": lines, "truncated": false});
        return Ok(Executed::new(Outcome {
            text,
            output,
            ..Outcome::default()
        }));
    }
    // A window of lines: stream, so a window of a huge file costs only the window.
    let file = cx.walls.open_read(&target, cx.session)?;
    let first = a.offset.unwrap_or(1).max(1);
    let limit = a.limit.unwrap_or(u64::MAX);
    let mut reader = BufReader::new(file);
    let (mut content, mut line, mut taken, mut truncated) = (String::new(), 0u64, 0u64, false);
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
        if buf.contains(&0) {
            return Err(FsError::Binary { path: shown });
        }
        let text = std::str::from_utf8(&buf).map_err(|_| FsError::Binary {
            path: shown.clone(),
        })?;
        if (content.len() + text.len()) as u64 > cx.limits.read_bytes_max {
            truncated = true;
            break;
        }
        content.push_str(text);
        taken += 1;
    }
    let output = json!({"path": shown, "content": content, "lines": taken, "offset": first, "truncated": truncated});
    Ok(Executed::new(Outcome {
        text: content,
        output,
        ..Outcome::default()
    }))
}

pub(crate) fn read_files(cx: &Ctx, a: &ReadFiles) -> Result<Executed, FsError> {
    let mut files = Vec::new();
    let mut text = String::new();
    let mut budget = cx.limits.read_bytes_max;
    for path in &a.paths {
        if cx.cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        let one = cx.check(path, AccessKind::Read).and_then(|t| {
            let bytes = cx.walls.read_all(&t, cx.session, budget)?;
            if !is_text(&bytes) {
                return Err(FsError::Binary { path: t.shown() });
            }
            budget -= bytes.len() as u64;
            Ok((t.shown(), String::from_utf8_lossy(&bytes).into_owned()))
        });
        match one {
            Ok((shown, content)) => {
                text.push_str(&format!("==> {shown} <==\n{content}\n"));
                files.push(json!({"path": shown, "ok": true, "content": content}));
            }
            Err(e) => {
                text.push_str(&format!("==> {path} <==\n[{}] {e}\n", e.code()));
                files.push(
                    json!({"path": path, "ok": false, "code": e.code(), "message": e.to_string()}),
                );
            }
        }
    }
    Ok(Executed::new(Outcome {
        text,
        output: json!({"files": files}),
        ..Outcome::default()
    }))
}

fn decode_content(content: &str, encoding: Encoding) -> Result<Vec<u8>, FsError> {
    match encoding {
        Encoding::Utf8 => Ok(content.as_bytes().to_vec()),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(content)
            .map_err(|e| FsError::BadBase64 {
                reason: e.to_string(),
            }),
    }
}

pub(crate) fn write_file(cx: &Ctx, a: &WriteFile) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    let bytes = decode_content(&a.content, a.encoding)?;
    let len = bytes.len();
    let mut exec = Executed::default();
    let created = cx.write(&target, bytes, a.create_parents, &mut exec)?;
    let shown = target.shown();
    exec.outcome.text = format!(
        "{} {shown} ({len} bytes)",
        if created { "created" } else { "replaced" }
    );
    exec.outcome.output = json!({"path": shown, "bytes": len, "created": created});
    Ok(exec)
}

fn diff(old: &str, new: &str) -> String {
    diffy::create_patch(old, new).to_string()
}

pub(crate) fn edit_file(cx: &Ctx, a: &EditFile) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    if a.old_string.is_empty() {
        return Err(FsError::EditEmpty);
    }
    let old = cx.read_text(&target)?;
    let count = old.matches(&a.old_string).count();
    let shown = target.shown();
    match count {
        0 => return Err(FsError::EditNoMatch { path: shown }),
        n if n > 1 && !a.replace_all => {
            return Err(FsError::EditAmbiguous {
                path: shown,
                count: n,
            });
        }
        _ => {}
    }
    let new = old.replace(&a.old_string, &a.new_string);
    let patch = diff(&old, &new);
    let mut exec = Executed::default();
    if !a.dry_run {
        cx.write(&target, new.into_bytes(), false, &mut exec)?;
    }
    exec.outcome.text = patch.clone();
    exec.outcome.output =
        json!({"path": shown, "replacements": count, "diff": patch, "dry_run": a.dry_run});
    Ok(exec)
}

fn apply_one(path: &str, old: &str, patch: &str) -> Result<String, FsError> {
    let parsed = diffy::Patch::from_str(patch).map_err(|e| FsError::PatchInvalid {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    if parsed.hunks().is_empty() {
        return Err(FsError::PatchInvalid {
            path: path.to_owned(),
            reason: "no hunks".into(),
        });
    }
    diffy::apply(old, &parsed).map_err(|e| FsError::PatchFailed {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

pub(crate) fn apply_patch(cx: &Ctx, a: &ApplyPatch) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    let old = cx.read_text(&target)?;
    let shown = target.shown();
    let new = apply_one(&shown, &old, &a.patch)?;
    let patch = diff(&old, &new);
    let mut exec = Executed::default();
    if !a.dry_run {
        cx.write(&target, new.into_bytes(), false, &mut exec)?;
    }
    exec.outcome.text = patch.clone();
    exec.outcome.output = json!({"path": shown, "diff": patch, "dry_run": a.dry_run});
    Ok(exec)
}

pub(crate) fn patch_set(cx: &Ctx, a: &PatchSet) -> Result<Executed, FsError> {
    // Check and apply everything in memory first: nothing is written if any patch fails.
    let mut planned: Vec<(Target, String, String)> = Vec::new();
    for p in &a.patches {
        let target = cx.check(&p.path, AccessKind::Write)?;
        let current = match planned
            .iter()
            .rev()
            .find(|(t, _, _)| t.resolved == target.resolved)
        {
            Some((_, _, new)) => new.clone(),
            None => cx.read_text(&target)?,
        };
        let new = apply_one(&target.shown(), &current, &p.patch)?;
        planned.push((target, current, new));
    }
    let files: Vec<_> = planned
        .iter()
        .map(|(t, old, new)| json!({"path": t.shown(), "diff": diff(old, new)}))
        .collect();
    let mut exec = Executed::default();
    if !a.dry_run {
        let mut done: Vec<&(Target, String, String)> = Vec::new();
        for item in &planned {
            let (target, _, new) = item;
            if let Err(e) = cx.write(target, new.clone().into_bytes(), false, &mut exec) {
                // Put back what was written, newest first.
                for (t, old, _) in done.iter().rev() {
                    let _ = cx
                        .walls
                        .write_atomic(t, cx.session, old.as_bytes(), false, 0);
                }
                return Err(FsError::PatchSetRolledBack {
                    path: target.shown(),
                    reason: e.to_string(),
                });
            }
            done.push(item);
        }
    }
    exec.outcome.text = format!(
        "{} files {}",
        planned.len(),
        if a.dry_run { "would change" } else { "changed" }
    );
    exec.outcome.output = json!({"files": files, "dry_run": a.dry_run});
    Ok(exec)
}

pub(crate) fn stat_files(cx: &Ctx, a: &StatFiles) -> Result<Executed, FsError> {
    let mut files = Vec::new();
    for path in &a.paths {
        let target = cx.check(path, AccessKind::Read)?;
        let entry = match cx.walls.metadata(&target)? {
            None => json!({"path": target.shown(), "exists": false}),
            Some(m) => {
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
                json!({"path": target.shown(), "exists": true, "kind": kind, "size": m.len(),
                       "mode": format!("{mode:o}"), "modified_ms": modified_ms})
            }
        };
        files.push(entry);
    }
    Ok(Executed::new(Outcome::from_output(json!({"files": files}))))
}

/// Stream a file through `each`, checking for cancellation between chunks.
fn stream(cx: &Ctx, target: &Target, mut each: impl FnMut(&[u8])) -> Result<u64, FsError> {
    let mut file = cx.walls.open_read(target, cx.session)?;
    let mut buf = vec![0u8; STREAM_CHUNK_BYTES];
    let mut total = 0u64;
    loop {
        if cx.cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        let n = file
            .read(&mut buf)
            .map_err(|e| FsError::io("read", &target.shown(), e))?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
        each(&buf[..n]);
    }
}

fn digest(cx: &Ctx, target: &Target, algorithm: HashAlgorithm) -> Result<(String, u64), FsError> {
    match algorithm {
        HashAlgorithm::Blake3 => {
            let mut h = blake3::Hasher::new();
            let n = stream(cx, target, |b| {
                h.update(b);
            })?;
            Ok((h.finalize().to_hex().to_string(), n))
        }
        HashAlgorithm::Sha256 => {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            let n = stream(cx, target, |b| h.update(b))?;
            Ok((hex::encode(h.finalize()), n))
        }
    }
}

pub(crate) fn checksum(cx: &Ctx, a: &Checksum) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let (hex, bytes) = digest(cx, &target, a.algorithm)?;
    let algorithm = match a.algorithm {
        HashAlgorithm::Blake3 => "blake3",
        HashAlgorithm::Sha256 => "sha256",
    };
    let output =
        json!({"path": target.shown(), "algorithm": algorithm, "digest": hex, "bytes": bytes});
    Ok(Executed::new(Outcome {
        text: format!("{hex}  {}", target.shown()),
        output,
        ..Outcome::default()
    }))
}

fn media_type(path: &Path, head: &[u8], text: bool) -> &'static str {
    let magic: &[(&[u8], &str)] = &[
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"%PDF-", "application/pdf"),
        (b"\x1f\x8b", "application/gzip"),
        (b"\x7fELF", "application/x-executable"),
        (b"PK\x03\x04", "application/zip"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF8", "image/gif"),
    ];
    if let Some((_, m)) = magic.iter().find(|(sig, _)| head.starts_with(sig)) {
        return m;
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match (ext, text) {
        ("json", true) => "application/json",
        ("toml", true) => "application/toml",
        ("md", true) => "text/markdown",
        ("rs", true) => "text/x-rust",
        ("py", true) => "text/x-python",
        ("html" | "htm", true) => "text/html",
        ("js", true) => "text/javascript",
        (_, true) => "text/plain",
        _ => "application/octet-stream",
    }
}

pub(crate) fn file_info(cx: &Ctx, a: &FileInfo) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let mut hasher = blake3::Hasher::new();
    let mut head = Vec::new();
    let (mut lines, mut nul, mut utf8, mut last) = (0u64, false, true, None);
    let mut pending: Vec<u8> = Vec::new();
    let size = stream(cx, &target, |chunk| {
        hasher.update(chunk);
        if head.len() < 8192 {
            head.extend_from_slice(&chunk[..chunk.len().min(8192 - head.len())]);
        }
        lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        last = chunk.last().copied();
        nul |= chunk.contains(&0);
        // UTF-8 across chunk boundaries: keep an incomplete tail for the next chunk.
        pending.extend_from_slice(chunk);
        match std::str::from_utf8(&pending) {
            Ok(_) => pending.clear(),
            Err(e) if e.error_len().is_none() => {
                let keep = pending.split_off(e.valid_up_to());
                pending = keep;
            }
            Err(_) => {
                utf8 = false;
                pending.clear();
            }
        }
    })?;
    let text = utf8 && !nul && pending.is_empty();
    let output = json!({
        "path": target.shown(), "size": size, "binary": !text,
        "lines": if text { Some(lines + u64::from(last.is_some_and(|b| b != b'\n'))) } else { None },
        "media_type": media_type(&target.resolved, &head, text),
        "blake3": hasher.finalize().to_hex().to_string(),
    });
    Ok(Executed::new(Outcome::from_output(output)))
}

pub(crate) fn move_to_trash(cx: &Ctx, a: &MoveToTrash) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Delete)?;
    let shown = target.shown();
    let Some(meta) = cx.walls.metadata(&target)? else {
        return Err(FsError::NotFound { path: shown });
    };
    if cx.trash.starts_with(&target.resolved) {
        return Err(FsError::Trash {
            path: shown,
            reason: "the trash itself is inside it".into(),
        });
    }
    if meta.is_dir() {
        refuse_denied_inside(cx, &target.resolved)?;
    }
    let now = cx.clock.now_ms();
    let slot = trash::reserve(cx.trash, &target.resolved, now)?;
    if let Err(e) = trash::move_across(&target.resolved, &slot.files) {
        let _ = std::fs::remove_file(&slot.info);
        return Err(FsError::io("trash", &shown, e));
    }
    let to = slot.files.display().to_string();
    let mut exec = Executed::default();
    exec.outcome.effects.push(Effect::Moved {
        from: shown.clone(),
        to: to.clone(),
    });
    exec.outcome.inputs.push(Input::Clock { unix_ms: now });
    exec.outcome.text = format!("moved {shown} to the trash ({to})");
    exec.outcome.output =
        json!({"path": shown, "trashed_to": to, "info_file": slot.info.display().to_string()});
    Ok(exec)
}

/// Most entries looked at when checking a directory before it is trashed.
const TRASH_WALK_ENTRIES_MAX: usize = 200_000;

/// A directory holding a denied path (a `.ssh`, a `.env`) cannot be trashed as a whole.
fn refuse_denied_inside(cx: &Ctx, dir: &Path) -> Result<(), FsError> {
    let mut stack = vec![dir.to_owned()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| FsError::io("list", &d.display().to_string(), e))?;
        for entry in entries.flatten() {
            seen += 1;
            if seen > TRASH_WALK_ENTRIES_MAX {
                return Err(FsError::Trash {
                    path: dir.display().to_string(),
                    reason: format!("more than {TRASH_WALK_ENTRIES_MAX} entries to check"),
                });
            }
            let path = entry.path();
            if let Some(pattern) = cx.walls.policy.denied_by_pattern(&path) {
                return Err(FsError::Denied {
                    gate: aido_actions::verdict::Gate::DenyPatterns,
                    code: "path_denied_by_pattern",
                    reason: format!(
                        "{} holds {} which matches the deny pattern {pattern}",
                        dir.display(),
                        path.display()
                    ),
                });
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    Ok(())
}

pub(crate) fn restore_from_trash(cx: &Ctx, a: &RestoreFromTrash) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Write)?;
    let shown = target.shown();
    if cx.walls.metadata(&target)?.is_some() || target.resolved.symlink_metadata().is_ok() {
        return Err(FsError::RestoreTargetExists { path: shown });
    }
    let Some((item, info)) = trash::find(cx.trash, &target.resolved) else {
        return Err(FsError::NotInTrash { path: shown });
    };
    if let Some(parent) = target.resolved.parent() {
        std::fs::create_dir_all(parent).map_err(|e| FsError::io("create parent of", &shown, e))?;
    }
    trash::move_across(&item, &target.resolved).map_err(|e| FsError::io("restore", &shown, e))?;
    let _ = std::fs::remove_file(&info);
    let from = item.display().to_string();
    let mut exec = Executed::default();
    exec.outcome.effects.push(Effect::Moved {
        from: from.clone(),
        to: shown.clone(),
    });
    exec.outcome.text = format!("restored {shown} from the trash");
    exec.outcome.output = json!({"path": shown, "from": from});
    Ok(exec)
}

fn line_column(text: &str, byte: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..byte.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

pub(crate) fn validate(cx: &Ctx, a: &Validate) -> Result<Executed, FsError> {
    let target = cx.check(&a.path, AccessKind::Read)?;
    let shown = target.shown();
    let bytes = cx
        .walls
        .read_all(&target, cx.session, cx.limits.read_bytes_max)?;
    let invalid = |format, line, column, reason: String| FsError::Invalid {
        path: shown.clone(),
        format,
        line,
        column,
        reason,
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
            let (line, column) = line_column(valid, valid.len());
            return Err(invalid("utf8", line, column, e.to_string()));
        }
    };
    let name = match a.format {
        Format::Utf8 => "utf8",
        Format::Json => {
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| invalid("json", e.line(), e.column(), e.to_string()))?;
            "json"
        }
        Format::Toml => {
            if let Err(e) = text.parse::<toml::Table>() {
                let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
                return Err(invalid("toml", line, column, e.message().to_owned()));
            }
            "toml"
        }
    };
    let output = json!({"path": shown, "format": name, "valid": true});
    Ok(Executed::new(Outcome {
        text: format!("{shown} is valid {name}"),
        output,
        ..Outcome::default()
    }))
}

/// Answer a condition; every path in it is checked as a read.
pub(crate) fn evaluate(cx: &Ctx, c: &Condition, depth: usize) -> Result<bool, FsError> {
    if depth > Condition::DEPTH_MAX {
        return Err(FsError::Invalid {
            path: String::new(),
            format: "condition",
            line: 1,
            column: 1,
            reason: "nested too deeply".into(),
        });
    }
    match c {
        Condition::FileExists { path } => {
            let target = cx.check(path, AccessKind::Read)?;
            Ok(cx.walls.metadata(&target)?.is_some())
        }
        Condition::FileContains { path, text } => {
            let target = cx.check(path, AccessKind::Read)?;
            Ok(cx.read_text(&target)?.contains(text.as_str()))
        }
        Condition::ChecksumEquals {
            path,
            algorithm,
            digest: expected,
        } => {
            let target = cx.check(path, AccessKind::Read)?;
            Ok(digest(cx, &target, *algorithm)?
                .0
                .eq_ignore_ascii_case(expected))
        }
        Condition::Not { condition } => Ok(!evaluate(cx, condition, depth + 1)?),
        Condition::All { conditions } => {
            for c in conditions {
                if !evaluate(cx, c, depth + 1)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Any { conditions } => {
            for c in conditions {
                if evaluate(cx, c, depth + 1)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
    }
}
