//! Filesystem primitives. Paths may be absolute, relative to the session's working directory,
//! or start with `~`; the policy resolves them and the filesystem body opens them relative to
//! the checked root.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

fn no() -> bool {
    false
}
fn yes() -> bool {
    true
}

/// Read a text file (UTF-8), optionally a window of lines. Binary files are refused unless
/// `encoding` is `base64`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    /// The file to read.
    pub path: String,
    /// First line to return, counting from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Most lines to return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `utf8` (default) or `base64` for binary files.
    #[serde(default)]
    pub encoding: Encoding,
}

/// How file bytes are carried in JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// Text; binary files are refused with `binary_file`.
    #[default]
    Utf8,
    /// Any bytes, base64-encoded.
    Base64,
}

impl Touches for ReadFile {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::read(&self.path));
    }
}

/// Read several text files at once; each file succeeds or fails on its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFiles {
    /// The files to read.
    pub paths: Vec<String>,
}

impl Touches for ReadFiles {
    fn touches(&self, out: &mut Vec<Access>) {
        out.extend(self.paths.iter().map(|p| Access::read(p)));
    }
}

/// Create or replace a file with the given contents, atomically (write then rename). The
/// previous contents are kept in the journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// The file to write.
    pub path: String,
    /// The new contents (UTF-8 text, or base64 when `encoding` is `base64`).
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
    /// Create missing parent directories (default true).
    #[serde(default = "yes")]
    pub create_parents: bool,
    /// The file's modification time, nanoseconds since the epoch (default: when it is
    /// written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i64>,
}

impl Touches for WriteFile {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::write(&self.path));
    }
}

/// Replace an exact string in a text file. `old_string` must occur exactly once unless
/// `replace_all` is set. With `dry_run` the diff is returned and nothing is written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    /// The file to edit.
    pub path: String,
    /// The exact text to find.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default = "no")]
    pub replace_all: bool,
    /// Return the diff without writing.
    #[serde(default = "no")]
    pub dry_run: bool,
}

impl Touches for EditFile {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::write(&self.path));
    }
}

/// Apply a unified diff to one file. The hunks must apply exactly; nothing is written if one
/// does not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatch {
    /// The file to patch (it must exist; create files with write_file).
    pub path: String,
    /// A unified diff (`--- a/x`, `+++ b/x`, `@@ ... @@` hunks) for this file.
    pub patch: String,
    /// Return the patched result's diff without writing.
    #[serde(default = "no")]
    pub dry_run: bool,
}

impl Touches for ApplyPatch {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::write(&self.path));
    }
}

/// One file's part of a patch_set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilePatch {
    /// The file to patch.
    pub path: String,
    /// A unified diff for this file.
    pub patch: String,
}

/// Apply unified diffs to several files, all or nothing: every patch is checked before the
/// first file is written, and a failed write puts the earlier files back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchSet {
    /// The patches, applied in order.
    pub patches: Vec<FilePatch>,
    /// Check every patch and return the diffs without writing.
    #[serde(default = "no")]
    pub dry_run: bool,
}

impl Touches for PatchSet {
    fn touches(&self, out: &mut Vec<Access>) {
        out.extend(self.patches.iter().map(|p| Access::write(&p.path)));
    }
}

/// Metadata of several paths: existence, kind, size, permissions, modification time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatFiles {
    /// The paths to look at.
    pub paths: Vec<String>,
}

impl Touches for StatFiles {
    fn touches(&self, out: &mut Vec<Access>) {
        out.extend(self.paths.iter().map(|p| Access::read(p)));
    }
}

/// What a file is: size, line count, text or binary, a guessed media type and its blake3.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileInfo {
    /// The file to describe.
    pub path: String,
}

impl Touches for FileInfo {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::read(&self.path));
    }
}

/// A hash function offered by checksum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HashAlgorithm {
    /// BLAKE3, 256-bit (default).
    #[default]
    Blake3,
    /// SHA-256.
    Sha256,
}

/// Hash a file's bytes, streaming, so files of any size can be checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checksum {
    /// The file to hash.
    pub path: String,
    /// `blake3` (default) or `sha256`.
    #[serde(default)]
    pub algorithm: HashAlgorithm,
}

impl Touches for Checksum {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::read(&self.path));
    }
}

/// Move a file or directory to the user's trash (freedesktop.org trash specification), from
/// where restore_from_trash or any desktop file manager can bring it back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveToTrash {
    /// The file or directory to trash.
    pub path: String,
}

impl Touches for MoveToTrash {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::delete(&self.path));
    }
}

/// Put the most recently trashed item whose original location is `path` back where it was.
/// Refused if something already exists there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreFromTrash {
    /// The original location of the trashed item.
    pub path: String,
}

impl Touches for RestoreFromTrash {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::write(&self.path));
    }
}
