//! `aido-bench`: the side-by-side benchmark harness behind docs/BENCHMARKS.md.
//!
//! It measures aido where an agent feels it — `read_file` round trips over MCP stdio — against
//! a peer that does the same read without a policy or a journal
//! (`@modelcontextprotocol/server-filesystem`), both spawned by one rmcp client and driven in
//! alternating rounds, twice: with the files and aido's journal in the default temp dir, then on
//! tmpfs, so the price of a durable journal shows. It puts the result beside the criterion
//! benches of the policy and the journal, each against its target, and prices one metadata
//! system call (the difference between the two policy evaluation benches). `bench/run` builds
//! everything and runs it.
//!
//! ```text
//! target/release/aido-bench --aido target/release/aido --out docs/BENCHMARKS.md
//! ```

/// Criterion results.
mod estimates;
/// The temp tree both servers read.
mod fixture;
/// Machine and build facts for the header.
mod machine;
/// The price of one metadata system call.
mod metadata;
/// The markdown report.
mod report;
/// The stdio comparison.
mod stdio;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::Value;

use crate::machine::Machine;
use crate::report::Report;
use crate::stdio::{Outcome, Placement, Plan, Setup, StdioRun};

#[derive(Parser, Debug)]
#[command(
    name = "aido-bench",
    about = "Benchmark aido against a peer MCP server and write docs/BENCHMARKS.md"
)]
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
    /// `symlink_metadata` calls timed to price one metadata call.
    #[arg(long, default_value_t = 100_000)]
    metadata_calls: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let aido = std::fs::canonicalize(&args.aido)
        .with_context(|| format!("the aido binary {} (build it first)", args.aido.display()))?;
    let (peer_entry, peer) = peer_package(&args.peer_dir)?;
    let temp = std::env::temp_dir();
    let machine = Machine::collect(&args.node, &temp);

    // First, while nothing else runs: the price of the metadata calls the full policy
    // evaluation makes and the gates-only evaluation does not.
    let metadata = metadata::measure(&temp, args.metadata_calls, machine.temp_fs.clone())?;
    eprintln!(
        "aido-bench: std::fs::symlink_metadata on a file in {} ({}): {} median over {} calls",
        temp.display(),
        metadata.fs,
        report::format_ns(metadata.median_ns),
        metadata.calls
    );

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
    };
    let mut stdio = vec![
        stdio::run(
            &setup,
            Placement {
                label: "the default temp dir".into(),
                dir: temp.clone(),
                fs: machine.temp_fs.clone(),
            },
        )
        .await?,
    ];
    let tmpfs = Placement {
        label: "the tmpfs dir".into(),
        dir: args.tmpfs_dir.clone(),
        fs: machine::fs_type(&args.tmpfs_dir).unwrap_or_else(|| "unknown".into()),
    };
    stdio.push(match machine::check_tmpfs(&args.tmpfs_dir) {
        Ok(()) => stdio::run(&setup, tmpfs).await?,
        Err(reason) => {
            eprintln!("aido-bench: the tmpfs run is skipped: {reason}");
            StdioRun {
                place: tmpfs,
                outcome: Outcome::Skipped(reason),
            }
        }
    });

    let report = Report {
        machine,
        policy: estimates::read(&args.criterion_dir, report::POLICY_ID)?,
        gates: estimates::read(&args.criterion_dir, report::GATES_ID)?,
        simulate: estimates::read(&args.criterion_dir, report::SIMULATE_ID)?,
        group_commit: estimates::read(&args.criterion_dir, report::GROUP_COMMIT_ID)?,
        per_record: estimates::read(&args.criterion_dir, report::PER_RECORD_ID)?,
        metadata,
        stdio,
        plan: setup.plan,
        peer,
    };
    if let Some(parent) = args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, report.render())
        .with_context(|| format!("writing {}", args.out.display()))?;

    for run in &report.stdio {
        println!("stdio in {} ({}):", run.place.label, run.place.fs);
        match &run.outcome {
            Outcome::Ran { measured, .. } => {
                for m in measured {
                    println!(
                        "  {:<18} {:>8.0} round trips/s  p50 {:>9}  p99 {:>9}",
                        m.name,
                        m.per_second(),
                        report::format_ns(m.percentile(50.0).as_nanos() as f64),
                        report::format_ns(m.percentile(99.0).as_nanos() as f64),
                    );
                }
                if let Some(ratio) = run.ratio() {
                    println!("  aido / peer        {ratio:.2}x");
                }
            }
            Outcome::Skipped(reason) => println!("  skipped: {reason}"),
        }
    }
    println!(
        "symlink_metadata   {} per call",
        report::format_ns(report.metadata.median_ns)
    );
    for (id, met) in report.targets_met() {
        let word = match met {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "not run",
        };
        println!("{id:<42} {word}");
    }
    println!("wrote {}", args.out.display());
    Ok(())
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
