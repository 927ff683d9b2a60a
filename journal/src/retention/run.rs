//! One retention run, in the order the module describes: open, scan, plan, mark (before
//! anything changes, so a run that cannot mark changes nothing), prune, sweep, audit files,
//! compaction, and the `collected` record.

use std::collections::HashMap;

use crate::PinGuard;
use crate::journal::Journal;
use crate::record::{Event, SessionId, Skipped};
use crate::stored::{check_value, seq_of};

use super::audit::{Gone, sweep_audit};
use super::compact::{compact, compact_dir};
use super::mark::{Marks, expand_parts, recovery_marks, references};
use super::plan::{Fate, Plan, plan};
use super::prune::{cut_session, remove_session};
use super::scan::{Hold, Scanned, Shard, open_shards, scan_shard};
use super::sweep::sweep;
use super::usage::{attribute, chunks_of, disk_bytes};
use super::{
    COLLECTED_SESSIONS_LISTED_MAX, Kept, Options, Paths, Planned, Report, RetentionError,
    SnapshotStore, skipped,
};

/// Run retention over the `AIDO_HOME` at `paths` (see the module). `own` is the journal of the
/// running aido that calls it, with the guard that pinned what it stored since it opened
/// (`Journal::pin_blobs`); `None` from `aido gc`. Every shard no other aido holds is taken for
/// the run; the others are read from a copy and left alone.
pub fn collect(
    paths: &Paths,
    own: Option<(&Journal, &PinGuard)>,
    options: &Options,
    snapshots: &dyn SnapshotStore,
) -> Result<Report, RetentionError> {
    if options.rules.is_empty() {
        return Err(RetentionError::ArgumentInvalid {
            argument: "rules".into(),
            why: "no rule: give an age (older_than or before), max_bytes or keep_sessions".into(),
        });
    }
    let dry = options.dry_run;
    let mut report = Report {
        dry_run: dry,
        journal_bytes_before: disk_bytes(&paths.journal),
        audit_bytes_before: disk_bytes(&paths.audit),
        ..Report::default()
    };
    let mut skipped_out = Vec::new();
    let (shards, sessions) = open_and_scan(paths, own.map(|(j, _)| j), options, &mut skipped_out)?;
    let (exclusive, total) = budget(&shards, &sessions, &report, options, snapshots)?;
    let plan = plan(
        &sessions,
        &shards,
        &options.rules,
        options.now_ms,
        &exclusive,
        total,
        &mut skipped_out,
    );
    let (marks, mut sweepable) = mark(&shards, &plan, &mut skipped_out)?;
    for s in &sessions {
        if s.damaged.is_some() {
            sweepable[s.shard] = false;
        }
    }
    let mut changed = vec![false; shards.len()];
    let gone = prune(
        &shards,
        &sessions,
        &plan,
        options,
        snapshots,
        &mut report,
        &mut changed,
        &mut skipped_out,
    )?;
    let pins_overflowed = own.is_some_and(|(_, guard)| guard.pins().overflowed());
    for (index, shard) in shards.iter().enumerate() {
        let held = !shard.journal.is_copy() && (dry || shard.hold != Hold::Read);
        if !held || !sweepable[index] {
            continue;
        }
        if shard.hold == Hold::Own && pins_overflowed {
            skipped_out.push(skipped(
                shard.path.display().to_string(),
                Kept::PinsOverflow,
                "this aido stored too much while retention ran to tell its new contents apart",
            ));
            continue;
        }
        let swept = sweep(shard, &marks, dry)?;
        report.summary.blobs_removed += swept.blobs + swept.chunked;
        report.summary.objects_removed += swept.objects;
        changed[index] |= swept != Default::default();
    }
    let audit = sweep_audit(&paths.audit, &gone, options.now_ms, dry, &mut skipped_out)?;
    report.summary.audit_lines_removed = audit.lines;
    let target = compact_all(shards, &changed, options, &mut report, &mut skipped_out);
    summarize(paths, &mut report, skipped_out);
    let summary = &report.summary;
    let something = summary.records_removed
        + summary.blobs_removed
        + summary.objects_removed
        + summary.snapshots_removed
        + summary.audit_lines_removed
        > 0;
    if !dry && something {
        report.journaled_in = journal_run(paths, own.map(|(j, _)| j), target, options, summary)?;
        report.journal_bytes_after = disk_bytes(&paths.journal);
    }
    Ok(report)
}

/// Open every shard (removing what a compaction a crash cut short left beside those the run
/// holds) and scan every session.
fn open_and_scan(
    paths: &Paths,
    own: Option<&Journal>,
    options: &Options,
    skipped_out: &mut Vec<Skipped>,
) -> Result<(Vec<Shard>, Vec<Scanned>), RetentionError> {
    let shards = open_shards(&paths.journal, own, options.dry_run, skipped_out)?;
    for shard in shards.iter().filter(|s| s.hold == Hold::Held) {
        let stale = compact_dir(&shard.path);
        if stale.exists() {
            std::fs::remove_dir_all(&stale).map_err(|e| RetentionError::io("remove", &stale, e))?;
        }
    }
    let cutoff = options.rules.cutoff_ms(options.now_ms);
    let mut sessions = Vec::new();
    for (index, shard) in shards.iter().enumerate() {
        sessions.extend(scan_shard(&shard.journal, index, cutoff)?);
    }
    Ok((shards, sessions))
}

/// Compact the held shards the run changed (closing every shard), and say where the run is
/// journaled: the first shard it held, kept open when it is not compacted, taken again after
/// its compaction when it is.
fn compact_all(
    shards: Vec<Shard>,
    changed: &[bool],
    options: &Options,
    report: &mut Report,
    skipped_out: &mut Vec<Skipped>,
) -> Target {
    let mut target = Target::None;
    for (index, shard) in shards.into_iter().enumerate() {
        let compacting =
            !options.dry_run && options.compact && shard.hold == Hold::Held && changed[index];
        if shard.hold == Hold::Held && matches!(target, Target::None) {
            target = if compacting {
                Target::Reopen(shard.path.clone())
            } else {
                Target::Open(shard.journal.clone())
            };
        }
        if !compacting {
            continue;
        }
        let path = shard.path.display().to_string();
        match compact(shard) {
            Ok(done) => report.compacted.push(done),
            Err(why) => skipped_out.push(skipped(path, Kept::CompactionSkipped, why)),
        }
    }
    target
}

/// Measure what the run gave back and fill in the summary.
fn summarize(paths: &Paths, report: &mut Report, skipped_out: Vec<Skipped>) {
    report.journal_bytes_after = disk_bytes(&paths.journal);
    report.audit_bytes_after = disk_bytes(&paths.audit);
    report.summary.bytes_freed = (report.journal_bytes_before + report.audit_bytes_before)
        .saturating_sub(report.journal_bytes_after + report.audit_bytes_after)
        + report.snapshot_bytes_freed;
    report.summary.removed = report
        .sessions
        .iter()
        .filter(|p| p.action == "remove")
        .take(COLLECTED_SESSIONS_LISTED_MAX)
        .map(|p| p.session)
        .collect();
    report.summary.skipped = skipped_out;
}

/// For `max_bytes`: what each session alone holds, and the total the budget counts (the
/// journal, the audit files, the sessions' snapshots).
fn budget(
    shards: &[Shard],
    sessions: &[Scanned],
    report: &Report,
    options: &Options,
    snapshots: &dyn SnapshotStore,
) -> Result<(HashMap<SessionId, u64>, u64), RetentionError> {
    if options.rules.max_bytes.is_none() {
        return Ok((HashMap::new(), 0));
    }
    let attribution = attribute(shards, sessions)?;
    let refs: Vec<_> = sessions
        .iter()
        .flat_map(|s| s.snapshots.iter().cloned())
        .collect();
    let snapshot_bytes = snapshots.usage(&refs);
    let mut exclusive = HashMap::new();
    let mut total = report.journal_bytes_before + report.audit_bytes_before;
    for (index, s) in sessions.iter().enumerate() {
        let snaps: u64 = s
            .snapshots
            .iter()
            .filter_map(|r| snapshot_bytes.get(&r.snapshot))
            .sum();
        total += snaps;
        exclusive.insert(s.id, s.record_bytes + attribution.alone[index] + snaps);
    }
    Ok((exclusive, total))
}

/// Mark what every record that stays names, in every shard, and what every recovery marker
/// names. Returns the marks and, per shard, whether it may be swept (every record and part it
/// holds was read).
fn mark(
    shards: &[Shard],
    plan: &Plan,
    skipped_out: &mut Vec<Skipped>,
) -> Result<(Marks, Vec<bool>), RetentionError> {
    let mut marks = Marks::default();
    let mut sweepable = vec![true; shards.len()];
    let stores: Vec<_> = shards.iter().map(|s| &s.journal.trees().blobs).collect();
    for (index, shard) in shards.iter().enumerate() {
        let mut parts = Vec::new();
        let mut failed = None;
        // The markers first: a running aido appends an action's outcome record before it
        // removes the action's marker, so what a marker read here no longer holds is in a
        // record read below.
        let recovery = crate::dir::recovery_dir(&shard.path);
        if !recovery_marks(&recovery, &mut marks, &mut parts)? {
            sweepable[index] = false;
        }
        for item in shard.journal.trees().records.iter() {
            let (k, v) = item.map_err(crate::ReadError::from)?;
            let (Some(session), Ok(seq)) = (
                k.get(..16)
                    .and_then(|b| <[u8; 16]>::try_from(b).ok())
                    .map(SessionId::from_bytes),
                seq_of(&k),
            ) else {
                sweepable[index] = false;
                continue;
            };
            match plan.fates.get(&session) {
                Some(Fate::Remove { .. }) => continue,
                Some(Fate::Cut { through, .. }) if seq <= *through => continue,
                _ => {}
            }
            let Ok(checked) = check_value(&shard.journal.trees().blobs, session, seq, &v) else {
                sweepable[index] = false;
                continue;
            };
            // A large record's own bytes are a blob under its hash.
            if checked.kept_as_blob {
                marks.add(checked.hash)?;
            }
            references(
                &checked.stored,
                &mut |h| {
                    if let Err(e) = marks.add(h) {
                        failed = Some(e);
                    }
                },
                &mut parts,
            );
            if let Some(e) = failed.take() {
                return Err(e);
            }
        }
        if let Err(why) = expand_parts(&stores, &parts, &mut marks) {
            sweepable[index] = false;
            skipped_out.push(skipped(
                shard.path.display().to_string(),
                Kept::ReferenceUnreadable,
                why,
            ));
        }
    }
    // A marked chunked blob marks its chunks, wherever its list is.
    let mut chunks = Vec::new();
    for shard in shards {
        for item in shard.journal.trees().blobs.chunked.iter() {
            let (k, list) = item.map_err(crate::ReadError::from)?;
            if let Ok(key) = <[u8; 32]>::try_from(k.as_ref())
                && marks.contains(&key)
            {
                chunks.extend(chunks_of(&list));
            }
        }
    }
    for chunk in chunks {
        marks.add(chunk)?;
    }
    Ok((marks, sweepable))
}

/// Apply the plan's fates (or, dry, count them): snapshots, `pruned` records, records.
#[allow(clippy::too_many_arguments)]
fn prune(
    shards: &[Shard],
    sessions: &[Scanned],
    plan: &Plan,
    options: &Options,
    snapshots: &dyn SnapshotStore,
    report: &mut Report,
    changed: &mut [bool],
    skipped_out: &mut Vec<Skipped>,
) -> Result<Gone, RetentionError> {
    let dry = options.dry_run;
    let mut gone = Gone::default();
    for s in sessions {
        gone.known.insert(s.id);
        if let Some(cut) = &s.cut {
            gone.cuts.insert(s.id, cut.through_seq);
        }
    }
    let mut order: Vec<&Scanned> = sessions.iter().collect();
    order.sort_by_key(|s| (s.started_ms, s.id));
    for s in order {
        let Some(fate) = plan.fates.get(&s.id).copied() else {
            continue;
        };
        let shard = &shards[s.shard];
        let (action, through, rule) = match fate {
            Fate::Remove { rule } => ("remove", None, rule),
            Fate::Cut { through, rule, .. } => ("cut", Some(through), rule),
        };
        let (records, record_bytes) = match through {
            None => (s.records, s.record_bytes),
            Some(t) => s.records_through(&shard.journal, t),
        };
        report.sessions.push(Planned {
            session: s.id,
            shard: shard.path.display().to_string(),
            action,
            through_seq: through,
            records,
            record_bytes,
            rule,
            last_ms: s.last_ms,
        });
        let going: Vec<_> = s
            .snapshots
            .iter()
            .filter(|r| through.is_none_or(|t| r.seq <= t))
            .collect();
        match through {
            None => {
                gone.sessions.insert(s.id);
                report.summary.sessions_removed += 1;
            }
            Some(t) => {
                gone.cuts.insert(s.id, t);
                report.summary.sessions_cut += 1;
            }
        }
        if dry {
            report.summary.records_removed += records;
            report.summary.snapshots_removed += going.len() as u64;
            continue;
        }
        changed[s.shard] = true;
        let removed = match fate {
            Fate::Remove { .. } => {
                remove_snapshots(&going, snapshots, report, skipped_out);
                remove_session(&shard.journal, s)?
            }
            Fate::Cut {
                through,
                rule,
                recorded,
            } => cut_session(
                &shard.journal,
                s,
                through,
                rule,
                recorded,
                options.now_ms,
                || remove_snapshots(&going, snapshots, report, skipped_out),
            )?,
        };
        report.summary.records_removed += removed;
    }
    for (index, shard) in shards.iter().enumerate() {
        if changed[index] {
            shard
                .journal
                .trees()
                .db
                .flush()
                .map_err(|e| crate::AppendError::Storage {
                    message: e.to_string(),
                })?;
        }
    }
    Ok(gone)
}

fn remove_snapshots(
    going: &[&super::SnapshotRef],
    snapshots: &dyn SnapshotStore,
    report: &mut Report,
    skipped_out: &mut Vec<Skipped>,
) {
    for snapshot in going {
        match snapshots.remove(snapshot) {
            Ok(bytes) => {
                report.summary.snapshots_removed += 1;
                report.snapshot_bytes_freed += bytes;
            }
            Err((code, message)) => skipped_out.push(skipped(
                format!("snapshot {} of {}", snapshot.snapshot, snapshot.workspace),
                Kept::SnapshotKept,
                format!("[{code}] {message}"),
            )),
        }
    }
}

/// Where the run's own record goes (besides the caller's journal).
enum Target {
    /// No shard was held.
    None,
    /// A held shard, still open.
    Open(Journal),
    /// A held shard that was compacted: open it again.
    Reopen(std::path::PathBuf),
}

/// How long the run waits to take a shard it just compacted again (sled lets go of a closed
/// database's lock a moment after the handle is gone).
const REOPEN_WAIT_MS: u64 = 5000;

fn reopen(path: &std::path::Path) -> Result<Journal, crate::OpenError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(REOPEN_WAIT_MS);
    loop {
        match Journal::open(path, crate::Limits::default(), crate::CommitMode::Group) {
            Err(crate::OpenError::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Journal the run: a session of its own holding its `collected` record, in the caller's
/// journal, else in the shard this run held first, else (another aido took that one
/// meanwhile, or none was held) in the first shard free now.
fn journal_run(
    paths: &Paths,
    own: Option<&Journal>,
    target: Target,
    options: &Options,
    summary: &crate::record::Collected,
) -> Result<Option<SessionId>, RetentionError> {
    let first_free = || {
        crate::dir::open_writer(
            &paths.journal,
            crate::Limits::default(),
            crate::CommitMode::Group,
        )
    };
    let opened = match (own, target) {
        (Some(j), _) => j.clone(),
        (None, Target::Open(j)) => j,
        (None, Target::Reopen(path)) => match reopen(&path) {
            Ok(j) => j,
            Err(crate::OpenError::Locked { .. }) => first_free()?,
            Err(e) => return Err(e.into()),
        },
        (None, Target::None) => first_free()?,
    };
    let journal = &opened;
    let session = options.session;
    let now = options.now_ms;
    let mut summary = summary.clone();
    summary.skipped.truncate(COLLECTED_SESSIONS_LISTED_MAX);
    journal.append_blocking(
        session,
        now,
        Event::SessionStarted {
            client: Some(options.trigger.clone()),
            cwd: paths.journal.display().to_string(),
            runtime: options.runtime.clone(),
            grant: None,
        },
    )?;
    journal.append_blocking(
        session,
        now,
        Event::Collected {
            trigger: options.trigger.clone(),
            summary,
        },
    )?;
    journal.append_blocking(
        session,
        now,
        Event::SessionEnded {
            reason: "retention finished".into(),
        },
    )?;
    Ok(Some(session))
}
