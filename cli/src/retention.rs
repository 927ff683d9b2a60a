//! `aido gc`, `aido du`, and the retention `aido mcp` and `aido serve` run at start: the
//! binary's side of `aido_journal::retention` (the rules from the command line or the
//! `[retention]` config, the snapshot store lent to it, the output).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use aido_actors::{Clock, SystemClock};
use aido_journal::Journal;
use aido_journal::retention::{
    self, Options, Paths, Report, Rules, SnapshotRef, SnapshotStore, Usage, human_bytes,
};
use aido_snapshots::{Backend, SnapshotError, Store};
use anyhow::Result;

/// When the retention at start last ran, in milliseconds since the epoch (beside the shards).
const STAMP: &str = "retention-at-start";

/// The retention at start runs at most once in this long per `AIDO_HOME`.
pub const AT_START_INTERVAL_MS: u64 = 24 * 60 * 60 * 1000;

const DAY_MS: u64 = 86_400_000;

/// The workspace snapshot stores of an `AIDO_HOME`, as retention needs them.
pub struct HomeSnapshots {
    home: PathBuf,
}

impl HomeSnapshots {
    pub fn new(home: &Path) -> Self {
        Self {
            home: home.to_owned(),
        }
    }

    fn store(&self, s: &SnapshotRef) -> Result<Store, SnapshotError> {
        let backend = Backend::from_name(&s.backend).ok_or_else(|| SnapshotError::Damaged {
            id: s.snapshot.clone(),
            reason: format!("its record names no backend aido knows ({:?})", s.backend),
        })?;
        Ok(Store::recorded(
            Path::new(&s.workspace),
            &self.home,
            backend,
        ))
    }
}

impl SnapshotStore for HomeSnapshots {
    fn remove(&self, s: &SnapshotRef) -> Result<u64, (String, String)> {
        let coded = |e: SnapshotError| (e.code().to_owned(), e.to_string());
        let store = self.store(s).map_err(coded)?;
        let bytes = store
            .usage(&[s.snapshot.as_str()])
            .ok()
            .and_then(|m| m.get(&s.snapshot).copied())
            .unwrap_or(0);
        match store.delete(&s.snapshot) {
            Ok(()) => Ok(bytes),
            // Removed already (by hand, or by a run a crash cut short).
            Err(SnapshotError::NotFound { .. }) => Ok(0),
            Err(e) => Err(coded(e)),
        }
    }

    fn usage(&self, snapshots: &[SnapshotRef]) -> HashMap<String, u64> {
        let mut by_store: HashMap<(&str, &str), Vec<&str>> = HashMap::new();
        for s in snapshots {
            by_store
                .entry((s.workspace.as_str(), s.backend.as_str()))
                .or_default()
                .push(&s.snapshot);
        }
        let mut out = HashMap::new();
        for ((workspace, backend), ids) in by_store {
            let Some(backend) = Backend::from_name(backend) else {
                continue;
            };
            let store = Store::recorded(Path::new(workspace), &self.home, backend);
            if let Ok(usage) = store.usage(&ids) {
                out.extend(usage);
            }
        }
        out
    }
}

/// The rules `aido gc` was given.
pub struct GcArgs {
    pub older_than: Option<String>,
    pub before_ms: Option<u64>,
    pub max_bytes: Option<String>,
    pub keep_sessions: Option<u64>,
    pub dry_run: bool,
    pub no_compact: bool,
    pub json: bool,
}

/// The rules of the `[retention]` config.
pub fn config_rules(config: &aido_policy::Retention) -> Rules {
    let nonzero = |n: u64| (n > 0).then_some(n);
    Rules {
        older_than_ms: nonzero(config.older_than_days).map(|d| d * DAY_MS),
        before_ms: None,
        max_bytes: nonzero(config.max_bytes),
        keep_sessions: nonzero(config.keep_sessions),
    }
}

fn coded(e: retention::RetentionError) -> anyhow::Error {
    anyhow::anyhow!("[{}] {e}", e.code())
}

/// `aido gc`.
pub fn gc(home: &Path, config: &aido_policy::Retention, args: &GcArgs) -> Result<ExitCode> {
    let given = Rules {
        older_than_ms: args
            .older_than
            .as_deref()
            .map(retention::parse_age)
            .transpose()
            .map_err(coded)?,
        before_ms: args.before_ms,
        max_bytes: args
            .max_bytes
            .as_deref()
            .map(retention::parse_bytes)
            .transpose()
            .map_err(coded)?,
        keep_sessions: args.keep_sessions,
    };
    let rules = if given.is_empty() {
        config_rules(config)
    } else {
        given
    };
    let clock = SystemClock::default();
    let options = Options {
        rules,
        now_ms: clock.now_ms(),
        dry_run: args.dry_run,
        compact: config.compact && !args.no_compact,
        trigger: "aido gc".into(),
        session: clock.session_id(),
        runtime: format!("aido {}", aido_actors::runtime::VERSION),
    };
    let before = retention::disk_bytes(home);
    let report = retention::collect(&Paths::of(home), None, &options, &HomeSnapshots::new(home))
        .map_err(coded)?;
    let after = retention::disk_bytes(home);
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["rules"] = serde_json::to_value(rules)?;
        value["home_bytes_before"] = before.into();
        value["home_bytes_after"] = after.into();
        println!("{value}");
    } else {
        print!("{}", gc_text(&report, &rules, before, after));
    }
    Ok(ExitCode::SUCCESS)
}

fn rules_text(rules: &Rules) -> String {
    let mut parts = Vec::new();
    if let Some(ms) = rules.older_than_ms {
        parts.push(format!("older than {}", age_text(ms)));
    }
    if let Some(ms) = rules.before_ms {
        parts.push(format!("before {}", aido_serve::feed::utc_day(ms)));
    }
    if let Some(max) = rules.max_bytes {
        parts.push(format!("over {}", human_bytes(max)));
    }
    if let Some(n) = rules.keep_sessions {
        parts.push(format!("beyond the newest {n} session(s)"));
    }
    parts.join(", ")
}

fn age_text(ms: u64) -> String {
    match ms {
        ms if ms % DAY_MS == 0 => format!("{}d", ms / DAY_MS),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

fn gc_text(report: &Report, rules: &Rules, before: u64, after: u64) -> String {
    use std::fmt::Write;
    let s = &report.summary;
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut out = format!(
        "aido gc ({}): {verb} {} session(s) whole and cut {}: {} record(s), {} blob(s), {} object(s), {} snapshot(s), {} audit line(s)\n",
        rules_text(rules),
        s.sessions_removed,
        s.sessions_cut,
        s.records_removed,
        s.blobs_removed,
        s.objects_removed,
        s.snapshots_removed,
        s.audit_lines_removed
    );
    if !report.dry_run {
        let _ = writeln!(
            out,
            "  AIDO_HOME {} -> {} (journal {} -> {}, audit files {} -> {}; snapshots gave back {})",
            human_bytes(before),
            human_bytes(after),
            human_bytes(report.journal_bytes_before),
            human_bytes(report.journal_bytes_after),
            human_bytes(report.audit_bytes_before),
            human_bytes(report.audit_bytes_after),
            human_bytes(report.snapshot_bytes_freed)
        );
    }
    for p in &report.sessions {
        let what = match p.through_seq {
            Some(t) => format!("cut through seq {t}"),
            None => "whole".into(),
        };
        let _ = writeln!(
            out,
            "  session {} {what} ({}, last active {}): {} record(s), {}",
            p.session,
            p.rule,
            aido_serve::feed::utc_day(p.last_ms),
            p.records,
            human_bytes(p.record_bytes)
        );
    }
    for c in &report.compacted {
        let _ = writeln!(
            out,
            "  compacted {}: {} -> {}",
            c.shard,
            human_bytes(c.bytes_before),
            human_bytes(c.bytes_after)
        );
    }
    for k in &s.skipped {
        let _ = writeln!(out, "  kept {} [{}] {}", k.what, k.code, k.detail);
    }
    if let Some(session) = report.journaled_in {
        let _ = writeln!(out, "  journaled in session {session}");
    }
    out
}

/// `aido du`: what takes the space.
pub fn du(home: &Path, json: bool) -> Result<ExitCode> {
    let now = SystemClock::default().now_ms();
    let usage =
        retention::usage(&Paths::of(home), now, &HomeSnapshots::new(home)).map_err(coded)?;
    let total = retention::disk_bytes(home);
    let snapshots_dir = retention::disk_bytes(&home.join("snapshots"));
    let layers = retention::disk_bytes(&home.join("layers"));
    let measured = usage.journal_bytes + snapshots_dir + layers + usage.kinds.audit;
    let other = total.saturating_sub(measured);
    if json {
        let mut value = serde_json::to_value(&usage)?;
        value["home"] = home.display().to_string().into();
        value["total_bytes"] = total.into();
        value["kinds"]["snapshots_dir"] = snapshots_dir.into();
        value["kinds"]["layers"] = layers.into();
        value["kinds"]["other"] = other.into();
        println!("{value}");
        return Ok(ExitCode::SUCCESS);
    }
    print!(
        "{}",
        du_text(home, &usage, total, snapshots_dir, layers, other)
    );
    Ok(ExitCode::SUCCESS)
}

fn du_text(
    home: &Path,
    usage: &Usage,
    total: u64,
    snapshots_dir: u64,
    layers: u64,
    other: u64,
) -> String {
    use std::fmt::Write;
    let k = &usage.kinds;
    let b = human_bytes;
    let mut out = format!("{}: {} on disk\n", home.display(), b(total));
    let _ = writeln!(
        out,
        "  journal       {:>10}  database {} (records {}, blobs {}), objects {}, other {}",
        b(usage.journal_bytes),
        b(k.journal_db),
        b(k.records),
        b(k.sled_blobs),
        b(k.objects),
        b(k.journal_other)
    );
    let _ = writeln!(
        out,
        "  snapshots     {:>10}  in AIDO_HOME ({} held by the sessions' snapshots, some beside their workspaces)",
        b(snapshots_dir),
        b(k.snapshots)
    );
    let _ = writeln!(out, "  layers        {:>10}", b(layers));
    let _ = writeln!(out, "  audit files   {:>10}", b(k.audit));
    let _ = writeln!(
        out,
        "  other         {:>10}  (logs, caches, machines, artifacts, memory, ...)",
        b(other)
    );
    let _ = writeln!(
        out,
        "  unreferenced  {:>10}  contents no record names (aido gc takes them)",
        b(k.unreferenced)
    );
    let _ = writeln!(
        out,
        "\n  {:<32} {:<10} {:<10} {:>8} {:>10} {:>10} {:>10} {:>10}  state",
        "session", "started", "last", "records", "records", "alone", "shared", "snapshots"
    );
    for s in &usage.sessions {
        let state = match (s.live, s.ended) {
            (true, _) => "live",
            (false, true) => "ended",
            (false, false) => "quiet",
        };
        let _ = writeln!(
            out,
            "  {} {:<10} {:<10} {:>8} {:>10} {:>10} {:>10} {:>10}  {state}",
            s.id,
            aido_serve::feed::utc_day(s.started_ms),
            aido_serve::feed::utc_day(s.last_ms),
            s.records,
            b(s.record_bytes),
            b(s.alone_bytes),
            b(s.shared_bytes),
            b(s.snapshot_bytes)
        );
    }
    out
}

/// Run the `[retention]` rules in the background, at most once a day per `AIDO_HOME`, over
/// this runtime's own `journal` (what it stores meanwhile is pinned: call this before the
/// runtime starts) and the shards no other aido holds. What it removed is journaled in a
/// session of its own; what happened is logged.
pub fn at_start(home: &Path, config: &aido_policy::Retention, journal: &Journal, trigger: &str) {
    if !config.at_start || config.is_off() {
        return;
    }
    let clock = SystemClock::default();
    let now = clock.now_ms();
    let stamp = home.join("journal").join(STAMP);
    let last = std::fs::read_to_string(&stamp)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    if last.is_some_and(|last| last.saturating_add(AT_START_INTERVAL_MS) > now) {
        return;
    }
    // Written first, so two runtimes starting together do not both run it.
    let temp = stamp.with_extension("tmp");
    if let Err(e) =
        std::fs::write(&temp, now.to_string()).and_then(|()| std::fs::rename(&temp, &stamp))
    {
        tracing::warn!(error = %e, "retention at start: cannot write its stamp; not running");
        return;
    }
    let guard = journal.pin_blobs();
    let journal = journal.clone();
    let options = Options {
        rules: config_rules(config),
        now_ms: now,
        dry_run: false,
        compact: config.compact,
        trigger: format!("{trigger} (retention at start)"),
        session: clock.session_id(),
        runtime: format!("aido {}", aido_actors::runtime::VERSION),
    };
    let home = home.to_owned();
    let spawned = std::thread::Builder::new()
        .name("aido-retention".into())
        .spawn(move || {
            let snapshots = HomeSnapshots::new(&home);
            match retention::collect(
                &Paths::of(&home),
                Some((&journal, &guard)),
                &options,
                &snapshots,
            ) {
                Ok(report) => tracing::info!(
                    sessions_removed = report.summary.sessions_removed,
                    sessions_cut = report.summary.sessions_cut,
                    records = report.summary.records_removed,
                    blobs = report.summary.blobs_removed,
                    objects = report.summary.objects_removed,
                    bytes_freed = report.summary.bytes_freed,
                    skipped = report.summary.skipped.len(),
                    "retention at start finished"
                ),
                Err(e) => tracing::warn!(code = e.code(), error = %e, "retention at start failed"),
            }
            drop(guard);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "retention at start: cannot start its thread");
    }
}
