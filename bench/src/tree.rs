//! The tree the snapshot benchmark snapshots: a deterministic set of files of varied sizes in
//! nested directories, the same bytes wherever it is written, and the change made to it before
//! each restore (files changed, deleted and added), with a check that a restore undid it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Files per leaf directory (about): the tree has `files / FILES_PER_DIR` leaf directories.
const FILES_PER_DIR: usize = 100;
/// Leaf directories per top-level directory.
const LEAVES_PER_TOP: usize = 5;
/// Bytes of the text every file takes a slice of.
const CORPUS_BYTES: usize = 4 << 20;
/// Bytes of each file the change adds.
const ADDED_BYTES: usize = 8 << 10;

/// How big the tree is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeSpec {
    /// Regular files.
    pub files: usize,
    /// Bytes over all of them (exactly).
    pub bytes: u64,
}

/// How much of the tree one change touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeSpec {
    /// Files rewritten (a patch in the middle and a line appended).
    pub changed: usize,
    /// Files deleted.
    pub deleted: usize,
    /// Files added.
    pub added: usize,
}

/// The generated tree: where every file goes and how big it is.
pub struct Tree {
    /// The sizes asked for.
    pub spec: TreeSpec,
    sizes: Vec<u64>,
    corpus: Vec<u8>,
}

/// One change: which files it rewrites, deletes and adds (paths relative to the tree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Which repeat it belongs to (varies the files and the bytes).
    pub repeat: usize,
    /// Indices of rewritten files.
    pub changed: Vec<usize>,
    /// Indices of deleted files.
    pub deleted: Vec<usize>,
    /// Paths of added files.
    pub added: Vec<String>,
}

impl Tree {
    /// Sizes for `spec`: one file in every [`FILES_PER_DIR`] is large (40 to 120 units), the
    /// rest small (0.2 to 3 units), scaled so the total is exactly `spec.bytes`.
    pub fn new(spec: TreeSpec) -> Self {
        let weights: Vec<f64> = (0..spec.files)
            .map(|i| {
                let r = (mix(i as u64, 1) % 1000) as f64 / 1000.0;
                if is_large(i, spec.files) {
                    40.0 + 80.0 * r
                } else {
                    0.2 + 2.8 * r
                }
            })
            .collect();
        let sum: f64 = weights.iter().sum();
        let mut sizes: Vec<u64> = weights
            .iter()
            .map(|w| ((w / sum) * spec.bytes as f64) as u64)
            .collect();
        let total: u64 = sizes.iter().sum();
        if let Some(last) = sizes.last_mut() {
            *last += spec.bytes.saturating_sub(total);
        }
        Self {
            spec,
            sizes,
            corpus: corpus(CORPUS_BYTES),
        }
    }

    /// Leaf directories.
    fn leaves(&self) -> usize {
        (self.spec.files / FILES_PER_DIR).max(1)
    }

    /// The directory (relative) file `i` lives in: `dNN/sM`.
    fn dir_of(&self, i: usize) -> String {
        let leaf = i % self.leaves();
        format!("d{:02}/s{}", leaf / LEAVES_PER_TOP, leaf % LEAVES_PER_TOP)
    }

    /// The relative path of file `i`.
    pub fn path(&self, i: usize) -> String {
        if is_large(i, self.spec.files) {
            format!("{}/blob{i:05}.dat", self.dir_of(i))
        } else {
            format!("{}/f{i:05}.rs", self.dir_of(i))
        }
    }

    /// The smallest and the largest file's size.
    pub fn size_range(&self) -> (u64, u64) {
        let min = self.sizes.iter().min().copied().unwrap_or(0);
        let max = self.sizes.iter().max().copied().unwrap_or(0);
        (min, max)
    }

    /// Leaf directories in the tree.
    pub fn dirs(&self) -> usize {
        self.leaves()
    }

    /// The bytes of file `i`: a header naming it, then a slice of the corpus.
    pub fn content(&self, i: usize) -> Vec<u8> {
        let size = self.sizes[i] as usize;
        let header = format!("// aido-bench tree, file {i:05}\n");
        fill(&self.corpus, header.as_bytes(), mix(i as u64, 2), size)
    }

    /// Writes the whole tree under `root` (created if missing).
    pub fn write(&self, root: &Path) -> Result<()> {
        for i in 0..self.spec.files {
            let path = root.join(self.path(i));
            if i < self.leaves() {
                let parent = path.parent().unwrap_or(root);
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&path, self.content(i))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// The change for `repeat`: distinct small files, spread over the tree.
    pub fn change(&self, repeat: usize, spec: ChangeSpec) -> Change {
        let n = self.spec.files;
        let stride = [7919usize, 7907, 7901, 104_729]
            .into_iter()
            .find(|p| !n.is_multiple_of(*p))
            .unwrap_or(1);
        let start = (mix(repeat as u64, 3) % n.max(1) as u64) as usize;
        let mut picked = Vec::new();
        for k in 0..n {
            if picked.len() == spec.changed + spec.deleted {
                break;
            }
            let i = (start + k * stride) % n;
            if !is_large(i, n) {
                picked.push(i);
            }
        }
        let deleted = picked.split_off(spec.changed.min(picked.len()));
        let added = (0..spec.added)
            .map(|k| format!("{}/new-r{repeat}-{k:02}.rs", self.dir_of(k * 37 + repeat)))
            .collect();
        Change {
            repeat,
            changed: picked,
            deleted,
            added,
        }
    }

    /// The new bytes of a changed file: a comment over the middle, a line appended.
    fn changed_content(&self, i: usize, repeat: usize) -> Vec<u8> {
        let mut bytes = self.content(i);
        let patch = format!("/* edited in repeat {repeat} */");
        let at = bytes.len() / 2;
        let end = (at + patch.len()).min(bytes.len());
        bytes.splice(at..end, patch.bytes());
        bytes.extend_from_slice(format!("\n// appended in repeat {repeat}\n").as_bytes());
        bytes
    }

    /// Makes `change` in the tree at `root`.
    pub fn apply(&self, root: &Path, change: &Change) -> Result<()> {
        for &i in &change.changed {
            let path = root.join(self.path(i));
            std::fs::write(&path, self.changed_content(i, change.repeat))
                .with_context(|| format!("changing {}", path.display()))?;
        }
        for &i in &change.deleted {
            let path = root.join(self.path(i));
            std::fs::remove_file(&path).with_context(|| format!("deleting {}", path.display()))?;
        }
        for (k, rel) in change.added.iter().enumerate() {
            let path = root.join(rel);
            let header = format!("// added by aido-bench, repeat {}\n", change.repeat);
            let bytes = fill(
                &self.corpus,
                header.as_bytes(),
                mix(change.repeat as u64, 4 + k as u64),
                ADDED_BYTES,
            );
            std::fs::write(&path, bytes).with_context(|| format!("adding {}", path.display()))?;
        }
        Ok(())
    }

    /// Checks that the tree at `root` is the original again after `change` was made and
    /// undone: every touched file holds its original bytes, no added file is left, and the
    /// tree holds exactly the original count of files and bytes (`.git` aside).
    pub fn verify(&self, root: &Path, change: &Change) -> Result<()> {
        for &i in change.changed.iter().chain(&change.deleted) {
            let path = root.join(self.path(i));
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            if bytes != self.content(i) {
                bail!("{} does not hold its original bytes", path.display());
            }
        }
        for rel in &change.added {
            if root.join(rel).symlink_metadata().is_ok() {
                bail!("{} was added by the change and is still there", rel);
            }
        }
        let (files, bytes) = count(root)?;
        if (files, bytes) != (self.spec.files, self.spec.bytes) {
            bail!(
                "the tree at {} holds {files} files and {bytes} bytes, not {} and {}",
                root.display(),
                self.spec.files,
                self.spec.bytes
            );
        }
        Ok(())
    }
}

/// Regular files and their bytes under `root`, skipping a top-level `.git`.
pub fn count(root: &Path) -> Result<(usize, u64)> {
    let mut stack: Vec<PathBuf> = vec![root.to_owned()];
    let (mut files, mut bytes) = (0usize, 0u64);
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if dir == root && entry.file_name() == ".git" {
                continue;
            }
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(path);
            } else {
                files += 1;
                bytes += meta.len();
            }
        }
    }
    Ok((files, bytes))
}

/// One file in every [`FILES_PER_DIR`]: the 43rd of each leaf directory.
fn is_large(i: usize, files: usize) -> bool {
    let leaves = (files / FILES_PER_DIR).max(1);
    (i / leaves) % FILES_PER_DIR == 42
}

/// `header`, then `size - header` bytes of `corpus` from `seed`, wrapping; exactly `size` bytes.
fn fill(corpus: &[u8], header: &[u8], seed: u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&header[..header.len().min(size)]);
    let mut at = (seed % corpus.len().max(1) as u64) as usize;
    while out.len() < size {
        let take = (size - out.len()).min(corpus.len() - at);
        out.extend_from_slice(&corpus[at..at + take]);
        at = 0;
    }
    out
}

/// Source-like text: words from a fixed list, spaces and newlines, from a fixed seed.
fn corpus(bytes: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "fn", "let", "mut", "self", "impl", "struct", "enum", "match", "return", "Result", "Ok",
        "Err", "Some", "None", "use", "pub", "crate", "super", "where", "for", "in", "while",
        "loop", "if", "else", "async", "await", "move", "ref", "const", "static", "type", "trait",
        "dyn", "Box", "Vec", "String", "Option", "path", "file", "bytes", "len", "index", "value",
        "error", "context", "session", "journal", "snapshot", "restore", "policy", "action",
        "record", "{", "}", "(", ");", "=>", "->", "::", "&", "0", "1", "42",
    ];
    let mut out = Vec::with_capacity(bytes + 16);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut column = 0usize;
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let word = WORDS[(state % WORDS.len() as u64) as usize];
        out.extend_from_slice(word.as_bytes());
        column += word.len() + 1;
        if column > 60 + (state >> 58) as usize {
            out.push(b'\n');
            column = 0;
        } else {
            out.push(b' ');
        }
    }
    out.truncate(bytes);
    out
}

/// A cheap integer hash, so files differ without a random number generator.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: TreeSpec = TreeSpec {
        files: 300,
        bytes: 3_000_000,
    };
    const CHANGE: ChangeSpec = ChangeSpec {
        changed: 10,
        deleted: 3,
        added: 2,
    };

    #[test]
    fn sizes_add_up_and_vary() {
        let tree = Tree::new(SMALL);
        let sizes = tree.sizes.clone();
        assert_eq!(sizes.iter().sum::<u64>(), SMALL.bytes);
        let large = (0..SMALL.files)
            .filter(|&i| is_large(i, SMALL.files))
            .count();
        assert_eq!(large, 3, "one large file per leaf directory");
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(max / min.max(&1) > 50, "{min} .. {max}");
        assert_eq!(tree.content(7).len() as u64, tree.sizes[7]);
        assert_eq!(
            tree.content(7),
            Tree::new(SMALL).content(7),
            "deterministic"
        );
        assert_ne!(tree.content(7), tree.content(8));
    }

    #[test]
    fn a_change_touches_distinct_small_files_and_verify_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(SMALL);
        tree.write(dir.path()).unwrap();
        assert_eq!(count(dir.path()).unwrap(), (SMALL.files, SMALL.bytes));
        let change = tree.change(1, CHANGE);
        assert_eq!(
            (
                change.changed.len(),
                change.deleted.len(),
                change.added.len()
            ),
            (10, 3, 2)
        );
        let mut all: Vec<usize> = change
            .changed
            .iter()
            .chain(&change.deleted)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 13);
        assert!(all.iter().all(|&i| !is_large(i, SMALL.files)));
        assert_ne!(tree.change(2, CHANGE), change, "each repeat differs");
        tree.verify(dir.path(), &change).unwrap();

        tree.apply(dir.path(), &change).unwrap();
        assert_eq!(count(dir.path()).unwrap().0, SMALL.files - 3 + 2);
        assert!(tree.verify(dir.path(), &change).is_err());
        // Put it back by hand: the original bytes, the added files gone.
        for &i in change.changed.iter().chain(&change.deleted) {
            std::fs::write(dir.path().join(tree.path(i)), tree.content(i)).unwrap();
        }
        for rel in &change.added {
            std::fs::remove_file(dir.path().join(rel)).unwrap();
        }
        tree.verify(dir.path(), &change).unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "x").unwrap();
        tree.verify(dir.path(), &change).unwrap();
    }
}
