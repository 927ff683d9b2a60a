//! The stdio comparison: the same `read_file` round trips against aido and against the peer, each
//! spawned as a child and driven by one rmcp client, in alternating rounds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::fixture::Fixture;
use crate::harness::{Server, alternate};
use crate::record::{Record, Section, Stats, Unit};

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

/// One run of the comparison, or why it did not run.
#[derive(Clone, Debug)]
pub struct StdioRun {
    /// Where it ran (or would have).
    pub place: Placement,
    /// What it measured.
    pub outcome: Outcome,
}

/// A run's result.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The run happened.
    Ran {
        /// aido first, then the peer.
        measured: Vec<Measured>,
        /// aido's journal afterwards.
        journal: JournalCheck,
        /// Files in the fixture.
        files: usize,
        /// Mean bytes per file.
        file_bytes: usize,
    },
    /// The run was skipped, and why.
    Skipped(String),
}

impl StdioRun {
    /// aido's measurement and the peer's, when the run happened.
    pub fn pair(&self) -> Option<(&Measured, &Measured)> {
        match &self.outcome {
            Outcome::Ran { measured, .. } => match measured.as_slice() {
                [aido, peer] => Some((aido, peer)),
                _ => None,
            },
            Outcome::Skipped(_) => None,
        }
    }

    /// aido's round trips per second over the peer's.
    pub fn ratio(&self) -> Option<f64> {
        let (aido, peer) = self.pair()?;
        let peer = peer.per_second();
        (peer > 0.0).then(|| aido.per_second() / peer)
    }
}

/// Runs the comparison once with the fixture and AIDO_HOME in a fresh directory under
/// `place.dir`: both servers started, warmed up, measured in alternating rounds (every reply
/// checked), stopped, then aido's journal read back.
pub async fn run(setup: &Setup, place: Placement) -> Result<StdioRun> {
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
    Ok(StdioRun {
        place,
        outcome: Outcome::Ran {
            measured,
            journal,
            files: fixture.files.len(),
            file_bytes: fixture.total_bytes() / fixture.files.len().max(1),
        },
    })
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

impl Measured {
    /// Round trips per second over the time spent inside calls.
    pub fn per_second(&self) -> f64 {
        let busy: Duration = self.latencies.iter().sum();
        if busy.is_zero() {
            return 0.0;
        }
        self.latencies.len() as f64 / busy.as_secs_f64()
    }
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
    let mut measured: Vec<Measured> = servers
        .iter()
        .map(|s| Measured {
            name: s.name.clone(),
            tool: s.tool.clone(),
            latencies: Vec::with_capacity(plan.calls),
        })
        .collect();
    let per_round = plan.calls / plan.rounds;
    for round in 0..plan.rounds {
        for lane in alternate(round, servers.len()) {
            for k in 0..per_round {
                let took = read_checked(&servers[lane], fixture, round * per_round + k).await?;
                measured[lane].latencies.push(took);
            }
        }
    }
    Ok(measured)
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

/// The stdio section's records: aido's round trips per second beside the peer's, and each
/// side's latency, per run; the journal each run left.
pub fn records(runs: &[StdioRun], plan: Plan, peer: &str) -> Vec<Record> {
    let mut s = Section::new("stdio");
    let (files, file_bytes) = runs
        .iter()
        .find_map(|run| match run.outcome {
            Outcome::Ran {
                files, file_bytes, ..
            } => Some((files, file_bytes)),
            Outcome::Skipped(_) => None,
        })
        .unwrap_or_default();
    let mut journal = Vec::new();
    for (k, run) in runs.iter().enumerate() {
        // The first run is in the default temp dir, the second on tmpfs.
        let id = match k {
            0 => "stdio_temp".to_owned(),
            1 => "stdio_tmpfs".to_owned(),
            _ => format!("stdio_{}", k + 1),
        };
        let place = format!(
            "files and journal in {} (`{}`, {})",
            run.place.label,
            run.place.dir.display(),
            run.place.fs
        );
        let what = format!("stdio `read_file` round trips, {place}: aido / {peer}");
        match (&run.outcome, run.pair()) {
            (Outcome::Ran { journal: check, .. }, Some((aido, them))) => {
                s.value(&id, None, Unit::PerSecond, aido.per_second())
                    .what(what);
                let lane = format!("{} (`{}`)", them.name, them.tool);
                s.value(&id, Some(&lane), Unit::PerSecond, them.per_second());
                s.ratio(&id, run.ratio());
                for (who, m) in [("aido", aido), ("peer", them)] {
                    let row = format!("{id}_{who}_latency");
                    s.lane(
                        &row,
                        None,
                        Unit::Ns,
                        Stats::latency(&m.latencies),
                        Vec::new(),
                    )
                    .what(format!("{} `{}` round trip, {place}", m.name, m.tool));
                }
                journal.push(vec![
                    (k + 1).to_string(),
                    place.clone(),
                    check.records.to_string(),
                    check.sessions.to_string(),
                    check.verified.to_string(),
                ]);
            }
            (Outcome::Skipped(why), _) => s.not_run(&id, what, why),
            (Outcome::Ran { .. }, None) => {
                s.failed(&id, what, "the run measured no pair of servers");
            }
        }
    }
    s.fact("peer", peer);
    s.numbers(&[
        ("files", files as f64),
        ("file_bytes", file_bytes as f64),
        ("warmup", plan.warmup as f64),
        ("calls", plan.calls as f64),
        ("rounds", plan.rounds as f64),
    ]);
    let columns = ["run", "place", "records", "sessions", "verified"];
    s.table("journal", &columns, journal);
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn per_second_counts_only_time_in_calls() {
        let m = Measured {
            name: "x".into(),
            tool: "read_file".into(),
            latencies: ms(&[2, 2, 2, 2]),
        };
        assert!((m.per_second() - 500.0).abs() < 1e-6);
    }

    #[test]
    fn ratio_is_aido_over_peer_and_absent_when_skipped() {
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
        let ran = StdioRun {
            place: place.clone(),
            outcome: Outcome::Ran {
                measured: vec![measured("aido", 4), measured("peer", 1)],
                journal: JournalCheck::default(),
                files: 1,
                file_bytes: 10,
            },
        };
        assert!((ran.ratio().unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(ran.pair().unwrap().0.name, "aido");
        let skipped = StdioRun {
            place,
            outcome: Outcome::Skipped("no tmpfs".into()),
        };
        assert!(skipped.pair().is_none() && skipped.ratio().is_none());
    }
}
