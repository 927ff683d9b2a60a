//! Rewind through a real runtime: a fresh session of many actions per target, then one timed
//! `rewind` to a seq of it, the workspace checked against the state recorded for that seq.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use aido_snapshots::Backend;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::harness::Run;
use crate::record::Section;
use crate::render::{format_duration, thousands};
use crate::stop;
use crate::tree::mix;

/// Directories the session's files are spread over.
const DIRS: usize = 10;
/// Lines in each file.
const LINES: usize = 40;

/// How the rewind benchmark runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Actions in each session.
    pub actions: usize,
    /// Files the actions work on.
    pub files: usize,
    /// A `create_snapshot` every this many actions (the first action is one).
    pub snapshot_every: usize,
    /// Rewinds (one fresh session each).
    pub targets: usize,
}

/// One session and its rewind.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Actions run before the rewind.
    pub actions: usize,
    /// Of which `create_snapshot`.
    pub snapshots: usize,
    /// The session's last seq before the rewind.
    pub head: u64,
    /// How long the actions took, all together.
    pub session_time: Duration,
    /// The rewind's target.
    pub to_seq: u64,
    /// `snapshot` or `undo`.
    pub method: String,
    /// Steps the rewind ran (a restore and the redone writes).
    pub steps: u64,
    /// The seq of the snapshot it restored, if it restored one.
    pub snapshot_seq: Option<u64>,
    /// Files written since that snapshot (what an incremental restore must rewrite).
    pub files_since_snapshot: usize,
    /// The `rewind` call, end to end.
    pub time: Duration,
}

/// Runs `options.targets` sessions with their workspaces under `work` (on the filesystem
/// measured) and their journals under `journals` (the temp dir), on `backend`.
pub fn run(
    options: &Options,
    backend: Backend,
    work: &Path,
    journals: &Path,
) -> Result<Vec<Sample>> {
    eprintln!(
        "aido-bench: rewind on {backend}: {} sessions of {} actions",
        options.targets, options.actions
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let mut samples = Vec::new();
    for k in 0..options.targets {
        stop::check()?;
        let dirs = Dirs {
            home: work.join(format!("s{k}")).join("home"),
            aido_home: journals.join(format!("s{k}")).join("aido-home"),
        };
        let sample = runtime.block_on(session(options, backend, &dirs, k))?;
        eprintln!(
            "aido-bench:   session {k}: {} actions in {:.1} s, rewind to seq {} of {} by {} \
             ({} steps) in {}",
            sample.actions,
            sample.session_time.as_secs_f64(),
            sample.to_seq,
            sample.head,
            sample.method,
            sample.steps,
            format_duration(sample.time)
        );
        samples.push(sample);
        // The session's files and journal are done with.
        let _ = std::fs::remove_dir_all(dirs.aido_home.parent().unwrap_or(&dirs.aido_home));
    }
    Ok(samples)
}

/// The row of `backend`'s rewinds on `fs` and its sessions' lines, or why there are none.
pub fn record(
    s: &mut Section,
    options: &Options,
    backend: Backend,
    fs: &str,
    run: Run<Vec<Sample>>,
) {
    let row = format!("rewind_{backend}");
    let what = format!(
        "rewind to an arbitrary seq of a {}-action session, `{backend}` backend ({fs})",
        thousands(options.actions as f64)
    );
    let samples = match run {
        Run::Ran(samples) if !samples.is_empty() => samples,
        Run::Ran(_) => return s.failed(&row, what, "no rewinds"),
        Run::Skipped(why) => return s.not_run(&row, what, &why),
        Run::Failed(why) => return s.failed(&row, what, &why),
    };
    let times: Vec<Duration> = samples.iter().map(|x| x.time).collect();
    s.times(&row, None, &times).what(what);
    for (k, x) in samples.iter().enumerate() {
        let seq = |q: u64| thousands(q as f64);
        let session = format_duration(x.session_time / x.actions.max(1) as u32);
        let cells = [
            format!("`{backend}`"),
            (k + 1).to_string(),
            seq(x.head),
            seq(x.to_seq),
            x.method.clone(),
            x.snapshot_seq.map_or("none".to_owned(), seq),
            x.snapshot_seq
                .map_or("—".to_owned(), |_| x.files_since_snapshot.to_string()),
            x.steps.to_string(),
            format!(
                "{:.1} s ({session} per action)",
                x.session_time.as_secs_f64()
            ),
            format_duration(x.time),
        ];
        let cells: Vec<(&str, String)> = COLUMNS.into_iter().zip(cells).collect();
        let line = s.next_line("sessions");
        s.line("sessions", line, &cells);
    }
}

/// The sessions table's columns.
const COLUMNS: [&str; 10] = [
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

/// The facts the section's prose names; with no options (`--skip-rewind`), each row says so.
pub fn facts(s: &mut Section, options: Option<&Options>) {
    let Some(o) = options else {
        for backend in [Backend::Copy, Backend::BtrfsSubvolume] {
            let what = format!("rewind to an arbitrary seq, `{backend}` backend");
            s.not_run(&format!("rewind_{backend}"), what, "`--skip-rewind`");
        }
        return s.fact("skipped", "`--skip-rewind`");
    };
    s.numbers(&[
        ("actions", o.actions as f64),
        ("files", o.files as f64),
        ("file_bytes", file_bytes() as f64),
        ("dirs", dirs() as f64),
        ("snapshot_every", o.snapshot_every as f64),
        ("targets", o.targets as f64),
    ]);
    if s.next_line("sessions") > 1 {
        s.fact("ran", "");
    }
}

struct Dirs {
    home: PathBuf,
    aido_home: PathBuf,
}

/// A file's text: `LINES` lines that change with `version`, and one `counter: N` line the
/// edits bump.
fn file_text(file: usize, version: u64, counter: u64) -> String {
    let mut text = format!("// file {file:03}, written at version {version}\ncounter: {counter}\n");
    for line in 0..LINES {
        text.push_str(&format!(
            "let value_{line:02} = {:016x}; // of file {file:03}\n",
            mix(mix(file as u64, version), line as u64)
        ));
    }
    text
}

/// Directories the session's files are spread over.
pub fn dirs() -> usize {
    DIRS
}

/// Bytes of one of the session's files (about: versions and counters vary a little).
pub fn file_bytes() -> usize {
    file_text(0, 0, 0).len()
}

fn rel(file: usize) -> String {
    format!("src/m{}/file{file:03}.txt", file % DIRS)
}

/// The target seq for session `k` of `targets`: a seeded point in the k-th slice of 1..=head.
pub fn target(k: usize, targets: usize, head: u64) -> u64 {
    let targets = targets.max(1) as u64;
    let k = (k as u64).min(targets - 1);
    let lo = 1 + (head.saturating_sub(1)) * k / targets;
    let hi = (1 + (head.saturating_sub(1)) * (k + 1) / targets).max(lo);
    lo + mix(k, 0x5eed) % (hi - lo + 1)
}

/// What one action did to the model, and where its record ended.
struct Step {
    head: u64,
    file: usize,
    text: String,
}

async fn session(options: &Options, backend: Backend, dirs: &Dirs, k: usize) -> Result<Sample> {
    let ws = dirs.home.join("ws");
    std::fs::create_dir_all(&dirs.home)?;
    std::fs::create_dir_all(&dirs.aido_home)?;
    // A subvolume where the parent is btrfs (aido's own workspace init), a directory elsewhere.
    aido_snapshots::volume::init(&ws, &dirs.aido_home, None)?;
    let ws = ws.canonicalize()?;
    let home = dirs.home.canonicalize()?;
    // The project the agent works on, there before the session.
    let initial: Vec<String> = (0..options.files).map(|f| file_text(f, 0, 0)).collect();
    for (f, text) in initial.iter().enumerate() {
        let path = ws.join(rel(f));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
    }

    let config = format!(
        "workdir = \"{}\"\n[snapshots]\nbackend = \"{}\"\n",
        ws.display(),
        backend.name()
    );
    let aido_home = dirs.aido_home.clone();
    let (_, runtime, session) = crate::fixture::runtime(&config, home, aido_home).await?;
    let result = drive(options, backend, &runtime, &session, &ws, k, &initial).await;
    session.close("done").await;
    runtime.shutdown().await;
    result
}

/// The session's actions on the files (`initial` at the start), then one timed rewind to a
/// target seq, the workspace checked against the files' texts at that seq.
async fn drive(
    options: &Options,
    backend: Backend,
    runtime: &Runtime,
    session: &Session,
    ws: &Path,
    k: usize,
    initial: &[String],
) -> Result<Sample> {
    let mut current = initial.to_vec();
    let (mut counters, mut versions) = (vec![0u64; initial.len()], vec![0u64; initial.len()]);
    let head = || runtime.journal().head_seq(session.id());
    let mut steps = Vec::new();
    let mut snapshots = 0;
    let mut taken = std::collections::HashMap::new();
    let start = Instant::now();
    for i in 0..options.actions {
        if i % 64 == 0 {
            stop::check()?;
        }
        let file = (mix(k as u64, i as u64) % options.files.max(1) as u64) as usize;
        let path = rel(file);
        let (primitive, args) = if i % options.snapshot_every.max(1) == 0 {
            snapshots += 1;
            ("create_snapshot", json!({}))
        } else {
            match i % 10 {
                3 => ("read_file", json!({"path": path})),
                1 | 5 | 8 => {
                    versions[file] += 1;
                    current[file] = file_text(file, versions[file], counters[file]);
                    (
                        "write_file",
                        json!({"path": path, "content": current[file]}),
                    )
                }
                _ => {
                    let old = format!("counter: {}\n", counters[file]);
                    counters[file] += 1;
                    let new = format!("counter: {}\n", counters[file]);
                    current[file] = current[file].replacen(&old, &new, 1);
                    (
                        "edit_file",
                        json!({"path": path, "old_string": old, "new_string": new}),
                    )
                }
            }
        };
        let output = ok(session, primitive, args).await?;
        if primitive == "create_snapshot" {
            if output["backend"] != backend.name() {
                bail!(
                    "asked for the {backend} backend, the snapshot was taken by {}: {}",
                    output["backend"],
                    output["why"]
                );
            }
            if let (Some(id), Some(seq)) = (output["snapshot"].as_str(), output["seq"].as_u64()) {
                taken.insert(id.to_owned(), seq);
            }
        }
        if matches!(primitive, "write_file" | "edit_file") {
            steps.push(Step {
                head: head()?,
                file,
                text: current[file].clone(),
            });
        }
    }
    let session_time = start.elapsed();
    let last = head()?;
    let to_seq = target(k, options.targets, last);

    stop::check()?;
    let start = Instant::now();
    let output = ok(session, "rewind", json!({"to_seq": to_seq})).await?;
    let time = start.elapsed();

    // Rewinding to an action's proposal keeps that action.
    let cut = output["kept_through"].as_u64().unwrap_or(to_seq);
    check_rewound(ws, initial, &steps, cut, to_seq)?;
    let snapshot_seq = output["snapshot"]
        .as_str()
        .and_then(|id| taken.get(id).copied());
    let files_since_snapshot = snapshot_seq.map_or(0, |seq| {
        let mut files: Vec<usize> = steps
            .iter()
            .filter(|s| s.head > seq)
            .map(|s| s.file)
            .collect();
        files.sort_unstable();
        files.dedup();
        files.len()
    });
    Ok(Sample {
        snapshot_seq,
        files_since_snapshot,
        actions: options.actions,
        snapshots,
        head: last,
        session_time,
        to_seq,
        method: output["method"].as_str().unwrap_or("?").to_owned(),
        steps: output["steps"].as_u64().unwrap_or(0),
        time,
    })
}

/// The workspace after a rewind to `to_seq` is the tree at the target: `initial` with every
/// change whose outcome record is at or before `cut` (the last record the rewind kept).
fn check_rewound(
    ws: &Path,
    initial: &[String],
    steps: &[Step],
    cut: u64,
    to_seq: u64,
) -> Result<()> {
    let mut expected = initial.to_vec();
    for step in steps.iter().filter(|s| s.head <= cut) {
        expected[step.file] = step.text.clone();
    }
    for (f, text) in expected.iter().enumerate() {
        let path = ws.join(rel(f));
        let found = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} after the rewind", path.display()))?;
        if &found != text {
            bail!("after the rewind to seq {to_seq}, {} differs", rel(f));
        }
    }
    let (files, _) = crate::tree::count(ws)?;
    if files != initial.len() {
        bail!(
            "after the rewind the workspace holds {files} files, not {}",
            initial.len()
        );
    }
    Ok(())
}

async fn ok(session: &Session, primitive: &str, args: Value) -> Result<Value> {
    let action = Action::from_tool_call(primitive, args)?;
    match session.run(action, Hooks::default()).await {
        Ok(ran) => Ok(ran.outcome.output),
        Err(e) => Err(anyhow!(
            "{primitive} failed: {} ({})",
            e.failure.message,
            e.failure.code
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_fall_one_per_slice() {
        let head = 3_000;
        let picked: Vec<u64> = (0..5).map(|k| target(k, 5, head)).collect();
        for (k, t) in picked.iter().enumerate() {
            let k = k as u64;
            assert!(
                (1 + 2_999 * k / 5..=1 + 2_999 * (k + 1) / 5).contains(t),
                "{k}: {t}"
            );
        }
        assert!(picked.windows(2).all(|w| w[0] <= w[1]), "{picked:?}");
        assert_eq!(target(0, 1, 1), 1);
        assert!((1..=10).contains(&target(3, 1, 10)));
    }

    #[test]
    fn edits_bump_the_one_counter_line() {
        let text = file_text(7, 2, 5);
        assert_eq!(text.matches("counter: ").count(), 1);
        assert!(text.contains("counter: 5\n"));
        assert_ne!(file_text(7, 3, 5), text);
    }

    /// A short session on the copy backend: the whole path, rewind and check included.
    #[test]
    fn a_short_session_rewinds_to_the_recorded_tree() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let options = Options {
            actions: 40,
            files: 12,
            snapshot_every: 10,
            targets: 2,
        };
        let (work, journals) = (base.join("work"), base.join("journals"));
        let samples = run(&options, Backend::Copy, &work, &journals).unwrap();
        assert_eq!(samples.len(), 2);
        for s in &samples {
            assert_eq!((s.actions, s.snapshots), (40, 4));
            assert!(s.to_seq >= 1 && s.to_seq <= s.head, "{s:?}");
            if s.method == "snapshot" {
                let seq = s.snapshot_seq.unwrap();
                assert!(seq <= s.to_seq, "{s:?}");
                assert!(
                    s.files_since_snapshot > 0 && s.files_since_snapshot <= 12,
                    "{s:?}"
                );
            }
        }
        let mut section = Section::new("rewind");
        record(
            &mut section,
            &options,
            Backend::Copy,
            "fs",
            Run::Ran(samples),
        );
        let records = section.finish();
        assert_eq!(records.iter().filter(|r| r.row == "sessions:2").count(), 10);
        let row = records.iter().find(|r| r.row == "rewind_copy").unwrap();
        assert_eq!(row.samples.len(), 2);
    }
}
