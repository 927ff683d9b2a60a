use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::btrfs;
use crate::detect::{self, Backend};
use crate::manifest::{self, Applied, Entry, Manifest};
use crate::tree::{self, Hook, Step, Walk};

pub use crate::error::SnapshotError;

/// A snapshot as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Its id.
    pub id: String,
    /// How it was taken.
    pub backend: Backend,
    /// When, milliseconds since the epoch (from the caller's clock).
    pub created_ms: u64,
    /// Regular files in it (not counted for btrfs snapshots: counting would walk the tree
    /// that an O(1) snapshot never reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Bytes of those files (as `files`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// What a restore did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RestoreStats {
    /// How.
    pub backend: Backend,
    /// Files written (0 for a btrfs swap).
    pub written: u64,
    /// Entries removed.
    pub removed: u64,
    /// Files that already matched.
    pub unchanged: u64,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    #[serde(flatten)]
    snapshot: Snapshot,
    #[serde(default)]
    manifest: Option<Manifest>,
}

/// Snapshots of one workspace.
#[derive(Clone, Debug)]
pub struct Store {
    workspace: PathBuf,
    backend: Backend,
    why: String,
    /// Where this workspace's snapshots and their metadata live.
    dir: PathBuf,
    /// The content-addressed objects (copy backend).
    objects: PathBuf,
    /// Never part of a snapshot (aido's own home, if it sits in the workspace).
    exclude: Vec<PathBuf>,
    /// Called between planning and acting on each entry, for tests (see [`Store::set_hook`]).
    hook: Option<Hook>,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Store {
    /// The store for `workspace`, with the best backend it supports.
    pub fn open(workspace: &Path, aido_home: &Path) -> Result<Self, SnapshotError> {
        Self::open_with(workspace, aido_home, None)
    }

    /// The store for `workspace` with a given backend, or the best one when `None`. A backend
    /// the workspace cannot use falls back to the next (btrfs -> reflink -> copy), and
    /// [`Store::why`] says so.
    pub fn open_with(
        workspace: &Path,
        aido_home: &Path,
        wanted: Option<Backend>,
    ) -> Result<Self, SnapshotError> {
        let workspace = workspace
            .canonicalize()
            .map_err(|e| SnapshotError::io("open workspace", workspace, e))?;
        if !workspace.is_dir() {
            return Err(SnapshotError::NotADirectory {
                path: workspace.display().to_string(),
            });
        }
        let aido_home = aido_home
            .canonicalize()
            .unwrap_or_else(|_| aido_home.to_owned());
        let name = workspace
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "root".into());
        let beside = workspace
            .parent()
            .unwrap_or(Path::new("/"))
            .join(".aido-snapshots")
            .join(&name);
        let key = blake3::hash(workspace.as_os_str().as_encoded_bytes()).to_hex()[..16].to_owned();
        let in_aido_home = aido_home.join("snapshots").join(key);
        let objects = aido_home.join("snapshots").join("objects");
        let exclude: Vec<PathBuf> = if aido_home.starts_with(&workspace) {
            vec![aido_home.clone()]
        } else {
            Vec::new()
        };

        let mut why = Vec::new();
        let try_btrfs = matches!(wanted, None | Some(Backend::BtrfsSubvolume));
        let try_reflink = !matches!(wanted, Some(Backend::Copy));
        let mut chosen = None;
        if try_btrfs {
            if !exclude.is_empty() {
                why.push("btrfs_subvolume: AIDO_HOME is inside the workspace and a subvolume snapshot would hold the journal".to_owned());
            } else if detect::is_btrfs_subvolume(&workspace) {
                chosen = Some(Backend::BtrfsSubvolume);
            } else {
                why.push("btrfs_subvolume: the workspace is not a btrfs subvolume (with `btrfs` installed)".to_owned());
            }
        }
        if chosen.is_none() && try_reflink {
            std::fs::create_dir_all(&beside)
                .map_err(|e| SnapshotError::io("create", &beside, e))?;
            if detect::supports_reflink(&beside) {
                chosen = Some(Backend::Reflink);
            } else {
                why.push("reflink: the filesystem cannot clone extents (FICLONE)".to_owned());
                let _ = std::fs::remove_dir(&beside);
                let _ = beside.parent().map(std::fs::remove_dir);
            }
        }
        let backend = chosen.unwrap_or(Backend::Copy);
        let dir = match backend {
            Backend::Copy => in_aido_home,
            Backend::BtrfsSubvolume | Backend::Reflink => beside,
        };
        std::fs::create_dir_all(&dir).map_err(|e| SnapshotError::io("create", &dir, e))?;
        if backend == Backend::Copy {
            std::fs::create_dir_all(&objects)
                .map_err(|e| SnapshotError::io("create", &objects, e))?;
        }
        let why = if why.is_empty() {
            format!("{backend}: supported")
        } else {
            format!("{backend} (skipped {})", why.join("; "))
        };
        Ok(Self {
            workspace,
            backend,
            why,
            dir,
            objects,
            exclude,
            hook: None,
        })
    }

    /// The store a `snapshot_taken` record names: its `workspace` (as it was resolved when
    /// the snapshot was taken) and the backend it was taken with. Nothing is probed or
    /// created, so it works when the workspace is gone or would now get another backend;
    /// for retention, which removes (and measures) snapshots whose records it removes.
    pub fn recorded(workspace: &Path, aido_home: &Path, backend: Backend) -> Self {
        let aido_home = aido_home
            .canonicalize()
            .unwrap_or_else(|_| aido_home.to_owned());
        let name = workspace
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "root".into());
        let key = blake3::hash(workspace.as_os_str().as_encoded_bytes()).to_hex()[..16].to_owned();
        let dir = match backend {
            Backend::Copy => aido_home.join("snapshots").join(key),
            Backend::BtrfsSubvolume | Backend::Reflink => workspace
                .parent()
                .unwrap_or(Path::new("/"))
                .join(".aido-snapshots")
                .join(&name),
        };
        let exclude = if aido_home.starts_with(workspace) {
            vec![aido_home.clone()]
        } else {
            Vec::new()
        };
        Self {
            workspace: workspace.to_owned(),
            backend,
            why: format!("{backend}: as recorded"),
            dir,
            objects: aido_home.join("snapshots").join("objects"),
            exclude,
            hook: None,
        }
    }

    /// Bytes on disk each of `ids` holds alone, by id (ids with no snapshot are left out):
    /// its metadata, and for the copy backend the objects no other snapshot of this
    /// `AIDO_HOME` names, for reflink its copy, for a btrfs subvolume nothing more (its
    /// extents are shared with the workspace until either changes; only `btrfs` could say
    /// how many are its own).
    pub fn usage(&self, ids: &[&str]) -> Result<HashMap<String, u64>, SnapshotError> {
        use std::os::unix::fs::MetadataExt;
        let blocks = |path: &Path| {
            std::fs::symlink_metadata(path)
                .map(|m| m.blocks() * 512)
                .unwrap_or(0)
        };
        let mut out = HashMap::new();
        let mut copies = Vec::new();
        for id in ids {
            let Ok(stored) = self.load(id) else {
                continue;
            };
            let mut bytes = blocks(&self.meta_path(id));
            match stored.snapshot.backend {
                Backend::Reflink => bytes += tree_blocks(&self.data_path(id)),
                Backend::BtrfsSubvolume => {}
                Backend::Copy => copies.push((id.to_string(), stored)),
            }
            out.insert(id.to_string(), bytes);
        }
        if copies.is_empty() {
            return Ok(out);
        }
        // How many snapshots of the whole AIDO_HOME name each object.
        let mut named: HashMap<String, u32> = HashMap::new();
        for stored in self.all_copy_snapshots()? {
            for hash in copy_objects(&stored) {
                *named.entry(hash).or_default() += 1;
            }
        }
        for (id, stored) in copies {
            let alone: u64 = copy_objects(&stored)
                .filter(|h| named.get(h) == Some(&1))
                .map(|h| blocks(&self.objects.join(h)))
                .sum();
            *out.entry(id).or_default() += alone;
        }
        Ok(out)
    }

    /// Every copy-backend snapshot's metadata in this AIDO_HOME (all workspaces share the
    /// objects).
    fn all_copy_snapshots(&self) -> Result<Vec<Stored>, SnapshotError> {
        let mut out = Vec::new();
        let Some(all) = self.objects.parent() else {
            return Ok(out);
        };
        let Ok(workspaces) = std::fs::read_dir(all) else {
            return Ok(out);
        };
        for ws in workspaces.flatten() {
            if ws.path() == self.objects || !ws.path().is_dir() {
                continue;
            }
            for meta in std::fs::read_dir(ws.path())
                .map_err(|e| SnapshotError::io("list", &ws.path(), e))?
                .flatten()
            {
                let Ok(bytes) = std::fs::read(meta.path()) else {
                    continue;
                };
                if let Ok(stored) = serde_json::from_slice::<Stored>(&bytes) {
                    out.push(stored);
                }
            }
        }
        Ok(out)
    }

    /// Call `hook(step, rel)` between planning and acting on each entry of a walk, snapshot,
    /// restore or delete, so a test can change the tree at exactly that moment (swap a
    /// directory for a symlink, say). For tests only; unset, it costs one `Option` check.
    #[doc(hidden)]
    pub fn set_hook(&mut self, hook: impl Fn(Step, &str) + Send + Sync + 'static) {
        self.hook = Some(Hook::new(hook));
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Why this backend (which ones were skipped and why).
    pub fn why(&self) -> &str {
        &self.why
    }

    /// The workspace (resolved).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn meta_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn data_path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn load(&self, id: &str) -> Result<Stored, SnapshotError> {
        if !valid_id(id) {
            return Err(SnapshotError::InvalidId { id: id.to_owned() });
        }
        let text = match std::fs::read(self.meta_path(id)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SnapshotError::NotFound { id: id.to_owned() });
            }
            Err(e) => return Err(SnapshotError::io("read", &self.meta_path(id), e)),
        };
        serde_json::from_slice(&text).map_err(|e| SnapshotError::Damaged {
            id: id.to_owned(),
            reason: e.to_string(),
        })
    }

    fn save(&self, stored: &Stored) -> Result<(), SnapshotError> {
        let path = self.meta_path(&stored.snapshot.id);
        let temp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(stored).map_err(|e| SnapshotError::Damaged {
            id: stored.snapshot.id.clone(),
            reason: e.to_string(),
        })?;
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&temp, &path)
        };
        write().map_err(|e| SnapshotError::io("write", &path, e))
    }

    /// Take a snapshot named `id`; `created_ms` comes from the caller's clock.
    pub fn create(&self, id: &str, created_ms: u64) -> Result<Snapshot, SnapshotError> {
        if !valid_id(id) {
            return Err(SnapshotError::InvalidId { id: id.to_owned() });
        }
        if self.meta_path(id).exists() || self.data_path(id).symlink_metadata().is_ok() {
            return Err(SnapshotError::Exists { id: id.to_owned() });
        }
        let (manifest, keep_manifest) = match self.backend {
            Backend::BtrfsSubvolume => {
                // `btrfs` takes the path: check first that no symlink stands in for the
                // workspace (one would make the snapshot of whatever it points at).
                self.workspace_in_parent()?;
                btrfs::snapshot_read_only(&self.workspace, &self.data_path(id))?;
                (None, false)
            }
            Backend::Reflink => (Some(self.create_reflink(id)?), true),
            Backend::Copy => (Some(self.create_copy()?), true),
        };
        let snapshot = Snapshot {
            id: id.to_owned(),
            backend: self.backend,
            created_ms,
            files: manifest.as_ref().map(Manifest::files),
            bytes: manifest.as_ref().map(Manifest::bytes),
        };
        self.save(&Stored {
            snapshot: snapshot.clone(),
            manifest: if keep_manifest { manifest } else { None },
        })?;
        Ok(snapshot)
    }

    fn create_reflink(&self, id: &str) -> Result<Manifest, SnapshotError> {
        let mut walk = Walk::new(tree::open_root(&self.workspace)?, &self.workspace);
        let manifest = manifest::scan_with(
            &mut walk,
            &self.workspace,
            &self.exclude,
            self.hook.as_ref(),
        )?;
        let data = self.data_path(id);
        std::fs::create_dir_all(&data).map_err(|e| SnapshotError::io("create", &data, e))?;
        for (rel, entry) in manifest::tree_order(&manifest) {
            let to = data.join(rel);
            match entry {
                Entry::Dir { .. } => {
                    std::fs::create_dir(&to).map_err(|e| SnapshotError::io("mkdir", &to, e))?
                }
                Entry::File { .. } => {
                    let source = self.open_in_workspace(&mut walk, rel)?;
                    let target = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&to)
                        .map_err(|e| SnapshotError::io("create", &to, e))?;
                    // FICLONE on the two open files: the clone is of what was opened no-follow.
                    rustix::fs::ioctl_ficlone(&target, &source).map_err(|e| {
                        SnapshotError::io("clone", &self.workspace.join(rel), e.into())
                    })?;
                }
                Entry::Symlink { target } => std::os::unix::fs::symlink(target, &to)
                    .map_err(|e| SnapshotError::io("symlink", &to, e))?,
            }
        }
        Ok(manifest)
    }

    /// Open the workspace file `rel` for reading through no-follow directory handles.
    fn open_in_workspace(
        &self,
        walk: &mut Walk<'_>,
        rel: &str,
    ) -> Result<std::fs::File, SnapshotError> {
        let (parts, name) = manifest::split(rel)?;
        tree::call(self.hook.as_ref(), Step::Snapshot, rel);
        let parent = walk.to(&parts)?;
        tree::open_file(parent, name).map_err(|e| {
            if tree::is_swapped(&e) {
                SnapshotError::Swapped {
                    path: rel.to_owned(),
                }
            } else {
                SnapshotError::io("open", &self.workspace.join(rel), e)
            }
        })
    }

    /// The newest stored manifest, to reuse hashes of files that did not change.
    fn previous_manifest(&self) -> BTreeMap<String, Entry> {
        self.list()
            .ok()
            .and_then(|l| l.into_iter().max_by_key(|s| s.created_ms))
            .and_then(|s| self.load(&s.id).ok())
            .and_then(|s| s.manifest)
            .map(|m| m.entries)
            .unwrap_or_default()
    }

    fn create_copy(&self) -> Result<Manifest, SnapshotError> {
        let mut walk = Walk::new(tree::open_root(&self.workspace)?, &self.workspace);
        let mut manifest = manifest::scan_with(
            &mut walk,
            &self.workspace,
            &self.exclude,
            self.hook.as_ref(),
        )?;
        let previous = self.previous_manifest();
        for (rel, entry) in manifest.entries.iter_mut() {
            let Entry::File {
                size,
                mtime_ns,
                hash,
                ..
            } = entry
            else {
                continue;
            };
            let reused = match previous.get(rel) {
                Some(Entry::File {
                    size: s,
                    mtime_ns: m,
                    hash: Some(h),
                    ..
                }) if s == size && m == mtime_ns => Some(h.clone()),
                _ => None,
            };
            let digest = match reused {
                Some(h) if self.objects.join(&h).exists() => h,
                _ => {
                    let file = self.open_in_workspace(&mut walk, rel)?;
                    self.store_object(file, rel)?
                }
            };
            *hash = Some(digest);
        }
        Ok(manifest)
    }

    /// Copy an open workspace file into the object store under its blake3; return the hash.
    /// The file is read once to hash it, and, when no object has that hash, once more into a
    /// temporary object hashed again as it is written, which is stored under that second hash:
    /// the bytes stored are always the bytes named, even if the file changed in between.
    fn store_object(&self, mut file: std::fs::File, rel: &str) -> Result<String, SnapshotError> {
        use std::io::Seek;
        let shown = self.workspace.join(rel);
        let hash = read_hashing(&mut file, None, &shown)?;
        if self.objects.join(&hash).exists() {
            return Ok(hash);
        }
        // Unique per process and call: stores of several workspaces share the objects.
        static TEMPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = TEMPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = self
            .objects
            .join(format!(".{}.{n}.tmp", std::process::id()));
        let mut out =
            std::fs::File::create(&temp).map_err(|e| SnapshotError::io("store", &temp, e))?;
        // The copy backend is chosen where extents cannot be shared: copy outright.
        let copied = file
            .rewind()
            .map_err(|e| SnapshotError::io("read", &shown, e))
            .and_then(|()| read_hashing(&mut file, Some(&mut out), &shown))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&temp);
            })?;
        drop(out);
        let object = self.objects.join(&copied);
        std::fs::rename(&temp, &object).map_err(|e| SnapshotError::io("store", &object, e))?;
        Ok(copied)
    }

    /// Make the workspace equal to snapshot `id`. Safe to run again after a crash.
    pub fn restore(&self, id: &str) -> Result<RestoreStats, SnapshotError> {
        let stored = self.load(id)?;
        let applied = match (stored.snapshot.backend, stored.manifest) {
            (Backend::BtrfsSubvolume, _) => {
                self.restore_btrfs(id)?;
                Applied::default()
            }
            (Backend::Reflink, Some(m)) => {
                let data = self.data_path(id);
                manifest::apply(
                    &self.workspace,
                    &m,
                    &self.exclude,
                    self.hook.as_ref(),
                    &|rel, _, target| tree::clone_or_copy(&open_stored(&data.join(rel))?, target),
                )?
            }
            (Backend::Copy, Some(m)) => manifest::apply(
                &self.workspace,
                &m,
                &self.exclude,
                self.hook.as_ref(),
                &|_, entry, target| match entry {
                    Entry::File { hash: Some(h), .. } => {
                        tree::clone_or_copy(&open_stored(&self.objects.join(h))?, target)
                    }
                    _ => Err(std::io::Error::other("a file without a hash")),
                },
            )?,
            (_, None) => {
                return Err(SnapshotError::Damaged {
                    id: id.to_owned(),
                    reason: "no manifest".into(),
                });
            }
        };
        Ok(RestoreStats {
            backend: stored.snapshot.backend,
            written: applied.written,
            removed: applied.removed,
            unchanged: applied.unchanged,
        })
    }

    /// A handle on the workspace's parent and the workspace's name in it, after checking
    /// through that handle that the name is a directory itself, not a symlink standing in for
    /// one (`btrfs` commands take paths and would follow it).
    fn workspace_in_parent(&self) -> Result<(cap_std::fs::Dir, &str), SnapshotError> {
        let not_a_directory = || SnapshotError::NotADirectory {
            path: self.workspace.display().to_string(),
        };
        let name = self
            .workspace
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(not_a_directory)?;
        let above = self.workspace.parent().ok_or_else(not_a_directory)?;
        let parent = tree::open_root(above)?;
        match parent.symlink_metadata(name) {
            Ok(m) if m.is_dir() => Ok((parent, name)),
            Ok(_) => Err(not_a_directory()),
            Err(e) => Err(SnapshotError::io("stat", &self.workspace, e)),
        }
    }

    fn restore_btrfs(&self, id: &str) -> Result<(), SnapshotError> {
        // Everything by name in a handle on the workspace's parent: the exchange swaps
        // exactly these two entries, whatever the path to the parent does meanwhile.
        let (parent, name) = self.workspace_in_parent()?;
        let swap_name = format!(".{name}.aido-swap");
        let swap = self.workspace.with_file_name(&swap_name);
        // A swap left by a crash holds either the new tree (not yet swapped in) or the old
        // one (swapped out, not yet deleted); either way it is not the workspace. Drop it.
        drop_swap(&parent, &swap_name, &swap)?;
        btrfs::snapshot(&self.data_path(id), &swap)?;
        tree::call(self.hook.as_ref(), Step::Restore, "");
        // Both names must still be directories themselves: exchanged, a symlink standing in
        // for the workspace would go to the swap's name, and deleting the swap would hand the
        // link to `btrfs subvolume delete`, which follows it.
        for (each, path) in [(swap_name.as_str(), &swap), (name, &self.workspace)] {
            match parent.symlink_metadata(each) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(SnapshotError::NotADirectory {
                        path: path.display().to_string(),
                    });
                }
                Err(e) => return Err(SnapshotError::io("stat", path, e)),
            }
        }
        btrfs::exchange(&parent, &swap_name, name, &self.workspace)?;
        drop_swap(&parent, &swap_name, &swap)
    }

    /// Delete snapshot `id` (and, for the copy backend, objects nothing else uses).
    pub fn delete(&self, id: &str) -> Result<(), SnapshotError> {
        let stored = self.load(id)?;
        let data = self.data_path(id);
        match stored.snapshot.backend {
            Backend::BtrfsSubvolume => btrfs::delete(&data)?,
            Backend::Reflink => {
                // The copy holds the workspace's symlinks: removed by handles, never followed.
                let dir = tree::open_root(&self.dir)?;
                let mut budget = manifest::ENTRIES_MAX;
                tree::remove_tree(&dir, id, id, &mut budget, self.hook.as_ref(), Step::Delete)
                    .map_err(|e| match e {
                        SnapshotError::Io { op, source, .. } => {
                            SnapshotError::io(op, &data, source)
                        }
                        other => other,
                    })?
            }
            Backend::Copy => {}
        }
        let meta = self.meta_path(id);
        std::fs::remove_file(&meta).map_err(|e| SnapshotError::io("remove", &meta, e))?;
        if stored.snapshot.backend == Backend::Copy {
            self.collect_garbage()?;
        }
        Ok(())
    }

    /// Remove objects no snapshot of any workspace in this AIDO_HOME refers to.
    fn collect_garbage(&self) -> Result<(), SnapshotError> {
        let Some(all) = self.objects.parent() else {
            return Ok(());
        };
        let mut live = HashSet::new();
        for ws in std::fs::read_dir(all)
            .map_err(|e| SnapshotError::io("list", all, e))?
            .flatten()
        {
            if ws.path() == self.objects || !ws.path().is_dir() {
                continue;
            }
            for meta in std::fs::read_dir(ws.path())
                .map_err(|e| SnapshotError::io("list", &ws.path(), e))?
                .flatten()
            {
                let Ok(bytes) = std::fs::read(meta.path()) else {
                    continue;
                };
                let Ok(stored) = serde_json::from_slice::<Stored>(&bytes) else {
                    continue;
                };
                for entry in stored.manifest.iter().flat_map(|m| m.entries.values()) {
                    if let Entry::File { hash: Some(h), .. } = entry {
                        live.insert(h.clone());
                    }
                }
            }
        }
        for object in std::fs::read_dir(&self.objects)
            .map_err(|e| SnapshotError::io("list", &self.objects, e))?
            .flatten()
        {
            let name = object.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                let _ = std::fs::remove_file(object.path());
            }
        }
        Ok(())
    }

    /// Every snapshot of this workspace, oldest first.
    pub fn list(&self) -> Result<Vec<Snapshot>, SnapshotError> {
        let mut out = Vec::new();
        for item in std::fs::read_dir(&self.dir)
            .map_err(|e| SnapshotError::io("list", &self.dir, e))?
            .flatten()
        {
            let name = item.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if let Ok(stored) = self.load(id) {
                out.push(stored.snapshot);
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(out)
    }
}

/// The distinct objects a copy snapshot's manifest names.
fn copy_objects(stored: &Stored) -> impl Iterator<Item = String> + '_ {
    let mut seen = HashSet::new();
    stored
        .manifest
        .iter()
        .flat_map(|m| m.entries.values())
        .filter_map(move |entry| match entry {
            Entry::File { hash: Some(h), .. } if seen.insert(h.clone()) => Some(h.clone()),
            _ => None,
        })
}

/// Blocks a tree takes on disk (directories included, links not followed).
fn tree_blocks(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        total += entries
            .flatten()
            .map(|e| tree_blocks(&e.path()))
            .sum::<u64>();
    }
    total
}

/// Read `file` to its end, hashing it (blake3) and writing what was read to `out` if given.
fn read_hashing(
    file: &mut std::fs::File,
    mut out: Option<&mut std::fs::File>,
    shown: &Path,
) -> Result<String, SnapshotError> {
    use std::io::Write;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| SnapshotError::io("read", shown, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if let Some(out) = out.as_mut() {
            out.write_all(&buf[..n])
                .map_err(|e| SnapshotError::io("store", shown, e))?;
        }
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// Remove the swap entry `name` of a btrfs restore from `parent`: a subvolume through
/// `btrfs subvolume delete`, anything else (a symlink put there would be followed by the
/// command) unlinked itself.
fn drop_swap(parent: &cap_std::fs::Dir, name: &str, path: &Path) -> Result<(), SnapshotError> {
    match parent.symlink_metadata(name) {
        Ok(m) if m.is_dir() => btrfs::delete(path),
        Ok(_) => tree::unlink(parent, name).map_err(|e| SnapshotError::io("remove", path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SnapshotError::io("stat", path, e)),
    }
}

/// Open a stored file (a reflink snapshot's copy, or an object) for reading; a symlink there
/// is refused rather than followed.
fn open_stored(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_own_stable_code() {
        let io = || std::io::Error::other("x");
        let table = [
            (
                SnapshotError::io("op", Path::new("p"), io()),
                "snapshot_io_failed",
            ),
            (
                SnapshotError::io("op", Path::new("p"), std::io::Error::from_raw_os_error(28)),
                "disk_full",
            ),
            (
                SnapshotError::NotFound { id: "i".into() },
                "snapshot_not_found",
            ),
            (SnapshotError::Exists { id: "i".into() }, "snapshot_exists"),
            (
                SnapshotError::InvalidId { id: "i".into() },
                "snapshot_id_invalid",
            ),
            (
                SnapshotError::UnsupportedName { name: "n".into() },
                "snapshot_name_unsupported",
            ),
            (
                SnapshotError::TooManyEntries { max: 1 },
                "snapshot_too_large",
            ),
            (
                SnapshotError::NotADirectory { path: "p".into() },
                "workspace_not_a_directory",
            ),
            (
                SnapshotError::Command {
                    command: "c".into(),
                    stderr: "e".into(),
                },
                "snapshot_command_failed",
            ),
            (
                SnapshotError::Swapped { path: "p".into() },
                "workspace_entry_swapped",
            ),
            (
                SnapshotError::EntryInvalid { path: "p".into() },
                "snapshot_entry_invalid",
            ),
            (SnapshotError::TooDeep { max: 1 }, "snapshot_too_deep"),
            (
                SnapshotError::Damaged {
                    id: "i".into(),
                    reason: "r".into(),
                },
                "snapshot_damaged",
            ),
        ];
        let mut seen = HashSet::new();
        for (error, code) in &table {
            assert_eq!(error.code(), *code, "{error}");
            assert!(seen.insert(*code), "{code} is used twice");
        }
    }

    /// A store opened from a `snapshot_taken` record's workspace and backend finds, measures
    /// and deletes the snapshot the live store took; objects two snapshots share are counted
    /// for neither, and survive the deletion of one.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_recorded_store_measures_and_deletes_what_the_live_one_took() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let home = dir.path().join("aido");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("shared"), vec![1u8; 100_000]).unwrap();
        let live = Store::open_with(&ws, &home, Some(Backend::Copy)).unwrap();
        live.create("one", 1).unwrap();
        std::fs::write(ws.join("second"), vec![2u8; 50_000]).unwrap();
        live.create("two", 2).unwrap();
        let recorded = Store::recorded(live.workspace(), &home, Backend::Copy);
        let usage = recorded.usage(&["one", "two", "three"]).unwrap();
        assert_eq!(usage.len(), 2);
        assert!(usage["one"] < 8192, "one holds only its metadata alone");
        assert!(usage["two"] >= 50_000, "two alone holds the second file");
        recorded.delete("two").unwrap();
        assert_eq!(recorded.list().unwrap().len(), 1);
        std::fs::write(ws.join("shared"), b"changed").unwrap();
        live.restore("one").unwrap();
        assert_eq!(
            std::fs::read(ws.join("shared")).unwrap(),
            vec![1u8; 100_000]
        );
        assert_eq!(Backend::from_name("reflink"), Some(Backend::Reflink));
        assert_eq!(Backend::from_name("zfs"), None);
    }
}
