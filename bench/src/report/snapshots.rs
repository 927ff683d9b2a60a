//! The snapshot and rewind sections' rows and blocks.

use aido_snapshots::Backend;

use super::schema::{Fact, Outcome, Row, Section};
use super::{format_bytes, format_duration, row, samples, section, table, thousands};
use crate::rewind::{RewindOutcome, RewindRun};
use crate::snapshots::{BtrfsStatus, Method, Results, RowOutcome};

/// The snapshot section's state in one run.
pub type SnapshotSection = crate::harness::Run<Box<Results>>;

/// A method's part of a row id.
fn slug(method: Method) -> String {
    match method {
        Method::Aido(b) => b.to_string(),
        Method::CpA => "cp_a".into(),
        Method::Git => "git".into(),
        Method::BtrfsBare => "btrfs_bare".into(),
    }
}

/// The rewind id of a backend.
fn rewind_id(backend: Backend) -> String {
    format!("rewind_{backend}")
}

/// The snapshot section and the rewind section, their rows pushed onto `rows`.
pub(super) fn sections(measured: &SnapshotSection, rows: &mut Vec<Row>) -> [Section; 2] {
    let r = match measured {
        SnapshotSection::Ran(r) => r,
        SnapshotSection::Skipped(why) | SnapshotSection::Failed(why) => {
            let why = match measured {
                SnapshotSection::Failed(_) => format!("the section failed before measuring: {why}"),
                _ => why.clone(),
            };
            // The judged rows still stand in the summary, saying why they have no value.
            for (id, what) in [
                (
                    "snapshot_btrfs_subvolume_btrfs_create".to_owned(),
                    "aido `btrfs_subvolume`: first snapshot of the tree",
                ),
                (
                    "snapshot_btrfs_subvolume_btrfs_restore".to_owned(),
                    "aido `btrfs_subvolume`: restore after the change",
                ),
                (
                    rewind_id(Backend::Copy),
                    "rewind to an arbitrary seq, `copy` backend",
                ),
                (
                    rewind_id(Backend::BtrfsSubvolume),
                    "rewind to an arbitrary seq, `btrfs_subvolume` backend",
                ),
            ] {
                let section = if id.starts_with("rewind") {
                    "rewind"
                } else {
                    "snapshots"
                };
                rows.push(row(section, id, what, Outcome::NotRun(why.clone())));
            }
            let not_run = [("not_run", why.clone().into())];
            return [
                section("snapshots", &not_run, Vec::new()),
                section("rewind", &not_run, Vec::new()),
            ];
        }
    };
    [snapshots(r, rows), rewind(r, rows)]
}

fn snapshots(r: &Results, rows: &mut Vec<Row>) -> Section {
    const S: &str = "snapshots";
    let tree = format!(
        "{} files, {}",
        thousands(r.tree.files as f64),
        format_bytes(r.tree.bytes)
    );
    for x in &r.rows {
        // The rows in the temp dir come first; the ones on the btrfs volume after them.
        let place = if x.place.contains("temp dir") {
            "temp"
        } else {
            "btrfs"
        };
        let steps: [(&str, String); 5] = [
            ("create", format!("first snapshot of the tree ({tree})")),
            (
                "restore",
                format!(
                    "restore after {} changed, {} deleted, {} added",
                    r.change.changed, r.change.deleted, r.change.added
                ),
            ),
            (
                "second_create",
                "second snapshot, of the changed tree, the first kept".into(),
            ),
            ("sync_after_create", "`sync -f` right after create".into()),
            ("sync_after_restore", "`sync -f` right after restore".into()),
        ];
        for (step, words) in steps {
            let outcome = match &x.outcome {
                RowOutcome::Ran(t) => Outcome::Measured(samples(match step {
                    "create" => &t.create,
                    "restore" => &t.restore,
                    "second_create" => &t.second_create,
                    "sync_after_create" => &t.sync_after_create,
                    _ => &t.sync_after_restore,
                })),
                RowOutcome::Skipped(why) => Outcome::NotRun(why.clone()),
                RowOutcome::Failed(why) => Outcome::Failed(why.clone()),
            };
            rows.push(row(
                S,
                format!("snapshot_{}_{place}_{step}", slug(x.method)),
                format!("{}, {} ({}): {words}", x.method.label(), x.place, x.fs),
                outcome,
            ));
        }
    }
    let said: Vec<Vec<String>> = r
        .rows
        .iter()
        .filter_map(|x| {
            let t = x.timings()?;
            Some(vec![x.method.label(), x.fs.clone(), t.note.clone()])
        })
        .collect();
    let tools: Vec<String> = r
        .tools
        .iter()
        .map(|(name, version)| format!("{name}: `{version}`"))
        .collect();
    let cp = r.tools.iter().find(|(name, _)| name == "cp");
    let mut params: Vec<(&str, Fact)> = vec![
        ("files", r.tree.files.into()),
        ("bytes", r.tree.bytes.into()),
        ("smallest", r.sizes.0.into()),
        ("largest", r.sizes.1.into()),
        ("dirs", r.dirs.into()),
        ("repeats", r.repeats.into()),
        ("changed", r.change.changed.into()),
        ("deleted", r.change.deleted.into()),
        ("added", r.change.added.into()),
        ("tools", tools.join("; ").into()),
        ("cp", cp.map_or("cp".to_owned(), |(_, v)| v.clone()).into()),
    ];
    params.push(match &r.btrfs {
        BtrfsStatus::Mounted { bytes } => ("btrfs_bytes", format_bytes(*bytes).into()),
        BtrfsStatus::Unavailable(why) => ("btrfs_missing", why.clone().into()),
    });
    let said = table(&["method", "file system", "said"], said);
    section(S, &params, vec![("said", said)])
}

fn rewind(r: &Results, rows: &mut Vec<Row>) -> Section {
    const S: &str = "rewind";
    let Some(o) = &r.rewind_options else {
        for backend in [Backend::Copy, Backend::BtrfsSubvolume] {
            rows.push(row(
                S,
                rewind_id(backend),
                format!("rewind to an arbitrary seq, `{backend}` backend"),
                Outcome::NotRun("`--skip-rewind`".into()),
            ));
        }
        return section(
            S,
            &[("skipped", "`--skip-rewind`".to_owned().into())],
            Vec::new(),
        );
    };
    let mut sessions = Vec::new();
    for run in &r.rewind {
        rows.push(rewind_row(run, o.actions));
        if let RewindOutcome::Ran(samples) = &run.outcome {
            for (k, x) in samples.iter().enumerate() {
                sessions.push(vec![
                    format!("`{}`", run.backend),
                    (k + 1).to_string(),
                    thousands(x.head as f64),
                    thousands(x.to_seq as f64),
                    x.method.clone(),
                    x.snapshot_seq
                        .map_or("none".to_owned(), |q| thousands(q as f64)),
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
    }
    let mut params: Vec<(&str, Fact)> = vec![
        ("actions", o.actions.into()),
        ("files", o.files.into()),
        ("file_bytes", crate::rewind::file_bytes().into()),
        ("dirs", crate::rewind::dirs().into()),
        ("snapshot_every", o.snapshot_every.into()),
        ("targets", o.targets.into()),
    ];
    let mut tables = Vec::new();
    if !sessions.is_empty() {
        params.push(("ran", String::new().into()));
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
        tables.push(("sessions", table(&columns, sessions)));
    }
    section(S, &params, tables)
}

fn rewind_row(run: &RewindRun, actions: usize) -> Row {
    let outcome = match &run.outcome {
        RewindOutcome::Ran(samples) if !samples.is_empty() => {
            let times: Vec<_> = samples.iter().map(|x| x.time).collect();
            Outcome::Measured(super::samples(&times))
        }
        RewindOutcome::Ran(_) => Outcome::Failed("no rewinds".into()),
        RewindOutcome::Skipped(why) => Outcome::NotRun(why.clone()),
        RewindOutcome::Failed(why) => Outcome::Failed(why.clone()),
    };
    row(
        "rewind",
        rewind_id(run.backend),
        format!(
            "rewind to an arbitrary seq of a {}-action session, `{}` backend ({})",
            thousands(actions as f64),
            run.backend,
            run.fs
        ),
        outcome,
    )
}
