use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::ArtifactError;

/// An id is 16 random bytes (128 bits) in lowercase hex.
pub const ID_HEX_LEN: usize = 32;

/// Most segments of a file name (`a/b/c.js` has 3).
const NAME_DEPTH_MAX: usize = 8;
/// Longest file name, in bytes.
const NAME_BYTES_MAX: usize = 255;
/// The manifest's file inside an artifact's directory.
const MANIFEST: &str = "manifest.json";
/// The directory holding an artifact's files, beside its manifest.
const FILES: &str = "files";

/// The store's caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest file of an artifact, in bytes.
    pub file_bytes_max: u64,
    /// Largest artifact (all its files), in bytes.
    pub artifact_bytes_max: u64,
    /// Largest store (every artifact), in bytes.
    pub total_bytes_max: u64,
    /// Most files in one artifact.
    pub files_max: u32,
    /// Most artifacts in the store.
    pub artifacts_max: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            file_bytes_max: 8 << 20,
            artifact_bytes_max: 32 << 20,
            total_bytes_max: 256 << 20,
            files_max: 256,
            artifacts_max: 256,
        }
    }
}

/// One file of an artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its name inside the artifact (`index.html`, `js/app.js`).
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// The blake3 of its contents (hex).
    pub blake3: String,
    /// The media type it is served with.
    pub media_type: String,
}

/// What an artifact holds: written once, when it is made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Its id (32 hex digits).
    pub id: String,
    /// A title for people.
    pub title: String,
    /// The page `/a/<id>/` serves.
    pub entry: String,
    /// Its files, sorted by name.
    pub files: Vec<FileEntry>,
    /// All its files' bytes.
    pub bytes: u64,
    /// When it was made (milliseconds since the epoch, from the runtime's clock).
    pub created_ms: u64,
}

impl Manifest {
    /// The file named `name`, if the artifact has one.
    pub fn file(&self, name: &str) -> Option<&FileEntry> {
        self.files
            .binary_search_by(|f| f.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.files[i])
    }
}

/// Whether `id` is an artifact id: exactly 32 lowercase hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == ID_HEX_LEN && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Why `name` is not a plain relative file name, if it is not.
fn name_refusal(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Some("it must be 1 to 255 bytes");
    }
    let segments: Vec<&str> = name.split('/').collect();
    if segments.len() > NAME_DEPTH_MAX {
        return Some("it is more than 8 segments deep");
    }
    for segment in segments {
        if segment.is_empty() {
            return Some("it has an empty segment (a leading, trailing or double slash)");
        }
        if segment.starts_with('.') {
            return Some("a segment starts with a dot (`.`, `..` and hidden names are refused)");
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Some("only letters, digits, `.`, `_`, `-` and `/` between segments");
        }
    }
    None
}

/// Whether `name` is a plain relative file name an artifact may hold: segments of ASCII
/// letters, digits, `.`, `_` and `-`, none empty or starting with a dot, at most 8 deep and
/// 255 bytes long. So a name never climbs out, never needs escaping in a URL, and has one
/// spelling.
pub fn valid_name(name: &str) -> bool {
    name_refusal(name).is_none()
}

/// The media type a file is served with, from its extension (unknown ones are
/// `application/octet-stream`, which a browser downloads rather than renders).
pub fn media_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "txt" | "md" | "csv" => "text/plain; charset=utf-8",
        "wasm" => "application/wasm",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        _ => "application/octet-stream",
    }
}

/// The artifacts of one AIDO_HOME: `DIR/<id>/manifest.json` and `DIR/<id>/files/<name>`.
/// An artifact is made in a scratch directory and renamed into place, so a reader sees all
/// of it or none; it never changes after that, only goes.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    limits: Limits,
}

impl Store {
    /// Open (and create) the store at `dir`.
    pub fn open(dir: &Path, limits: Limits) -> Result<Self, ArtifactError> {
        std::fs::create_dir_all(dir).map_err(|e| ArtifactError::io(dir, e))?;
        Ok(Self {
            dir: dir.to_owned(),
            limits,
        })
    }

    /// Its caps.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn path_of(&self, id: &str) -> Result<PathBuf, ArtifactError> {
        if !valid_id(id) {
            return Err(ArtifactError::NotFound { id: id.to_owned() });
        }
        Ok(self.dir.join(id))
    }

    /// Make artifact `id` from `files` (name, contents). `entry` defaults to `index.html`
    /// when it has one, else to its first `.html` file, else to its first file. Checked
    /// whole before anything is written: names, duplicates, the entry and every cap.
    #[allow(clippy::too_many_lines)]
    pub fn create(
        &self,
        id: &str,
        title: &str,
        entry: Option<&str>,
        files: Vec<(String, Vec<u8>)>,
        created_ms: u64,
    ) -> Result<Manifest, ArtifactError> {
        let target = self.path_of(id)?;
        let limits = self.limits;
        if files.is_empty() || files.len() > limits.files_max as usize {
            return Err(ArtifactError::TooLarge {
                what: "the artifact's file count (at least 1)",
                size: files.len() as u64,
                max: u64::from(limits.files_max),
            });
        }
        let mut seen = BTreeSet::new();
        let mut entries = Vec::with_capacity(files.len());
        let mut bytes = 0u64;
        for (name, contents) in &files {
            if let Some(why) = name_refusal(name) {
                return Err(ArtifactError::NameInvalid {
                    name: name.clone(),
                    why,
                });
            }
            if !seen.insert(name.as_str()) {
                return Err(ArtifactError::NameInvalid {
                    name: name.clone(),
                    why: "two files have this name",
                });
            }
            // A file may not also be a directory of another (`a` and `a/b`).
            let size = contents.len() as u64;
            if size > limits.file_bytes_max {
                return Err(ArtifactError::TooLarge {
                    what: "a file",
                    size,
                    max: limits.file_bytes_max,
                });
            }
            bytes += size;
            entries.push(FileEntry {
                name: name.clone(),
                bytes: size,
                blake3: blake3::hash(contents).to_hex().to_string(),
                media_type: media_type(name).to_owned(),
            });
        }
        for name in &seen {
            let mut prefix = String::new();
            for segment in name.split('/') {
                if !prefix.is_empty() && seen.contains(prefix.as_str()) {
                    return Err(ArtifactError::NameInvalid {
                        name: (*name).to_owned(),
                        why: "another file has the name of one of its directories",
                    });
                }
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(segment);
            }
        }
        if bytes > limits.artifact_bytes_max {
            return Err(ArtifactError::TooLarge {
                what: "the artifact",
                size: bytes,
                max: limits.artifact_bytes_max,
            });
        }
        let existing = self.list()?;
        if existing.len() >= limits.artifacts_max as usize {
            return Err(ArtifactError::TooLarge {
                what: "the number of artifacts",
                size: existing.len() as u64 + 1,
                max: u64::from(limits.artifacts_max),
            });
        }
        let total = existing.iter().map(|m| m.bytes).sum::<u64>() + bytes;
        if total > limits.total_bytes_max {
            return Err(ArtifactError::TooLarge {
                what: "all artifacts together",
                size: total,
                max: limits.total_bytes_max,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let entry = match entry {
            Some(e) if seen.contains(e) => e.to_owned(),
            Some(e) => {
                return Err(ArtifactError::EntryMissing {
                    entry: e.to_owned(),
                });
            }
            None if seen.contains("index.html") => "index.html".to_owned(),
            None => entries
                .iter()
                .find(|f| f.name.ends_with(".html"))
                .unwrap_or(&entries[0])
                .name
                .clone(),
        };
        let manifest = Manifest {
            id: id.to_owned(),
            title: title.to_owned(),
            entry,
            files: entries,
            bytes,
            created_ms,
        };
        if target.exists() {
            return Err(ArtifactError::Corrupt {
                id: id.to_owned(),
                why: "an artifact with this id exists already".into(),
            });
        }
        let scratch = self.dir.join(format!(".new-{id}"));
        let _ = std::fs::remove_dir_all(&scratch);
        let written = (|| {
            for (name, contents) in &files {
                let path = scratch.join(FILES).join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| ArtifactError::io(parent, e))?;
                }
                std::fs::write(&path, contents).map_err(|e| ArtifactError::io(&path, e))?;
            }
            let path = scratch.join(MANIFEST);
            let json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
            std::fs::write(&path, json).map_err(|e| ArtifactError::io(&path, e))?;
            std::fs::rename(&scratch, &target).map_err(|e| ArtifactError::io(&target, e))
        })();
        if written.is_err() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        written.map(|()| manifest)
    }

    /// Artifact `id`'s manifest, checked to be the one of that id.
    pub fn get(&self, id: &str) -> Result<Manifest, ArtifactError> {
        let path = self.path_of(id)?.join(MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::NotFound { id: id.to_owned() });
            }
            Err(e) => return Err(ArtifactError::io(&path, e)),
        };
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| ArtifactError::Corrupt {
                id: id.to_owned(),
                why: format!("its manifest does not parse: {e}"),
            })?;
        if manifest.id != id {
            return Err(ArtifactError::Corrupt {
                id: id.to_owned(),
                why: format!("its manifest names {}", manifest.id),
            });
        }
        Ok(manifest)
    }

    /// Every artifact, oldest first (then by id).
    pub fn list(&self) -> Result<Vec<Manifest>, ArtifactError> {
        let read = std::fs::read_dir(&self.dir).map_err(|e| ArtifactError::io(&self.dir, e))?;
        let mut out = Vec::new();
        for entry in read {
            let entry = entry.map_err(|e| ArtifactError::io(&self.dir, e))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().filter(|n| valid_id(n)) else {
                continue;
            };
            match self.get(id) {
                Ok(m) => out.push(m),
                // Destroyed by another process between the listing and the read.
                Err(ArtifactError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(out)
    }

    /// The contents of file `name` of artifact `id`, checked against the manifest's blake3.
    pub fn read(&self, id: &str, name: &str) -> Result<Vec<u8>, ArtifactError> {
        let manifest = self.get(id)?;
        let Some(entry) = manifest.file(name) else {
            return Err(ArtifactError::NameInvalid {
                name: name.to_owned(),
                why: "the artifact has no file of this name",
            });
        };
        self.read_entry(id, entry)
    }

    /// The contents of a file the manifest lists, checked against its blake3.
    pub fn read_entry(&self, id: &str, entry: &FileEntry) -> Result<Vec<u8>, ArtifactError> {
        let path = self.path_of(id)?.join(FILES).join(&entry.name);
        let bytes = std::fs::read(&path).map_err(|e| ArtifactError::io(&path, e))?;
        if blake3::hash(&bytes).to_hex().as_str() != entry.blake3 {
            return Err(ArtifactError::Corrupt {
                id: id.to_owned(),
                why: format!("{} does not hash to its recorded blake3", entry.name),
            });
        }
        Ok(bytes)
    }

    /// Delete artifact `id`: renamed aside first, so no reader sees half of it.
    pub fn destroy(&self, id: &str) -> Result<Manifest, ArtifactError> {
        let manifest = self.get(id)?;
        let path = self.path_of(id)?;
        let gone = self.dir.join(format!(".gone-{id}"));
        std::fs::rename(&path, &gone).map_err(|e| ArtifactError::io(&path, e))?;
        std::fs::remove_dir_all(&gone).map_err(|e| ArtifactError::io(&gone, e))?;
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const ID: &str = "00112233445566778899aabbccddeeff";

    fn store(limits: Limits) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("artifacts"), limits).unwrap();
        (dir, store)
    }

    #[test]
    fn names_have_one_plain_spelling() {
        for good in ["index.html", "js/app.js", "a-b_c.d/e.png", "x"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            "/abs",
            "a//b",
            "a/",
            "..",
            "../x",
            "a/../b",
            ".hidden",
            "a/.git/x",
            "a\\b",
            "a%2fb",
            "a b",
            "é.html",
            "a/b/c/d/e/f/g/h/i",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_id(ID));
        assert!(!valid_id("00112233445566778899AABBCCDDEEFF"));
        assert!(!valid_id("../../../../../../../../etc/passwd"));
    }

    #[test]
    fn an_artifact_is_made_whole_listed_read_and_destroyed() {
        let (_dir, store) = store(Limits::default());
        let files = vec![
            ("js/app.js".to_owned(), b"1".to_vec()),
            ("page.html".to_owned(), b"<p>".to_vec()),
        ];
        let made = store.create(ID, "t", None, files, 7).unwrap();
        assert_eq!(made.entry, "page.html", "the first html file");
        assert_eq!(made.bytes, 4);
        assert_eq!(store.list().unwrap(), vec![made.clone()]);
        assert_eq!(store.read(ID, "js/app.js").unwrap(), b"1");
        assert_eq!(
            store.read(ID, "js").unwrap_err().code(),
            "artifact_name_invalid"
        );
        store.destroy(ID).unwrap();
        assert_eq!(store.get(ID).unwrap_err().code(), "artifact_not_found");
        assert!(store.list().unwrap().is_empty());
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_written() {
        let limits = Limits {
            file_bytes_max: 4,
            artifact_bytes_max: 6,
            total_bytes_max: 8,
            files_max: 3,
            artifacts_max: 2,
        };
        let (_dir, store) = store(limits);
        let f = |n: &str, b: &[u8]| (n.to_owned(), b.to_vec());
        type Files = Vec<(String, Vec<u8>)>;
        let cases: Vec<(Files, Option<&str>, &str)> = vec![
            (vec![], None, "artifact_too_large"),
            (vec![f("../x", b"")], None, "artifact_name_invalid"),
            (
                vec![f("a", b""), f("a", b"")],
                None,
                "artifact_name_invalid",
            ),
            (
                vec![f("a", b""), f("a/b", b"")],
                None,
                "artifact_name_invalid",
            ),
            (vec![f("a", b"12345")], None, "artifact_too_large"),
            (
                vec![f("a", b"1234"), f("b", b"123")],
                None,
                "artifact_too_large",
            ),
            (
                vec![f("a", b""), f("b", b""), f("c", b""), f("d", b"")],
                None,
                "artifact_too_large",
            ),
            (vec![f("a", b"")], Some("b"), "artifact_entry_missing"),
        ];
        for (files, entry, code) in cases {
            let err = store.create(ID, "", entry, files.clone(), 0).unwrap_err();
            assert_eq!(err.code(), code, "{files:?}");
        }
        assert!(store.list().unwrap().is_empty());
        // The store's total and count.
        store
            .create(ID, "", None, vec![f("a", b"1234")], 0)
            .unwrap();
        let second = "ffffffffffffffffffffffffffffffff";
        let err = store
            .create(second, "", None, vec![f("a", b"12345")], 0)
            .unwrap_err();
        assert_eq!(err.code(), "artifact_too_large");
        store
            .create(second, "", None, vec![f("a", b"1")], 0)
            .unwrap();
        let third = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";
        let err = store
            .create(third, "", None, vec![f("a", b"")], 0)
            .unwrap_err();
        assert_eq!(err.code(), "artifact_too_large", "the count");
    }

    #[test]
    fn a_changed_file_is_refused_on_read() {
        let (dir, store) = store(Limits::default());
        store
            .create(ID, "", None, vec![("a.txt".into(), b"one".to_vec())], 0)
            .unwrap();
        std::fs::write(
            dir.path().join("artifacts").join(ID).join("files/a.txt"),
            b"two",
        )
        .unwrap();
        assert_eq!(
            store.read(ID, "a.txt").unwrap_err().code(),
            "artifact_corrupt"
        );
    }
}
