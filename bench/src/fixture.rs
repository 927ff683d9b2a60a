//! The files both servers read: one temp tree, the same bytes for both, so the only difference
//! between the two columns of the comparison is the server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aido_actors::{Runtime, RuntimeOptions, Session, SystemClock};
use aido_journal::{CommitMode, Journal, Limits};
use aido_policy::{Environment, Layered, Source};
use anyhow::{Context, Result};

/// `temp`, or `/var/tmp` when `temp` is under `/tmp`: a sandbox gives a command a /tmp of its
/// own (aido's a private one, codex's a fresh mount that hides what it keeps in CODEX_HOME), so
/// the files a command works on must be elsewhere.
pub fn outside_tmp(temp: &Path) -> &Path {
    if temp.starts_with("/tmp") {
        Path::new("/var/tmp")
    } else {
        temp
    }
}

/// A real runtime (what `aido mcp` runs) on `home` and `aido_home`, `config` (TOML) its one
/// config layer, its journal in `aido_home/journal`; with one session open.
pub async fn runtime(
    config: &str,
    home: PathBuf,
    aido_home: PathBuf,
) -> Result<(Journal, Runtime, Session)> {
    let config = Layered::from_layers(&[(Source::File("aido-bench".into()), config)])?.config;
    let journal = Journal::open(
        &aido_home.join("journal"),
        Limits::default(),
        CommitMode::Group,
    )?;
    let runtime = Runtime::start(RuntimeOptions {
        config,
        env: Environment { home, aido_home },
        journal: journal.clone(),
        clock: Arc::new(SystemClock::default()),
    })
    .await?;
    let session = runtime.open_session(Some("aido-bench".into())).await?;
    Ok((journal, runtime, session))
}

/// A temp dir holding `home/` (HOME for aido, the allowed dir for the peer, with the files in
/// `home/files/`) and `aido-home/` (AIDO_HOME: aido's journal). Removed on drop.
pub struct Fixture {
    root: tempfile::TempDir,
    /// Every file, with the exact text it holds.
    pub files: Vec<(PathBuf, String)>,
}

impl Fixture {
    /// Writes `count` text files of about `bytes` bytes each, in a fresh directory under
    /// `parent` (the default temp dir when `None`).
    pub fn create(count: usize, bytes: usize, parent: Option<&Path>) -> Result<Self> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("aido-bench-");
        let root = match parent {
            Some(parent) => builder
                .tempdir_in(parent)
                .with_context(|| format!("creating a temp dir in {}", parent.display()))?,
            None => builder.tempdir().context("creating the temp dir")?,
        };
        let dir = root.path().join("home").join("files");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::create_dir_all(root.path().join("aido-home"))?;
        let mut files = Vec::with_capacity(count);
        for index in 0..count {
            let path = dir.join(format!("file-{index:04}.txt"));
            let text = content(index, bytes);
            std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            files.push((path, text));
        }
        Ok(Self { root, files })
    }

    /// HOME for aido and the directory the peer is allowed to serve.
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// AIDO_HOME.
    pub fn aido_home(&self) -> PathBuf {
        self.root.path().join("aido-home")
    }

    /// Where the servers' stderr goes (kept for the error message if one fails).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Bytes over all files.
    pub fn total_bytes(&self) -> usize {
        self.files.iter().map(|(_, text)| text.len()).sum()
    }
}

/// Deterministic ASCII lines, different for every file, about `bytes` long (whole lines only).
pub fn content(index: usize, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 80);
    let mut line = 0usize;
    while text.len() < bytes {
        let next = format!(
            "file {index:04} line {line:04}: the quick brown fox jumps over the lazy dog {:08x}\n",
            mix(index, line)
        );
        if text.len() + next.len() > bytes && !text.is_empty() {
            break;
        }
        text.push_str(&next);
        line += 1;
    }
    text
}

/// A cheap integer hash so lines differ without a random number generator.
fn mix(index: usize, line: usize) -> u32 {
    let mut x = (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (line as u64);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x & 0xffff_ffff) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_near_the_size_and_differs_per_file() {
        let a = content(1, 4096);
        let b = content(2, 4096);
        assert!(a.len() <= 4096 && a.len() > 4000, "{}", a.len());
        assert_ne!(a, b);
        assert_eq!(a, content(1, 4096));
        assert!(a.is_ascii() && a.ends_with('\n'));
    }

    #[test]
    fn fixture_writes_what_it_lists() {
        let f = Fixture::create(3, 1000, None).unwrap();
        assert_eq!(f.files.len(), 3);
        for (path, text) in &f.files {
            assert!(path.starts_with(f.home()));
            assert_eq!(&std::fs::read_to_string(path).unwrap(), text);
        }
        assert!(f.aido_home().is_dir());
    }

    #[test]
    fn fixture_goes_where_it_is_told() {
        let parent = tempfile::tempdir().unwrap();
        let f = Fixture::create(2, 500, Some(parent.path())).unwrap();
        assert!(f.root().starts_with(parent.path()));
        assert!(f.home().starts_with(parent.path()) && f.aido_home().starts_with(parent.path()));
        assert!(
            f.files
                .iter()
                .all(|(path, _)| path.starts_with(parent.path()))
        );
        drop(f);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }
}
