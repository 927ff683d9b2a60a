//! The snapshot and rewind sections' rows and blocks.

use aido_snapshots::Backend;

use super::render::thousands;
use super::schema::{Block, Outcome, Row, Section};
use super::{format_bytes, format_duration, row, samples, section, table, text};
use crate::rewind::{RewindOutcome, RewindRun};
use crate::snapshots::{BtrfsStatus, Method, Results, RowOutcome};

/// The snapshot section's state in one run.
#[derive(Clone, Debug, PartialEq)]
pub enum SnapshotSection {
    /// Measured (some rows may still be skipped or failed).
    Ran(Box<Results>),
    /// Not run (`--skip-snapshots`), and why.
    Skipped(String),
    /// The section could not start (the tree could not be written, ...).
    Failed(String),
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

/// The rewind id of a backend.
fn rewind_id(backend: Backend) -> String {
    format!("rewind_{backend}")
}

/// The snapshot section and the rewind section, their rows pushed onto `rows`.
pub(super) fn sections(section: &SnapshotSection, rows: &mut Vec<Row>) -> [Section; 2] {
    let r = match section {
        SnapshotSection::Ran(r) => r,
        SnapshotSection::Skipped(why) | SnapshotSection::Failed(why) => {
            let why = match section {
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
            let blocks = vec![text(format!("Not run: {why}.")), Block::Rows];
            return [
                Section {
                    id: "snapshots".into(),
                    title: TITLE.into(),
                    blocks: blocks.clone(),
                },
                Section {
                    id: "rewind".into(),
                    title: "Rewind".into(),
                    blocks,
                },
            ];
        }
    };
    [snapshots(r, rows), rewind(r, rows)]
}

const TITLE: &str = "Snapshots: create and restore on a large tree";

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
    let said: Vec<String> = r
        .rows
        .iter()
        .filter_map(|x| {
            let t = x.timings()?;
            Some(format!("- {} ({}): {}", x.method.label(), x.fs, t.note))
        })
        .collect();
    let tools: Vec<String> = r
        .tools
        .iter()
        .map(|(name, version)| format!("{name}: `{version}`"))
        .collect();
    let cp = r.tools.iter().find(|(name, _)| name == "cp");
    let mut params = vec![
        ("files", thousands(r.tree.files as f64)),
        ("bytes", format_bytes(r.tree.bytes)),
        ("smallest", format_bytes(r.sizes.0)),
        ("largest", format_bytes(r.sizes.1)),
        ("dirs", r.dirs.to_string()),
        ("repeats", r.repeats.to_string()),
        ("changed", r.change.changed.to_string()),
        ("deleted", r.change.deleted.to_string()),
        ("added", r.change.added.to_string()),
        ("tools", tools.join("; ")),
        ("cp", cp.map_or("cp".into(), |(_, v)| v.clone())),
    ];
    params.push(match &r.btrfs {
        BtrfsStatus::Mounted { bytes } => ("btrfs_bytes", format_bytes(*bytes)),
        BtrfsStatus::Unavailable(why) => ("btrfs_missing", why.clone()),
    });
    if !said.is_empty() {
        params.push((
            "said",
            format!("What each method said about itself:\n\n{}", said.join("\n")),
        ));
    }
    section(S, &params, Vec::new())
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
        return section(S, &[("skipped", "`--skip-rewind`".into())], Vec::new());
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
    let mut params = vec![
        ("actions", thousands(o.actions as f64)),
        ("files", o.files.to_string()),
        (
            "file_bytes",
            format_bytes(crate::rewind::file_bytes() as u64),
        ),
        ("dirs", crate::rewind::dirs().to_string()),
        ("snapshot_every", o.snapshot_every.to_string()),
        ("targets", o.targets.to_string()),
    ];
    let mut tables = Vec::new();
    if !sessions.is_empty() {
        params.push(("ran", String::new()));
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::render;
    use crate::report::schema::Verdict;
    use crate::report::tests::{report, verdicts};
    use crate::rewind::{Options as RewindOptions, Sample};
    use crate::snapshots::{Row as SnapshotRow, Timings};
    use crate::tree::{ChangeSpec, TreeSpec};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn timings(create: u64, restore: u64) -> Timings {
        Timings {
            create: vec![ms(create), ms(create + 10), ms(create - 1)],
            sync_after_create: vec![ms(5); 3],
            restore: vec![ms(restore), ms(restore + 20), ms(restore - 2)],
            sync_after_restore: vec![ms(1); 3],
            second_create: vec![ms(create / 2); 3],
            note: "said".into(),
        }
    }

    fn snapshot_row(method: Method, place: &str, fs: &str, outcome: RowOutcome) -> SnapshotRow {
        SnapshotRow {
            method,
            place: place.into(),
            fs: fs.into(),
            outcome,
        }
    }

    fn sample(to_seq: u64, millis: u64) -> Sample {
        Sample {
            snapshot_seq: Some(to_seq - 50),
            files_since_snapshot: 280,
            actions: 1000,
            snapshots: 10,
            head: 3000,
            session_time: Duration::from_secs(3),
            to_seq,
            method: "snapshot".into(),
            steps: 40,
            time: ms(millis),
        }
    }

    fn results() -> Results {
        let temp = "a directory in the default temp dir";
        let volume = "a btrfs subvolume";
        Results {
            tree: TreeSpec {
                files: 10_000,
                bytes: 200 << 20,
            },
            dirs: 100,
            sizes: (1_000, 1_000_000),
            change: ChangeSpec {
                changed: 100,
                deleted: 10,
                added: 10,
            },
            repeats: 3,
            btrfs: BtrfsStatus::Mounted { bytes: 2 << 30 },
            rows: vec![
                snapshot_row(
                    Method::Aido(Backend::Copy),
                    temp,
                    "ext4",
                    RowOutcome::Ran(timings(2_000, 300)),
                ),
                snapshot_row(
                    Method::Git,
                    temp,
                    "ext4",
                    RowOutcome::Failed("git: not found".into()),
                ),
                snapshot_row(
                    Method::Aido(Backend::BtrfsSubvolume),
                    volume,
                    "btrfs",
                    RowOutcome::Ran(timings(40, 250)),
                ),
                snapshot_row(
                    Method::CpA,
                    volume,
                    "btrfs",
                    RowOutcome::Skipped("no volume".into()),
                ),
            ],
            rewind: vec![
                RewindRun {
                    backend: Backend::Copy,
                    fs: "ext4".into(),
                    outcome: RewindOutcome::Ran(vec![
                        sample(100, 300),
                        sample(900, 200),
                        sample(2_500, 1_200),
                    ]),
                },
                RewindRun::skipped(Backend::BtrfsSubvolume, "btrfs", "no volume".into()),
            ],
            rewind_asked: true,
            rewind_options: Some(RewindOptions {
                actions: 1000,
                files: 300,
                snapshot_every: 100,
                targets: 3,
            }),
            tools: vec![("cp".into(), "cp (GNU coreutils) 9.1".into())],
        }
    }

    #[test]
    fn btrfs_rows_and_rewinds_are_judged_against_their_targets() {
        let mut r = report();
        r.snapshots = SnapshotSection::Ran(Box::new(results()));
        let doc = r.document();
        doc.check().unwrap();
        let v = verdicts(&doc);
        // create 40 ms median < 50 ms; restore 250 ms median > 200 ms.
        assert!(v.contains(&("snapshot_btrfs_subvolume_btrfs_create", Verdict::Pass)));
        assert!(v.contains(&("snapshot_btrfs_subvolume_btrfs_restore", Verdict::Fail)));
        // 1.2 s max: the rewind target is for every rewind.
        assert!(v.contains(&("rewind_copy", Verdict::Fail)));
        assert!(v.contains(&("rewind_btrfs_subvolume", Verdict::NotRun)));
        let text = render(&doc);
        for part in [
            "| `snapshot_copy_temp_create` | aido `copy`, a directory in the default temp dir \
             (ext4): first snapshot of the tree (10,000 files, 200 MiB) | 2.00 s median of 3 \
             (2.00 s – 2.01 s) | none (informational) | — |",
            "| `snapshot_git_temp_restore` | git, a directory in the default temp dir (ext4): \
             restore after 100 changed, 10 deleted, 10 added | failed: git: not found |",
            "| `snapshot_cp_a_btrfs_create` |",
            "| not run: no volume |",
            "| rewind to an arbitrary seq of a 1,000-action session, `copy` backend (ext4) | \
             300 ms median of 3 (200 ms – 1.20 s) | < 1.00 s max (every sample) | **FAIL** |",
            "| `copy` | 3 | 3,000 | 2,500 | snapshot | 2,450 | 280 | 40 | 3.0 s (3.00 ms per \
             action) | 1.20 s |",
            "- aido `copy` (ext4): said",
            "a 2.00 GiB sparse loop file",
            "`cp -a` (cp (GNU coreutils) 9.1)",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
    }

    #[test]
    fn a_skipped_section_keeps_its_judged_rows() {
        let mut r = report();
        r.snapshots = SnapshotSection::Skipped("`--skip-snapshots`".into());
        let doc = r.document();
        doc.check().unwrap();
        let v = verdicts(&doc);
        for id in [
            "snapshot_btrfs_subvolume_btrfs_create",
            "snapshot_btrfs_subvolume_btrfs_restore",
            "rewind_copy",
            "rewind_btrfs_subvolume",
        ] {
            assert!(v.contains(&(id, Verdict::NotRun)), "{id} in {v:?}");
        }
        assert!(render(&doc).contains("Not run: `--skip-snapshots`."));
    }
}
