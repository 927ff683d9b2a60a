//! The stdio comparison: the same `read_file` round trips against aido and against the peer, each
//! spawned as a child and driven by one rmcp client, in alternating rounds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::fixture::Fixture;
use crate::harness::Server;
use crate::record::{Section, Stats, Unit};

/// What every run of the comparison shares.
pub struct Setup {
    /// The aido binary.
    pub aido: PathBuf,
    /// The node binary that runs the peer.
    pub node: String,
    /// The peer's entry script.
    pub peer_entry: PathBuf,
    /// How the comparison is run.
    pub plan: Plan,
    /// Files in the fixture.
    pub files: usize,
    /// Bytes per file (about).
    pub file_bytes: usize,
    /// The peer, as "`name` version".
    pub peer: String,
}

/// Where one run keeps the fixture and aido's journal.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Shown in the report ("default temp dir", "tmpfs").
    pub label: String,
    /// The directory the fixture is created in.
    pub dir: PathBuf,
    /// The file system type of `dir`.
    pub fs: String,
}

/// Runs the comparison once with the fixture and AIDO_HOME in a fresh directory under
/// `place.dir`: both servers started, warmed up, measured in alternating rounds (every reply
/// checked), stopped, then aido's journal read back. Run `k` of the section, its rows in `s`.
pub async fn run(s: &mut Section, k: usize, setup: &Setup, place: &Placement) -> Result<()> {
    let fixture = Fixture::create(setup.files, setup.file_bytes, Some(&place.dir))?;
    eprintln!(
        "aido-bench: stdio in {} ({}): {} files ({} bytes) in {}; {} warm-up + {} measured calls per server in {} rounds",
        place.label,
        place.fs,
        fixture.files.len(),
        fixture.total_bytes(),
        fixture.root().display(),
        setup.plan.warmup,
        setup.plan.calls,
        setup.plan.rounds
    );
    let mut command = tokio::process::Command::new(&setup.aido);
    command
        .arg("mcp")
        .env("HOME", fixture.home())
        .env("AIDO_HOME", fixture.aido_home())
        .env_remove("AIDO_LOG")
        .current_dir(fixture.home());
    let aido_server = Server::start(
        "aido",
        command,
        fixture.root().join("aido.stderr"),
        &["read_file"],
    )
    .await?;
    let mut command = tokio::process::Command::new(&setup.node);
    command
        .arg(&setup.peer_entry)
        .arg(fixture.home())
        .current_dir(fixture.home());
    let peer_server = match Server::start(
        "server-filesystem",
        command,
        fixture.root().join("peer.stderr"),
        &["read_text_file", "read_file"],
    )
    .await
    {
        Ok(server) => server,
        Err(e) => {
            let _ = aido_server.stop().await;
            return Err(e);
        }
    };

    let servers = [aido_server, peer_server];
    let measured = compare(&servers, &fixture, setup.plan).await;
    let [aido_server, peer_server] = servers;
    // Stop both even when the run failed, so no child outlives the harness.
    let stopped = (aido_server.stop().await, peer_server.stop().await);
    let measured = measured?;
    stopped.0?;
    stopped.1?;
    let journal = check_journal(&setup.aido, &fixture.aido_home())?;
    if k == 0 {
        let files = fixture.files.len();
        s.number("files", files as f64);
        s.number("file_bytes", (fixture.total_bytes() / files.max(1)) as f64);
    }
    rows(s, k, &setup.peer, place, &measured, &journal);
    Ok(())
}

/// Run `k`'s id and where it ran, in words.
fn row_of(k: usize, place: &Placement) -> (String, String) {
    // The first run is in the default temp dir, the second on tmpfs.
    let id = match k {
        0 => "stdio_temp".to_owned(),
        1 => "stdio_tmpfs".to_owned(),
        _ => format!("stdio_{}", k + 1),
    };
    let (label, dir, fs) = (&place.label, place.dir.display(), &place.fs);
    (id, format!("files and journal in {label} (`{dir}`, {fs})"))
}

/// Run `k`, not run, and why.
pub fn skipped(s: &mut Section, k: usize, peer: &str, place: &Placement, why: &str) {
    let (id, place) = row_of(k, place);
    let what = format!("stdio `read_file` round trips, {place}: aido / {peer}");
    s.not_run(&id, what, why);
}

/// Run `k`'s rows: aido's round trips per second beside the peer's (and the ratio), each side's
/// latency; and its line of the journal table.
fn rows(
    s: &mut Section,
    k: usize,
    peer: &str,
    place: &Placement,
    measured: &[Measured],
    check: &JournalCheck,
) {
    let (id, place) = row_of(k, place);
    let what = format!("stdio `read_file` round trips, {place}: aido / {peer}");
    let [aido, them] = measured else {
        return s.failed(&id, what, "the run measured no pair of servers");
    };
    let (ours, theirs) = (per_second(&aido.latencies), per_second(&them.latencies));
    s.value(&id, None, Unit::PerSecond, ours).what(what);
    let lane = format!("{} (`{}`)", them.name, them.tool);
    s.value(&id, Some(&lane), Unit::PerSecond, theirs);
    s.ratio(&id, (theirs > 0.0).then(|| ours / theirs));
    for (who, m) in [("aido", aido), ("peer", them)] {
        let row = format!("{id}_{who}_latency");
        let latency = Stats::latency(&m.latencies);
        s.lane(&row, None, Unit::Ns, latency, Vec::new())
            .what(format!("{} `{}` round trip, {place}", m.name, m.tool));
    }
    let cells = [
        ("run", (k + 1).to_string()),
        ("place", place),
        ("records", check.records.to_string()),
        ("sessions", check.sessions.to_string()),
        ("verified", check.verified.to_string()),
    ];
    s.line("journal", k + 1, &cells);
}

/// How the comparison is run.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Measured round trips per server.
    pub calls: usize,
    /// The measured calls are split into this many rounds per server, run A, B, A, B, ...
    pub rounds: usize,
    /// Unmeasured round trips per server first.
    pub warmup: usize,
}

/// One server's measured round trips.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The server.
    pub name: String,
    /// The tool called.
    pub tool: String,
    /// Every measured round trip, in call order.
    pub latencies: Vec<Duration>,
}

/// Round trips per second over the time spent inside calls.
fn per_second(latencies: &[Duration]) -> f64 {
    let busy: Duration = latencies.iter().sum();
    if busy.is_zero() {
        return 0.0;
    }
    latencies.len() as f64 / busy.as_secs_f64()
}

/// Warms every server up, then runs the measured rounds in turn (round r of server 0, round r
/// of server 1, round r+1 of server 0, ...), so drift in the machine hits both alike. Every
/// reply is checked against the file's bytes: a mismatch ends the run with an error.
pub async fn compare(servers: &[Server], fixture: &Fixture, plan: Plan) -> Result<Vec<Measured>> {
    if fixture.files.is_empty() || plan.rounds == 0 || !plan.calls.is_multiple_of(plan.rounds) {
        bail!(
            "need files, and calls ({}) divisible by rounds ({})",
            plan.calls,
            plan.rounds
        );
    }
    for server in servers {
        for n in 0..plan.warmup {
            read_checked(server, fixture, n).await?;
        }
    }
    let per_round = plan.calls / plan.rounds;
    let times = crate::harness::rounds(plan.rounds, servers.len(), per_round, async |lane, n| {
        read_checked(&servers[lane], fixture, n).await
    })
    .await?;
    let measured = servers.iter().zip(times);
    let measured = measured.map(|(s, latencies)| Measured {
        name: s.name.clone(),
        tool: s.tool.clone(),
        latencies,
    });
    Ok(measured.collect())
}

/// Reads file `n % files` through `server`, checks the text, and returns the round trip time.
async fn read_checked(server: &Server, fixture: &Fixture, n: usize) -> Result<Duration> {
    let (path, expected) = &fixture.files[n % fixture.files.len()];
    let start = Instant::now();
    let text = server.read(path).await?;
    let took = start.elapsed();
    if text != *expected {
        let at = text
            .bytes()
            .zip(expected.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(text.len().min(expected.len()));
        bail!(
            "{} returned wrong text for {}: {} bytes instead of {}, first difference at byte {at}",
            server.name,
            path.display(),
            text.len(),
            expected.len()
        );
    }
    Ok(took)
}

/// What aido's journal holds after the run, read back with `aido replay`.
#[derive(Clone, Debug, Default)]
pub struct JournalCheck {
    /// Sessions in the journal.
    pub sessions: usize,
    /// Records over all sessions.
    pub records: u64,
    /// Sessions whose hash chain `aido replay verify` accepted.
    pub verified: usize,
}

/// Runs `aido replay sessions --json` and `aido replay verify` on every session (after aido
/// has exited: the journal is locked while it runs).
pub fn check_journal(aido: &Path, aido_home: &Path) -> Result<JournalCheck> {
    let output = crate::harness::exec(
        std::process::Command::new(aido)
            .args(["replay", "sessions", "--json"])
            .env("AIDO_HOME", aido_home),
    )?;
    let sessions: Value =
        serde_json::from_slice(&output.stdout).context("aido replay sessions --json")?;
    let sessions = sessions.as_array().cloned().unwrap_or_default();
    let mut check = JournalCheck {
        sessions: sessions.len(),
        ..JournalCheck::default()
    };
    for session in &sessions {
        check.records += session["records"].as_u64().unwrap_or(0);
        let Some(id) = session["id"].as_str() else {
            bail!("a session without an id: {session}");
        };
        let status = std::process::Command::new(aido)
            .args(["replay", "verify", id])
            .env("AIDO_HOME", aido_home)
            .stdout(Stdio::null())
            .status()
            .context("running aido replay verify")?;
        if status.success() {
            check.verified += 1;
        }
    }
    Ok(check)
}

/// The facts the section's prose names.
pub fn facts(s: &mut Section, setup: &Setup) {
    s.fact("peer", setup.peer.clone());
    let plan = setup.plan;
    s.numbers(&[
        ("warmup", plan.warmup as f64),
        ("calls", plan.calls as f64),
        ("rounds", plan.rounds as f64),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RATIO;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn per_second_counts_only_time_in_calls() {
        assert!((per_second(&ms(&[2, 2, 2, 2])) - 500.0).abs() < 1e-6);
        assert_eq!(per_second(&[]), 0.0);
    }

    #[test]
    fn a_run_is_aido_beside_the_peer_with_the_ratio_and_a_journal_line() {
        let place = Placement {
            label: "tmpfs".into(),
            dir: "/dev/shm".into(),
            fs: "tmpfs".into(),
        };
        let measured = |name: &str, each: u64| Measured {
            name: name.into(),
            tool: "read_file".into(),
            latencies: ms(&[each; 4]),
        };
        let mut s = Section::new("stdio");
        let pair = [measured("aido", 4), measured("peer", 1)];
        let check = JournalCheck {
            sessions: 1,
            records: 8,
            verified: 1,
        };
        rows(&mut s, 1, "`peer` 1", &place, &pair, &check);
        skipped(&mut s, 2, "`peer` 1", &place, "no tmpfs");
        let records = s.finish();
        let lane = |row: &str, lane: Option<&str>| {
            let found = records
                .iter()
                .find(|r| r.row == row && r.lane.as_deref() == lane);
            found.and_then(|r| r.value.or(r.stats.as_ref().map(|s| s.median)))
        };
        assert_eq!(lane("stdio_tmpfs", None), Some(250.0));
        assert_eq!(
            lane("stdio_tmpfs", Some("peer (`read_file`)")),
            Some(1000.0)
        );
        assert_eq!(lane("stdio_tmpfs", Some(RATIO)), Some(0.25));
        assert_eq!(lane("stdio_tmpfs_peer_latency", None), Some(1e6));
        assert_eq!(lane("journal:2", Some("records")), None);
        let cell = records
            .iter()
            .find(|r| r.row == "journal:2" && r.lane.as_deref() == Some("records"));
        assert_eq!(cell.and_then(|r| r.note.as_deref()), Some("8"));
        let not_run = records.iter().find(|r| r.row == "stdio_3").unwrap();
        assert_eq!(not_run.error.as_deref(), Some("not run: no tmpfs"));
    }
}
