//! `aido-bench`: the side-by-side benchmark harness behind docs/BENCHMARKS.md. Every section
//! emits `record::Record`s into one results file, docs/benchmarks.json; the report is rendered
//! from that file alone (`render` redraws it without measuring). `bench/run` builds everything
//! and runs it.
//!
//! ```text
//! target/release/aido-bench --aido target/release/aido \
//!     --results docs/benchmarks.json --out docs/BENCHMARKS.md
//! target/release/aido-bench render --from docs/benchmarks.json --out docs/BENCHMARKS.md
//! ```

mod artifact;
mod conformance;
mod desktop;
mod estimates;
mod fetch;
mod fixture;
mod gateway;
mod harness;
mod machine;
mod memory;
mod process;
mod realwork;
mod record;
mod render;
mod rewind;
mod script;
mod search;
mod serve;
mod snapshots;
mod soak;
mod stdio;
mod stop;
mod telemetry;
mod tree;
mod vm;
mod volume;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::Value;

use crate::machine::Machine;
use crate::record::Record;
use crate::stdio::{Placement, Plan, Setup};

#[derive(Parser, Debug)]
#[command(
    name = "aido-bench",
    about = "Benchmark aido against a peer MCP server; write docs/benchmarks.json and render \
             docs/BENCHMARKS.md from it",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Without a command: measure, write the results, render the report.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    args: Args,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Render the report from a results file, without measuring.
    Render {
        /// The results file.
        #[arg(long, default_value = render::RESULTS_FILE)]
        from: PathBuf,
        /// The report to write.
        #[arg(long, default_value = "docs/BENCHMARKS.md")]
        out: PathBuf,
    },
    /// Run only the script section and print its records as JSON lines.
    Script {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        /// Rounds timed.
        #[arg(long, default_value_t = 10)]
        repeats: usize,
    },
    /// Run only the artifact section and print its records as JSON lines.
    Artifact {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
    },
    /// Run only the process section and print its records as JSON lines (`--write`: also
    /// into the results file, and render the report).
    Process {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        /// Where the peers are installed.
        #[arg(long, default_value = "bench/node_modules")]
        node_modules: PathBuf,
        #[command(flatten)]
        write: WriteTo,
    },
    /// Run only the gateway section (a downstream tool through aido beside the server called
    /// directly; aido's browser beside @playwright/mcp) and print its records as JSON lines
    /// (`--write`: also into the results file, and render the report).
    Gateway {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        /// Where the peers are installed.
        #[arg(long, default_value = "bench/node_modules")]
        node_modules: PathBuf,
        /// Alternating rounds of each pair.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
        #[command(flatten)]
        write: WriteTo,
    },
    /// Run only the serve section and print its records as JSON lines (`--write`: also into
    /// the results file, and render the report).
    Serve {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        /// read_file calls per side per round.
        #[arg(long, default_value_t = 300)]
        calls: usize,
        /// MCP sessions opened and held at once (each with its standing SSE stream), 100 from
        /// each loopback address 127.0.1.N (one address may hold 256 connections).
        #[arg(long, default_value_t = 1000)]
        hold: usize,
        #[command(flatten)]
        write: WriteTo,
    },
    /// Run only the soak section and print its records as JSON lines (`--write`: also into
    /// the results file, and render the report).
    Soak {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        /// Calls per transport.
        #[arg(long, default_value_t = 20_000)]
        calls: usize,
        /// Bytes of a large call's argument (about).
        #[arg(long, default_value_t = 1 << 20)]
        large_bytes: usize,
        /// One call in this many is large.
        #[arg(long, default_value_t = 10)]
        large_every: usize,
        #[command(flatten)]
        write: WriteTo,
    },
    /// Run only the real-work section and print its records as JSON lines (`--write`: also
    /// into the results file, and render the report).
    Realwork {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        #[command(flatten)]
        realwork: RealworkArgs,
        #[command(flatten)]
        write: WriteTo,
    },
    /// Run the MCP conformance suite (tests/conformance/run) and put its section into the
    /// results file (replacing the one there), then render the report.
    Conformance {
        /// The suite's runner.
        #[arg(long, default_value = "tests/conformance/run")]
        script: PathBuf,
        /// The results file.
        #[arg(long, default_value = render::RESULTS_FILE)]
        results: PathBuf,
        /// The report to write.
        #[arg(long, default_value = "docs/BENCHMARKS.md")]
        out: PathBuf,
    },
    /// Run only the fetch section and print its records as JSON lines.
    Fetch {
        /// The aido binary.
        #[arg(long, default_value = "target/release/aido")]
        aido: PathBuf,
        /// The Python with mcp-server-fetch installed.
        #[arg(long, default_value = "bench/.venv-fetch/bin/python")]
        python: PathBuf,
        /// Fetches of each page by each side.
        #[arg(long, default_value_t = 20)]
        repeats: usize,
    },
    /// Run only the desktop section and print its records as JSON lines.
    Desktop,
    /// Measure telemetry's price per action (in process) and print it as JSON lines.
    Telemetry {
        /// Reads per side per round.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        /// Rounds, alternating which side goes first.
        #[arg(long, default_value_t = 6)]
        rounds: usize,
    },
}

/// `--write`: a section measured on its own goes into the results file (replacing the one
/// there, saying it was measured alone) and the report is rendered again.
#[derive(clap::Args, Debug)]
struct WriteTo {
    /// Write the section into the results file and render the report.
    #[arg(long)]
    write: bool,
    /// The results file.
    #[arg(long, default_value = render::RESULTS_FILE)]
    results: PathBuf,
    /// The report to write.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    out: PathBuf,
}

impl WriteTo {
    /// The results file and the report, when `--write` was given.
    fn files(&self) -> Option<(&Path, &Path)> {
        self.write
            .then_some((self.results.as_path(), self.out.as_path()))
    }
}

/// How the real-work section runs.
#[derive(clap::Args, Debug, Clone)]
struct RealworkArgs {
    /// The inputs tests/realwork/prepare made (wheels, the crate with its lock file).
    #[arg(long, default_value = "tests/.realwork")]
    realwork_dir: PathBuf,
    /// Paired rounds (aido, bare) of the venv, wheel and loop workloads.
    #[arg(long, default_value_t = 5)]
    realwork_rounds: usize,
    /// Paired rounds of the no-op cargo rebuild.
    #[arg(long, default_value_t = 20)]
    realwork_noop_rounds: usize,
}

impl RealworkArgs {
    fn options(&self) -> realwork::Options {
        realwork::Options {
            inputs: self.realwork_dir.clone(),
            rounds: self.realwork_rounds,
            noop_rounds: self.realwork_noop_rounds,
        }
    }
}

#[derive(clap::Args, Debug)]
struct Args {
    /// The aido binary.
    #[arg(long, default_value = "target/release/aido")]
    aido: PathBuf,
    /// The installed peer package (holds package.json and dist/).
    #[arg(
        long,
        default_value = "bench/node_modules/@modelcontextprotocol/server-filesystem"
    )]
    peer_dir: PathBuf,
    /// The node binary that runs the peer.
    #[arg(long, default_value = "node")]
    node: String,
    /// Where criterion left its results.
    #[arg(long, default_value = "target/criterion")]
    criterion_dir: PathBuf,
    /// The results file to write (JSON; the report is rendered from it).
    #[arg(long, default_value = render::RESULTS_FILE)]
    results: PathBuf,
    /// The report to write.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    out: PathBuf,
    /// Measured round trips per server.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Rounds the measured calls are split into, alternating between the servers.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Unmeasured round trips per server before measuring.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Files in the shared tree.
    #[arg(long, default_value_t = 100)]
    files: usize,
    /// Bytes per file (about; whole lines).
    #[arg(long, default_value_t = 4096)]
    file_bytes: usize,
    /// The tmpfs directory for the second stdio run (skipped if it is missing or not tmpfs).
    #[arg(long, default_value = "/dev/shm")]
    tmpfs_dir: PathBuf,
    /// Leave out the snapshot and rewind benchmarks.
    #[arg(long)]
    skip_snapshots: bool,
    /// Leave out the rewind benchmark (the snapshot benchmark still runs).
    #[arg(long)]
    skip_rewind: bool,
    /// Files in the snapshot benchmark's tree.
    #[arg(long, default_value_t = 10_000)]
    tree_files: usize,
    /// Bytes in the snapshot benchmark's tree (exactly).
    #[arg(long, default_value_t = 200 << 20)]
    tree_bytes: u64,
    /// Files the change before each restore rewrites (it also deletes and adds a tenth as many).
    #[arg(long, default_value_t = 100)]
    tree_changed: usize,
    /// Repeats of create, change, restore per method (the median is reported).
    #[arg(long, default_value_t = 3)]
    snapshot_repeats: usize,
    /// Size of the sparse btrfs loop file (data plus snapshots must fit).
    #[arg(long, default_value_t = 2 << 30)]
    btrfs_bytes: u64,
    /// Actions in each rewind session.
    #[arg(long, default_value_t = 1000)]
    rewind_actions: usize,
    /// Files the rewind sessions work on.
    #[arg(long, default_value_t = 300)]
    rewind_files: usize,
    /// A `create_snapshot` every this many actions of a rewind session.
    #[arg(long, default_value_t = 100)]
    rewind_snapshot_every: usize,
    /// Rewinds per backend (each in a fresh session).
    #[arg(long, default_value_t = 5)]
    rewind_targets: usize,
    /// Leave out the VM benchmarks.
    #[arg(long)]
    skip_vm: bool,
    /// Leave out the code search benchmark.
    #[arg(long)]
    skip_search: bool,
    /// Alternating rounds of search_code and rg timed.
    #[arg(long, default_value_t = 10)]
    search_repeats: usize,
    /// Leave out the memory benchmark.
    #[arg(long)]
    skip_memory: bool,
    /// Memories each side holds in the memory benchmark.
    #[arg(long, default_value_t = 10_000)]
    memories: usize,
    /// Queries asked of both (each once per round).
    #[arg(long, default_value_t = 20)]
    memory_queries: usize,
    /// Rounds of the memory queries timed.
    #[arg(long, default_value_t = 5)]
    memory_repeats: usize,
    /// The installed server-memory package.
    #[arg(
        long,
        default_value = "bench/node_modules/@modelcontextprotocol/server-memory"
    )]
    memory_peer_dir: PathBuf,
    /// Leave out the fetch benchmark.
    #[arg(long)]
    skip_fetch: bool,
    /// Fetches of each page by each side in the fetch benchmark.
    #[arg(long, default_value_t = 20)]
    fetch_repeats: usize,
    /// Leave out the gateway benchmark.
    #[arg(long)]
    skip_gateway: bool,
    /// Alternating rounds of each pair in the gateway benchmark.
    #[arg(long, default_value_t = 200)]
    gateway_rounds: usize,
    /// Leave out the desktop benchmark (owned sway and Xvfb sessions).
    #[arg(long)]
    skip_desktop: bool,
    /// Leave out the script benchmark.
    #[arg(long)]
    skip_script: bool,
    /// Leave out the artifact benchmark.
    #[arg(long)]
    skip_artifact: bool,
    /// Leave out the process benchmark.
    #[arg(long)]
    skip_process: bool,
    /// Leave out the soak benchmark.
    #[arg(long)]
    skip_soak: bool,
    /// Calls per transport in the soak benchmark.
    #[arg(long, default_value_t = 20_000)]
    soak_calls: usize,
    /// Bytes of a large soak call's argument (about).
    #[arg(long, default_value_t = 1 << 20)]
    soak_large_bytes: usize,
    /// One soak call in this many is large.
    #[arg(long, default_value_t = 10)]
    soak_large_every: usize,
    /// Leave out the real-work benchmark.
    #[arg(long)]
    skip_realwork: bool,
    #[command(flatten)]
    realwork: RealworkArgs,
    /// Rounds of the script benchmark timed.
    #[arg(long, default_value_t = 10)]
    script_repeats: usize,
    /// Leave out the serve benchmark.
    #[arg(long)]
    skip_serve: bool,
    /// read_file calls per side per round in the serve benchmark.
    #[arg(long, default_value_t = 300)]
    serve_calls: usize,
    /// MCP sessions the serve benchmark opens and holds at once.
    #[arg(long, default_value_t = 1000)]
    serve_hold: usize,
    /// The Python with mcp-server-fetch installed (bench/run makes it).
    #[arg(long, default_value = "bench/.venv-fetch/bin/python")]
    fetch_peer_python: PathBuf,
    /// The script that builds the guest images.
    #[arg(long, default_value = "vm/guest/build-image")]
    vm_build_image: PathBuf,
    /// Boots of the text-console guest timed (the median is reported).
    #[arg(long, default_value_t = 3)]
    vm_boots: usize,
    /// `loadvm` reverts, and migration-file restores, timed.
    #[arg(long, default_value_t = 5)]
    vm_reverts: usize,
    /// Pool acquisitions timed (a refill after each).
    #[arg(long, default_value_t = 5)]
    vm_acquisitions: usize,
    /// `find_text` calls timed on each screen.
    #[arg(long, default_value_t = 5)]
    vm_finds: usize,
    /// Clones the pool keeps warm.
    #[arg(long, default_value_t = 2)]
    vm_pool_size: usize,
}

impl Args {
    /// The node_modules the peers are installed in (the filesystem peer's).
    fn node_modules(&self) -> PathBuf {
        self.peer_dir
            .ancestors()
            .find(|p| p.ends_with("node_modules"))
            .map_or_else(|| PathBuf::from("bench/node_modules"), Path::to_path_buf)
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let temp = std::env::temp_dir();
    let t = temp.as_path();
    match &cli.command {
        None => block_on(bench(cli.args))?,
        Some(Command::Render { from, out }) => render(from, out),
        Some(Command::Conformance {
            script,
            results,
            out,
        }) => conformance_only(script, results, out),
        Some(Command::Telemetry { calls, rounds }) => {
            telemetry::run((*calls).max(1), (*rounds).max(1))
        }
        Some(Command::Desktop) => {
            record::print(&desktop::run());
            Ok(())
        }
        Some(Command::Fetch {
            aido,
            python,
            repeats,
        }) => {
            let a = built(aido)?;
            alone(
                None,
                "fetch",
                &fetch::ROWS,
                fetch::run(&a, python, t, *repeats),
            )
        }
        Some(Command::Gateway {
            aido,
            node_modules,
            rounds,
            write,
        }) => {
            let a = built(aido)?;
            let run = gateway::run(&a, t, node_modules, *rounds);
            alone(write.files(), "gateway", &gateway::ROWS, run)
        }
        Some(Command::Script { aido, repeats }) => {
            let a = built(aido)?;
            alone(None, "script", &script::ROWS, script::run(&a, t, *repeats))
        }
        Some(Command::Artifact { aido }) => {
            let a = built(aido)?;
            alone(None, "artifact", &artifact::ROWS, artifact::run(&a, t))
        }
        Some(Command::Process {
            aido,
            node_modules,
            write,
        }) => {
            let peers = process::Peers {
                node_modules: node_modules.clone(),
            };
            let a = built(aido)?;
            let run = process::run(&a, t, &peers);
            alone(write.files(), "process", &process::ROWS, run)
        }
        Some(Command::Serve {
            aido,
            calls,
            hold,
            write,
        }) => {
            let a = built(aido)?;
            let run = serve::run(&a, t, *calls, 4, *hold);
            alone(write.files(), "serve", &serve::ROWS, run)
        }
        Some(Command::Soak {
            aido,
            calls,
            large_bytes,
            large_every,
            write,
        }) => {
            let options = soak::Options {
                calls: (*calls).max(20),
                large_bytes: *large_bytes,
                large_every: (*large_every).max(1),
            };
            let a = built(aido)?;
            let run = soak::run(&a, t, options);
            alone(write.files(), "soak", &soak::ROWS, run)
        }
        Some(Command::Realwork {
            aido,
            realwork,
            write,
        }) => {
            let options = realwork.options();
            let a = built(aido)?;
            let run = realwork::run(&a, t, &options);
            alone(write.files(), "realwork", &realwork::ROWS, run)
        }
    }
}

async fn bench(args: Args) -> Result<()> {
    let aido = built(&args.aido)?;
    let (peer_entry, peer) = peer_package(&args.peer_dir)?;
    let temp = std::env::temp_dir();
    let machine = Machine::collect(&args.node, &temp);

    let setup = Setup {
        aido,
        node: args.node.clone(),
        peer_entry,
        plan: Plan {
            calls: args.calls,
            rounds: args.rounds,
            warmup: args.warmup,
        },
        files: args.files,
        file_bytes: args.file_bytes,
        peer,
    };
    let stdio = stdio_runs(&setup, &args, &machine, &temp).await?;
    let mut records = machine.records();
    records.extend(estimates::records(&args.criterion_dir, &machine.temp_fs)?);
    records.extend(stdio);
    let (options, at) = (snapshot_options(&args), temp.clone());
    let snaps = blocking(args.skip_snapshots, "snapshots", move || {
        snapshots::run(&at, &options)
    });
    records.extend(snapshots::records(snaps.await?));
    let (options, at) = (vm_options(&args), temp.clone());
    let vm = blocking(args.skip_vm, "vm", move || vm::run_blocking(&at, &options));
    records.extend(vm::records(vm.await?));

    let (a, t) = (&setup.aido, temp.as_path());
    let search = search::run(a, t, args.search_repeats);
    records.extend(step(args.skip_search, "search", &search::ROWS, search).await);
    let (node, dir) = (&args.node, &args.memory_peer_dir);
    let (n, queries, repeats) = (args.memories, args.memory_queries, args.memory_repeats);
    let memory = memory::run(a, node, dir, t, n, queries, repeats);
    records.extend(step(args.skip_memory, "memory", &memory::ROWS, memory).await);
    let fetch = fetch::run(a, &args.fetch_peer_python, t, args.fetch_repeats);
    records.extend(step(args.skip_fetch, "fetch", &fetch::ROWS, fetch).await);
    let script = script::run(a, t, args.script_repeats);
    records.extend(step(args.skip_script, "script", &script::ROWS, script).await);
    let node_modules = args.node_modules();
    let gateway = gateway::run(a, t, &node_modules, args.gateway_rounds);
    records.extend(step(args.skip_gateway, "gateway", &gateway::ROWS, gateway).await);
    let serve = serve::run(a, t, args.serve_calls, 4, args.serve_hold);
    records.extend(step(args.skip_serve, "serve", &serve::ROWS, serve).await);
    records.extend(if args.skip_desktop {
        desktop::skipped("`--skip-desktop`")
    } else {
        eprintln!("aido-bench: desktop");
        tokio::task::spawn_blocking(desktop::run).await?
    });
    let artifact = artifact::run(a, t);
    records.extend(step(args.skip_artifact, "artifact", &artifact::ROWS, artifact).await);
    let peers = process::Peers {
        node_modules: args.node_modules(),
    };
    let process = process::run(a, t, &peers);
    records.extend(step(args.skip_process, "process", &process::ROWS, process).await);
    let options = soak::Options {
        calls: args.soak_calls.max(20),
        large_bytes: args.soak_large_bytes,
        large_every: args.soak_large_every.max(1),
    };
    let soak = soak::run(a, t, options);
    records.extend(step(args.skip_soak, "soak", &soak::ROWS, soak).await);
    let options = args.realwork.options();
    let realwork = realwork::run(a, t, &options);
    records.extend(step(args.skip_realwork, "realwork", &realwork::ROWS, realwork).await);
    finish(&args, &records)
}

/// Section `name` measured on its own (its judged `rows` saying why, should it not run): its
/// records printed as JSON lines; with `into` (the results file and the report) also
/// [`merge_into`] the results, saying when it was measured.
fn alone<R: Into<harness::Run<Vec<Record>>>>(
    into: Option<(&Path, &Path)>,
    name: &str,
    rows: &[(&str, &str)],
    run: impl std::future::Future<Output = R>,
) -> Result<()> {
    let records = record::section(name, rows, block_on(run)?.into());
    let Some((results, out)) = into else {
        record::print(&records);
        return Ok(());
    };
    merge_into(results, out, |machine| {
        let mut when = record::Section::new(name);
        when.fact("alone_commit", format!("`{}`", machine.commit));
        when.fact("alone_date", machine.date.clone());
        let mut records = records;
        records.extend(when.records);
        record::ordered(records)
    })
}

/// Puts one section, measured on its own, into the results file (replacing the one there)
/// and renders the report from it.
fn merge_into(
    results: &Path,
    out: &Path,
    part: impl FnOnce(&Machine) -> Vec<record::Record>,
) -> Result<()> {
    let machine = Machine::collect("node", &std::env::temp_dir());
    let fresh = part(&machine);
    record::print(&fresh);
    let records = record::merge(record::read(results)?, fresh);
    record::write(results, &records)?;
    write(out, &render::render(&records)?)?;
    println!("wrote {} and {}", results.display(), out.display());
    Ok(())
}

/// `aido-bench conformance`: the suite's section into the results file, the report redrawn.
fn conformance_only(script: &Path, results: &Path, out: &Path) -> Result<()> {
    let run = conformance::run(script)?;
    println!("{}", run.line);
    merge_into(results, out, |machine| {
        conformance::section(&run, &machine.commit, &machine.date)
    })
}

/// `aido-bench render`: the report from a results file, without measuring.
fn render(from: &Path, out: &Path) -> Result<()> {
    let records = record::read(from)?;
    write(out, &render::render(&records)?)?;
    println!("rendered {} from {}", out.display(), from.display());
    Ok(())
}

/// Writes `text` to `path`, making its directory first.
fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The stdio comparison in the default temp dir, then on tmpfs (unless that is missing).
async fn stdio_runs(
    setup: &Setup,
    args: &Args,
    machine: &Machine,
    temp: &Path,
) -> Result<Vec<Record>> {
    let mut s = record::Section::new("stdio");
    let place = Placement {
        label: "the default temp dir".into(),
        dir: temp.to_path_buf(),
        fs: machine.temp_fs.clone(),
    };
    stdio::run(&mut s, 0, setup, &place).await?;
    let tmpfs = Placement {
        label: "the tmpfs dir".into(),
        dir: args.tmpfs_dir.clone(),
        fs: machine::fs_type(&args.tmpfs_dir).unwrap_or_else(|| "unknown".into()),
    };
    match machine::check_tmpfs(&args.tmpfs_dir) {
        Ok(()) => stdio::run(&mut s, 1, setup, &tmpfs).await?,
        Err(reason) => {
            eprintln!("aido-bench: the tmpfs run is skipped: {reason}");
            stdio::skipped(&mut s, 1, &setup.peer, &tmpfs, &reason);
        }
    }
    stdio::facts(&mut s, setup);
    Ok(s.finish())
}

/// Writes the run's records and renders the report from them.
fn finish(args: &Args, records: &[Record]) -> Result<()> {
    // Written before it is rendered, so a run's numbers survive a bug in the template.
    record::write(&args.results, records)?;
    write(&args.out, &render::render(records)?)?;
    record::print(records);
    println!(
        "wrote {} and {}",
        args.results.display(),
        args.out.display()
    );
    Ok(())
}

/// Runs section `name` unless `--skip-NAME` was given, saying which runs and what failed; its
/// records, or its judged `rows` saying why it has none.
async fn step<R: Into<harness::Run<Vec<Record>>>>(
    skip: bool,
    name: &str,
    rows: &[(&str, &str)],
    run: impl std::future::Future<Output = R>,
) -> Vec<Record> {
    let out = if skip {
        harness::Run::Skipped(format!("`--skip-{name}`"))
    } else {
        eprintln!("aido-bench: {name}");
        run.await.into()
    };
    if let harness::Run::Failed(why) = &out {
        eprintln!("aido-bench: the {name} section failed: {why}");
    }
    record::section(name, rows, out)
}

/// The snapshot and rewind benchmarks' options.
fn snapshot_options(args: &Args) -> snapshots::Options {
    snapshots::Options {
        tree: tree::TreeSpec {
            files: args.tree_files.max(1),
            bytes: args.tree_bytes,
        },
        change: tree::ChangeSpec {
            changed: args.tree_changed,
            deleted: args.tree_changed.div_ceil(10),
            added: args.tree_changed.div_ceil(10),
        },
        repeats: args.snapshot_repeats.max(1),
        btrfs_bytes: args.btrfs_bytes,
        rewind: (!args.skip_rewind).then(|| rewind::Options {
            actions: args.rewind_actions,
            files: args.rewind_files.max(1),
            snapshot_every: args.rewind_snapshot_every.max(1),
            targets: args.rewind_targets.max(1),
        }),
    }
}

/// The VM benchmarks' options.
fn vm_options(args: &Args) -> vm::Options {
    vm::Options {
        build_image: args.vm_build_image.clone(),
        boots: args.vm_boots.max(1),
        reverts: args.vm_reverts.max(1),
        acquisitions: args.vm_acquisitions.max(1),
        finds: args.vm_finds.max(1),
        pool_size: args.vm_pool_size.max(1),
    }
}

/// Runs a section that blocks (the snapshot and rewind benchmarks, whose rewind sessions run
/// their own multi-threaded runtime; the VM benchmarks) on its own thread, stoppable: see
/// [`interruptible`]. Unless `--skip-NAME` was given.
async fn blocking<T: Send + 'static>(
    skip: bool,
    name: &'static str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<harness::Run<T>> {
    if skip {
        return Ok(harness::Run::Skipped(format!("`--skip-{name}`")));
    }
    let run = harness::Run::from(interruptible(name, work).await?);
    if let harness::Run::Failed(why) = &run {
        eprintln!("aido-bench: the {name} section failed: {why}");
    }
    Ok(run)
}

/// Runs `work` on a thread of its own while this one waits for Ctrl-C or SIGTERM: a stop
/// request lets the work return through its guards, which undo what it made. `Err` when
/// interrupted (or the thread panicked); `Ok(Err)` when the work failed by itself.
async fn interruptible<T: Send + 'static>(
    section: &'static str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<Result<T>> {
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("aido-bench-{section}"))
        .spawn(move || {
            let _ = done.send(work());
        })
        .with_context(|| format!("starting the {section} section's thread"))?;
    let interrupt = tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => t.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
        eprintln!("aido-bench: interrupted; cleaning up the {section} section");
        stop::request();
    });
    let outcome = finished.await;
    interrupt.abort();
    match outcome {
        Ok(Err(e)) if stop::requested() => Err(e),
        Ok(result) => Ok(result),
        Err(_) => bail!("the {section} section's thread panicked"),
    }
}

/// The peer's entry script (its `bin`) and "name version", from its package.json.
fn peer_package(dir: &Path) -> Result<(PathBuf, String)> {
    let file = dir.join("package.json");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("reading {} (run bench/run to install it)", file.display()))?;
    let package: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let entry = match &package["bin"] {
        Value::String(path) => Some(path.clone()),
        Value::Object(bins) => bins.values().find_map(|v| v.as_str().map(str::to_owned)),
        _ => None,
    }
    .unwrap_or_else(|| "dist/index.js".to_owned());
    let entry = std::fs::canonicalize(dir.join(&entry))
        .with_context(|| format!("the peer's entry {entry} in {}", dir.display()))?;
    let (Some(name), Some(version)) = (package["name"].as_str(), package["version"].as_str())
    else {
        bail!("{} has no name or version", file.display());
    };
    Ok((entry, format!("`{name}` {version}")))
}

/// The aido binary a section runs, resolved (it must be built first).
fn built(aido: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(aido)
        .with_context(|| format!("the aido binary {} (build it first)", aido.display()))
}

/// `future` run to its end on a runtime of its own (a section measured alone).
fn block_on<F: std::future::Future>(future: F) -> Result<F::Output> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(future))
}
