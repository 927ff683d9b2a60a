//! `aido`: the one binary. `aido mcp` serves an agent over stdio; `aido replay` reads the
//! journal back; `aido config show` and `aido policy check` explain the policy.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use aido_actions::{Action, Verdict};
use aido_actors::{Runtime, RuntimeOptions, SystemClock};
use aido_journal::{CommitMode, Journal};
use aido_policy::{Environment, FsResolver, Layered, PolicyEngine, SessionContext, Source};
use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "aido",
    version,
    about = "A runtime every action of an AI agent passes through"
)]
struct Cli {
    /// aido's home (journal, config); default $AIDO_HOME, else ~/.aido.
    #[arg(long, global = true, env = "AIDO_HOME")]
    home: Option<PathBuf>,
    /// A config file layered over the defaults and $AIDO_HOME/config.toml.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve one agent over MCP on stdin/stdout.
    Mcp,
    /// Read sessions back from the journal.
    #[command(subcommand)]
    Replay(Replay),
    /// Show the effective config.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Ask the policy about an action without running it.
    #[command(subcommand)]
    Policy(PolicyCmd),
}

#[derive(Subcommand)]
enum Replay {
    /// List sessions, oldest first.
    Sessions {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The timeline of one session.
    Show {
        /// Session id or a unique prefix.
        session: String,
        /// JSON records instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a session's hash chain; exit 1 and name the first broken seq if altered.
    Verify {
        /// Session id or a unique prefix.
        session: String,
    },
    /// Write a session's records.
    Export {
        /// Session id or a unique prefix.
        session: String,
        /// One JSON record per line (the only format so far).
        #[arg(long, required = true)]
        jsonl: bool,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// The effective config and the layer each value came from.
    Show {
        /// JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Judge an action given as JSON (`{"type": "write_file", ...}`); exit 0 allow, 1 deny, 3 confirm.
    Check {
        /// The action.
        action: String,
    },
}

fn aido_home(cli: &Cli) -> PathBuf {
    cli.home
        .clone()
        .unwrap_or_else(|| aido_actors::runtime::default_home().join(".aido"))
}

fn layered(cli: &Cli, home: &Path) -> Result<Layered> {
    let mut texts = Vec::new();
    let default_file = home.join("config.toml");
    if default_file.exists() {
        texts.push((
            Source::File(default_file.display().to_string()),
            std::fs::read_to_string(&default_file)?,
        ));
    }
    if let Some(file) = &cli.config {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        texts.push((Source::File(file.display().to_string()), text));
    }
    let layers: Vec<(Source, &str)> = texts.iter().map(|(s, t)| (s.clone(), t.as_str())).collect();
    Layered::from_layers(&layers).map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))
}

fn environment(home: &Path) -> Environment {
    Environment {
        home: aido_actors::runtime::default_home(),
        aido_home: home.to_owned(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AIDO_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("aido: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let home = aido_home(&cli);
    match &cli.command {
        Command::Mcp => {
            let layered = layered(&cli, &home)?;
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(mcp(layered, &home))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Replay(r) => replay(r, &home),
        Command::Config(ConfigCmd::Show { json }) => {
            let layered = layered(&cli, &home)?;
            if *json {
                let sources: serde_json::Map<_, _> = layered
                    .sources
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            serde_json::json!(v.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
                        )
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"config": layered.config, "sources": sources})
                );
            } else {
                println!("# effective config (AIDO_HOME = {})", home.display());
                println!("# where each value came from:");
                for (key, sources) in &layered.sources {
                    let names: Vec<_> = sources.iter().map(|s| s.to_string()).collect();
                    println!("#   {key:<34} {}", names.join(" + "));
                }
                println!("\n{}", layered.config.to_toml());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy(PolicyCmd::Check { action }) => {
            let layered = layered(&cli, &home)?;
            let value: serde_json::Value =
                serde_json::from_str(action).context("the action is not JSON")?;
            let action: Action = serde_json::from_value(value)
                .map_err(|e| anyhow::anyhow!("[invalid_arguments] {e}"))?;
            action
                .check_bounds()
                .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
            let engine = PolicyEngine::new(&layered.config, &environment(&home), &FsResolver)?;
            let ctx = SessionContext::new(engine.workdir().to_owned());
            let verdict = engine.evaluate(&action, &ctx, &FsResolver);
            println!("{}", serde_json::to_string_pretty(&verdict)?);
            Ok(match verdict {
                Verdict::Allow => ExitCode::SUCCESS,
                Verdict::Deny { .. } => ExitCode::from(1),
                Verdict::Confirm { .. } => ExitCode::from(3),
            })
        }
    }
}

async fn mcp(layered: Layered, home: &Path) -> Result<()> {
    std::fs::create_dir_all(home).with_context(|| format!("creating {}", home.display()))?;
    let limits = &layered.config.limits;
    let journal_limits = aido_journal::Limits {
        record_bytes_max: limits.record_bytes_max,
        blob_bytes_max: limits.blob_bytes_max,
        records_per_session_max: limits.records_per_session_max,
    };
    let journal =
        aido_journal::dir::open_writer(&home.join("journal"), journal_limits, CommitMode::Group)
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    tracing::info!(journal = %journal.path().display(), "journal open");
    let runtime = Runtime::start(RuntimeOptions {
        config: layered.config,
        env: environment(home),
        journal,
        clock: Arc::new(SystemClock::default()),
    })
    .await
    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let runtime = Arc::new(runtime);
    aido_mcp::serve_stdio(runtime.clone())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await;
    }
    Ok(())
}

fn readers(home: &Path) -> Result<Vec<Journal>> {
    let journals = aido_journal::dir::open_readers(&home.join("journal"))
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    if journals.is_empty() {
        bail!(
            "no journal under {} (has `aido mcp` run with this AIDO_HOME?)",
            home.display()
        );
    }
    Ok(journals)
}

fn replay(command: &Replay, home: &Path) -> Result<ExitCode> {
    let journals = readers(home)?;
    let coded = |e: aido_journal::ReadError| anyhow::anyhow!("[{}] {e}", e.code());
    match command {
        Replay::Sessions { json } => {
            let sessions = aido_journal::dir::sessions(&journals).map_err(coded)?;
            if *json {
                println!("{}", serde_json::to_string(&sessions)?);
            } else {
                for s in sessions {
                    println!(
                        "{}  {:>6} records  {}  {}",
                        s.id,
                        s.records,
                        s.client.as_deref().unwrap_or("-"),
                        s.cwd
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Replay::Show { session, json } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let records = journal.all_records(id).map_err(coded)?;
            if *json {
                let values: Vec<_> = records.iter().map(aido_replay::record_json).collect();
                println!("{}", serde_json::to_string_pretty(&values)?);
            } else {
                print!(
                    "{}",
                    aido_replay::timeline(&records, std::io::stdout().is_terminal())
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Replay::Verify { session } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let report = journal.verify(id).map_err(coded)?;
            println!("{}", aido_replay::verify_text(&id.to_string(), &report));
            Ok(if report.broken.is_some() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Replay::Export { session, .. } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let records = journal.all_records(id).map_err(coded)?;
            let stdout = std::io::stdout();
            aido_replay::export_jsonl(&records, &mut stdout.lock())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
