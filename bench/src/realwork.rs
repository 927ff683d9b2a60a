//! Real work: a coding agent's commands (a venv, a wheel install, a no-op cargo rebuild, a
//! 20,000-file loop) through `run_command` beside the same command bare, in paired rounds; the
//! journal's bytes per byte changed; aido's memory for a 2 GiB change set. The report's
//! real-work section says how.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::harness::{Run, Server};
use crate::machine::{Usage, usage};
use crate::record::{Record, Section, Stats, Unit};

/// The sandbox's own PATH; the bare runs get the same.
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Files the loop writes.
pub const LOOP_FILES: usize = 20_000;
/// Bytes of the large change set.
pub const BIG_BYTES: u64 = 2 << 30;
/// The command that writes it: two 1 GiB files (each at the sandbox's file size limit).
const BIG_SHELL: &str = "yes aido | head -c 1G > a && yes work | head -c 1G > b";
/// One 2 GiB file, tried first.
const ONE_FILE_SHELL: &str = "head -c 2G /dev/zero > big";
/// The goal for the no-op rebuild: at most this many times bare's time ...
pub const NOOP_FACTOR: f64 = 1.2;
/// ... plus this.
pub const NOOP_PLUS: Duration = Duration::from_millis(20);
/// A bound on every command (run_command's own maximum).
const TIMEOUT_MS: u64 = 600_000;

/// How the section runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Prepared by `tests/realwork/prepare`: `wheels/`, `crate/`.
    pub inputs: PathBuf,
    /// Paired rounds of the venv, wheel and loop workloads.
    pub rounds: usize,
    /// Paired rounds of the no-op rebuild (it takes a fraction of a second).
    pub noop_rounds: usize,
}

/// The judged rows, said not run when the section does not run.
pub const ROWS: [(&str, &str); 7] = [
    ("realwork_venv", "see the real-work section"),
    ("realwork_wheels", "see the real-work section"),
    ("realwork_cargo_noop", "see the real-work section"),
    ("realwork_cargo_noop_margin", "see the real-work section"),
    ("realwork_loop", "see the real-work section"),
    ("realwork_big_file", "see the real-work section"),
    ("realwork_big_file_memory", "see the real-work section"),
];

/// One workload, through aido and bare.
pub struct Workload {
    /// Stable id part (`venv`, `wheels`, `cargo_noop`, `loop`).
    pub id: &'static str,
    /// What it is, for the report.
    pub name: String,
    /// The command, as run.
    pub command: String,
    /// Each timed run through `run_command`, in order.
    pub aido: Vec<Duration>,
    /// Each timed bare run, in order (pair k is `aido[k]`, `bare[k]`).
    pub bare: Vec<Duration>,
    /// AIDO_HOME's allocated bytes grown over the timed runs through aido, together.
    pub journal_bytes: u64,
    /// Bytes of the files the timed runs through aido created or changed, together.
    pub changed_bytes: u64,
    /// aido's peak resident memory (VmHWM) at the end, less its resident memory at the start.
    pub rss_growth: u64,
}

impl Workload {
    /// The median of the pair-by-pair ratios aido / bare.
    pub fn ratio(&self) -> f64 {
        let ratios: Vec<f64> = (self.aido.iter().zip(&self.bare))
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64().max(1e-9))
            .collect();
        crate::record::Stats::range(&ratios).median
    }

    /// The median over the pairs of aido's time less `factor` times bare's, in nanoseconds
    /// (negative when aido is within the factor).
    pub fn margin_ns(&self, factor: f64) -> f64 {
        let margins: Vec<f64> = (self.aido.iter().zip(&self.bare))
            .map(|(a, b)| a.as_nanos() as f64 - factor * b.as_nanos() as f64)
            .collect();
        crate::record::Stats::range(&margins).median
    }

    /// Journal bytes per byte changed in the workspace, when anything changed.
    pub fn journal_per_byte(&self) -> Option<f64> {
        (self.changed_bytes > 0).then(|| self.journal_bytes as f64 / self.changed_bytes as f64)
    }
}

/// The 2 GiB change set.
pub struct BigFile {
    /// What became of one command writing one 2 GiB file: its exit, or the error.
    pub one_file: String,
    /// The command through aido.
    pub aido: Duration,
    /// The same command bare.
    pub bare: Duration,
    /// aido's resident memory before the command (VmRSS), bytes.
    pub rss_before: u64,
    /// aido's peak resident memory after it (VmHWM), bytes.
    pub rss_peak: u64,
    /// AIDO_HOME's allocated bytes grown by the command.
    pub journal_bytes: u64,
    /// AIDO_HOME's apparent bytes grown by the command (a sparse blob is smaller allocated).
    pub journal_apparent_bytes: u64,
    /// The files' sizes.
    pub changed_bytes: u64,
    /// The rewind that took it back.
    pub rewind: Duration,
}

/// Runs the section: each workload through `run_command` beside the same command bare (paired
/// rounds, the ratio pair by pair), the journal's bytes per byte changed, and aido's memory for
/// a 2 GiB change set.
pub async fn run(aido: &Path, temp: &Path, options: &Options) -> Run<Vec<Record>> {
    let wheels = options.inputs.join("wheels");
    if !wheels.is_dir() || !options.inputs.join("crate/Cargo.lock").is_file() {
        return Run::Skipped(format!(
            "the inputs are not prepared in {} (run tests/realwork/prepare)",
            options.inputs.display()
        ));
    }
    measure(aido, temp, options).await.into()
}

async fn measure(aido: &Path, temp: &Path, options: &Options) -> Result<Vec<Record>> {
    let temp = crate::fixture::outside_tmp(temp);
    let inputs = std::fs::canonicalize(&options.inputs)?;
    let mut wheels: Vec<String> = std::fs::read_dir(inputs.join("wheels"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    wheels.sort();
    let rounds = options.rounds.max(1);
    let mut workloads = Vec::new();
    eprintln!("aido-bench: real work: venv");
    workloads.push(venv(aido, temp, rounds).await.context("venv")?);
    eprintln!("aido-bench: real work: a wheel install");
    workloads.push(
        wheel_install(aido, temp, &inputs, rounds)
            .await
            .context("wheel install")?,
    );
    eprintln!("aido-bench: real work: a no-op cargo rebuild");
    workloads.push(
        cargo_noop(aido, temp, &inputs, options.noop_rounds.max(1))
            .await
            .context("no-op cargo rebuild")?,
    );
    eprintln!("aido-bench: real work: a loop writing {LOOP_FILES} files");
    workloads.push(file_loop(aido, temp, rounds).await.context("file loop")?);
    eprintln!("aido-bench: real work: one 2 GiB file");
    let big = big_file(aido, temp).await.context("2 GiB file")?;
    Ok(records(&workloads, &big, &wheels))
}

/// One fresh `aido mcp` with its work dir (`home/`, `aido_home/`, `bare/`), its pid, and the
/// temp dir that holds them all.
struct Bench {
    server: Server,
    pid: u32,
    home: PathBuf,
    aido_home: PathBuf,
    bare: PathBuf,
    /// aido's resident memory once started.
    rss_start: u64,
    _dir: tempfile::TempDir,
}

impl Bench {
    /// A fresh `aido mcp`; `config` is its `$AIDO_HOME/config.toml` when given.
    async fn start(aido: &Path, temp: &Path, config: Option<&str>) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("aido-bench-realwork-")
            .tempdir_in(temp)?;
        if let Some(config) = config {
            let aido_home = dir.path().join("aido_home");
            std::fs::create_dir_all(&aido_home)?;
            std::fs::write(aido_home.join("config.toml"), config)?;
        }
        let (server, home) = Server::aido(aido, dir.path(), &["run_command"]).await?;
        let pid = server.pid;
        let bare = dir.path().join("bare");
        std::fs::create_dir_all(&bare)?;
        // The sandbox and the journal warm up before anything is timed.
        seq_call(&server, "run_command", json!({"argv": ["true"]})).await?;
        Ok(Self {
            rss_start: crate::harness::status_bytes(pid, "VmRSS:")?,
            server,
            pid,
            home,
            aido_home: dir.path().join("aido_home"),
            bare,
            _dir: dir,
        })
    }

    /// `rounds` pairs, the sides in the order [`sides`] gives: `ours(k)` through aido (adding
    /// to the growth) and `theirs(k)` bare, each giving its timed run's time. The workload
    /// (`id`, its name, its command), with aido's memory growth; the server stopped.
    async fn pairs(
        self,
        (id, name, command): (&'static str, String, String),
        rounds: usize,
        mut ours: impl AsyncFnMut(&Self, usize, &mut Growth) -> Result<Duration>,
        mut theirs: impl AsyncFnMut(&Self, usize) -> Result<Duration>,
    ) -> Result<Workload> {
        let (mut aido, mut bare, mut growth) = (Vec::new(), Vec::new(), Growth::default());
        for k in 0..rounds {
            for side in sides(k) {
                if side {
                    aido.push(ours(&self, k, &mut growth).await?);
                } else {
                    bare.push(theirs(&self, k).await?);
                }
            }
        }
        let rss_growth = self.rss("VmHWM:")?.saturating_sub(self.rss_start);
        self.server.stop().await?;
        Ok(Workload {
            id,
            name,
            command,
            aido,
            bare,
            journal_bytes: growth.journal,
            changed_bytes: growth.changed,
            rss_growth,
        })
    }

    /// `shell` through run_command in `cwd`; its seq and time. A failure is an error.
    async fn run(
        &self,
        shell: &str,
        cwd: &Path,
        env: &[(&str, String)],
    ) -> Result<(u64, Duration, Value)> {
        let mut args = json!({
            "shell": shell,
            "cwd": cwd.to_string_lossy(),
            "timeout_ms": TIMEOUT_MS,
        });
        if !env.is_empty() {
            args["env"] = env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        let start = Instant::now();
        let (seq, out) = seq_call(&self.server, "run_command", args).await?;
        let took = start.elapsed();
        if out["exit_code"] != json!(0) {
            bail!("`{shell}` through aido did not exit 0: {out}");
        }
        Ok((seq, took, out))
    }

    /// [`Bench::run`], adding what the journal and `cwd` grew by to `growth`.
    async fn measured(
        &self,
        shell: &str,
        cwd: &Path,
        env: &[(&str, String)],
        growth: &mut Growth,
    ) -> Result<(u64, Duration, Value)> {
        let before = (self.journal()?, usage(cwd)?);
        let ran = self.run(shell, cwd, env).await?;
        growth.add((before.0, self.journal()?), (before.1, usage(cwd)?));
        Ok(ran)
    }

    /// Undoes everything from `seq` on.
    async fn rewind_before(&self, seq: u64) -> Result<Duration> {
        let start = Instant::now();
        seq_call(&self.server, "rewind", json!({"before_seq": seq})).await?;
        Ok(start.elapsed())
    }

    fn journal(&self) -> Result<Usage> {
        Ok(usage(&self.aido_home)?)
    }

    fn rss(&self, field: &str) -> Result<u64> {
        crate::harness::status_bytes(self.pid, field)
    }
}

/// A tool call that must succeed; its seq and structured result.
async fn seq_call(server: &Server, tool: &str, args: Value) -> Result<(u64, Value)> {
    let result = server.call(tool, args).await?;
    let out = result.structured_content.clone().unwrap_or(Value::Null);
    let seq = result
        .meta
        .as_ref()
        .and_then(|m| m.get("aido/seq"))
        .and_then(Value::as_u64)
        .with_context(|| format!("{tool} result without aido/seq: {out}"))?;
    Ok((seq, out))
}

/// `shell` bare: `/bin/sh -c` in `cwd` with the sandbox's environment (a fresh HOME) plus
/// `env`; its time.
async fn bare(shell: &str, cwd: &Path, home: &Path, env: &[(&str, String)]) -> Result<Duration> {
    let _ = std::fs::remove_dir_all(home);
    std::fs::create_dir_all(home)?;
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(shell)
        .current_dir(cwd)
        .env_clear()
        .env("HOME", home)
        .env("PATH", SANDBOX_PATH)
        .env("TERM", "dumb")
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let start = Instant::now();
    let out = command.output().await.context("spawning /bin/sh")?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "`{shell}` bare exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(took)
}

/// What the timed runs through aido grew: the journal and the workspace.
#[derive(Default)]
struct Growth {
    journal: u64,
    changed: u64,
}

impl Growth {
    fn add(&mut self, journal: (Usage, Usage), workspace: (Usage, Usage)) {
        self.journal += journal.1.allocated.saturating_sub(journal.0.allocated);
        self.changed += workspace.1.apparent.saturating_sub(workspace.0.apparent);
    }
}

async fn venv(aido: &Path, temp: &Path, rounds: usize) -> Result<Workload> {
    let b = Bench::start(aido, temp, None).await?;
    let shell = "python3 -m venv .venv";
    let what = ("venv", "create a venv (with pip)".into(), shell.into());
    let ours = async |b: &Bench, k: usize, growth: &mut Growth| {
        let ws = b.home.join(format!("venv{k}"));
        std::fs::create_dir_all(&ws)?;
        let (seq, took, _) = b.measured(shell, &ws, &[], growth).await?;
        b.rewind_before(seq).await?;
        Ok(took)
    };
    let theirs = async |b: &Bench, k: usize| {
        let elsewhere = b.bare.join(format!("venv{k}"));
        std::fs::create_dir_all(&elsewhere)?;
        let took = bare(shell, &elsewhere, &b.bare.join("home"), &[]).await?;
        std::fs::remove_dir_all(elsewhere.join(".venv"))?;
        Ok(took)
    };
    b.pairs(what, rounds, ours, theirs).await
}

/// The order of round k's two sides: `true` is aido.
fn sides(k: usize) -> impl Iterator<Item = bool> {
    crate::harness::alternate(k, 2)
        .into_iter()
        .map(|lane| lane == 0)
}

async fn wheel_install(aido: &Path, temp: &Path, inputs: &Path, rounds: usize) -> Result<Workload> {
    let b = Bench::start(aido, temp, None).await?;
    let shell = format!(
        ".venv/bin/pip install --disable-pip-version-check --no-index --find-links {} pytest",
        inputs.join("wheels").display()
    );
    // One venv each side, made untimed; each round installs into it and is then undone (a
    // rewind of the install through aido; the bare one put back from a copy taken before the
    // first round). The bare venv stays at the path it was made at: its scripts name that
    // path's python, and a copy elsewhere would install into the original.
    let ws = b.home.join("wheels");
    std::fs::create_dir_all(&ws)?;
    b.run("python3 -m venv .venv", &ws, &[]).await?;
    let (elsewhere, pristine) = (b.bare.join("wheels"), b.bare.join("pristine"));
    std::fs::create_dir_all(&elsewhere)?;
    bare(
        "python3 -m venv .venv",
        &elsewhere,
        &b.bare.join("home"),
        &[],
    )
    .await?;
    copy_tree(&elsewhere, &pristine).await?;
    // Each timed run installs pytest into a venv that lacks it, on both sides.
    let installed = |dir: &Path| dir.join(".venv/bin/pytest").exists();
    let command = ".venv/bin/pip install --disable-pip-version-check --no-index --find-links \
                   WHEELS pytest";
    let what = (
        "wheels",
        "install pytest into the venv from a directory of wheels (no network)".into(),
        command.into(),
    );
    let ours = async |b: &Bench, _, growth: &mut Growth| {
        if installed(&ws) {
            bail!("pytest is already in {} before the install", ws.display());
        }
        let (seq, took, _) = b.measured(&shell, &ws, &[], growth).await?;
        if !installed(&ws) {
            bail!("the install through aido left no pytest");
        }
        b.rewind_before(seq).await?;
        Ok(took)
    };
    let theirs = async |b: &Bench, _| {
        if installed(&elsewhere) {
            bail!(
                "pytest is already in {} before the install",
                elsewhere.display()
            );
        }
        let took = bare(&shell, &elsewhere, &b.bare.join("home"), &[]).await?;
        if !installed(&elsewhere) {
            bail!("the bare install left no pytest");
        }
        std::fs::remove_dir_all(&elsewhere)?;
        copy_tree(&pristine, &elsewhere).await?;
        Ok(took)
    };
    b.pairs(what, rounds, ours, theirs).await
}

async fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let status = tokio::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .await?;
    if !status.success() {
        bail!("cp -a {} {} failed", from.display(), to.display());
    }
    Ok(())
}

/// What a command needs to find the Rust toolchain, as the e2e tests give it: the sandbox's
/// PATH with cargo's directory first, CARGO_HOME and RUSTUP_HOME (read only).
fn cargo_env() -> Result<Vec<(&'static str, String)>> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let cargo = std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("cargo"))
                .find(|c| c.is_file())
        })
        .context("cargo is not on PATH")?;
    let dir = cargo.parent().unwrap_or(Path::new("/usr/bin"));
    let var = |name: &str, default: PathBuf| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .unwrap_or(default)
            .display()
            .to_string()
    };
    let mut env = vec![
        ("PATH", format!("{}:{SANDBOX_PATH}", dir.display())),
        ("CARGO_HOME", var("CARGO_HOME", home.join(".cargo"))),
        ("CARGO_TERM_COLOR", "never".to_owned()),
    ];
    let rustup = var("RUSTUP_HOME", home.join(".rustup"));
    if Path::new(&rustup).is_dir() {
        env.push(("RUSTUP_HOME", rustup));
    }
    Ok(env)
}

/// A config whose read walls add the toolchain's homes to `~`: aido as root runs commands as
/// an unprivileged user (`[processes] sandbox_uid`), who may read only the walls and what any
/// user may (a rustup toolchain under `/root` is neither).
fn toolchain_walls(env: &[(&str, String)]) -> Result<String> {
    let mut read = vec!["~".to_owned()];
    read.extend(
        env.iter()
            .filter(|(k, _)| matches!(*k, "CARGO_HOME" | "RUSTUP_HOME"))
            .map(|(_, v)| v.clone()),
    );
    Ok(format!(
        "[paths]\nread = {}\n",
        serde_json::to_string(&read)?
    ))
}

async fn cargo_noop(aido: &Path, temp: &Path, inputs: &Path, rounds: usize) -> Result<Workload> {
    let env = cargo_env()?;
    let b = Bench::start(aido, temp, Some(&toolchain_walls(&env)?)).await?;
    let shell = "cargo build --offline --locked";
    let (crate_dir, elsewhere) = (b.home.join("crate"), b.bare.join("crate"));
    for to in [&crate_dir, &elsewhere] {
        copy_tree(&inputs.join("crate"), to).await?;
        let _ = std::fs::remove_dir_all(to.join("target"));
    }
    // Built once each side, untimed.
    b.run(shell, &crate_dir, &env).await?;
    bare(shell, &elsewhere, &b.bare.join("home"), &env).await?;
    let what = (
        "cargo_noop",
        "a no-op `cargo build` of a crate already built (itoa, semver; nothing compiled)".into(),
        shell.into(),
    );
    let ours = async |b: &Bench, _, growth: &mut Growth| {
        let (_, took, out) = b.measured(shell, &crate_dir, &env, growth).await?;
        if out["stderr"].as_str().unwrap_or("").contains("Compiling") {
            bail!("the rebuild through aido compiled: {out}");
        }
        Ok(took)
    };
    let theirs = async |b: &Bench, _| bare(shell, &elsewhere, &b.bare.join("home"), &env).await;
    b.pairs(what, rounds, ours, theirs).await
}

async fn file_loop(aido: &Path, temp: &Path, rounds: usize) -> Result<Workload> {
    // Declared before the bench, so it is unmounted after the bench's server and files.
    let ext4 = crate::volume::Ext4::create(temp, 4 << 30);
    let (place, on) = match &ext4 {
        Ok(ext4) => (ext4.mount().to_owned(), "on a journaled ext4".to_owned()),
        Err(e) => {
            eprintln!("aido-bench: the loop runs in the temp dir: no ext4 loop device ({e:#})");
            (
                temp.to_owned(),
                "in the temp dir: no ext4 loop device".to_owned(),
            )
        }
    };
    let b = Bench::start(aido, &place, None).await?;
    let shell = format!("mkdir d && for i in $(seq {LOOP_FILES}); do echo $i > d/f$i; done");
    let name = format!("a shell loop writing {LOOP_FILES} small files ({on})");
    let what = ("loop", name, shell.clone());
    let ours = async |b: &Bench, k: usize, growth: &mut Growth| {
        let ws = b.home.join(format!("loop{k}"));
        std::fs::create_dir_all(&ws)?;
        let (seq, took, _) = b.measured(&shell, &ws, &[], growth).await?;
        let made = std::fs::read_dir(ws.join("d"))?.count();
        if made != LOOP_FILES {
            bail!("the loop through aido left {made} files, not {LOOP_FILES}");
        }
        b.rewind_before(seq).await?;
        Ok(took)
    };
    let theirs = async |b: &Bench, k: usize| {
        let elsewhere = b.bare.join(format!("loop{k}"));
        std::fs::create_dir_all(&elsewhere)?;
        let took = bare(&shell, &elsewhere, &b.bare.join("home"), &[]).await?;
        std::fs::remove_dir_all(elsewhere.join("d"))?;
        Ok(took)
    };
    b.pairs(what, rounds, ours, theirs).await
}

async fn big_file(aido: &Path, temp: &Path) -> Result<BigFile> {
    let b = Bench::start(aido, temp, None).await?;
    let ws = b.home.join("big");
    std::fs::create_dir_all(&ws)?;
    // One 2 GiB file first, for the record: what the command's exit says.
    let one_file = match seq_call(
        &b.server,
        "run_command",
        json!({"shell": ONE_FILE_SHELL, "cwd": ws.to_string_lossy(), "timeout_ms": TIMEOUT_MS}),
    )
    .await
    {
        Ok((seq, out)) => {
            b.rewind_before(seq).await?;
            format!(
                "exit {}, stderr {:?}",
                out["exit_code"],
                out["stderr"].as_str().unwrap_or("").trim()
            )
        }
        Err(e) => format!("refused: {e:#}"),
    };
    // Bare first: the page cache then holds no 2 GiB of ours while aido's memory is read.
    let bare_time = bare(BIG_SHELL, &b.bare, &b.bare.join("home"), &[]).await?;
    for name in ["a", "b"] {
        std::fs::remove_file(b.bare.join(name))?;
    }
    let rss_before = b.rss("VmRSS:")?;
    let journal_before = b.journal()?;
    let (seq, took, _) = b.run(BIG_SHELL, &ws, &[]).await?;
    let rss_peak = b.rss("VmHWM:")?;
    let journal_after = b.journal()?;
    let mut size = 0;
    for name in ["a", "b"] {
        size += std::fs::metadata(ws.join(name))?.len();
    }
    if size != BIG_BYTES {
        bail!("the files through aido hold {size} bytes, not {BIG_BYTES}");
    }
    let rewind = b.rewind_before(seq).await?;
    if ws.join("a").exists() || ws.join("b").exists() {
        bail!("the rewind left the files");
    }
    b.server.stop().await?;
    Ok(BigFile {
        one_file,
        aido: took,
        bare: bare_time,
        rss_before,
        rss_peak,
        journal_bytes: journal_after
            .allocated
            .saturating_sub(journal_before.allocated),
        journal_apparent_bytes: journal_after
            .apparent
            .saturating_sub(journal_before.apparent),
        changed_bytes: size,
        rewind,
    })
}

/// The section's records.
fn records(workloads: &[Workload], big: &BigFile, wheels: &[String]) -> Vec<Record> {
    let mut s = Section::new("realwork");
    let round = |x: f64| (x * 100.0).round() / 100.0;
    for w in workloads {
        let row = format!("realwork_{}", w.id);
        s.times(&row, None, &w.aido).what(format!(
            "real work: {} through `run_command` over MCP / the same command bare, wall time per run",
            w.name
        ));
        s.times(&row, Some("bare"), &w.bare);
        s.ratio(&row, Some(round(w.ratio())));
        if w.id == "cargo_noop" {
            let margin = Stats {
                median: w.margin_ns(NOOP_FACTOR),
                n: Some(w.aido.len() as u64),
                ..Stats::default()
            };
            s.lane("realwork_cargo_noop_margin", None, Unit::Ns, margin, Vec::new())
                .what(format!(
                    "real work: the no-op `cargo build` through aido less {NOOP_FACTOR} × bare, median over the pairs (the goal: at most {NOOP_FACTOR}× bare plus {})",
                    crate::render::format_duration(NOOP_PLUS)
                ));
        }
    }
    s.once("realwork_big_file", None, big.aido).what(
        "real work: one command writing a 2 GiB change set (two 1 GiB files) through `run_command` / bare, wall time",
    );
    s.once("realwork_big_file", Some("bare"), big.bare);
    let ratio = big.aido.as_secs_f64() / big.bare.as_secs_f64().max(1e-9);
    s.ratio("realwork_big_file", Some(round(ratio)));
    let grown = big.rss_peak.saturating_sub(big.rss_before);
    s.value("realwork_big_file_memory", None, Unit::Bytes, grown as f64).what(
        "real work: aido's peak resident memory (VmHWM) after a command's 2 GiB change set (two 1 GiB files), less its resident memory before",
    );
    let big_per_byte = big.journal_bytes as f64 / big.changed_bytes.max(1) as f64;
    for (id, name, per_byte) in workloads
        .iter()
        .filter_map(|w| w.journal_per_byte().map(|p| (w.id, w.name.as_str(), p)))
        .chain([(
            "big_file",
            "a 2 GiB change set (two 1 GiB files)",
            big_per_byte,
        )])
    {
        let row = format!("realwork_journal_per_byte_{id}");
        s.value(&row, None, Unit::Ratio, round(per_byte)).what(format!(
            "real work: journal bytes per byte changed, {name} (AIDO_HOME's allocated growth / the bytes of the files written)"
        ));
    }
    let rounds = |id: &str| {
        let w = workloads.iter().find(|w| w.id == id);
        w.map_or(0, |w| w.aido.len()) as f64
    };
    s.numbers(&[
        ("rounds", rounds("venv")),
        ("noop_rounds", rounds("cargo_noop")),
    ]);
    s.fact("wheels", wheels.join(", "));
    let ns = |d: Duration| d.as_nanos() as f64;
    s.numbers(&[
        ("big", BIG_BYTES as f64),
        ("big_aido", ns(big.aido)),
        ("big_bare", ns(big.bare)),
        ("big_rewind", ns(big.rewind)),
        ("rss_before", big.rss_before as f64),
        ("rss_peak", big.rss_peak as f64),
        ("big_journal", big.journal_bytes as f64),
        ("big_journal_apparent", big.journal_apparent_bytes as f64),
    ]);
    s.fact("one_file", big.one_file.clone());
    let cells = workloads_table(workloads);
    let columns = [
        "workload",
        "command",
        "aido ms (median)",
        "bare ms (median)",
        "pairs",
        "ratio (median of pairs)",
        "journal grew (allocated, all pairs)",
        "files written (bytes, all pairs)",
        "journal bytes per byte",
        "aido memory growth MB",
    ];
    s.table("workloads", &columns, cells);
    s.finish()
}

/// The workloads' detail table.
fn workloads_table(workloads: &[Workload]) -> Vec<Vec<String>> {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let bytes = crate::render::format_bytes;
    workloads
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                format!("`{}`", w.command),
                ms(crate::harness::median(&w.aido)),
                ms(crate::harness::median(&w.bare)),
                w.aido.len().to_string(),
                format!("{:.2}", w.ratio()),
                bytes(w.journal_bytes),
                bytes(w.changed_bytes),
                w.journal_per_byte()
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:.2}")),
                format!("{:.1}", w.rss_growth as f64 / 1e6),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn ratios_and_margins_are_taken_pair_by_pair() {
        let w = Workload {
            id: "x",
            name: "x".into(),
            command: "x".into(),
            aido: ms(&[120, 260, 130]),
            bare: ms(&[100, 200, 100]),
            journal_bytes: 30,
            changed_bytes: 10,
            rss_growth: 0,
        };
        // Pair ratios 1.2, 1.3, 1.3: the median.
        assert!((w.ratio() - 1.3).abs() < 1e-9);
        // Margins over 1.2x: 0, 20 ms, 10 ms.
        assert!((w.margin_ns(1.2) - 10e6).abs() < 1.0);
        assert_eq!(w.journal_per_byte(), Some(3.0));
    }
}
