//! The results of the filesystem primitives as pure functions of the action's arguments and
//! what the body read from the world (the [`Input`]s it records). The body reads the world,
//! records what it read, then calls these; `aido replay playback` takes the recorded inputs
//! from the journal and calls the same functions, so a result is reproduced by the very code
//! that made it, never by a second copy of its formatting.
//!
//! Nothing here touches the filesystem, the clock or the journal.

use aido_actions::fs::{
    ApplyPatch, EditFile, Encoding, HashAlgorithm, PatchSet, ReadFile, ReadFiles, WriteFile,
};
use aido_actions::safety::{Format, Validate};
use aido_actions::{Before, Condition, Effect, Failure, Input, Meta, Outcome};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::FsError;

/// Bytes of a file's start looked at to tell text from binary and to guess a media type.
pub const HEAD_BYTES: usize = 8192;

/// blake3 (hex) of some bytes: the name the journal's blob store gives them.
pub fn blob_name(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// True for UTF-8 without NUL bytes in its head.
pub fn is_text(bytes: &[u8]) -> bool {
    !bytes[..bytes.len().min(HEAD_BYTES)].contains(&0) && std::str::from_utf8(bytes).is_ok()
}

fn text_of(path: &str, bytes: &[u8]) -> Result<String, FsError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| FsError::Binary {
        path: path.to_owned(),
    })
}

/// read_file of a whole file (no offset or limit).
pub fn read_file(a: &ReadFile, path: &str, bytes: &[u8]) -> Result<Outcome, FsError> {
    if a.encoding == Encoding::Base64 {
        let content = base64::engine::general_purpose::STANDARD.encode(bytes);
        let output =
            json!({"path": path, "encoding": "base64", "bytes": bytes.len(), "content": content});
        return Ok(Outcome {
            text: content,
            output,
            ..Outcome::default()
        });
    }
    let text = text_of(path, bytes)?;
    if !is_text(text.as_bytes()) {
        return Err(FsError::Binary {
            path: path.to_owned(),
        });
    }
    let lines = text.lines().count();
    let output = json!({"path": path, "content": text, "lines": lines, "offset": 1, "total_lines": lines, "truncated": false});
    Ok(Outcome {
        text,
        output,
        ..Outcome::default()
    })
}

/// read_file of a window of lines: `lines` are the lines read (each with its newline), `more`
/// says the window stopped before the end.
pub fn read_window(a: &ReadFile, path: &str, lines: &[u8], more: bool) -> Result<Outcome, FsError> {
    let content = text_of(path, lines)?;
    let first = a.offset.unwrap_or(1).max(1);
    let taken = content.split_inclusive('\n').count();
    let output = json!({"path": path, "content": content, "lines": taken, "offset": first, "truncated": more});
    Ok(Outcome {
        text: content,
        output,
        ..Outcome::default()
    })
}

/// read_files: one entry per requested path, in order: what was read (resolved path and
/// bytes), or the failure the body met.
pub fn read_files(a: &ReadFiles, entries: &[Result<(String, Vec<u8>), Failure>]) -> Outcome {
    let mut files = Vec::new();
    let mut text = String::new();
    for (given, entry) in a.paths.iter().zip(entries) {
        let one = match entry {
            Ok((path, bytes)) if is_text(bytes) => {
                Ok((path, String::from_utf8_lossy(bytes).into_owned()))
            }
            Ok((path, _)) => Err(Failure::from(FsError::Binary { path: path.clone() })),
            Err(f) => Err(f.clone()),
        };
        match one {
            Ok((path, content)) => {
                text.push_str(&format!("==> {path} <==\n{content}\n"));
                files.push(json!({"path": path, "ok": true, "content": content}));
            }
            Err(f) => {
                text.push_str(&format!("==> {given} <==\n[{}] {}\n", f.code, f.message));
                files.push(
                    json!({"path": given, "ok": false, "code": f.code, "message": f.message}),
                );
            }
        }
    }
    Outcome {
        text,
        output: json!({"files": files}),
        ..Outcome::default()
    }
}

/// The bytes write_file writes.
pub fn write_file_bytes(a: &WriteFile) -> Result<Vec<u8>, FsError> {
    match a.encoding {
        Encoding::Utf8 => Ok(a.content.as_bytes().to_vec()),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(&a.content)
            .map_err(|e| FsError::BadBase64 {
                reason: e.to_string(),
            }),
    }
}

/// What a write found at its path, as recorded in [`Input::Written`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The resolved path.
    pub path: String,
    /// The file did not exist.
    pub created: bool,
    /// blake3 of the replaced contents, when kept.
    pub before: Option<String>,
    /// Directories the write created above the file, outermost first.
    pub dirs: Vec<String>,
    /// blake3 of the new contents ([`blob_name`]), worked out once per write.
    pub blob: String,
    /// The new file's modification time, nanoseconds since the epoch, when known.
    pub mtime_ns: Option<i64>,
    /// The replaced file's modification time, when there was one.
    pub before_mtime_ns: Option<i64>,
}

/// Contents about to be written, and their blob name, hashed at most once however many
/// records (intent, blob, effect) name it.
#[derive(Debug)]
pub struct NewContents<'a> {
    /// The bytes.
    pub bytes: &'a [u8],
    /// The modification time to give the file (nanoseconds since the epoch); `None`: when it
    /// is written.
    pub mtime_ns: Option<i64>,
    blob: std::cell::OnceCell<String>,
}

impl<'a> NewContents<'a> {
    /// Contents not hashed yet.
    pub fn new(bytes: &'a [u8]) -> Self {
        NewContents {
            bytes,
            mtime_ns: None,
            blob: std::cell::OnceCell::new(),
        }
    }

    /// The same, the file given this modification time.
    pub fn with_mtime(mut self, mtime_ns: Option<i64>) -> Self {
        self.mtime_ns = mtime_ns;
        self
    }

    /// Their blob name (blake3, hex), hashed on first use.
    pub fn blob(&self) -> &str {
        self.blob.get_or_init(|| blob_name(self.bytes))
    }
}

impl Replaced {
    /// The input that records it.
    pub fn input(&self) -> Input {
        Input::Written {
            path: self.path.clone(),
            created: self.created,
            before: self.before.clone(),
            dirs: self.dirs.clone(),
            mtime_ns: self.mtime_ns,
            before_mtime_ns: self.before_mtime_ns,
        }
    }

    /// The effects of the write: the directories it created, outermost first, then the file.
    pub fn effects(&self) -> Vec<Effect> {
        let mut out: Vec<Effect> = self
            .dirs
            .iter()
            .map(|d| Effect::DirCreated { path: d.clone() })
            .collect();
        out.push(Effect::FileWritten {
            path: self.path.clone(),
            blob: self.blob.clone(),
            before: Before::of(self.created, self.before.as_deref()),
            mtime_ns: self.mtime_ns,
            before_mtime_ns: self.before_mtime_ns,
        });
        out
    }
}

/// write_file, from the bytes written and what the write replaced.
pub fn write_file(bytes: &[u8], replaced: &Replaced) -> Outcome {
    let (path, len) = (&replaced.path, bytes.len());
    Outcome {
        text: format!(
            "{} {path} ({len} bytes)",
            if replaced.created {
                "created"
            } else {
                "replaced"
            }
        ),
        output: json!({"path": path, "bytes": len, "created": replaced.created}),
        effects: replaced.effects(),
        ..Outcome::default()
    }
}

/// A change to one file worked out in memory: the new contents and the result to return.
#[derive(Clone, Debug)]
pub struct Change {
    /// The resolved path.
    pub path: String,
    /// The new contents (not written on a dry run).
    pub new: Vec<u8>,
    /// The result, without effects.
    pub outcome: Outcome,
}

impl Change {
    /// The result once the write (if any) happened.
    pub fn done(self, replaced: Option<&Replaced>) -> Outcome {
        let mut outcome = self.outcome;
        if let Some(r) = replaced {
            outcome.effects.extend(r.effects());
        }
        outcome
    }
}

fn diff(old: &str, new: &str) -> String {
    diffy::create_patch(old, new).to_string()
}

/// edit_file, from the file's contents.
pub fn edit_file(a: &EditFile, path: &str, old: &[u8]) -> Result<Change, FsError> {
    if a.old_string.is_empty() {
        return Err(FsError::EditEmpty);
    }
    let old = text_of(path, old)?;
    let count = old.matches(&a.old_string).count();
    match count {
        0 => {
            return Err(FsError::EditNoMatch {
                path: path.to_owned(),
            });
        }
        n if n > 1 && !a.replace_all => {
            return Err(FsError::EditAmbiguous {
                path: path.to_owned(),
                count: n,
            });
        }
        _ => {}
    }
    let new = old.replace(&a.old_string, &a.new_string);
    Ok(text_change(path, &old, new, Some(count), a.dry_run))
}

/// A change to a text file, shown as a unified diff; `replacements` for edit_file.
fn text_change(
    path: &str,
    old: &str,
    new: String,
    replacements: Option<usize>,
    dry_run: bool,
) -> Change {
    let patch = diff(old, &new);
    let output = match replacements {
        Some(count) => {
            json!({"path": path, "replacements": count, "diff": patch, "dry_run": dry_run})
        }
        None => json!({"path": path, "diff": patch, "dry_run": dry_run}),
    };
    Change {
        path: path.to_owned(),
        new: new.into_bytes(),
        outcome: Outcome {
            text: patch,
            output,
            ..Outcome::default()
        },
    }
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

/// apply_patch, from the file's contents.
pub fn apply_patch(a: &ApplyPatch, path: &str, old: &[u8]) -> Result<Change, FsError> {
    let old = text_of(path, old)?;
    let new = apply_one(path, &old, &a.patch)?;
    Ok(text_change(path, &old, new, None, a.dry_run))
}

/// One file's new contents in a patch_set: resolved path and bytes.
pub type Planned = (String, Vec<u8>);

/// patch_set, from what the body read for each patch (resolved path and contents). A patch to
/// a file an earlier patch already changed applies to that change, not to what was read.
/// Returns the new contents per patch and the result without effects.
pub fn patch_set(
    a: &PatchSet,
    reads: &[(String, Vec<u8>)],
) -> Result<(Vec<Planned>, Outcome), FsError> {
    let mut planned: Vec<(String, String, String)> = Vec::new();
    for (p, (path, bytes)) in a.patches.iter().zip(reads) {
        let current = match planned.iter().rev().find(|(t, _, _)| t == path) {
            Some((_, _, new)) => new.clone(),
            None => text_of(path, bytes)?,
        };
        let new = apply_one(path, &current, &p.patch)?;
        planned.push((path.clone(), current, new));
    }
    let files: Vec<_> = planned
        .iter()
        .map(|(t, old, new)| json!({"path": t, "diff": diff(old, new)}))
        .collect();
    let outcome = Outcome {
        text: format!(
            "{} files {}",
            planned.len(),
            if a.dry_run { "would change" } else { "changed" }
        ),
        output: json!({"files": files, "dry_run": a.dry_run}),
        ..Outcome::default()
    };
    let writes = planned
        .into_iter()
        .map(|(t, _, new)| (t, new.into_bytes()))
        .collect();
    Ok((writes, outcome))
}

/// stat_files, from each path's metadata (absent: it did not exist).
pub fn stat_files(seen: &[(String, Option<Meta>)]) -> Outcome {
    let files: Vec<_> = seen
        .iter()
        .map(|(path, meta)| match meta {
            None => json!({"path": path, "exists": false}),
            Some(m) => json!({"path": path, "exists": true, "kind": m.kind, "size": m.size,
                              "mode": m.mode, "modified_ms": m.modified_ms}),
        })
        .collect();
    Outcome::from_output(json!({"files": files}))
}

/// What checksum and file_info derive from a file's bytes, fed in chunks of any size.
#[derive(Clone, Debug)]
pub struct Facts {
    blake3: blake3::Hasher,
    sha256: sha2::Sha256,
    want_sha256: bool,
    head: Vec<u8>,
    size: u64,
    newlines: u64,
    last: Option<u8>,
    nul: bool,
    utf8: bool,
    pending: Vec<u8>,
}

/// The facts of a whole file, as [`Input::Streamed`] keeps them for files too large to keep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFacts {
    /// Bytes.
    pub size: u64,
    /// blake3, hex.
    pub blake3: String,
    /// sha256, hex, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// UTF-8 without NUL bytes.
    pub text: bool,
    /// Lines, counting a last line without a newline.
    pub lines: u64,
    /// The guessed media type.
    pub media_type: String,
}

impl Facts {
    /// Start; sha256 is computed only when `sha256` is set.
    pub fn new(sha256: bool) -> Self {
        use sha2::Digest;
        Self {
            blake3: blake3::Hasher::new(),
            sha256: sha2::Sha256::new(),
            want_sha256: sha256,
            head: Vec::new(),
            size: 0,
            newlines: 0,
            last: None,
            nul: false,
            utf8: true,
            pending: Vec::new(),
        }
    }

    /// Feed the next chunk.
    pub fn update(&mut self, chunk: &[u8]) {
        use sha2::Digest;
        self.blake3.update(chunk);
        if self.want_sha256 {
            self.sha256.update(chunk);
        }
        if self.head.len() < HEAD_BYTES {
            self.head
                .extend_from_slice(&chunk[..chunk.len().min(HEAD_BYTES - self.head.len())]);
        }
        self.size += chunk.len() as u64;
        self.newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(&b) = chunk.last() {
            self.last = Some(b);
        }
        self.nul |= chunk.contains(&0);
        // UTF-8 across chunk boundaries: keep an incomplete tail for the next chunk.
        if !self.utf8 {
            return;
        }
        self.pending.extend_from_slice(chunk);
        match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.clear(),
            Err(e) if e.error_len().is_none() => {
                let keep = self.pending.split_off(e.valid_up_to());
                self.pending = keep;
            }
            Err(_) => {
                self.utf8 = false;
                self.pending.clear();
            }
        }
    }

    /// The facts of everything fed, for a file at `path`.
    pub fn finish(self, path: &str) -> FileFacts {
        let text = self.utf8 && !self.nul && self.pending.is_empty();
        FileFacts {
            size: self.size,
            blake3: self.blake3.finalize().to_hex().to_string(),
            sha256: self
                .want_sha256
                .then(|| hex::encode(sha2::Digest::finalize(self.sha256))),
            text,
            lines: self.newlines + u64::from(self.last.is_some_and(|b| b != b'\n')),
            media_type: media_type(path, &self.head, text).to_owned(),
        }
    }

    /// The facts of a file's bytes.
    pub fn of(path: &str, bytes: &[u8], sha256: bool) -> FileFacts {
        let mut facts = Self::new(sha256);
        facts.update(bytes);
        facts.finish(path)
    }
}

fn media_type(path: &str, head: &[u8], text: bool) -> &'static str {
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
    let ext = std::path::Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
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

/// The digest a hash algorithm gives, from a file's facts.
pub fn digest_of(facts: &FileFacts, algorithm: HashAlgorithm) -> Option<&str> {
    match algorithm {
        HashAlgorithm::Blake3 => Some(&facts.blake3),
        HashAlgorithm::Sha256 => facts.sha256.as_deref(),
    }
}

/// checksum, from the file's facts.
pub fn checksum(path: &str, algorithm: HashAlgorithm, facts: &FileFacts) -> Outcome {
    let name = match algorithm {
        HashAlgorithm::Blake3 => "blake3",
        HashAlgorithm::Sha256 => "sha256",
    };
    let hex = digest_of(facts, algorithm).unwrap_or_default();
    let output = json!({"path": path, "algorithm": name, "digest": hex, "bytes": facts.size});
    Outcome {
        text: format!("{hex}  {path}"),
        output,
        ..Outcome::default()
    }
}

/// file_info, from the file's facts.
pub fn file_info(path: &str, facts: &FileFacts) -> Outcome {
    Outcome::from_output(json!({
        "path": path, "size": facts.size, "binary": !facts.text,
        "lines": if facts.text { Some(facts.lines) } else { None },
        "media_type": facts.media_type,
        "blake3": facts.blake3,
    }))
}

fn line_column(text: &str, byte: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..byte.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

/// validate, from the file's bytes.
pub fn validate(a: &Validate, path: &str, bytes: &[u8]) -> Result<Outcome, FsError> {
    let invalid = |format, line, column, reason: String| FsError::Invalid {
        path: path.to_owned(),
        format,
        line,
        column,
        reason,
    };
    let text = match std::str::from_utf8(bytes) {
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
    Ok(Outcome {
        text: format!("{path} is valid {name}"),
        output: json!({"path": path, "format": name, "valid": true}),
        ..Outcome::default()
    })
}

/// move_to_trash, from where the trash put the item.
pub fn move_to_trash(path: &str, item: &str, info: &str) -> Outcome {
    Outcome {
        text: format!("moved {path} to the trash ({item})"),
        output: json!({"path": path, "trashed_to": item, "info_file": info}),
        effects: vec![Effect::Moved {
            from: path.to_owned(),
            to: item.to_owned(),
        }],
        ..Outcome::default()
    }
}

/// restore_from_trash, from where the trash held the item.
pub fn restore_from_trash(path: &str, item: &str) -> Outcome {
    Outcome {
        text: format!("restored {path} from the trash"),
        output: json!({"path": path, "from": item}),
        effects: vec![Effect::Moved {
            from: item.to_owned(),
            to: path.to_owned(),
        }],
        ..Outcome::default()
    }
}

/// What a condition's leaf saw.
#[derive(Clone, Debug)]
pub enum Seen {
    /// file_exists: whether something was there.
    Exists(bool),
    /// file_contains: the file's bytes.
    Bytes(String, Vec<u8>),
    /// checksum_equals: the file's facts.
    Facts(FileFacts),
}

/// Whether a leaf condition (file_exists, file_contains, checksum_equals) holds.
pub fn leaf_holds(c: &Condition, seen: &Seen) -> Result<bool, FsError> {
    match (c, seen) {
        (Condition::FileExists { .. }, Seen::Exists(e)) => Ok(*e),
        (Condition::FileContains { text, .. }, Seen::Bytes(path, bytes)) => {
            Ok(text_of(path, bytes)?.contains(text.as_str()))
        }
        (
            Condition::ChecksumEquals {
                algorithm, digest, ..
            },
            Seen::Facts(f),
        ) => Ok(digest_of(f, *algorithm).is_some_and(|d| d.eq_ignore_ascii_case(digest))),
        _ => Err(FsError::Invalid {
            path: String::new(),
            format: "condition",
            line: 1,
            column: 1,
            reason: "what was seen does not fit the condition".into(),
        }),
    }
}

/// Answer a condition tree; `leaf` answers file_exists, file_contains and checksum_equals
/// (reading the world, or the journal in playback), in the same order every time.
pub fn evaluate(
    c: &Condition,
    depth: usize,
    leaf: &mut dyn FnMut(&Condition) -> Result<bool, FsError>,
) -> Result<bool, FsError> {
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
        Condition::FileExists { .. }
        | Condition::FileContains { .. }
        | Condition::ChecksumEquals { .. } => leaf(c),
        Condition::Not { condition } => Ok(!evaluate(condition, depth + 1, leaf)?),
        Condition::All { conditions } => {
            for c in conditions {
                if !evaluate(c, depth + 1, leaf)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Any { conditions } => {
            for c in conditions {
                if evaluate(c, depth + 1, leaf)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
    }
}
