//! `aido`: the one binary. `aido mcp` serves an agent over stdio; `aido replay` reads the
//! journal back; `aido config show` and `aido policy check` explain the policy.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Claude Code's file tools' writes, kept and journaled by `aido hook claude-code`.
mod adopt;
/// `aido agent`: the goal handed to a small agent loop, streamed to the terminal.
mod agent;
/// `aido answer`: answering the questions no client could show.
#[cfg(feature = "prim-human")]
mod answer;
/// The live view and the control channel `aido vm` uses.
#[cfg(feature = "prim-vm")]
mod control;
/// `aido desktop doctor`.
#[cfg(feature = "prim-desktop")]
mod desktop;
/// `aido grant`.
mod grant;
/// `aido init CLIENT` and the Claude Code hook.
mod init;
/// `aido gc`, `aido du`, and the retention at start.
mod retention;
/// `aido serve`: MCP over streamable HTTP, `/actions`, `/events`.
mod serve;
/// OpenTelemetry for `aido serve` and `aido mcp`.
mod telemetry;
/// `aido tools`: what a client is given and what it costs; the tool reference.
mod tools;
/// `aido undo`.
mod undo;
/// `aido vm` commands, spoken to a running aido's control channel.
mod vm_client;
/// `aido watch`: the operator's terminal.
mod watch;

use aido_actions::{Action, Verdict};
use aido_actors::{Runtime, RuntimeOptions, SystemClock};
use aido_journal::{CommitMode, Journal};
use aido_policy::{Environment, FsResolver, Layered, PolicyEngine, SessionContext, Source};
use anyhow::{Context, Result, bail};
use base64::Engine as _;
use clap::{Parser, Subcommand};
use serde_json::json;

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
    /// The project directory, where relative paths and commands start (`workdir`). Default:
    /// the directory aido was started in, when it lies inside a write root and no config file
    /// sets `workdir`; else the config's.
    #[arg(long, global = true)]
    workdir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// Which tools a client is given, for one run: `aido mcp` and `aido tools` alike; they say
/// what `[mcp]` says in a config file, over it.
#[derive(clap::Args)]
struct ToolChoice {
    /// Only these toolsets or profiles (comma-separated: `coding`, `files,process,search`,
    /// `all`); over `[mcp] toolsets`.
    #[arg(long, value_delimiter = ',')]
    toolsets: Vec<String>,
    /// These single tools too (comma-separated); over `[mcp] tools`.
    #[arg(long, value_delimiter = ',')]
    tools: Vec<String>,
    /// Only the tools that change nothing.
    #[arg(long)]
    read_only: bool,
}

impl ToolChoice {
    /// `[mcp]` with this choice over it, and the primitives it gives a client.
    fn apply(&self, config: &mut aido_policy::Config) -> Result<Vec<&'static str>> {
        let given = &mut config.mcp;
        if !self.toolsets.is_empty() {
            given.toolsets = self.toolsets.clone();
        }
        if !self.tools.is_empty() {
            given.tools = self.tools.clone();
        }
        given.read_only |= self.read_only;
        given
            .given(&config.downstream)
            .map(|(primitives, _)| primitives)
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))
    }
}

/// Where a rewind goes: `aido rewind` and `aido replay rewind` alike.
#[derive(clap::Args)]
struct RewindTo {
    /// Keep the action (or record) at this seq and undo everything after it.
    #[arg(
        long = "to",
        required_unless_present = "before",
        conflicts_with = "before"
    )]
    to: Option<u64>,
    /// Undo the action proposed at this seq, and everything after it.
    #[arg(long = "before")]
    before: Option<u64>,
}

impl RewindTo {
    fn action(&self) -> aido_actions::snapshot::Rewind {
        aido_actions::snapshot::Rewind {
            to_seq: self.to,
            before_seq: self.before,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Serve one agent over MCP on stdin/stdout.
    Mcp {
        #[command(flatten)]
        choice: ToolChoice,
    },
    /// The tools a client is given (the same choice as `aido mcp`'s flags and `[mcp]`), with
    /// the bytes and tokens the list costs its context.
    Tools {
        #[command(flatten)]
        choice: ToolChoice,
        /// The `tools/list` result itself, as a client receives it.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// The tool reference of this build (docs/TOOLS.md), whatever the choice.
        #[arg(long)]
        markdown: bool,
    },
    /// Every stable error code this aido can give, one per line with the error that gives it
    /// (`CODE<TAB>module::Enum`), from the code tables each coded error registers, and the
    /// policy's denials. docs/REFERENCE.md's list is checked against it.
    Codes,
    /// Serve agents over MCP on streamable HTTP (`/mcp`), with `/actions` and `/events` for
    /// frontends, on one listener (127.0.0.1 by default) behind a bearer token kept in
    /// AIDO_HOME/serve/token. Prints the MCP URL and the token file's path; stops on SIGTERM
    /// or SIGINT.
    Serve {
        /// The address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:7411")]
        listen: std::net::SocketAddr,
        /// A Host name (or name:port) to accept beside the loopback names.
        #[arg(long)]
        allow_host: Vec<String>,
        /// A browser Origin (scheme://host:port) to accept beside the server's own.
        #[arg(long)]
        allow_origin: Vec<String>,
        /// No bearer token (only on a loopback address).
        #[arg(long)]
        no_auth: bool,
        /// Seconds an idle MCP session lives; then its id gets 404 and the client
        /// initializes again.
        #[arg(long, default_value_t = 300)]
        session_idle_secs: u64,
        /// The largest request body in bytes (default: as on stdio).
        #[arg(long)]
        body_bytes_max: Option<usize>,
        /// How long shutdown waits for open connections, in ms.
        #[arg(long, default_value_t = 3000)]
        drain_ms: u64,
    },
    /// Run one command confined by the policy (as run_command does), journaled in its own
    /// session; its exit status passes through (124 when it timed out, 128+N for signal N,
    /// 125 when aido refused or could not run it).
    Exec {
        /// A policy (config) file layered over the others, like --config.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Wall-clock bound in ms.
        #[arg(long, default_value_t = 600_000)]
        timeout_ms: u64,
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Read sessions back from the journal.
    #[command(subcommand)]
    Replay(Replay),
    /// Show the effective config.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Ask the policy about an action without running it.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Make workspaces that snapshot well.
    #[command(subcommand)]
    Workspace(WorkspaceCmd),
    /// Machines for agents.
    #[command(subcommand)]
    Vm(VmCmd),
    /// The host desktop.
    #[command(subcommand)]
    Desktop(DesktopCmd),
    /// Capability grants: mint, list and revoke, as the operator.
    #[command(subcommand)]
    Grant(GrantCmd),
    /// Put aido under an agent you already use: write its config in this project (the aido
    /// MCP server with a toolset profile; for Claude Code also a hook that runs its own Bash
    /// commands through aido, confined, journaled and rewindable).
    Init {
        /// claude-code, codex, cursor or vscode.
        client: init::Client,
        /// The toolsets or profile the client is given.
        #[arg(long, default_value = "coding")]
        toolsets: String,
        /// The project (default: the current directory).
        #[arg(long)]
        project: Option<PathBuf>,
    },
    /// Take back the last N actions that changed something in this project (its sessions,
    /// `aido exec` ones included), after showing what will be undone.
    Undo {
        /// How many actions.
        #[arg(default_value_t = 1)]
        count: usize,
        /// Undo without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Rewind a session of this project (the newest started here or below, or `--session`) to
    /// a seq, after showing what will be undone: files, machines and the journal head together.
    Rewind {
        /// Session id or a unique prefix (default: the newest session started here or below).
        #[arg(long)]
        session: Option<String>,
        #[command(flatten)]
        target: RewindTo,
        /// Rewind without asking.
        #[arg(long)]
        yes: bool,
        /// Only show what would be undone.
        #[arg(long, conflicts_with = "yes")]
        dry_run: bool,
    },
    /// The hook `aido init claude-code` installs: one PreToolUse event on stdin, the answer on
    /// stdout (a Bash command rewritten to run through `aido exec`; a file tool's path judged
    /// by the policy, refused or asked about as it says).
    Hook {
        /// The client whose hook this is (claude-code).
        client: HookClient,
        /// Keep Claude Code's own prompt for each command instead of allowing it.
        #[arg(long)]
        ask: bool,
    },
    /// Remove old sessions and everything only they use (blobs, objects, workspace
    /// snapshots, audit lines), by age, a byte budget or a session count; with no rule given,
    /// the `[retention]` config's. A session a running aido holds, or one that has not ended
    /// and was active within the day, is never touched; what goes is journaled.
    Gc {
        /// Remove what is older than this (30d, 12h, 90m, 45s): whole sessions, and the older
        /// records of sessions that go on after it (a `pruned` record marks the cut).
        #[arg(long, value_name = "AGE")]
        older_than: Option<String>,
        /// Remove what was recorded before this time (milliseconds since the epoch), as
        /// --older-than does.
        #[arg(long, value_name = "MS")]
        before_ms: Option<u64>,
        /// Remove the oldest sessions until the journal, its audit files and the sessions'
        /// snapshots take at most this (10G, 512M).
        #[arg(long, value_name = "SIZE")]
        max_bytes: Option<String>,
        /// Keep at most this many sessions, the newest.
        #[arg(long, value_name = "N")]
        keep_sessions: Option<u64>,
        /// Show what would go; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not compact the journal's database afterwards.
        #[arg(long)]
        no_compact: bool,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// What takes the space in AIDO_HOME: per session (its records, the contents only it
    /// names, those it shares, its snapshots) and per kind (records, blobs, objects,
    /// snapshots, layers, audit files).
    Du {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Watch a runtime's agents live in the terminal: its sessions, a session's timeline as it
    /// happens, each step in full with its diff; answer the questions waiting for you, and
    /// rewind a session to a chosen step after seeing what will be undone.
    ///
    /// It reads `aido serve`'s Mission Control API with the operator's token, so start
    /// `aido serve` first (it writes where it listens to AIDO_HOME/serve/url, which this
    /// reads). Works over SSH in 80x24; no colour when NO_COLOR is set.
    ///
    /// Keys: ↑↓ (j k) PgUp PgDn Home End move (up past the top reads older records; End
    /// follows the live tail) · Tab next pane · Enter open a session, or a step in full ·
    /// a approve / d deny a confirmation (a answer / d decline other questions) · t type an
    /// answer (a choice by number or text) · r rewind to the selected step: a preview, then
    /// y to go ahead, k to keep the step instead of undoing it · < > another runtime of the
    /// fleet · ? help · Esc leaves a box · q quit (Ctrl-C too).
    ///
    /// Examples: `aido watch` (this host's runtime); `aido watch --session 3f9a` (open that
    /// session first); `aido watch --url http://10.0.0.5:7411 --token-file ~/peer-token`
    /// (another host's; its token copied from its AIDO_HOME/serve/token).
    #[command(verbatim_doc_comment)]
    Watch {
        /// The `aido serve` to watch (http://HOST:PORT). Default: where this AIDO_HOME's
        /// `aido serve` listens (AIDO_HOME/serve/url), else http://127.0.0.1:7411.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// The file holding its bearer token. Default: AIDO_HOME/serve/token.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Open this session first (an id or a unique prefix). Default: the newest one an
        /// agent drives.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Hand a goal to a small agent loop inside aido, for an operator with no agent client.
    ///
    /// The model of the config's [llm] section (provider "openai": any OpenAI-compatible
    /// endpoint, OpenAI, vLLM, llama.cpp, Ollama's /v1; or "anthropic") is given the tools of
    /// --toolset and works toward the goal one tool call at a time.
    ///
    /// It is a thin client of the runtime: it opens one session on a runtime in this process
    /// (its id is printed first: `aido replay show ID` reads it) and everything runs through
    /// it; with --serve the session is one of the running `aido serve`'s instead, so `aido
    /// watch --session ID` and Mission Control follow it live. Each turn of the model is an llm_call action of that session (its URL
    /// judged by [net] allow, the conversation journaled, the key never), so the whole loop is
    /// in the journal and `aido replay playback` reproduces it. Each tool call the model makes
    /// is an ordinary action: judged by the policy, journaled, rewindable; a refused or failed
    /// call goes back to the model as its result with its code, and the loop goes on. Since
    /// llm_call carries text, the tools (name, description and the JSON Schema of the
    /// arguments, as `aido tools --json` gives them) are in the system prompt, and the model
    /// answers each turn with one JSON object: {"tool": NAME, "arguments": {...}} or
    /// {"answer": TEXT}.
    ///
    /// The plan and each call stream to stdout as plain lines (no colour when NO_COLOR is set
    /// or stdout is not a terminal); the answer comes last.
    ///
    /// Exit codes: 0 the model answered; 3 the step budget is spent (agent_steps_spent); 4
    /// the token budget (agent_tokens_spent); 5 the model call failed (agent_model_failed:
    /// unreachable, an error status, its URL refused by [net] allow); 6 the `aido serve` of
    /// --serve failed (agent_serve_failed); 2 bad input (llm_not_configured,
    /// agent_toolset_unknown, agent_budget_invalid, ...); 130 interrupted.
    ///
    /// Example: aido agent --toolset files,search --steps 10 "Which files mention TODO?"
    #[command(verbatim_doc_comment)]
    Agent {
        /// The goal, in words.
        goal: String,
        /// The toolsets, profiles or single tools the model is given (comma-separated; as
        /// `aido tools --toolsets` lists them).
        #[arg(
            long = "toolset",
            visible_alias = "toolsets",
            value_delimiter = ',',
            default_value = "coding"
        )]
        toolsets: Vec<String>,
        /// Only the tools that change nothing.
        #[arg(long)]
        read_only: bool,
        /// The most turns of the model (each makes at most one tool call; at most 120).
        #[arg(long, default_value_t = 20)]
        steps: u32,
        /// The most tokens the model's calls may use, prompt and completion together, as the
        /// endpoint reports them.
        #[arg(long, default_value_t = 200_000)]
        tokens: u64,
        /// The model, over [llm] model.
        #[arg(long)]
        model: Option<String>,
        /// Run the session in the running `aido serve` of this AIDO_HOME (through its
        /// /actions route, with the operator's token) instead of in this process, so `aido
        /// watch` and Mission Control follow it live; the model is then the serve's [llm].
        #[arg(long)]
        serve: bool,
        /// With --serve: another `aido serve` (http://HOST:PORT). Default: where this
        /// AIDO_HOME's listens (AIDO_HOME/serve/url).
        #[arg(long, value_name = "URL", requires = "serve")]
        url: Option<String>,
        /// With --serve: the file holding its bearer token. Default: AIDO_HOME/serve/token.
        #[arg(long, value_name = "FILE", requires = "serve")]
        token_file: Option<PathBuf>,
    },
    /// Answer a question an agent asked that its client could not show (it got
    /// `needs_human` with this id): free text, `yes`/`no` for a confirmation, or choices by
    /// text or number. `--list` shows the waiting questions.
    Answer {
        /// The question's id (`q-...`).
        #[arg(required_unless_present = "list")]
        id: Option<String>,
        /// The answer.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        answer: Vec<String>,
        /// List the questions waiting for an answer.
        #[arg(long, conflicts_with_all = ["id", "decline"])]
        list: bool,
        /// Decline to answer.
        #[arg(long)]
        decline: bool,
        /// With --list: JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum GrantCmd {
    /// Mint a capability grant (journaled in an `aido grant` session) and print its token:
    /// give it to an agent as `AIDO_GRANT=TOKEN aido mcp`, or as the bearer token of
    /// `aido serve`. Each option left out leaves that reach as the policy has it.
    Mint {
        /// A primitive (`read_file`) or class (`read_only`) it allows; repeat for more.
        #[arg(long = "primitive", value_name = "NAME")]
        primitives: Vec<String>,
        /// A root it may read under (inside the walls); repeat for more.
        #[arg(long, value_name = "PATH")]
        read: Vec<String>,
        /// A root it may write under (readable too); repeat for more.
        #[arg(long, value_name = "PATH")]
        write: Vec<String>,
        /// A network target (`host`, `host:port`, `*.suffix`); repeat for more.
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        /// Seconds until it expires.
        #[arg(long, value_name = "SECONDS")]
        expires_in: Option<u64>,
        /// How many actions may run under it.
        #[arg(long, value_name = "N")]
        uses: Option<u64>,
        /// A rate limit: `COUNT/SECONDS` (`10/60`: ten uses a minute).
        #[arg(long, value_name = "COUNT/SECONDS")]
        rate: Option<String>,
        /// Print the whole answer as JSON (the token included).
        #[arg(long)]
        json: bool,
    },
    /// Every grant of this AIDO_HOME with its uses (never a token).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a grant and every grant narrowed from it; sessions under it are refused from
    /// their next action, and `aido serve` refuses its token.
    Revoke {
        /// The grant's id (from `aido grant list`).
        id: String,
    },
}

#[derive(Subcommand)]
enum DesktopCmd {
    /// Say what a display supports (probed): with --display that one, else an owned session
    /// started as `[desktop]` describes (and stopped again).
    Doctor {
        /// An X display to probe (`:0`); nothing is started.
        #[arg(long)]
        display: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum VmCmd {
    /// Guest images.
    #[command(subcommand)]
    Image(VmImageCmd),
    /// The running aido's machines.
    List,
    /// Save a machine's screen as PNG.
    Shot {
        /// The machine.
        vm: String,
        /// Where to write it.
        #[arg(short, long, default_value = "screen.png")]
        output: PathBuf,
    },
    /// Type text on a machine (as a person; journaled).
    Type {
        /// The machine.
        vm: String,
        /// The text (`\n` for Enter is a real newline: quote it in your shell).
        text: String,
    },
    /// Press a key or chord on a machine.
    Key {
        /// The machine.
        vm: String,
        /// Keys joined by `+`.
        keys: String,
    },
    /// Click a point of a machine's screen.
    Click {
        /// The machine.
        vm: String,
        /// Pixels from the left.
        x: u32,
        /// Pixels from the top.
        y: u32,
    },
    /// Click text on a machine's screen.
    ClickText {
        /// The machine.
        vm: String,
        /// The text.
        text: String,
    },
    /// Wait until text is on a machine's screen.
    WaitText {
        /// The machine.
        vm: String,
        /// The text.
        text: String,
        /// How long to wait.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Save or restore a machine snapshot.
    Snapshot {
        /// The machine.
        vm: String,
        /// create, restore, list or delete.
        op: String,
        /// The snapshot name (not for list).
        name: Option<String>,
    },
    /// The warm pool.
    Pool {
        /// Only `status`.
        op: String,
    },
    /// Print the live view's address (open it in a browser on this machine).
    Live,
}

#[derive(Subcommand)]
enum VmImageCmd {
    /// Build the test guest from Debian packages (kernel + busybox initramfs + qcow2 disk)
    /// into $AIDO_HOME/vm/images/text, where vm_start finds it.
    Build {
        /// Rebuild even if the image exists.
        #[arg(long)]
        force: bool,
        /// The framebuffer variant (1280x800 graphical console, read by OCR) into
        /// $AIDO_HOME/vm/images/fb.
        #[arg(long)]
        framebuffer: bool,
    },
}

/// The guest image builder, shipped inside the binary.
const BUILD_IMAGE_SCRIPT: &str = include_str!("../../vm/guest/build-image");

#[derive(Subcommand)]
enum WorkspaceCmd {
    /// Make PATH a workspace: a btrfs subvolume when its parent is on btrfs, or, with
    /// `--btrfs SIZE`, a subvolume on a new btrfs filesystem in a loop file (needs root).
    Init {
        /// The workspace directory (must not exist, or be empty).
        path: PathBuf,
        /// Size of a btrfs loop file to create, e.g. 2G or 512M.
        #[arg(long, value_name = "SIZE")]
        btrfs: Option<String>,
    },
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
    /// Check a session's hash chain and re-derive its files from the records in a scratch
    /// dir, checking every blob; exit 1 and name the first broken seq if anything was altered.
    Verify {
        /// Session id or a unique prefix.
        session: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also hold the tree the journal derives against the live workspace: every path the
        /// session touched must hold what the journal says, and every entry of the write roots
        /// changed since the session began must be one the journal accounts for (exit 1 and
        /// name each that is not).
        #[arg(long)]
        tree: bool,
        /// The directories the tree check walks (default: the policy's write roots).
        #[arg(long = "root", value_name = "DIR")]
        roots: Vec<PathBuf>,
    },
    /// Reproduce every recorded result from its recorded inputs and compare byte for byte
    /// (results built from a guest machine's state are listed as external).
    Playback {
        /// Session id or a unique prefix.
        session: String,
        /// JSON (reproduced, not_reproducible, external, mismatches) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Every action another policy would have denied or sent to confirmation.
    WhatIf {
        /// Session id or a unique prefix.
        session: String,
        /// The other policy (a config file, layered over the defaults).
        #[arg(long)]
        policy: PathBuf,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The file changes between two seqs.
    Diff {
        /// Session id or a unique prefix.
        session: String,
        /// From just after this seq.
        #[arg(long)]
        from: u64,
        /// To just after this seq.
        #[arg(long)]
        to: u64,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Rewind a session like `git reset`: `--to SEQ` keeps the action at SEQ and undoes the
    /// later ones, `--before SEQ` undoes that action too (the undone records become a
    /// branch). The session's journal must not be held by a running aido.
    Rewind {
        /// Session id or a unique prefix.
        session: String,
        #[command(flatten)]
        target: RewindTo,
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

/// Refused paths `aido exec` prints, one per line, before saying how many more there were.
const REFUSED_PRINTED_MAX: usize = 20;

fn layered(cli: &Cli, home: &Path) -> Result<Layered> {
    layered_with(cli, home, None)
}

/// The defaults, `$AIDO_HOME/config.toml`, `--config` and `extra`, in that order, with the
/// project directory placed.
fn layered_with(cli: &Cli, home: &Path, extra: Option<&Path>) -> Result<Layered> {
    let mut files = Vec::new();
    let default_file = home.join("config.toml");
    if default_file.exists() {
        files.push(default_file);
    }
    files.extend(cli.config.iter().cloned());
    files.extend(extra.map(Path::to_owned));
    let mut layered = load(&files)?;
    place_workdir(&mut layered, cli.workdir.as_deref())?;
    Ok(layered)
}

/// The project directory: `--workdir`, else the directory aido was started in (an MCP client
/// starts `aido mcp` in its project) when no config file sets `workdir` and it lies inside a
/// write root; else the config's `workdir` stays. `aido config show` names which.
fn place_workdir(layered: &mut Layered, given: Option<&Path>) -> Result<()> {
    fn place(layered: &mut Layered, dir: &Path, how: String) {
        layered.config.workdir = dir.display().to_string();
        layered
            .sources
            .insert("workdir".into(), vec![Source::Started(how)]);
    }
    if let Some(dir) = given {
        let dir = dir
            .canonicalize()
            .with_context(|| format!("--workdir {}", dir.display()))?;
        anyhow::ensure!(
            dir.is_dir(),
            "--workdir {} is not a directory",
            dir.display()
        );
        place(layered, &dir, "--workdir".into());
        return Ok(());
    }
    let set_by_a_file = layered
        .sources
        .get("workdir")
        .is_some_and(|sources| sources.iter().any(|s| *s != Source::Defaults));
    if set_by_a_file {
        return Ok(());
    }
    let Ok(started) = std::env::current_dir().and_then(|d| d.canonicalize()) else {
        return Ok(());
    };
    let home = aido_actors::runtime::default_home();
    let inside = layered.config.paths.write.iter().any(|root| {
        aido_policy::expand_tilde(root, &home)
            .and_then(|root| root.canonicalize().ok())
            .is_some_and(|root| started.starts_with(root))
    });
    if inside {
        let how = format!("the directory aido was started in ({})", started.display());
        place(layered, &started, how);
    }
    Ok(())
}

/// The defaults with `files` layered over them, in order. Every file loaded is then protected
/// (`paths.protect`) from the actions and commands the config governs: a command that could
/// rewrite the policy it runs under could make its next run unconfined.
fn load(files: &[PathBuf]) -> Result<Layered> {
    let mut texts = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        texts.push((Source::File(file.display().to_string()), text));
    }
    let layers: Vec<(Source, &str)> = texts.iter().map(|(s, t)| (s.clone(), t.as_str())).collect();
    let mut layered =
        Layered::from_layers(&layers).map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    for file in files {
        let file = file.canonicalize().unwrap_or_else(|_| file.clone());
        let glob = globset::escape(&file.display().to_string());
        if !layered.config.paths.protect.contains(&glob) {
            layered.config.paths.protect.push(glob);
        }
    }
    Ok(layered)
}

/// `aido exec`: one run_command in a session of its own, its output and exit passed through.
/// A runtime over `home`'s journal directory (beside any running aido: each process writes
/// its own journal there), for one command's session.
async fn open_runtime(layered: Layered, home: &Path) -> Result<Runtime> {
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
    let runtime = Runtime::start(RuntimeOptions {
        config: layered.config,
        env: environment(home),
        journal,
        clock: Arc::new(SystemClock::default()),
    })
    .await
    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    Ok(runtime)
}

async fn exec(layered: Layered, home: &Path, argv: &[String], timeout_ms: u64) -> Result<ExitCode> {
    #[cfg(feature = "prim-process")]
    aido_sandbox::set_single_command();
    expect_commands(&layered.config);
    let runtime = open_runtime(layered, home).await?;
    let session = runtime
        .open_session(Some("aido exec".into()))
        .await
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let cwd = std::env::current_dir().context("the current directory")?;
    let action = Action::RunCommand(aido_actions::process::RunCommand {
        argv: argv.to_vec(),
        shell: None,
        cwd: Some(cwd.display().to_string()),
        env: Default::default(),
        stdin: None,
        timeout_ms: Some(timeout_ms),
        stdout_bytes_max: None,
        stderr_bytes_max: None,
        dry_run: false,
        background: false,
        pty: false,
        private_tmp: false,
        expose_ports: Vec::new(),
    });
    let result = session.run(action, aido_actors::Hooks::default()).await;
    // The command's output goes out as soon as it is known (its record is committed).
    let code = match result {
        Ok(ran) => {
            let output = ran.outcome.output;
            let stream = |name: &str| output[name].as_str().unwrap_or_default().to_owned();
            {
                use std::io::Write;
                let _ = std::io::stdout().write_all(stream("stdout").as_bytes());
                let _ = std::io::stderr().write_all(stream("stderr").as_bytes());
            }
            if output["timed_out"] == true {
                124
            } else if let Some(signal) = output["signal"].as_i64() {
                128 + signal
            } else {
                output["exit_code"].as_i64().unwrap_or(125)
            }
        }
        Err(e) => {
            // The command ran but its changes were refused: what it printed, then each path
            // with the code that refused it.
            let details = e.failure.details.clone().unwrap_or_default();
            let command = &details["command"];
            for name in ["stdout", "stderr"] {
                if let Some(text) = command[name].as_str() {
                    let _ = if name == "stdout" {
                        std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes())
                    } else {
                        std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes())
                    };
                }
            }
            eprintln!("aido: [{}] {}", e.failure.code, e.failure.message);
            if let Some(refused) = details["refused"].as_array() {
                for r in refused.iter().take(REFUSED_PRINTED_MAX) {
                    eprintln!(
                        "aido:   {} [{}]",
                        r["path"].as_str().unwrap_or_default(),
                        r["code"].as_str().unwrap_or_default()
                    );
                }
                let total = details["refused_total"]
                    .as_u64()
                    .unwrap_or(refused.len() as u64);
                if total > REFUSED_PRINTED_MAX as u64 {
                    eprintln!(
                        "aido:   ... and {} more",
                        total - REFUSED_PRINTED_MAX as u64
                    );
                }
            }
            125
        }
    };
    session.close("aido exec finished").await;
    runtime.shutdown().await;
    exit_committed(u8::try_from(code).unwrap_or(125))
}

/// Ends a process whose session is closed: every record is committed (the session's end was
/// flushed, and everything before it with it), so the journal is not torn down (sled's own
/// teardown would flush and sync the log again: milliseconds for nothing). The sandbox's
/// teardown (the child's exit, its cgroup's removal) is waited for, so nothing is left behind.
fn exit_committed(code: u8) -> ! {
    use std::io::Write;
    #[cfg(feature = "prim-process")]
    if !aido_sandbox::settle(std::time::Duration::from_secs(2)) {
        eprintln!("aido: a sandbox was still being torn down at exit; its cgroup is swept later");
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(i32::from(code))
}

/// A command is expected soon (`aido exec`, a runtime that serves agents): its sandbox child
/// starts now, so the first command does not wait for it.
fn expect_commands(config: &aido_policy::Config) {
    #[cfg(feature = "prim-process")]
    aido_actors::process::expect_commands(config);
    #[cfg(not(feature = "prim-process"))]
    let _ = config;
}

fn environment(home: &Path) -> Environment {
    Environment {
        home: aido_actors::runtime::default_home(),
        aido_home: home.to_owned(),
    }
}

fn main() -> ExitCode {
    // The sandbox child and init are this executable started with a reserved argv[1]: they must
    // run before anything else (before tokio starts threads). Returns only in the parent.
    #[cfg(feature = "prim-process")]
    aido_sandbox::run_child_if_requested();
    let cli = Cli::parse();
    logging(&cli);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("aido: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr (`AIDO_LOG`, default `warn`) and, for `aido mcp`, also to the bounded,
/// rotating `AIDO_HOME/logs/aido.log` (`AIDO_LOG`, default `info`), which `read_logs` reads.
/// stdout is never written: it is the MCP stdio transport.
fn logging(cli: &Cli) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = |default: &str| {
        tracing_subscriber::EnvFilter::try_from_env("AIDO_LOG").unwrap_or_else(|_| default.into())
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter("warn"));
    let file = matches!(cli.command, Command::Mcp { .. } | Command::Serve { .. })
        .then(|| aido_actors::logs::RotatingLog::open(&aido_home(cli)))
        .and_then(|opened| match opened {
            Ok(log) => Some(log),
            Err(e) => {
                eprintln!("aido: cannot open its log file ({e}); logging to stderr only");
                None
            }
        })
        .map(|log| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::sync::Mutex::new(log))
                .with_ansi(false)
                .with_filter(filter("info"))
        });
    tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .init();
}

/// The clients with a hook.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum HookClient {
    /// Claude Code's PreToolUse hook.
    ClaudeCode,
}

#[allow(clippy::too_many_lines)]
fn run(cli: Cli) -> Result<ExitCode> {
    let home = aido_home(&cli);
    match &cli.command {
        Command::Init {
            client,
            toolsets,
            project,
        } => init_command(*client, toolsets, project),
        Command::Undo { count, yes } => undo_command(&cli, &home, *count, *yes),
        Command::Rewind {
            session,
            target,
            yes,
            dry_run,
        } => rewind_command(&cli, &home, session, target, *yes, *dry_run),
        Command::Hook {
            client: HookClient::ClaudeCode,
            ask,
        } => {
            let mut input = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut input)
                .context("reading the hook's input")?;
            let aido = std::env::current_exe().context("aido's own path")?;
            let host = HookHost {
                cli: &cli,
                home: &home,
            };
            if let Some(answer) = init::hook(&input, &aido, *ask, &host)? {
                println!("{answer}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools {
            choice,
            json,
            markdown,
        } => {
            if *markdown {
                print!("{}", tools::markdown());
                return Ok(ExitCode::SUCCESS);
            }
            let mut layered = layered(&cli, &home)?;
            let given = choice.apply(&mut layered.config)?;
            let listed = tools::given(&given);
            if *json {
                println!("{}", serde_json::json!({ "tools": listed }));
            } else {
                print!("{}", tools::table(&listed));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Codes => codes_command(),
        Command::Mcp { choice } => {
            let mut layered = layered(&cli, &home)?;
            choice.apply(&mut layered.config)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let served = runtime.block_on(mcp(layered, &home));
            // The stdin reader may still be blocked in a read that will never return (the
            // session ended on a signal): do not wait for it.
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            listen,
            allow_host,
            allow_origin,
            no_auth,
            session_idle_secs,
            body_bytes_max,
            drain_ms,
        } => {
            let layered = layered(&cli, &home)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let args = serve::ServeArgs {
                listen: *listen,
                allow_host: allow_host.clone(),
                allow_origin: allow_origin.clone(),
                no_auth: *no_auth,
                session_idle_secs: *session_idle_secs,
                body_bytes_max: *body_bytes_max,
                drain_ms: *drain_ms,
            };
            let served = runtime.block_on(serve::serve(layered, &home, args));
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Exec {
            policy,
            timeout_ms,
            command,
        } => {
            let layered_cli = match policy {
                Some(file) => layered_with(&cli, &home, Some(file))?,
                None => layered(&cli, &home)?,
            };
            let runtime = tokio::runtime::Runtime::new()?;
            let code = runtime.block_on(exec(layered_cli, &home, command, *timeout_ms));
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            code
        }
        Command::Replay(Replay::Rewind { session, target }) => {
            let layered = layered(&cli, &home)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let target = target.action();
            show_rewind(&readers(&home)?, session, &target)?;
            runtime.block_on(rewind(layered, &home, session, target))
        }
        Command::Replay(r) => replay(r, &home),
        Command::Gc {
            older_than,
            before_ms,
            max_bytes,
            keep_sessions,
            dry_run,
            no_compact,
            json,
        } => {
            let layered = layered(&cli, &home)?;
            let args = retention::GcArgs {
                older_than: older_than.clone(),
                before_ms: *before_ms,
                max_bytes: max_bytes.clone(),
                keep_sessions: *keep_sessions,
                dry_run: *dry_run,
                no_compact: *no_compact,
                json: *json,
            };
            retention::gc(&home, &layered.config.retention, &args)
        }
        Command::Du { json } => retention::du(&home, *json),
        Command::Desktop(DesktopCmd::Doctor { display, json }) => {
            #[cfg(feature = "prim-desktop")]
            {
                let layered = layered(&cli, &home)?;
                desktop::doctor(&layered, display.as_deref(), *json)
            }
            #[cfg(not(feature = "prim-desktop"))]
            {
                let _ = (display, json);
                bail!(
                    "[primitive_not_built] this aido was built without the prim-desktop cargo feature"
                )
            }
        }
        Command::Agent {
            goal,
            toolsets,
            read_only,
            steps,
            tokens,
            model,
            serve,
            url,
            token_file,
        } => {
            let layered = layered(&cli, &home)?;
            let serve = serve.then(|| {
                let mut endpoint = aido_watch::discover::this_host(&home);
                if let Some(url) = url {
                    endpoint.url = url.trim_end_matches('/').to_owned();
                }
                if let Some(file) = token_file {
                    endpoint.token_file = file.clone();
                }
                endpoint
            });
            let args = agent::AgentArgs {
                goal: goal.clone(),
                toolsets: toolsets.clone(),
                read_only: *read_only,
                steps: *steps,
                tokens: *tokens,
                model: model.clone(),
                serve,
            };
            agent::agent(layered, &home, args)
        }
        Command::Watch {
            url,
            token_file,
            session,
        } => watch::watch(&home, url.clone(), token_file.clone(), session.clone()),
        Command::Answer {
            id,
            answer,
            list,
            decline,
            json,
        } => {
            #[cfg(feature = "prim-human")]
            match id {
                Some(id) if !list => answer::answer(&home, id, answer, *decline),
                _ => answer::list(&home, *json),
            }
            #[cfg(not(feature = "prim-human"))]
            {
                let _ = (id, answer, list, decline, json);
                bail!(
                    "[primitive_not_built] this aido was built without the prim-human cargo feature: no question store"
                )
            }
        }
        Command::Grant(cmd) => {
            let layered = layered(&cli, &home)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let code = runtime.block_on(grant::run(layered, &home, cmd));
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            code
        }
        Command::Vm(cmd) => vm_command(&home, cmd),
        Command::Workspace(WorkspaceCmd::Init { path, btrfs }) => {
            workspace_init(&home, path, btrfs)
        }
        Command::Config(ConfigCmd::Show { json }) => config_show(&cli, &home, *json),
        Command::Policy(PolicyCmd::Check { action }) => policy_check(&cli, &home, action),
    }
}

/// `aido init CLIENT`: write the client's configuration for aido.
fn init_command(
    client: init::Client,
    toolsets: &str,
    project: &Option<PathBuf>,
) -> Result<ExitCode> {
    let project = match project {
        Some(project) => project.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let aido = std::env::current_exe().context("aido's own path")?;
    let codex_home = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".codex")))
        .context("neither CODEX_HOME nor HOME is set")?;
    // The toolsets must exist before a client is told to ask for them.
    aido_policy::config::McpTools {
        toolsets: toolsets.split(',').map(str::to_owned).collect(),
        ..Default::default()
    }
    .primitives()
    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    for file in init::init(client, &project, &aido, toolsets, &codex_home)? {
        println!("wrote {}", file.display());
    }
    if client == init::Client::Codex {
        println!(
            "Codex has no hook that can send its own shell tool through aido: its commands run outside aido unless it uses aido's run_command."
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `aido undo [N]`: rewind the last N actions that changed this directory.
fn undo_command(cli: &Cli, home: &Path, count: usize, yes: bool) -> Result<ExitCode> {
    let layered = layered(cli, home)?;
    let here = std::env::current_dir().context("the current directory")?;
    let here = here.canonicalize().unwrap_or(here);
    let chosen = undo::last_changes(&readers(home)?, &here, count)
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    if chosen.is_empty() {
        println!(
            "nothing to undo: no action changed anything in {}",
            here.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("will undo (newest first):");
    for one in &chosen {
        println!("  {}", one.line);
    }
    if !yes && !confirmed("undo these?")? {
        return Ok(ExitCode::from(1));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    for (session, seq) in undo::rewinds(&chosen) {
        let target = aido_actions::snapshot::Rewind {
            to_seq: None,
            before_seq: Some(seq),
        };
        let code = runtime.block_on(rewind(layered.clone(), home, &session, target))?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `aido rewind`: show what a rewind would do, ask, and run it.
fn rewind_command(
    cli: &Cli,
    home: &Path,
    session: &Option<String>,
    target: &RewindTo,
    yes: bool,
    dry_run: bool,
) -> Result<ExitCode> {
    let layered = layered(cli, home)?;
    let journals = readers(home)?;
    let session = match session {
        Some(session) => session.clone(),
        None => {
            let here = std::env::current_dir().context("the current directory")?;
            let here = here.canonicalize().unwrap_or(here);
            undo::newest_session_in(&journals, &here)
                .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "[session_not_found] no session was started in {} or below; name one with --session (aido replay sessions)",
                        here.display()
                    )
                })?
        }
    };
    let target = target.action();
    show_rewind(&journals, &session, &target)?;
    drop(journals);
    if dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    if !yes && !confirmed("rewind?")? {
        return Ok(ExitCode::from(1));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(rewind(layered, home, &session, target))
}

/// `aido codes`: every code aido gives, with the enum it comes from.
fn codes_command() -> Result<ExitCode> {
    let mut lines: std::collections::BTreeSet<(String, &str)> = aido_actions::codes::tables()
        .flat_map(|t| t.codes.iter().map(|c| ((*c).to_owned(), t.name)))
        .collect();
    lines.extend(
        aido_actions::DenyCode::ALL
            .iter()
            .map(|c| (c.code().to_owned(), "aido_actions::verdict::DenyCode")),
    );
    // A reader that stops early (`aido codes | head`) ends the listing, not a panic.
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    for (code, from) in lines {
        if writeln!(out, "{code}\t{from}").is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `aido workspace init`: a snapshot-friendly workspace.
fn workspace_init(home: &Path, path: &Path, btrfs: &Option<String>) -> Result<ExitCode> {
    let bytes = btrfs.as_deref().map(parse_size).transpose()?;
    let made = aido_snapshots::volume::init(path, home, bytes)
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let store = aido_snapshots::Store::open(&made.path, home)
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    println!(
        "workspace {} ({})",
        made.path.display(),
        if made.subvolume {
            "a btrfs subvolume"
        } else {
            "a directory"
        }
    );
    if let (Some(image), Some(mount)) = (&made.image, &made.mount) {
        println!(
            "  btrfs image {} mounted at {}",
            image.display(),
            mount.display()
        );
    }
    println!("  snapshot backend: {}", store.why());
    println!(
        "  use it: set workdir (and snapshots.workspace) to {} in {}/config.toml",
        made.path.display(),
        home.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `aido config show`: the effective config and where each value came from.
fn config_show(cli: &Cli, home: &Path, json: bool) -> Result<ExitCode> {
    let layered = layered(cli, home)?;
    if json {
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

/// `aido policy check ACTION`: the verdict the policy gives an action (exit 0 allow, 1 deny,
/// 3 confirm).
fn policy_check(cli: &Cli, home: &Path, action: &str) -> Result<ExitCode> {
    let layered = layered(cli, home)?;
    let value: serde_json::Value =
        serde_json::from_str(action).context("the action is not JSON")?;
    let action: Action =
        serde_json::from_value(value).map_err(|e| anyhow::anyhow!("[invalid_arguments] {e}"))?;
    action
        .check_bounds()
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let engine = PolicyEngine::new(&layered.config, &environment(home), &FsResolver)?;
    let ctx = SessionContext::new(engine.workdir().to_owned());
    let verdict = engine.evaluate(&action, &ctx, &FsResolver);
    println!("{}", serde_json::to_string_pretty(&verdict)?);
    Ok(match verdict {
        Verdict::Allow => ExitCode::SUCCESS,
        Verdict::Deny { .. } => ExitCode::from(1),
        Verdict::Confirm { .. } => ExitCode::from(3),
    })
}

/// `aido vm ...`: look at and drive the machines of a running aido, and build guest images.
fn vm_command(home: &Path, cmd: &VmCmd) -> Result<ExitCode> {
    match cmd {
        VmCmd::List => vm_client::list(home),
        VmCmd::Shot { vm, output } => vm_client::shot(home, vm, output),
        VmCmd::Live => vm_client::live(home),
        VmCmd::Type { vm, text } => {
            vm_client::call(home, "vm_type", json!({"vm": vm, "text": text}))
        }
        VmCmd::Key { vm, keys } => vm_client::call(home, "vm_key", json!({"vm": vm, "keys": keys})),
        VmCmd::Click { vm, x, y } => {
            vm_client::call(home, "vm_click", json!({"vm": vm, "x": x, "y": y}))
        }
        VmCmd::ClickText { vm, text } => {
            vm_client::call(home, "vm_click_text", json!({"vm": vm, "text": text}))
        }
        VmCmd::WaitText {
            vm,
            text,
            timeout_ms,
        } => vm_client::call(
            home,
            "vm_wait_for_text",
            json!({"vm": vm, "text": text, "timeout_ms": timeout_ms}),
        ),
        VmCmd::Snapshot { vm, op, name } => {
            let primitive = match op.as_str() {
                "create" => "vm_snapshot_create",
                "restore" => "vm_snapshot_restore",
                "delete" => "vm_snapshot_delete",
                "list" => "vm_snapshot_list",
                other => bail!("snapshot takes create, restore, list or delete, not {other:?}"),
            };
            let mut args = json!({"vm": vm});
            if op != "list" {
                args["name"] = json!(name.clone().context("a snapshot name is needed")?);
            }
            vm_client::call(home, primitive, args)
        }
        VmCmd::Pool { op } => {
            if op != "status" {
                bail!("pool takes status");
            }
            vm_client::call(home, "vm_pool_status", json!({}))
        }
        VmCmd::Image(VmImageCmd::Build { force, framebuffer }) => {
            let out = home
                .join("vm")
                .join("images")
                .join(if *framebuffer { "fb" } else { "text" });
            if out.join("manifest.json").exists() && !force {
                println!(
                    "guest image already at {} (use --force to rebuild)",
                    out.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            std::fs::create_dir_all(&out)?;
            let script = tempfile::NamedTempFile::new()?;
            std::fs::write(script.path(), BUILD_IMAGE_SCRIPT)?;
            eprintln!(
                "building the guest image into {} (Debian kernel + busybox)",
                out.display()
            );
            let mut build = std::process::Command::new("bash");
            build.arg(script.path()).arg(&out);
            if *framebuffer {
                build.arg("--framebuffer");
            }
            let status = build.status()?;
            if !status.success() {
                bail!("[vm_image_build_failed] build-image exited with {status}");
            }
            let manifest = std::fs::read_to_string(out.join("manifest.json"))?;
            println!(
                "guest image ready at {}: {}",
                out.display(),
                manifest.trim()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[allow(clippy::too_many_lines)]
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
    // Before the runtime stores anything, so all it stores is pinned while retention runs.
    retention::at_start(home, &layered.config.retention, &journal, "aido mcp");
    expect_commands(&layered.config);
    // The audit files: every record as one line of AIDO_HOME/audit/DAY.jsonl.
    let audit = aido_serve::Feed::start(
        journal.clone(),
        Some(aido_serve::feed::audit_dir(home)),
        aido_serve::feed::RingLimits::NONE,
    )
    .context("following the journal for the audit files")?;
    let telemetry_config = layered.config.telemetry.clone();
    let runtime = Runtime::start(RuntimeOptions {
        config: layered.config,
        env: environment(home),
        journal: journal.clone(),
        clock: Arc::new(SystemClock::default()),
    })
    .await
    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let metrics_listen = telemetry_config.metrics_listen.clone();
    let telemetry = telemetry::start(
        &telemetry_config,
        !metrics_listen.is_empty(),
        home,
        &journal,
        &runtime,
    );
    drop(journal);
    // A stdio runtime has no listener: `[telemetry] metrics_listen` gives its /metrics one.
    let metrics_server = match (
        metrics_listen.is_empty(),
        telemetry.as_ref().and_then(|t| t.metrics()),
    ) {
        (true, _) => None,
        (false, None) => {
            anyhow::bail!(
                "[telemetry_unavailable] telemetry.metrics_listen is set but this aido has no \
                 metrics (built without the telemetry feature, or telemetry.prometheus = false)"
            );
        }
        (false, Some(metrics)) => Some(serve_metrics(&metrics_listen, metrics).await?),
    };
    // Seeded fault injection for the simulation test (tests/simulation.rs): slow and
    // panicking bodies. It can make aido slower or fail calls, never skip a check.
    if let Some(plan) = std::env::var_os("AIDO_FAULTS") {
        let plan = aido_actors::FaultPlan::parse(&plan.to_string_lossy())
            .map_err(|e| anyhow::anyhow!("AIDO_FAULTS: {e}"))?;
        tracing::warn!(?plan, "AIDO_FAULTS: injecting seeded faults");
        runtime.faults().follow(plan);
    }
    // AIDO_GRANT: the session runs under that capability grant. A token that is not valid
    // starts nothing (it is never taken from the command line, where `ps` would show it).
    let grant = match std::env::var("AIDO_GRANT") {
        Ok(token) => {
            let id = runtime
                .grant_of(&token)
                .await
                .map_err(|e| anyhow::anyhow!("AIDO_GRANT: [{}] {e}", e.code()))?;
            tracing::info!(grant = %id, "the session runs under a capability grant");
            Some(token)
        }
        Err(_) => None,
    };
    let runtime = Arc::new(runtime);
    if let Some(running) = &telemetry {
        telemetry::watch_vm_pool(running, &runtime);
    }
    #[cfg(feature = "prim-vm")]
    let control = if runtime.policy().config().vm.enabled && runtime.policy().config().vm.live_view
    {
        match control::start(runtime.clone(), home).await {
            Ok(file) => Some(file),
            Err(e) => {
                tracing::warn!(error = %e, "no live view");
                None
            }
        }
    } else {
        None
    };
    #[cfg(not(feature = "prim-vm"))]
    let control: Option<PathBuf> = None;
    let served = aido_mcp::serve_stdio(runtime.clone(), grant)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"));
    if let Some(file) = control {
        let _ = std::fs::remove_file(file);
    }
    if let Some(server) = metrics_server {
        server.abort();
    }
    served?;
    audit.stop();
    drop(audit);
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await;
    }
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    Ok(())
}

/// `GET /metrics` on a loopback listener for `aido mcp`. Requests must name the listener as
/// their Host (127.0.0.1, [::1] or localhost with its port), so a web page cannot read it
/// through a rebound DNS name.
async fn serve_metrics(
    listen: &str,
    metrics: aido_serve::Metrics,
) -> Result<tokio::task::JoinHandle<()>> {
    use axum::http::{StatusCode, header};
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| {
            format!("[telemetry_listen_failed] binding telemetry.metrics_listen {listen}")
        })?;
    let port = listener.local_addr()?.port();
    let hosts: Vec<String> = ["127.0.0.1", "[::1]", "localhost"]
        .iter()
        .map(|h| format!("{h}:{port}"))
        .collect();
    tracing::info!(%listen, "serving /metrics");
    eprintln!("aido mcp: metrics at http://{listen}/metrics");
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let metrics = metrics.clone();
            let hosts = hosts.clone();
            async move {
                let host = headers
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or_default();
                if !hosts.iter().any(|h| h == host) {
                    return (
                        StatusCode::FORBIDDEN,
                        [(header::CONTENT_TYPE, "text/plain")],
                        format!("serve_host_refused: Host {host:?} is not this listener\n"),
                    );
                }
                (
                    StatusCode::OK,
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    (metrics.0)(),
                )
            }
        }),
    );
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the /metrics listener stopped");
        }
    }))
}

fn readers(home: &Path) -> Result<Vec<Journal>> {
    let journals = aido_journal::dir::open_readers(&home.join("journal"))
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    Ok(journals)
}

fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .with_context(|| format!("{text:?} is not a size like 2G or 512M"))?;
    let mult = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        other => bail!("unknown size unit {other:?} (use K, M, G or T)"),
    };
    Ok(n * mult)
}

/// What `aido hook claude-code` asks of aido: the policy that `aido policy check` uses, and
/// the file tools' writes kept and journaled in a session of their own (as `aido exec` does
/// for a command).
struct HookHost<'a> {
    cli: &'a Cli,
    home: &'a Path,
}

impl init::Host for HookHost<'_> {
    fn judge(&self, action: &Action) -> Result<Verdict> {
        let layered = layered(self.cli, self.home)?;
        let engine = PolicyEngine::new(&layered.config, &environment(self.home), &FsResolver)?;
        let ctx = SessionContext::new(engine.workdir().to_owned());
        Ok(engine.evaluate(action, &ctx, &FsResolver))
    }

    fn keep(&self, tool_use_id: &str, path: &Path) -> Result<()> {
        adopt::keep(self.home, tool_use_id, path).map(|_| ())
    }

    fn journal(&self, tool_use_id: &str) -> Result<Option<String>> {
        let Some(before) = adopt::take(self.home, tool_use_id)? else {
            return Ok(None);
        };
        let Some((after, mtime_ns)) = adopt::after(&before.path)? else {
            return Ok(None);
        };
        let unchanged = before.file.as_ref().is_some_and(|kept| {
            base64::engine::general_purpose::STANDARD
                .decode(&kept.contents)
                .is_ok_and(|bytes| bytes == after)
        });
        if unchanged {
            return Ok(None);
        }
        adopt::put_back(&before)?;
        let action = adopt::write_action(&before.path, &after, mtime_ns)?;
        let layered = layered(self.cli, self.home)?;
        let home = self.home;
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(async move {
            let aido = open_runtime(layered, home).await?;
            let session = aido
                .open_session(Some("claude-code hook".into()))
                .await
                .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
            let result = session.run(action, aido_actors::Hooks::default()).await;
            session.close("claude-code hook finished").await;
            aido.shutdown().await;
            Ok(match result {
                Ok(_) => None,
                Err(e) => Some(format!(
                    "aido refused it [{}]: {}",
                    e.failure.code, e.failure.message
                )),
            })
        })
    }
}

/// Prints what rewinding `session` to `target` undoes, before it is done.
fn show_rewind(
    journals: &[Journal],
    session: &str,
    target: &aido_actions::snapshot::Rewind,
) -> Result<()> {
    let (actions, changed) = undo::preview(journals, session, target)
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    println!(
        "will undo {actions} action(s) of session {}; {} of them changed something (newest first):",
        &session[..8.min(session.len())],
        changed.len()
    );
    for one in &changed {
        println!("  {}", one.line);
    }
    Ok(())
}

/// Asks the person at the terminal; without a terminal, says to pass `--yes` and declines.
fn confirmed(question: &str) -> Result<bool> {
    if !std::io::stdin().is_terminal() {
        eprintln!("aido: not a terminal: pass --yes to go ahead");
        return Ok(false);
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes");
    if !yes {
        println!("nothing undone");
    }
    Ok(yes)
}

async fn rewind(
    layered: Layered,
    home: &Path,
    session: &str,
    target: aido_actions::snapshot::Rewind,
) -> Result<ExitCode> {
    let dir = home.join("journal");
    let path = {
        let journals = readers(home)?;
        let (journal, _) = aido_journal::dir::find(&journals, session)
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        journal.path().to_owned()
    };
    let _ = dir;
    let limits = &layered.config.limits;
    let journal_limits = aido_journal::Limits {
        record_bytes_max: limits.record_bytes_max,
        blob_bytes_max: limits.blob_bytes_max,
        records_per_session_max: limits.records_per_session_max,
    };
    let journal = Journal::open(&path, journal_limits, CommitMode::Group).map_err(|e| match e.code() {
        "journal_locked" => anyhow::anyhow!(
            "[journal_locked] the session's journal ({}) is held by a running aido; stop it, or ask the agent to call rewind",
            path.display()
        ),
        code => anyhow::anyhow!("[{code}] {e}"),
    })?;
    let id = journal
        .find_session(session)
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let runtime = Runtime::start(RuntimeOptions {
        config: layered.config,
        env: environment(home),
        journal,
        clock: Arc::new(SystemClock::default()),
    })
    .await
    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let who = format!(
        "aido replay rewind (user {})",
        std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| {
                use std::os::unix::fs::MetadataExt as _;
                std::fs::metadata("/proc/self")
                    .map_or_else(|_| "?".into(), |m| format!("uid {}", m.uid()))
            })
    );
    let resumed = runtime
        .resume_session(id, who)
        .await
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let action = Action::Rewind(target);
    let result = resumed.run(action, aido_actors::Hooks::default()).await;
    resumed.close("rewind finished").await;
    runtime.shutdown().await;
    match result {
        Ok(ran) => {
            println!("{}", ran.outcome.text);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("aido: [{}] {}", e.failure.code, e.failure.message);
            Ok(ExitCode::from(1))
        }
    }
}

/// `verify --tree`: the session's touched paths against the disk, and the write roots (or
/// `roots`) walked for changes since it began that its journal does not account for.
fn tree_report(
    journals: &[aido_journal::Journal],
    (journal, session): (&aido_journal::Journal, aido_journal::SessionId),
    records: &[aido_journal::Record],
    roots: &[PathBuf],
    home: &Path,
) -> Result<aido_replay::tree::TreeReport> {
    let expected = aido_replay::tree::expected(journal, records)
        .map_err(|why| anyhow::anyhow!("reading the session's change sets: {why}"))?;
    let since_ms = records
        .iter()
        .find(|r| matches!(r.event, aido_journal::Event::SessionStarted { .. }))
        .map(|r| r.time_ms)
        .unwrap_or(0);
    // What the other sessions did since this one began is in the journal too.
    let mut others = std::collections::BTreeSet::new();
    for other in journals {
        for summary in other
            .sessions()
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?
        {
            if summary.id == session {
                continue;
            }
            let all = other
                .all_records(summary.id)
                .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
            // A rewind since then gave back paths its session touched earlier: all of them.
            let rewound = all
                .iter()
                .any(|r| r.time_ms >= since_ms && r.event.rewound_cut().is_some());
            let since: Vec<aido_journal::Record> = all
                .into_iter()
                .filter(|r| rewound || r.time_ms >= since_ms)
                .collect();
            if since.iter().all(|r| r.time_ms < since_ms) {
                continue;
            }
            let touched = aido_replay::tree::expected(other, &since)
                .map_err(|why| anyhow::anyhow!("reading session {}: {why}", summary.id))?;
            others.extend(touched.into_keys());
        }
    }
    let roots = if roots.is_empty() {
        let mut texts = Vec::new();
        let file = home.join("config.toml");
        if file.exists() {
            texts.push((
                Source::File(file.display().to_string()),
                std::fs::read_to_string(&file)?,
            ));
        }
        let layers: Vec<(Source, &str)> =
            texts.iter().map(|(s, t)| (s.clone(), t.as_str())).collect();
        let layered =
            Layered::from_layers(&layers).map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        let engine = PolicyEngine::new(&layered.config, &environment(home), &FsResolver)?;
        engine.write_roots().to_vec()
    } else {
        roots.to_vec()
    };
    let trash = aido_actors::fs::actor::home_trash(&aido_actors::runtime::default_home());
    let skip = [
        home.canonicalize().unwrap_or_else(|_| home.to_owned()),
        home.to_owned(),
        trash,
    ];
    Ok(aido_replay::tree::check(
        &expected, &others, &roots, &skip, since_ms,
    ))
}

#[allow(clippy::too_many_lines)]
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
        Replay::Verify {
            session,
            json,
            tree,
            roots,
        } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let report = journal.verify(id).map_err(coded)?;
            if report.broken.is_some() {
                if *json {
                    println!("{}", serde_json::json!({"chain": report}));
                } else {
                    println!("{}", aido_replay::verify_text(&id.to_string(), &report));
                }
                return Ok(ExitCode::from(1));
            }
            let records = journal.all_records(id).map_err(coded)?;
            let scratch = tempfile::tempdir()?;
            let derived = aido_replay::derive::derive(journal, &records, scratch.path())?;
            let tree = if *tree {
                Some(tree_report(
                    &journals,
                    (journal, id),
                    &records,
                    roots,
                    home,
                )?)
            } else {
                None
            };
            let intact = derived.intact() && tree.as_ref().is_none_or(|t| t.intact());
            if *json {
                println!(
                    "{}",
                    serde_json::json!({"chain": report, "derive": derived, "tree": tree})
                );
            } else {
                println!("{}", aido_replay::verify_text(&id.to_string(), &report));
                println!(
                    "re-derived {} change(s) into a scratch dir: {}",
                    derived.steps,
                    if derived.intact() {
                        "every blob and file hash checks out"
                    } else {
                        "DAMAGE FOUND"
                    }
                );
                for f in &derived.findings {
                    println!("  seq {} {} [{}]: {}", f.seq, f.path, f.kind, f.detail);
                }
                if let Some(tree) = &tree {
                    println!(
                        "held the journal's tree against the workspace: {} path(s) the session touched, {} entr{} walked{}: {}",
                        tree.checked,
                        tree.walked,
                        if tree.walked == 1 { "y" } else { "ies" },
                        if tree.truncated {
                            " (stopped at the walk's bound)"
                        } else {
                            ""
                        },
                        if tree.intact() {
                            "the journal accounts for every change"
                        } else {
                            "NOT ACCOUNTED FOR"
                        }
                    );
                    for f in &tree.findings {
                        println!("  {} [{}]: {}", f.path, f.kind, f.detail);
                    }
                }
            }
            Ok(if intact {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Replay::Playback { session, json } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let records = journal.all_records(id).map_err(coded)?;
            let played = aido_replay::playback::playback(journal, &records);
            if *json {
                println!("{}", serde_json::to_string_pretty(&played)?);
                return Ok(if played.mismatches.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                });
            }
            let external: u64 = played.external.values().map(|e| e.count).sum();
            println!(
                "reproduced {} result(s) byte for byte; {} not reproducible; {} external; {} mismatch(es)",
                played.reproduced,
                played.not_reproducible.len(),
                external,
                played.mismatches.len()
            );
            for (primitive, e) in &played.external {
                println!("  external: {} {primitive}: {}", e.count, e.reason);
            }
            for u in &played.not_reproducible {
                println!(
                    "  not reproducible: seq {} {}: {}",
                    u.seq, u.primitive, u.reason
                );
            }
            for m in &played.mismatches {
                println!(
                    "  seq {} {}: recorded {} but reproduced {}",
                    m.seq, m.primitive, m.recorded, m.reproduced
                );
            }
            Ok(if played.mismatches.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Replay::WhatIf {
            session,
            policy,
            json,
        } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let records = journal.all_records(id).map_err(coded)?;
            let text = std::fs::read_to_string(policy)
                .with_context(|| format!("reading {}", policy.display()))?;
            let other =
                Layered::from_layers(&[(Source::File(policy.display().to_string()), &text)])
                    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
            let engine = PolicyEngine::new(&other.config, &environment(home), &FsResolver)?;
            let cwd = records
                .iter()
                .find_map(|r| match &r.event {
                    aido_journal::Event::SessionStarted { cwd, .. } => Some(PathBuf::from(cwd)),
                    _ => None,
                })
                .unwrap_or_else(|| engine.workdir().to_owned());
            let changed =
                aido_replay::whatif::what_if(&records, &engine, &cwd, &journal.blob_store());
            if *json {
                println!("{}", serde_json::to_string(&changed)?);
            } else {
                let proposals = records
                    .iter()
                    .filter(|r| matches!(r.event, aido_journal::Event::ActionProposed { .. }))
                    .count();
                println!(
                    "{} of {proposals} action(s) would be judged differently under {}:",
                    changed.len(),
                    policy.display()
                );
                for c in &changed {
                    let said = match &c.other {
                        Verdict::Deny {
                            gate, code, reason, ..
                        } => format!("DENY {code} by {gate}: {reason}"),
                        Verdict::Confirm { gate, reason, .. } => {
                            format!("CONFIRM by {gate}: {reason}")
                        }
                        Verdict::Allow => "allow".into(),
                    };
                    println!(
                        "  seq {:>5} {:<18} recorded {:<8} -> {said}",
                        c.seq,
                        c.primitive,
                        c.recorded.name()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Replay::Diff {
            session,
            from,
            to,
            json,
        } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let records = journal.all_records(id).map_err(coded)?;
            let scratch = tempfile::tempdir()?;
            let derived = aido_replay::derive::derive(journal, &records, scratch.path())?;
            let changes = aido_replay::derive::diff(journal, &derived, *from, *to);
            if *json {
                println!("{}", serde_json::to_string(&changes)?);
            } else {
                for c in &changes {
                    println!("{} {}", c.kind, c.path);
                    match &c.diff {
                        Some(d) => print!("{d}"),
                        None => println!("  (binary)"),
                    }
                }
                if changes.is_empty() {
                    println!("no file changes between seq {from} and seq {to}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Replay::Rewind { .. } => bail!("rewind is handled above"),
        Replay::Export { session, .. } => {
            let (journal, id) = aido_journal::dir::find(&journals, session).map_err(coded)?;
            let records = journal.all_records(id).map_err(coded)?;
            let stdout = std::io::stdout();
            aido_replay::export_jsonl(&records, &mut stdout.lock())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
