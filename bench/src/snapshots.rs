//! Snapshot create and restore on a large tree with every aido backend (btrfs on a loop
//! volume) against `cp -a`, git and the bare btrfs commands; then the rewind sessions. The
//! report's snapshot section gives the steps of one repeat.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aido_snapshots::{Backend, Store};
use anyhow::{Context, Result, bail};

use crate::harness::{Run, median};
use crate::machine;
use crate::record::{Record, Section};
use crate::render::{format_bytes, format_duration, thousands};
use crate::rewind;
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
struct Timings {
    /// The first snapshot of the tree.
    create: Vec<Duration>,
    /// The restore after the change.
    restore: Vec<Duration>,
    /// A second snapshot, of the changed tree, with the first kept.
    second_create: Vec<Duration>,
    /// `sync -f` right after the create and after the restore.
    sync_after_create: Vec<Duration>,
    sync_after_restore: Vec<Duration>,
    /// What the method said about itself (aido: why this backend; restore counts).
    note: String,
}

/// Why a btrfs row did not run (the report says once, in the snapshot section, why there was
/// no volume).
const NO_VOLUME: &str = "no btrfs volume in this run (the snapshot section says why)";

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

/// Runs the section in a fresh temp dir under `temp`; everything it makes is removed (and
/// unmounted) on the way out, whatever the way. The snapshot section's records, then the
/// rewind section's.
pub fn run(temp: &Path, options: &Options) -> Result<Vec<Record>> {
    let root = tempfile::Builder::new()
        .prefix("aido-bench-snapshots-")
        .tempdir_in(temp)
        .with_context(|| format!("creating a temp dir in {}", temp.display()))?;
    let base = root.path().canonicalize()?;
    let aido_home = base.join("aido-home");
    std::fs::create_dir_all(&aido_home)?;
    let tree = Tree::new(options.tree);
    let mut bench = Snapshots::new(&tree, &aido_home, options);

    // The default temp filesystem: the copy backend and both peers on one tree.
    let plain = base.join("tempfs");
    let ext_tree = plain.join("tree");
    let temp_fs = machine::fs_type(&base).unwrap_or_else(|| "unknown".into());
    write_tree(&tree, &ext_tree)?;
    for method in [Method::Aido(Backend::Copy), Method::CpA, Method::Git] {
        let place = "a directory in the default temp dir";
        bench.row(method, place, &temp_fs, &ext_tree)?;
    }
    let _ = std::fs::remove_dir_all(&plain);

    // btrfs in a loop file: the subvolume backend on the workspace subvolume, reflink and
    // the peers on a plain directory beside it.
    eprintln!(
        "aido-bench: making a {} btrfs loop volume",
        format_bytes(options.btrfs_bytes)
    );
    let volume = Volume::create(&base, &aido_home, options.btrfs_bytes);
    match &volume {
        Ok(v) => {
            bench.s.number("btrfs_bytes", v.bytes as f64);
            bench.btrfs_rows(v)?;
        }
        Err(why) => {
            eprintln!("aido-bench: no btrfs volume: {why}");
            bench.s.fact("btrfs_missing", why.clone());
            for (method, place) in BTRFS_ROWS {
                bench.rows(method, place, "btrfs", Run::Skipped(NO_VOLUME.into()));
            }
        }
    }

    let mut rewinds = Section::new("rewind");
    if let Some(o) = &options.rewind {
        let copy = base.join("rewind-copy");
        let samples = rewind::run(o, Backend::Copy, &copy, &copy);
        stop::check()?;
        rewind::record(&mut rewinds, o, Backend::Copy, &temp_fs, samples.into());
        let btrfs = Backend::BtrfsSubvolume;
        match &volume {
            Ok(v) => {
                let fs = machine::fs_type(v.mount()).unwrap_or_else(|| "unknown".into());
                let journals = base.join("rewind-btrfs");
                let samples = rewind::run(o, btrfs, &v.mount().join("rewind"), &journals);
                stop::check()?;
                rewind::record(&mut rewinds, o, btrfs, &fs, samples.into());
            }
            Err(_) => rewind::record(
                &mut rewinds,
                o,
                btrfs,
                "btrfs",
                Run::Skipped(NO_VOLUME.into()),
            ),
        }
    }
    rewind::facts(&mut rewinds, options.rewind.as_ref());
    // Unmount before the temp dir (which holds the image and the mount point) goes.
    drop(volume);
    drop(root);
    let mut records = bench.facts(tree.dirs(), tree.size_range());
    records.extend(rewinds.finish());
    Ok(records)
}

/// The section's records as it measures them.
struct Snapshots<'a> {
    s: Section,
    tree: &'a Tree,
    aido_home: &'a Path,
    options: &'a Options,
    /// Each row's step and its words.
    steps: [(&'static str, String); 5],
}

impl<'a> Snapshots<'a> {
    fn new(tree: &'a Tree, aido_home: &'a Path, options: &'a Options) -> Self {
        let spec = options.tree;
        let files = format!(
            "{} files, {}",
            thousands(spec.files as f64),
            format_bytes(spec.bytes)
        );
        let c = options.change;
        let restore = format!(
            "restore after {} changed, {} deleted, {} added",
            c.changed, c.deleted, c.added
        );
        Self {
            s: Section::new("snapshots"),
            tree,
            aido_home,
            options,
            steps: [
                ("create", format!("first snapshot of the tree ({files})")),
                ("restore", restore),
                (
                    "second_create",
                    "second snapshot, of the changed tree, the first kept".into(),
                ),
                ("sync_after_create", "`sync -f` right after create".into()),
                ("sync_after_restore", "`sync -f` right after restore".into()),
            ],
        }
    }

    /// Every btrfs row: the subvolume rows on the volume's workspace subvolume, the others on a
    /// plain directory beside it (removed afterwards).
    fn btrfs_rows(&mut self, v: &Volume) -> Result<()> {
        let fs = machine::fs_type(v.mount()).unwrap_or_else(|| "unknown".into());
        write_tree(self.tree, &v.subvolume)?;
        let plain_tree = v.mount().join("plain").join("tree");
        write_tree(self.tree, &plain_tree)?;
        for (method, place) in BTRFS_ROWS {
            let dir = match method {
                Method::Aido(Backend::BtrfsSubvolume) | Method::BtrfsBare => &v.subvolume,
                _ => &plain_tree,
            };
            self.row(method, place, &fs, dir)?;
        }
        // The trees are done with; the rewind runs need little room.
        let _ = std::fs::remove_dir_all(v.mount().join("plain"));
        Ok(())
    }

    /// Measures one method on the tree at `dir`; a failure of the method is a failed row, an
    /// interrupt is an error.
    fn row(&mut self, method: Method, place: &str, fs: &str, dir: &Path) -> Result<()> {
        stop::check()?;
        eprintln!("aido-bench: {} on {} ({fs})", method.label(), dir.display());
        let measured = subject(method, dir, self.aido_home)
            .and_then(|mut s| measure(s.as_mut(), self.tree, dir, self.options));
        let run = match measured {
            Ok(t) => {
                eprintln!(
                    "aido-bench:   create {} (median of {}), restore {}, second create {}",
                    format_duration(median(&t.create)),
                    t.create.len(),
                    format_duration(median(&t.restore)),
                    format_duration(median(&t.second_create)),
                );
                Run::Ran(t)
            }
            Err(_) if stop::requested() => bail!("interrupted"),
            Err(e) => {
                eprintln!("aido-bench:   failed: {e:#}");
                // The next rows on this tree start from the original again.
                if let Err(again) = rewrite(self.tree, dir) {
                    bail!("{e:#}; rewriting the tree afterwards also failed: {again:#}");
                }
                Run::Failed(format!("{e:#}"))
            }
        };
        self.rows(method, place, fs, run);
        Ok(())
    }

    /// One method's rows in one place (a step each), and what it said.
    fn rows(&mut self, method: Method, place: &str, fs: &str, run: Run<Timings>) {
        // The rows in the temp dir come first; the ones on the btrfs volume after them.
        let at = if place.contains("temp dir") {
            "temp"
        } else {
            "btrfs"
        };
        for (step, words) in &self.steps {
            let row = format!("snapshot_{}_{at}_{step}", slug(method));
            let what = format!("{}, {place} ({fs}): {words}", method.label());
            let t = match &run {
                Run::Ran(t) => t,
                Run::Skipped(why) => {
                    self.s.not_run(&row, what, why);
                    continue;
                }
                Run::Failed(why) => {
                    self.s.failed(&row, what, why);
                    continue;
                }
            };
            let times = match *step {
                "create" => &t.create,
                "restore" => &t.restore,
                "second_create" => &t.second_create,
                "sync_after_create" => &t.sync_after_create,
                _ => &t.sync_after_restore,
            };
            self.s.times(&row, None, times).what(what);
        }
        if let Run::Ran(t) = run {
            let line = self.s.next_line("said");
            let cells = [
                ("method", method.label()),
                ("file system", fs.to_owned()),
                ("said", t.note),
            ];
            self.s.line("said", line, &cells);
        }
    }

    /// The facts the prose names, and the section's records.
    fn facts(mut self, dirs: usize, (smallest, largest): (u64, u64)) -> Vec<Record> {
        let (o, c) = (self.options, self.options.change);
        self.s.numbers(&[
            ("files", o.tree.files as f64),
            ("bytes", o.tree.bytes as f64),
            ("smallest", smallest as f64),
            ("largest", largest as f64),
            ("dirs", dirs as f64),
            ("repeats", o.repeats as f64),
            ("changed", c.changed as f64),
            ("deleted", c.deleted as f64),
            ("added", c.added as f64),
        ]);
        let version = |program| machine::version(program).unwrap_or_else(|| "not found".into());
        let cp = version("cp");
        let tools = [
            format!("cp: `{cp}`"),
            format!("git: `{}`", version("git")),
            format!("btrfs-progs: `{}`", version("btrfs")),
        ];
        self.s.fact("tools", tools.join("; "));
        self.s.fact("cp", cp);
        self.s.finish()
    }
}

fn write_tree(tree: &Tree, dir: &Path) -> Result<()> {
    stop::check()?;
    let start = Instant::now();
    tree.write(dir)?;
    settle();
    eprintln!(
        "aido-bench: wrote the tree ({} files, {}) to {} in {:.1} s",
        tree.spec.files,
        format_bytes(tree.spec.bytes),
        dir.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
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

/// A method's part of a row id.
fn slug(method: Method) -> String {
    match method {
        Method::Aido(b) => b.to_string(),
        Method::CpA => "cp_a".into(),
        Method::Git => "git".into(),
        Method::BtrfsBare => "btrfs_bare".into(),
    }
}

/// The records of the snapshot section and of the rewind section; when they did not run, the
/// judged rows say why.
pub fn records(run: Run<Vec<Record>>) -> Vec<Record> {
    let why = match run {
        Run::Ran(records) => return records,
        Run::Failed(why) => format!("the section failed before measuring: {why}"),
        Run::Skipped(why) => why,
    };
    let (mut snaps, mut rewinds) = (Section::new("snapshots"), Section::new("rewind"));
    let what = |step| format!("aido `btrfs_subvolume`: {step}");
    let row = "snapshot_btrfs_subvolume_btrfs";
    let create = what("first snapshot of the tree");
    snaps.not_run(&format!("{row}_create"), create, &why);
    let restore = what("restore after the change");
    snaps.not_run(&format!("{row}_restore"), restore, &why);
    for backend in [Backend::Copy, Backend::BtrfsSubvolume] {
        let what = format!("rewind to an arbitrary seq, `{backend}` backend");
        rewinds.not_run(&format!("rewind_{backend}"), what, &why);
    }
    snaps.fact("not_run", why.clone());
    rewinds.fact("not_run", why);
    let mut out = snaps.finish();
    out.extend(rewinds.finish());
    out
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

    /// The `restore` rows' sample counts by row, and each row's error.
    fn restores(records: &[Record]) -> Vec<(String, usize, Option<String>)> {
        let restores = records
            .iter()
            .filter(|r| r.row.ends_with("_restore") && !r.row.ends_with("after_restore"));
        restores
            .map(|r| (r.row.clone(), r.samples.len(), r.error.clone()))
            .collect()
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
        let options = options();
        let mut bench = Snapshots::new(&tree, &home, &options);
        let place = "a directory in the default temp dir";
        for method in [Method::Aido(Backend::Copy), Method::CpA, Method::Git] {
            bench.row(method, place, "fs", &ws).unwrap();
            assert_eq!(crate::tree::count(&ws).unwrap(), (TREE.files, TREE.bytes));
        }
        assert!(!ws.join(".git").exists());
        let records = bench.s.finish();
        assert_eq!(
            restores(&records),
            ["copy", "cp_a", "git"].map(|m| (format!("snapshot_{m}_temp_restore"), 2, None))
        );
        assert_eq!(records.iter().filter(|r| r.unit.is_some()).count(), 15);
        let said: Vec<&Record> = records.iter().filter(|r| r.row == "said:3").collect();
        assert_eq!(said[0].note.as_deref(), Some("git"));
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
        let options = options();
        let mut bench = Snapshots::new(&tree, &home, &options);
        bench.btrfs_rows(&volume).unwrap();
        let slugs = BTRFS_ROWS.map(|(m, _)| slug(m));
        assert_eq!(
            restores(&bench.s.records),
            slugs.map(|m| (format!("snapshot_{m}_btrfs_restore"), 2, None))
        );
        assert!(
            bench
                .s
                .records
                .iter()
                .filter(|r| r.lane.as_deref() == Some("file system"))
                .all(|r| r.note.as_deref() == Some("btrfs"))
        );
        assert_eq!(
            crate::tree::count(&volume.subvolume).unwrap(),
            (TREE.files, TREE.bytes)
        );
        drop(volume);
        assert!(!crate::volume::is_mounted(&mount));
    }

    /// The whole section on a small tree: every row of both sections, measured or saying why
    /// not, and the facts their prose names.
    #[test]
    fn the_whole_section_records_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            repeats: 1,
            btrfs_bytes: 512 << 20,
            rewind: Some(rewind::Options {
                actions: 30,
                files: 10,
                snapshot_every: 10,
                targets: 1,
            }),
            ..options()
        };
        let records = run(dir.path(), &options).unwrap();
        let rows = |section: &str| {
            let rows = records.iter().filter(|r| r.section == section);
            rows.filter(|r| r.unit.is_some() || r.error.is_some())
                .count()
        };
        assert_eq!(rows("snapshots"), 8 * 5);
        assert_eq!(rows("rewind"), 2);
        let copy = records.iter().find(|r| r.row == "rewind_copy").unwrap();
        assert_eq!((copy.samples.len(), &copy.error), (1, &None));
        let fact = |name: &str| records.iter().any(|r| r.row == name && r.unit.is_none());
        assert!(fact("files") && fact("tools") && fact("ran") && fact("targets"));
        assert!(fact("btrfs_bytes") || fact("btrfs_missing"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
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
        let (home, options) = (dir.path().join("home"), options());
        let mut bench = Snapshots::new(&tree, &home, &options);
        let method = Method::Aido(Backend::BtrfsSubvolume);
        bench.row(method, "here", "fs", &ws).unwrap();
        let [(row, samples, error)] = &restores(&bench.s.records)[..] else {
            panic!("{:?}", bench.s.records);
        };
        assert_eq!(row, "snapshot_btrfs_subvolume_btrfs_restore");
        match error {
            Some(reason) => assert!(reason.contains("failed: asked for btrfs_subvolume")),
            None => assert_eq!(*samples, 2), // the temp dir is a btrfs subvolume here
        }
    }
}
