//! Processes: `true` spawned bare, through `aido exec`, srt and codex in alternating rounds;
//! then in one `aido mcp`: `run_command` of `true`, a 1 GB output flood's memory, the cost per
//! changed file, and a dev server's round trip. The report's process section says how.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::harness::{Server, status_bytes};
use crate::record::{Record, Section, Stats, Unit, median, ns};

/// Spawns of `true` per side (each peer takes about half a second through node).
pub const SPAWNS: usize = 30;
/// Rounds the spawns are split into, alternating between the sides.
pub const SPAWN_ROUNDS: usize = 5;
/// `run_command` round trips of `true` timed.
pub const CALLS: usize = 200;
/// Requests to the dev server timed, through aido and bare, alternately.
pub const DEV_CALLS: usize = 30;
/// The interpreter both sides of the dev-server round trip run (Debian's, the same file for
/// both: a version manager's shim on the host's PATH would time itself, not the round trip).
const PYTHON: &str = "/usr/bin/python3";
/// The dev server's client: one page fetched from 127.0.0.1:PORT.
const DEV_CLIENT: &str =
    "import sys, urllib.request as u; u.urlopen('http://127.0.0.1:%s/' % sys.argv[1]).read()";
/// Bytes the flood writes to standard output.
pub const FLOOD_BYTES: u64 = 1 << 30;
/// Files the larger change writes (the smaller writes one).
pub const FILES: usize = 101;
/// Commands of each change size timed.
pub const CHANGE_REPEATS: usize = 15;

/// The judged rows, said not run when the section does not run.
pub const ROWS: [(&str, &str); 6] = [
    ("process_exec_vs_srt", "see the process section"),
    ("process_exec_vs_codex", "see the process section"),
    ("process_run_command_true", "see the process section"),
    ("process_flood_memory", "see the process section"),
    ("process_changes_per_file", "see the process section"),
    ("process_dev_server_round_trip", "see the process section"),
];

/// One side of the spawn comparison.
struct Side {
    /// Shown in the report.
    pub name: String,
    /// The command line, as run.
    pub command: String,
    /// Its wall time per spawn, or why it could not run here.
    pub times: Result<Vec<Duration>, String>,
}

/// Where the peers are installed.
pub struct Peers {
    /// `bench/node_modules` (holds `.bin/srt` and `@openai/codex-linux-x64`).
    pub node_modules: PathBuf,
}

/// Runs the section: `aido exec -- true` beside srt and codex (and a bare spawn), `run_command`
/// of `true` over MCP, a 1 GB flood's memory, the cost per changed file, and the dev-server
/// round trip.
pub async fn run(aido: &Path, temp: &Path, peers: &Peers) -> Result<Vec<Record>> {
    // The spawns run in a temp dir: the peers' paths must not be relative.
    let node_modules =
        std::fs::canonicalize(&peers.node_modules).unwrap_or_else(|_| peers.node_modules.clone());
    let peers = &Peers { node_modules };
    measure(aido, temp, peers).await
}

/// Codex's native binary inside its npm package (the launcher script only spawns it).
fn codex_binary(node_modules: &Path) -> Result<PathBuf, String> {
    let vendor = node_modules.join("@openai/codex-linux-x64/vendor");
    let entries = std::fs::read_dir(&vendor).map_err(|e| {
        format!(
            "`@openai/codex` is not installed ({}: {e}; bench/run installs it)",
            vendor.display()
        )
    })?;
    for entry in entries.flatten() {
        let binary = entry.path().join("bin/codex");
        if binary.is_file() {
            return Ok(binary);
        }
    }
    Err(format!("no vendor/*/bin/codex under {}", vendor.display()))
}

/// The spawn sides: (name, program, args, extra environment), or why a side cannot run.
type Spec = (String, Result<(PathBuf, Vec<String>), String>);

fn spawn_specs(aido: &Path, peers: &Peers) -> Vec<Spec> {
    let srt = peers.node_modules.join(".bin/srt");
    let srt = if srt.exists() {
        Ok((srt, vec!["true".to_owned()]))
    } else {
        Err(format!(
            "`@anthropic-ai/sandbox-runtime` is not installed ({}; bench/run installs it)",
            srt.display()
        ))
    };
    vec![
        ("bare spawn".into(), Ok((PathBuf::from("true"), Vec::new()))),
        (
            "aido exec".into(),
            Ok((
                aido.to_owned(),
                vec!["exec".into(), "--".into(), "true".into()],
            )),
        ),
        ("srt".into(), srt),
        (
            "codex sandbox".into(),
            codex_binary(&peers.node_modules)
                .map(|binary| (binary, vec!["sandbox".into(), "true".into()])),
        ),
    ]
}

/// A program's path as the report may show it: relative to the checkout (no machine paths).
fn shown(program: &Path) -> String {
    let here = std::env::current_dir().unwrap_or_default();
    program
        .strip_prefix(&here)
        .unwrap_or(program)
        .display()
        .to_string()
}

/// One spawn of `program args` in `cwd`, with `HOME`, `AIDO_HOME` and `PATH` only; its time.
fn spawn_once(program: &Path, args: &[String], cwd: &Path, home: &Path) -> Result<Duration> {
    let start = Instant::now();
    let out = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("AIDO_HOME", home.join(".aido"))
        .env("CODEX_HOME", home.join(".codex"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("spawning {}", shown(program)))?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "{} {} exited with {}: {}",
            shown(program),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(took)
}

/// Directories in the home the spawns run in: a developer's home is not empty (this machine's
/// holds 21,000), and aido's sandbox must find every deny-glob match in it.
pub const HOME_DIRS: usize = 20_000;

/// A home of [`HOME_DIRS`] directories, 100 per parent, each with a small file, and a few
/// `.env` files for the deny globs to find.
fn populate(home: &Path) -> Result<()> {
    for i in 0..HOME_DIRS / 100 {
        for j in 0..100 {
            let dir = home.join(format!("src/p{i:03}/m{j:02}"));
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("lib.rs"), "fn f() {}\n")?;
        }
        if i % 50 == 0 {
            std::fs::write(home.join(format!("src/p{i:03}/.env")), "TOKEN=x\n")?;
        }
    }
    Ok(())
}

fn spawns(aido: &Path, work: &Path, peers: &Peers) -> Result<Vec<Side>> {
    let home = work.join("spawn-home");
    let cwd = home.join("project");
    std::fs::create_dir_all(&cwd)?;
    std::fs::create_dir_all(home.join(".codex"))?;
    populate(&home)?;
    let specs = spawn_specs(aido, peers);
    let mut sides: Vec<Side> = specs
        .iter()
        .map(|(name, spec)| Side {
            name: name.clone(),
            command: match spec {
                Ok((program, args)) => {
                    let program = program.file_name().map_or_else(
                        || program.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    );
                    format!("{program} {}", args.join(" ")).trim().to_owned()
                }
                Err(_) => String::new(),
            },
            times: spec.as_ref().map(|_| Vec::new()).map_err(Clone::clone),
        })
        .collect();
    // A side that fails its warm-up is reported as failed, not measured.
    for ((_, spec), side) in specs.iter().zip(sides.iter_mut()) {
        if let (Ok((program, args)), Ok(_)) = (spec, &side.times) {
            for _ in 0..3 {
                if let Err(e) = spawn_once(program, args, &cwd, &home) {
                    side.times = Err(format!("{e:#}"));
                    break;
                }
            }
        }
    }
    let per_round = SPAWNS.div_ceil(SPAWN_ROUNDS);
    for round in 0..SPAWN_ROUNDS {
        for i in crate::harness::alternate(round, specs.len()) {
            let (_, spec) = &specs[i];
            let Ok((program, args)) = spec else { continue };
            let Ok(times) = &mut sides[i].times else {
                continue;
            };
            for _ in 0..per_round {
                times.push(spawn_once(program, args, &cwd, &home)?);
            }
        }
    }
    Ok(sides)
}

async fn call(server: &Server, arguments: Value) -> Result<Value> {
    let out = server.json("run_command", arguments).await?;
    if out["exit_code"] != json!(0) {
        bail!("run_command did not exit 0: {out}");
    }
    Ok(out)
}

async fn measure(aido: &Path, temp: &Path, peers: &Peers) -> Result<Vec<Record>> {
    let temp = crate::fixture::outside_tmp(temp);
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let sides = {
        let (aido, work_path) = (aido.to_owned(), work.path().to_owned());
        let node_modules = peers.node_modules.clone();
        tokio::task::spawn_blocking(move || spawns(&aido, &work_path, &Peers { node_modules }))
            .await
            .context("the spawn thread")??
    };

    let (ours, home) = Server::aido(aido, work.path(), &["run_command"]).await?;
    let pid = ours.pid;

    for _ in 0..20 {
        call(&ours, json!({"argv": ["true"]})).await?;
    }
    let mut run_command = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let start = Instant::now();
        call(&ours, json!({"argv": ["true"]})).await?;
        run_command.push(start.elapsed());
    }

    let flood_rss_before = status_bytes(pid, "VmRSS:")?;
    let start = Instant::now();
    let flood = call(
        &ours,
        json!({"argv": ["head", "-c", FLOOD_BYTES.to_string(), "/dev/zero"], "timeout_ms": 120_000}),
    )
    .await?;
    let flood_time = start.elapsed();
    let flood_rss_peak = status_bytes(pid, "VmHWM:")?;
    let flood_counted = flood["stdout_bytes_total"].as_u64().unwrap_or(0);
    if flood_counted != FLOOD_BYTES {
        bail!("the flood wrote {FLOOD_BYTES} bytes but aido counted {flood_counted}: {flood}");
    }

    let mut one_file = Vec::with_capacity(CHANGE_REPEATS);
    let mut many_files = Vec::with_capacity(CHANGE_REPEATS);
    for k in 0..CHANGE_REPEATS {
        for (n, times) in [(1, &mut one_file), (FILES, &mut many_files)] {
            let script = format!(
                "mkdir d{n}_{k} && cd d{n}_{k} && i=0; while [ $i -lt {n} ]; do echo $i > f$i; i=$((i+1)); done"
            );
            let start = Instant::now();
            call(&ours, json!({"shell": script})).await?;
            times.push(start.elapsed());
        }
    }
    let made = std::fs::read_dir(home.join(format!("d{FILES}_0")))?.count();
    if made != FILES {
        bail!("the command wrote {made} files, not {FILES}");
    }
    let (dev_server, dev_server_bare) = dev_round_trips(&ours, &home).await?;
    ours.stop().await?;
    // The journaling cost per changed file: the median difference over the extra files.
    let per_file = crate::harness::median(&many_files)
        .saturating_sub(crate::harness::median(&one_file))
        / (FILES as u32 - 1);
    let mut s = Section::new("process");
    spawn_rows(&mut s, &sides);
    let latency = Stats::latency(&run_command);
    s.lane(ROWS[2].0, None, Unit::Ns, latency, Vec::new()).what(
        "`run_command` of `true` over MCP (stdio), end to end: judged, journaled, confined in the sandbox, its overlay layer read, the result journaled",
    );
    let grown = flood_rss_peak.saturating_sub(flood_rss_before);
    s.value(ROWS[3].0, None, Unit::Bytes, grown as f64).what(format!(
        "aido's peak resident memory (VmHWM) after `run_command` of a {} MB output flood, less its resident memory before",
        FLOOD_BYTES / 1_000_000
    ));
    s.once(ROWS[4].0, None, per_file).what(format!(
        "journaling a command's file changes, per file changed: (median of a command writing {FILES} new files - median of one writing 1) / {}",
        FILES - 1
    ));
    let dev_what = format!(
        "the dev-server workflow: `run_command` of a Python client fetching a page from a background `python3 -m http.server` on the session's loopback / the same client run bare against one on the host, {} round trips each, alternately",
        dev_server.len()
    );
    s.versus(ROWS[5].0, dev_what, &dev_server, "bare", &dev_server_bare);
    let median_ns = |d: &[Duration]| median(&ns(d));
    s.numbers(&[
        ("calls", run_command.len() as f64),
        ("spawn_rounds", SPAWN_ROUNDS as f64),
        ("flood_mb", (FLOOD_BYTES / 1_000_000) as f64),
        ("flood_ns", flood_time.as_nanos() as f64),
        ("flood_counted", flood_counted as f64),
        ("rss_before", flood_rss_before as f64),
        ("rss_peak", flood_rss_peak as f64),
        ("files", FILES as f64),
        ("home_dirs", HOME_DIRS as f64),
        ("one_file_ns", median_ns(&one_file)),
        ("many_files_ns", median_ns(&many_files)),
        ("repeats", one_file.len() as f64),
    ]);
    Ok(s.finish())
}

/// `aido exec` beside each peer, and the spawns table.
fn spawn_rows(s: &mut Section, sides: &[Side]) {
    let side = |name: &str| sides.iter().find(|s| s.name == name);
    let exec = side("aido exec").map(|s| &s.times);
    for (id, peer) in [(ROWS[0].0, "srt"), (ROWS[1].0, "codex sandbox")] {
        let command = side(peer).map_or(peer.to_owned(), |s| s.command.clone());
        let what = format!(
            "`aido exec -- true` (a whole aido process: policy, a journal session, the sandbox, the journaled result) / `{command}` on the same command, wall time per spawn"
        );
        match (exec, side(peer).map(|s| &s.times)) {
            (Some(Ok(ours)), Some(Ok(theirs))) => s.versus(id, what, ours, peer, theirs),
            (Some(Err(e)), _) => s.failed(id, what, &format!("aido exec: {e}")),
            (_, Some(Err(e))) => s.not_run(id, what, &format!("{peer} does not run here: {e}")),
            _ => s.failed(id, what, "a side is missing"),
        }
    }
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
    let cells = sides
        .iter()
        .map(|s| match &s.times {
            Ok(times) => vec![
                s.name.clone(),
                format!("`{}`", s.command),
                ms(crate::harness::median(times)),
                ms(crate::harness::percentile(times, 99.0)),
                times.len().to_string(),
            ],
            Err(e) => vec![
                s.name.clone(),
                format!("`{}`", s.command),
                format!("did not run: {e}"),
                "-".into(),
                "0".into(),
            ],
        })
        .collect();
    let columns = ["side", "command", "p50 ms", "p99 ms", "spawns"];
    s.table("spawns", &columns, cells);
}

/// A port free on the host's loopback now.
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The dev-server workflow timed: a background `python3 -m http.server` started through
/// `run_command`, then [`DEV_CALLS`] `run_command`s of a client fetching a page from it on the
/// session's loopback, each beside the same client run bare against a server on the host.
async fn dev_round_trips(ours: &Server, home: &Path) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let port = free_port()?;
    let shell = format!("exec python3 -m http.server {port} --bind 127.0.0.1");
    let start = json!({"shell": shell, "background": true});
    let started = ours.call("run_command", start).await?;
    let handle = started
        .structured_content
        .as_ref()
        .and_then(|out| out["handle"].as_str().map(str::to_owned))
        .with_context(|| format!("no handle: {:?}", started.structured_content))?;
    let client = |port: u16| json!({"argv": [PYTHON, "-c", DEV_CLIENT, port.to_string()]});
    // Up once a fetch answers.
    let up = Instant::now();
    while call(ours, client(port)).await.is_err() {
        if up.elapsed() > Duration::from_secs(30) {
            bail!("the dev server did not answer on 127.0.0.1:{port} in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bare_port = free_port()?;
    let mut bare_server = std::process::Command::new(PYTHON)
        .args([
            "-m",
            "http.server",
            &bare_port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("python3 -m http.server on the host")?;
    let bare = |port: u16| {
        std::process::Command::new(PYTHON)
            .args(["-c", DEV_CLIENT, &port.to_string()])
            .status()
            .map(|status| status.success())
            .unwrap_or(false)
    };
    let up = Instant::now();
    while !bare(bare_port) {
        if up.elapsed() > Duration::from_secs(30) {
            let _ = bare_server.kill();
            bail!("the bare dev server did not answer in 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..DEV_CALLS {
        let at = Instant::now();
        call(ours, client(port)).await?;
        through.push(at.elapsed());
        let at = Instant::now();
        if !bare(bare_port) {
            let _ = bare_server.kill();
            bail!("the bare client failed");
        }
        direct.push(at.elapsed());
    }
    let _ = bare_server.kill();
    let _ = bare_server.wait();
    let stop = json!({"handle": handle});
    ours.call("stop_handle", stop).await?;
    Ok((through, direct))
}
