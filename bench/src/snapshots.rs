//! Snapshot create and restore on a large tree, with every aido backend and two peers, in one
//! run: aido's `btrfs_subvolume` backend on a btrfs subvolume, `reflink` on a plain directory
//! of the same btrfs, and `copy` in the default temp dir; against `cp -a` and a git commit
//! (plus checkout) of the same tree, on the same filesystems.
//!
//! Every method runs the same repeats. One repeat: sync; time the first snapshot of the tree
//! (nothing of it stored yet); time a `sync -f` right after; make the change (files rewritten,
//! deleted, added); sync; time the restore; time a `sync -f`; check the tree is the original;
//! make the same change again; sync; time a second snapshot while the first is kept; then, not
//! timed, put the tree back and drop everything the method stored, so the next repeat starts
//! cold again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aido_snapshots::{Backend, Store};
use anyhow::{Context, Result, bail};

use crate::harness::median;
use crate::machine;
use crate::record::{Record, Section};
use crate::render::{format_bytes, format_duration, thousands};
use crate::rewind::{self, RewindOutcome, RewindRun};
use crate::stop;
use crate::tree::{ChangeSpec, Tree, TreeSpec};
use crate::volume::Volume;

/// How the section runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The tree.
    pub tree: TreeSpec,
    /// The change restored.
    pub change: ChangeSpec,
    /// Repeats per method.
    pub repeats: usize,
    /// Size of the btrfs loop file.
    pub btrfs_bytes: u64,
    /// The rewind benchmark, or `None` to skip it.
    pub rewind: Option<rewind::Options>,
}

/// A way of taking and restoring a copy of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// An aido snapshot store with this backend.
    Aido(Backend),
    /// `cp -a tree copy`; restore `rm -rf tree && cp -a copy tree`.
    CpA,
    /// `git init; git add -A; git commit`; restore `git checkout -- . && git clean -fdq`.
    Git,
    /// The btrfs commands alone, for the floor under aido's btrfs backend: `btrfs subvolume
    /// snapshot -r`; restore `btrfs subvolume delete` of the workspace and a writable `btrfs
    /// subvolume snapshot` back in its place.
    BtrfsBare,
}

impl Method {
    /// The name in the report.
    pub fn label(self) -> String {
        match self {
            Self::Aido(b) => format!("aido `{b}`"),
            Self::CpA => "`cp -a`".into(),
            Self::Git => "git".into(),
            Self::BtrfsBare => "`btrfs subvolume snapshot` alone".into(),
        }
    }
}

/// Every repeat's times, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// The first snapshot of the tree.
    pub create: Vec<Duration>,
    /// `sync -f` right after it.
    pub sync_after_create: Vec<Duration>,
    /// The restore after the change.
    pub restore: Vec<Duration>,
    /// `sync -f` right after it.
    pub sync_after_restore: Vec<Duration>,
    /// A second snapshot, of the changed tree, with the first kept.
    pub second_create: Vec<Duration>,
    /// What the method said about itself (aido: why this backend; restore counts).
    pub note: String,
}

/// One row's result.
#[derive(Clone, Debug, PartialEq)]
pub enum RowOutcome {
    /// Measured.
    Ran(Timings),
    /// Not run, and why.
    Skipped(String),
    /// Started and failed.
    Failed(String),
}

/// One method in one place.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What.
    pub method: Method,
    /// Where, in words ("a btrfs subvolume").
    pub place: String,
    /// The filesystem type.
    pub fs: String,
    /// What happened.
    pub outcome: RowOutcome,
}

impl Row {
    /// The times, when it ran.
    pub fn timings(&self) -> Option<&Timings> {
        match &self.outcome {
            RowOutcome::Ran(t) => Some(t),
            _ => None,
        }
    }
}

/// The btrfs volume, or why there was none.
#[derive(Clone, Debug, PartialEq)]
pub enum BtrfsStatus {
    /// Mounted: the loop file's size.
    Mounted {
        /// Bytes (sparse).
        bytes: u64,
    },
    /// Not available.
    Unavailable(String),
}

/// Everything the section measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Results {
    /// The tree.
    pub tree: TreeSpec,
    /// Leaf directories in it.
    pub dirs: usize,
    /// Its smallest and largest file, bytes.
    pub sizes: (u64, u64),
    /// The change.
    pub change: ChangeSpec,
    /// Repeats per method.
    pub repeats: usize,
    /// The btrfs volume.
    pub btrfs: BtrfsStatus,
    /// One per method and place.
    pub rows: Vec<Row>,
    /// The rewind runs (empty when skipped).
    pub rewind: Vec<RewindRun>,
    /// The rewind options, when asked for.
    pub rewind_options: Option<rewind::Options>,
    /// `cp --version`, `git --version`, `btrfs --version` (first lines).
    pub tools: Vec<(String, String)>,
}

/// Runs the section in a fresh temp dir under `temp`; everything it makes is removed (and
/// unmounted) on the way out, whatever the way.
#[allow(clippy::too_many_lines)]
pub fn run(temp: &Path, options: &Options) -> Result<Results> {
    let root = tempfile::Builder::new()
        .prefix("aido-bench-snapshots-")
        .tempdir_in(temp)
        .with_context(|| format!("creating a temp dir in {}", temp.display()))?;
    let base = root.path().canonicalize()?;
    let aido_home = base.join("aido-home");
    std::fs::create_dir_all(&aido_home)?;
    let tree = Tree::new(options.tree);
    let mut rows = Vec::new();

    // The default temp filesystem: the copy backend and both peers on one tree.
    let plain = base.join("tempfs");
    let ext_tree = plain.join("tree");
    let temp_fs = machine::fs_type(&base).unwrap_or_else(|| "unknown".into());
    write_tree(&tree, &ext_tree)?;
    for method in [Method::Aido(Backend::Copy), Method::CpA, Method::Git] {
        rows.push(row(
            method,
            "a directory in the default temp dir",
            &temp_fs,
            &tree,
            &ext_tree,
            &aido_home,
            options,
        )?);
    }
    let _ = std::fs::remove_dir_all(&plain);

    // btrfs in a loop file: the subvolume backend on the workspace subvolume, reflink and
    // the peers on a plain directory beside it.
    eprintln!(
        "aido-bench: making a {} btrfs loop volume",
        crate::render::format_bytes(options.btrfs_bytes)
    );
    let volume = Volume::create(&base, &aido_home, options.btrfs_bytes);
    let btrfs = match &volume {
        Ok(v) => BtrfsStatus::Mounted { bytes: v.bytes },
        Err(reason) => {
            eprintln!("aido-bench: no btrfs volume: {reason}");
            BtrfsStatus::Unavailable(reason.clone())
        }
    };
    match &volume {
        Ok(v) => rows.extend(btrfs_rows(v, &tree, &aido_home, options)?),
        Err(_) => {
            for (method, place) in BTRFS_ROWS {
                rows.push(Row {
                    method,
                    place: place.into(),
                    fs: "btrfs".into(),
                    outcome: RowOutcome::Skipped(NO_VOLUME.into()),
                });
            }
        }
    }

    let mut rewind_runs = Vec::new();
    if let Some(rewind_options) = &options.rewind {
        rewind_runs.push(rewind::run(
            rewind_options,
            Backend::Copy,
            &base.join("rewind-copy"),
            &base.join("rewind-copy"),
            &temp_fs,
        )?);
        match &volume {
            Ok(v) => {
                let fs = machine::fs_type(v.mount()).unwrap_or_else(|| "unknown".into());
                rewind_runs.push(rewind::run(
                    rewind_options,
                    Backend::BtrfsSubvolume,
                    &v.mount().join("rewind"),
                    &base.join("rewind-btrfs"),
                    &fs,
                )?);
            }
            Err(_) => rewind_runs.push(RewindRun::skipped(
                Backend::BtrfsSubvolume,
                "btrfs",
                NO_VOLUME.into(),
            )),
        }
    }
    // Unmount before the temp dir (which holds the image and the mount point) goes.
    drop(volume);
    drop(root);

    Ok(Results {
        tree: options.tree,
        dirs: tree.dirs(),
        sizes: tree.size_range(),
        change: options.change,
        repeats: options.repeats,
        btrfs,
        rows,
        rewind: rewind_runs,
        rewind_options: options.rewind.clone(),
        tools: [("cp", "cp"), ("git", "git"), ("btrfs-progs", "btrfs")]
            .into_iter()
            .map(|(name, program)| {
                let version = Command::new(program)
                    .arg("--version")
                    .output()
                    .ok()
                    .and_then(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .next()
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| "not found".into());
                (name.to_owned(), version)
            })
            .collect(),
    })
}

/// Why a btrfs row did not run (the report says once, in the snapshot section, why there was
/// no volume).
pub const NO_VOLUME: &str = "no btrfs volume in this run (the snapshot section says why)";

/// The rows on btrfs, and where they run.
const BTRFS_ROWS: [(Method, &str); 5] = [
    (
        Method::Aido(Backend::BtrfsSubvolume),
        "a btrfs subvolume (the workspace `aido workspace init --btrfs` makes)",
    ),
    (Method::BtrfsBare, "the same btrfs subvolume, without aido"),
    (
        Method::Aido(Backend::Reflink),
        "a plain directory on the same btrfs",
    ),
    (Method::CpA, "a plain directory on the same btrfs"),
    (Method::Git, "a plain directory on the same btrfs"),
];

/// Every btrfs row: the subvolume rows on the volume's workspace subvolume, the others on a
/// plain directory beside it (removed afterwards).
fn btrfs_rows(v: &Volume, tree: &Tree, aido_home: &Path, options: &Options) -> Result<Vec<Row>> {
    let fs = machine::fs_type(v.mount()).unwrap_or_else(|| "unknown".into());
    write_tree(tree, &v.subvolume)?;
    let plain_tree = v.mount().join("plain").join("tree");
    write_tree(tree, &plain_tree)?;
    let mut rows = Vec::new();
    for (method, place) in BTRFS_ROWS {
        let dir = match method {
            Method::Aido(Backend::BtrfsSubvolume) | Method::BtrfsBare => &v.subvolume,
            _ => &plain_tree,
        };
        rows.push(row(method, place, &fs, tree, dir, aido_home, options)?);
    }
    // The trees are done with; the rewind runs need little room.
    let _ = std::fs::remove_dir_all(v.mount().join("plain"));
    Ok(rows)
}

fn write_tree(tree: &Tree, dir: &Path) -> Result<()> {
    stop::check()?;
    let start = Instant::now();
    tree.write(dir)?;
    settle();
    eprintln!(
        "aido-bench: wrote the tree ({} files, {}) to {} in {:.1} s",
        tree.spec.files,
        crate::render::format_bytes(tree.spec.bytes),
        dir.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Measures one method on the tree at `dir`; a failure of the method is a row, an interrupt
/// is an error.
fn row(
    method: Method,
    place: &str,
    fs: &str,
    tree: &Tree,
    dir: &Path,
    aido_home: &Path,
    options: &Options,
) -> Result<Row> {
    stop::check()?;
    eprintln!("aido-bench: {} on {} ({fs})", method.label(), dir.display());
    let measured =
        subject(method, dir, aido_home).and_then(|mut s| measure(s.as_mut(), tree, dir, options));
    let outcome = match measured {
        Ok(t) => {
            eprintln!(
                "aido-bench:   create {} (median of {}), restore {}, second create {}",
                crate::render::format_duration(median(&t.create)),
                t.create.len(),
                crate::render::format_duration(median(&t.restore)),
                crate::render::format_duration(median(&t.second_create)),
            );
            RowOutcome::Ran(t)
        }
        Err(_) if stop::requested() => bail!("interrupted"),
        Err(e) => {
            eprintln!("aido-bench:   failed: {e:#}");
            // The next rows on this tree start from the original again.
            if let Err(again) = rewrite(tree, dir) {
                bail!("{e:#}; rewriting the tree afterwards also failed: {again:#}");
            }
            RowOutcome::Failed(format!("{e:#}"))
        }
    };
    Ok(Row {
        method,
        place: place.into(),
        fs: fs.into(),
        outcome,
    })
}

/// Empties `dir` (a `.git` and any leftover of a failed method included) and writes the tree
/// into it again.
fn rewrite(tree: &Tree, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    write_tree(tree, dir)
}

/// Something that copies the tree away and brings it back.
trait Subject {
    /// Take copy `id` of the tree; the time that counts.
    fn create(&mut self, id: &str) -> Result<Duration>;
    /// Make the tree equal to copy `id` (the newest); the time that counts.
    fn restore(&mut self, id: &str) -> Result<Duration>;
    /// Not timed: make the tree equal to copy `first` and drop every copy.
    fn reset(&mut self, first: &str, ids: &[&str]) -> Result<()>;
    /// Said in the report.
    fn note(&self) -> String;
}

fn subject(method: Method, dir: &Path, aido_home: &Path) -> Result<Box<dyn Subject>> {
    Ok(match method {
        Method::Aido(backend) => {
            let store = Store::open_with(dir, aido_home, Some(backend))?;
            if store.backend() != backend {
                bail!(
                    "asked for {backend}, the store took {}: {}",
                    store.backend(),
                    store.why()
                );
            }
            Box::new(Aido {
                store,
                clock: 0,
                restored: None,
            })
        }
        Method::CpA => {
            let copies = dir.with_file_name("cp-copies");
            std::fs::create_dir_all(&copies)?;
            Box::new(CpA {
                tree: dir.to_owned(),
                copies,
            })
        }
        Method::Git => Box::new(Git {
            tree: dir.to_owned(),
        }),
        Method::BtrfsBare => {
            let snapshots = dir.with_file_name("bare-snapshots");
            std::fs::create_dir_all(&snapshots)?;
            Box::new(BtrfsBare {
                subvolume: dir.to_owned(),
                snapshots,
            })
        }
    })
}

fn measure(
    subject: &mut dyn Subject,
    tree: &Tree,
    dir: &Path,
    options: &Options,
) -> Result<Timings> {
    let mut t = Timings::default();
    for repeat in 0..options.repeats {
        stop::check()?;
        let change = tree.change(repeat, options.change);
        let (first, second) = (format!("r{repeat}-first"), format!("r{repeat}-second"));
        settle();
        t.create.push(subject.create(&first).context("create")?);
        t.sync_after_create.push(sync_fs(dir)?);
        tree.apply(dir, &change)?;
        settle();
        t.restore.push(subject.restore(&first).context("restore")?);
        t.sync_after_restore.push(sync_fs(dir)?);
        tree.verify(dir, &change)
            .context("the tree after the restore")?;
        stop::check()?;
        tree.apply(dir, &change)?;
        settle();
        t.second_create
            .push(subject.create(&second).context("second create")?);
        subject
            .reset(&first, &[&first, &second])
            .context("putting the tree back")?;
        tree.verify(dir, &change)
            .context("the tree after the reset")?;
    }
    t.note = subject.note();
    Ok(t)
}

/// Let earlier writes reach the disk so no timed step pays for them (twice: the loop file's
/// own pages are written back after the filesystem inside it is synced).
fn settle() {
    for _ in 0..2 {
        let _ = Command::new("sync").status();
    }
}

/// Times `sync -f dir`: what it costs to make the step just timed durable.
fn sync_fs(dir: &Path) -> Result<Duration> {
    let start = Instant::now();
    exec(Command::new("sync").arg("-f").arg(dir))?;
    Ok(start.elapsed())
}

/// Runs a command to success, or says what it printed.
/// [`crate::harness::exec`], its output dropped.
fn exec(command: &mut Command) -> Result<()> {
    crate::harness::exec(command).map(drop)
}

fn timed(f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed())
}

struct Aido {
    store: Store,
    clock: u64,
    restored: Option<aido_snapshots::RestoreStats>,
}

impl Subject for Aido {
    fn create(&mut self, id: &str) -> Result<Duration> {
        self.clock += 1;
        let clock = self.clock;
        timed(|| self.store.create(id, clock).map(|_| ()).map_err(Into::into))
    }

    fn restore(&mut self, id: &str) -> Result<Duration> {
        let start = Instant::now();
        let stats = self.store.restore(id)?;
        let elapsed = start.elapsed();
        self.restored = Some(stats);
        Ok(elapsed)
    }

    fn reset(&mut self, first: &str, ids: &[&str]) -> Result<()> {
        self.store.restore(first)?;
        for id in ids {
            self.store.delete(id)?;
        }
        Ok(())
    }

    fn note(&self) -> String {
        let mut note = self.store.why().to_owned();
        if let Some(s) = self.restored
            && s.backend != Backend::BtrfsSubvolume
        {
            note.push_str(&format!(
                "; a restore rewrote {} files, removed {} and left {} as they were",
                s.written, s.removed, s.unchanged
            ));
        }
        note
    }
}

struct CpA {
    tree: PathBuf,
    copies: PathBuf,
}

impl Subject for CpA {
    fn create(&mut self, id: &str) -> Result<Duration> {
        let copy = self.copies.join(id);
        timed(|| exec(Command::new("cp").arg("-a").arg(&self.tree).arg(&copy)))
    }

    fn restore(&mut self, id: &str) -> Result<Duration> {
        let copy = self.copies.join(id);
        timed(|| {
            exec(Command::new("rm").arg("-rf").arg(&self.tree))?;
            exec(Command::new("cp").arg("-a").arg(&copy).arg(&self.tree))
        })
    }

    fn reset(&mut self, first: &str, _ids: &[&str]) -> Result<()> {
        self.restore(first)?;
        exec(Command::new("rm").arg("-rf").arg(&self.copies))?;
        std::fs::create_dir_all(&self.copies)?;
        Ok(())
    }

    fn note(&self) -> String {
        "GNU cp; restore is `rm -rf tree && cp -a copy tree`".into()
    }
}

struct Git {
    tree: PathBuf,
}

impl Git {
    /// git in the tree, with no user or system config, no automatic gc or maintenance (10,000
    /// loose objects would otherwise start a background `git gc` mid-measurement).
    fn git(&self, args: &[&str]) -> Result<()> {
        exec(
            Command::new("git")
                .current_dir(&self.tree)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_NAME", "aido-bench")
                .env("GIT_AUTHOR_EMAIL", "bench@localhost")
                .env("GIT_COMMITTER_NAME", "aido-bench")
                .env("GIT_COMMITTER_EMAIL", "bench@localhost")
                .args([
                    "-c",
                    "gc.auto=0",
                    "-c",
                    "maintenance.auto=false",
                    "-c",
                    "init.defaultBranch=main",
                    "-c",
                    "commit.gpgSign=false",
                ])
                .args(args),
        )
    }
}

impl Subject for Git {
    fn create(&mut self, id: &str) -> Result<Duration> {
        let fresh = !self.tree.join(".git").exists();
        timed(|| {
            if fresh {
                self.git(&["init", "-q"])?;
            }
            self.git(&["add", "-A"])?;
            self.git(&["commit", "-q", "-m", id])
        })
    }

    fn restore(&mut self, _id: &str) -> Result<Duration> {
        timed(|| {
            self.git(&["checkout", "-q", "--", "."])?;
            self.git(&["clean", "-fdq"])
        })
    }

    fn reset(&mut self, _first: &str, ids: &[&str]) -> Result<()> {
        // Back over the commits after the first, then drop the repository.
        let back = format!("HEAD~{}", ids.len().saturating_sub(1));
        self.git(&["reset", "-q", "--hard", &back])?;
        self.git(&["clean", "-fdq"])?;
        std::fs::remove_dir_all(self.tree.join(".git"))?;
        Ok(())
    }

    fn note(&self) -> String {
        "git defaults (zlib-compressed loose objects), gc.auto=0; restore is `git checkout -- . \
         && git clean -fdq`"
            .into()
    }
}

struct BtrfsBare {
    subvolume: PathBuf,
    snapshots: PathBuf,
}

impl BtrfsBare {
    fn btrfs(args: &[&str], paths: &[&Path]) -> Result<()> {
        exec(Command::new("btrfs").args(args).args(paths))
    }
}

impl Subject for BtrfsBare {
    fn create(&mut self, id: &str) -> Result<Duration> {
        let snapshot = self.snapshots.join(id);
        timed(|| {
            Self::btrfs(
                &["subvolume", "snapshot", "-r"],
                &[&self.subvolume, &snapshot],
            )
        })
    }

    fn restore(&mut self, id: &str) -> Result<Duration> {
        let snapshot = self.snapshots.join(id);
        timed(|| {
            Self::btrfs(&["subvolume", "delete"], &[&self.subvolume])?;
            Self::btrfs(&["subvolume", "snapshot"], &[&snapshot, &self.subvolume])
        })
    }

    fn reset(&mut self, first: &str, ids: &[&str]) -> Result<()> {
        self.restore(first)?;
        for id in ids {
            Self::btrfs(&["subvolume", "delete"], &[&self.snapshots.join(id)])?;
        }
        Ok(())
    }

    fn note(&self) -> String {
        "create `btrfs subvolume snapshot -r ws snap`; restore `btrfs subvolume delete ws && \
         btrfs subvolume snapshot snap ws` (not atomic: no swap, no walk of the tree)"
            .into()
    }
}

/// The snapshot section's state in one run.
pub type SnapshotSection = crate::harness::Run<Results>;

/// A method's part of a row id.
fn slug(method: Method) -> String {
    match method {
        Method::Aido(b) => b.to_string(),
        Method::CpA => "cp_a".into(),
        Method::Git => "git".into(),
        Method::BtrfsBare => "btrfs_bare".into(),
    }
}

/// The records of the snapshot section and of the rewind section.
pub fn records(measured: &SnapshotSection) -> Vec<Record> {
    let (mut snaps, mut rewinds) = (Section::new("snapshots"), Section::new("rewind"));
    let r = match measured {
        SnapshotSection::Ran(r) => r,
        SnapshotSection::Skipped(why) | SnapshotSection::Failed(why) => {
            let why = match measured {
                SnapshotSection::Failed(_) => format!("the section failed before measuring: {why}"),
                _ => why.clone(),
            };
            // The judged rows still stand in the summary, saying why they have no value.
            let what = |step| format!("aido `btrfs_subvolume`: {step}");
            let row = "snapshot_btrfs_subvolume_btrfs";
            snaps.not_run(
                &format!("{row}_create"),
                what("first snapshot of the tree"),
                &why,
            );
            snaps.not_run(
                &format!("{row}_restore"),
                what("restore after the change"),
                &why,
            );
            for backend in [Backend::Copy, Backend::BtrfsSubvolume] {
                let what = format!("rewind to an arbitrary seq, `{backend}` backend");
                rewinds.not_run(&format!("rewind_{backend}"), what, &why);
            }
            snaps.fact("not_run", why.clone());
            rewinds.fact("not_run", why);
            let mut out = snaps.finish();
            out.extend(rewinds.finish());
            return out;
        }
    };
    snapshot_records(r, &mut snaps);
    rewind_records(r, &mut rewinds);
    let mut out = snaps.finish();
    out.extend(rewinds.finish());
    out
}

fn snapshot_records(r: &Results, s: &mut Section) {
    let tree = format!(
        "{} files, {}",
        thousands(r.tree.files as f64),
        format_bytes(r.tree.bytes)
    );
    let c = r.change;
    let steps: [(&str, String); 5] = [
        ("create", format!("first snapshot of the tree ({tree})")),
        (
            "restore",
            format!(
                "restore after {} changed, {} deleted, {} added",
                c.changed, c.deleted, c.added
            ),
        ),
        (
            "second_create",
            "second snapshot, of the changed tree, the first kept".into(),
        ),
        ("sync_after_create", "`sync -f` right after create".into()),
        ("sync_after_restore", "`sync -f` right after restore".into()),
    ];
    for x in &r.rows {
        // The rows in the temp dir come first; the ones on the btrfs volume after them.
        let place = if x.place.contains("temp dir") {
            "temp"
        } else {
            "btrfs"
        };
        for (step, words) in &steps {
            let row = format!("snapshot_{}_{place}_{step}", slug(x.method));
            let what = format!("{}, {} ({}): {words}", x.method.label(), x.place, x.fs);
            match &x.outcome {
                RowOutcome::Ran(t) => {
                    let times = match *step {
                        "create" => &t.create,
                        "restore" => &t.restore,
                        "second_create" => &t.second_create,
                        "sync_after_create" => &t.sync_after_create,
                        _ => &t.sync_after_restore,
                    };
                    s.times(&row, None, times).what(what);
                }
                RowOutcome::Skipped(why) => s.not_run(&row, what, why),
                RowOutcome::Failed(why) => s.failed(&row, what, why),
            }
        }
    }
    s.numbers(&[
        ("files", r.tree.files as f64),
        ("bytes", r.tree.bytes as f64),
        ("smallest", r.sizes.0 as f64),
        ("largest", r.sizes.1 as f64),
        ("dirs", r.dirs as f64),
        ("repeats", r.repeats as f64),
        ("changed", c.changed as f64),
        ("deleted", c.deleted as f64),
        ("added", c.added as f64),
    ]);
    let tools: Vec<String> = r
        .tools
        .iter()
        .map(|(name, version)| format!("{name}: `{version}`"))
        .collect();
    s.fact("tools", tools.join("; "));
    let cp = r.tools.iter().find(|(name, _)| name == "cp");
    s.fact("cp", cp.map_or("cp".to_owned(), |(_, v)| v.clone()));
    match &r.btrfs {
        BtrfsStatus::Mounted { bytes } => s.number("btrfs_bytes", *bytes as f64),
        BtrfsStatus::Unavailable(why) => s.fact("btrfs_missing", why.clone()),
    }
    let said = r
        .rows
        .iter()
        .filter_map(|x| {
            let t = x.timings()?;
            Some(vec![x.method.label(), x.fs.clone(), t.note.clone()])
        })
        .collect();
    s.table("said", &["method", "file system", "said"], said);
}

fn rewind_records(r: &Results, s: &mut Section) {
    let Some(o) = &r.rewind_options else {
        for backend in [Backend::Copy, Backend::BtrfsSubvolume] {
            let what = format!("rewind to an arbitrary seq, `{backend}` backend");
            s.not_run(&format!("rewind_{backend}"), what, "`--skip-rewind`");
        }
        s.fact("skipped", "`--skip-rewind`");
        return;
    };
    let mut sessions = Vec::new();
    for run in &r.rewind {
        let row = format!("rewind_{}", run.backend);
        let what = format!(
            "rewind to an arbitrary seq of a {}-action session, `{}` backend ({})",
            thousands(o.actions as f64),
            run.backend,
            run.fs
        );
        let samples = match &run.outcome {
            RewindOutcome::Ran(samples) if !samples.is_empty() => samples,
            RewindOutcome::Ran(_) => {
                s.failed(&row, what, "no rewinds");
                continue;
            }
            RewindOutcome::Skipped(why) => {
                s.not_run(&row, what, why);
                continue;
            }
            RewindOutcome::Failed(why) => {
                s.failed(&row, what, why);
                continue;
            }
        };
        let times: Vec<Duration> = samples.iter().map(|x| x.time).collect();
        s.times(&row, None, &times).what(what);
        for (k, x) in samples.iter().enumerate() {
            let seq = |q: u64| thousands(q as f64);
            sessions.push(vec![
                format!("`{}`", run.backend),
                (k + 1).to_string(),
                seq(x.head),
                seq(x.to_seq),
                x.method.clone(),
                x.snapshot_seq.map_or("none".to_owned(), seq),
                x.snapshot_seq
                    .map_or("—".to_owned(), |_| x.files_since_snapshot.to_string()),
                x.steps.to_string(),
                format!(
                    "{:.1} s ({} per action)",
                    x.session_time.as_secs_f64(),
                    format_duration(x.session_time / x.actions.max(1) as u32)
                ),
                format_duration(x.time),
            ]);
        }
    }
    s.numbers(&[
        ("actions", o.actions as f64),
        ("files", o.files as f64),
        ("file_bytes", rewind::file_bytes() as f64),
        ("dirs", rewind::dirs() as f64),
        ("snapshot_every", o.snapshot_every as f64),
        ("targets", o.targets as f64),
    ]);
    if !sessions.is_empty() {
        s.fact("ran", "");
        let columns = [
            "backend",
            "session",
            "seqs in the session",
            "rewind to seq",
            "method",
            "snapshot restored (taken at seq)",
            "files written since that snapshot",
            "steps",
            "the session's actions took",
            "rewind",
        ];
        s.table("sessions", &columns, sessions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: TreeSpec = TreeSpec {
        files: 200,
        bytes: 400_000,
    };
    const CHANGE: ChangeSpec = ChangeSpec {
        changed: 5,
        deleted: 2,
        added: 2,
    };

    fn options() -> Options {
        Options {
            tree: TREE,
            change: CHANGE,
            repeats: 2,
            btrfs_bytes: 1 << 30,
            rewind: None,
        }
    }

    /// Every method that runs anywhere gives back the tree, twice in a row.
    #[test]
    fn copy_cp_and_git_restore_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let tree = Tree::new(TREE);
        let ws = base.join("t").join("tree");
        tree.write(&ws).unwrap();
        let home = base.join("aido-home");
        std::fs::create_dir_all(&home).unwrap();
        for method in [Method::Aido(Backend::Copy), Method::CpA, Method::Git] {
            let row = row(method, "here", "fs", &tree, &ws, &home, &options()).unwrap();
            let t = row.timings().unwrap_or_else(|| panic!("{row:?}"));
            assert_eq!(t.create.len(), 2);
            assert_eq!(t.restore.len(), 2);
            assert_eq!(t.second_create.len(), 2);
            assert_eq!(crate::tree::count(&ws).unwrap(), (TREE.files, TREE.bytes));
        }
        assert!(!ws.join(".git").exists());
    }

    /// As root with btrfs-progs: every btrfs row on a small loop volume, which is gone after.
    #[test]
    fn btrfs_rows_on_a_loop_volume_then_no_mount_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("aido-home");
        std::fs::create_dir_all(&home).unwrap();
        let volume = match Volume::create(&base, &home, 512 << 20) {
            Ok(v) => v,
            Err(reason) => {
                eprintln!("no btrfs volume here ({reason}); the btrfs rows are not tested");
                return;
            }
        };
        let mount = volume.mount().to_owned();
        assert!(crate::volume::is_mounted(&mount));
        let tree = Tree::new(TREE);
        let rows = btrfs_rows(&volume, &tree, &home, &options()).unwrap();
        let methods: Vec<Method> = rows.iter().map(|r| r.method).collect();
        assert_eq!(methods, BTRFS_ROWS.map(|(m, _)| m));
        for row in &rows {
            assert_eq!(row.fs, "btrfs");
            let t = row.timings().unwrap_or_else(|| panic!("{row:?}"));
            assert_eq!(t.restore.len(), 2);
        }
        assert_eq!(
            crate::tree::count(&volume.subvolume).unwrap(),
            (TREE.files, TREE.bytes)
        );
        drop(volume);
        assert!(!crate::volume::is_mounted(&mount));
    }

    #[test]
    fn a_failed_method_leaves_the_original_tree_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(TREE);
        let ws = dir.path().join("tree");
        tree.write(&ws).unwrap();
        tree.apply(&ws, &tree.change(0, CHANGE)).unwrap();
        std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
        rewrite(&tree, &ws).unwrap();
        assert!(!ws.join(".git").exists());
        tree.verify(&ws, &tree.change(0, CHANGE)).unwrap();
    }

    #[test]
    fn a_backend_the_directory_cannot_use_is_a_failed_row() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(TREE);
        let ws = dir.path().join("tree");
        tree.write(&ws).unwrap();
        let row = row(
            Method::Aido(Backend::BtrfsSubvolume),
            "here",
            "fs",
            &tree,
            &ws,
            &dir.path().join("home"),
            &options(),
        )
        .unwrap();
        match &row.outcome {
            RowOutcome::Failed(reason) => assert!(reason.contains("asked for btrfs_subvolume")),
            RowOutcome::Ran(_) => {} // the temp dir is a btrfs subvolume on this machine
            RowOutcome::Skipped(r) => panic!("{r}"),
        }
    }
}
