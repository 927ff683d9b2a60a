//! `aido agent "GOAL"`: aido-agent's loop on a session of an in-process runtime (or, with
//! `--serve`, of a running `aido serve`, through `/actions`), streamed to the terminal as
//! plain lines.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use aido_actions::Action;
use aido_agent::runner::{Answer, Boxed, Done, Refusal, Runner};
use aido_agent::{AgentError, Budget, Called, Event, InProcess, Options};
use aido_policy::Layered;
use anyhow::Result;
use serde_json::{Value, json};

/// The most of a call's arguments or result shown on one line, in chars.
const SHOWN_CHARS_MAX: usize = 160;
/// The exit code of a run stopped by SIGINT or SIGTERM.
const EXIT_INTERRUPTED: u8 = 130;

/// The longest one action may take through `aido serve`'s `/actions` (a model call, a long
/// command), in seconds.
const SERVE_CALL_TIMEOUT_SECS: u64 = 1_800;
/// The largest answer read from `/actions`, in bytes.
const SERVE_ANSWER_BYTES_MAX: u64 = 64 << 20;

/// What `aido agent` was asked.
pub struct AgentArgs {
    pub goal: String,
    pub toolsets: Vec<String>,
    pub read_only: bool,
    pub steps: u32,
    pub tokens: u64,
    pub model: Option<String>,
    /// Run in this `aido serve` instead of in this process.
    pub serve: Option<aido_watch::Endpoint>,
}

/// Check the input, then run the loop; a coded error on stderr and its exit code when it
/// stops without an answer.
pub fn agent(layered: Layered, home: &Path, mut args: AgentArgs) -> Result<ExitCode> {
    let serve = args.serve.take();
    let options = match options(&layered, args, serve.is_none()) {
        Ok(options) => options,
        Err(e) => return Ok(stopped(&e)),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let code = match serve {
        None => runtime.block_on(run(layered, home, options)),
        Some(endpoint) => match Served::new(&endpoint) {
            Ok(served) => Ok(runtime.block_on(run_served(served, options))),
            Err(e) => Ok(stopped(&e)),
        },
    };
    runtime.shutdown_timeout(Duration::from_millis(500));
    code
}

fn options(layered: &Layered, args: AgentArgs, local_llm: bool) -> Result<Options, AgentError> {
    let config = &layered.config;
    let tools = aido_policy::config::McpTools {
        toolsets: args.toolsets,
        tools: Vec::new(),
        read_only: args.read_only,
    }
    .primitives()
    .map_err(|e| AgentError::ToolsetUnknown {
        reason: match e {
            aido_policy::ConfigError::Value { reason, .. } => format!("--toolset: {reason}"),
            other => other.to_string(),
        },
    })?;
    aido_agent::check_goal(&args.goal)?;
    // Through `aido serve`, the model is the serve's `[llm]`: it says so itself.
    if local_llm {
        aido_agent::check_llm(&config.llm, args.model.as_deref())?;
    }
    Ok(Options {
        goal: args.goal,
        tools,
        budget: Budget::new(args.steps, args.tokens)?,
        model: args.model,
        reply_tokens_max: config.llm.max_tokens_default,
        argument_bytes_max: config.limits.argument_bytes_max,
        cwd: PathBuf::from(&config.workdir),
    })
}

async fn run(layered: Layered, home: &Path, mut options: Options) -> Result<ExitCode> {
    if options.tools.contains(&"run_command") {
        crate::expect_commands(&layered.config);
    }
    let runtime = crate::open_runtime(layered, home).await?;
    let session = runtime
        .open_session(Some("aido agent".into()))
        .await
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    options.cwd = session.cwd();
    let runner = InProcess {
        session: session.clone(),
        hooks: aido_actors::Hooks::default(),
    };
    let (code, reason) = looped(&runner, &options).await;
    session.close(&reason).await;
    runtime.shutdown().await;
    crate::exit_committed(code)
}

/// The loop through `aido serve`: its session is one of the serve's `/actions` sessions, which
/// stays open there (the serve ends it when it stops).
async fn run_served(served: Served, options: Options) -> ExitCode {
    let (code, _) = looped(&served, &options).await;
    ExitCode::from(code)
}

/// Run the loop, streamed; its exit code and the reason the session ends with.
async fn looped(runner: &dyn Runner, options: &Options) -> (u8, String) {
    let mut terminal = Terminal::new(options);
    let ran = {
        let mut on = |event: Event<'_>| terminal.event(&event);
        let looped = aido_agent::run(runner, options, &mut on);
        tokio::select! {
            ran = looped => Some(ran),
            () = interrupted() => None,
        }
    };
    match ran {
        Some(Ok(finished)) => {
            terminal.finished(&finished);
            (0, "aido agent: the model answered".to_owned())
        }
        Some(Err(e)) => {
            let code = stopped_code(&e);
            (code, format!("aido agent: [{}]", e.code()))
        }
        None => {
            eprintln!("aido: interrupted; the session ends here");
            (EXIT_INTERRUPTED, "aido agent: interrupted".to_owned())
        }
    }
}

/// A session of a running `aido serve`, reached through `/actions` with the operator's token:
/// the serve's runtime judges, journals and runs each action, so `aido watch` and Mission
/// Control follow the session live. A call that never became an action (outside the toolset)
/// is refused here and not journaled: `/actions` journals only what it is sent.
struct Served {
    url: String,
    bearer: String,
    agent: ureq::Agent,
    session: Mutex<Option<String>>,
}

impl Served {
    fn new(endpoint: &aido_watch::Endpoint) -> Result<Self, AgentError> {
        let url = endpoint.url.trim_end_matches('/').to_owned();
        let token =
            std::fs::read_to_string(&endpoint.token_file).map_err(|e| AgentError::ServeFailed {
                url: url.clone(),
                why: format!(
                    "its token file {}: {e} (aido serve writes it; pass --token-file)",
                    endpoint.token_file.display()
                ),
            })?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(SERVE_CALL_TIMEOUT_SECS)))
            .build()
            .into();
        Ok(Self {
            url,
            bearer: format!("Bearer {}", token.trim()),
            agent,
            session: Mutex::new(None),
        })
    }

    /// POST one action; the answer's JSON.
    fn post(&self, body: &Value) -> Result<Value, AgentError> {
        let url = format!("{}/actions", self.url);
        let failed = |why: String| AgentError::ServeFailed {
            url: url.clone(),
            why,
        };
        let mut response = self
            .agent
            .post(&url)
            .header("Authorization", &self.bearer)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| failed(format!("did not answer: {e} (is aido serve running?)")))?;
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(SERVE_ANSWER_BYTES_MAX)
            .read_to_vec()
            .map_err(|e| failed(e.to_string()))?;
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|e| failed(format!("HTTP {status}, not JSON: {e}")))?;
        if status >= 400 {
            let code = answer["code"].as_str().unwrap_or("unknown");
            let message = answer["message"].as_str().unwrap_or_default();
            return Err(failed(format!("HTTP {status} [{code}] {message}")));
        }
        Ok(answer)
    }
}

impl Runner for Served {
    fn session(&self) -> Option<String> {
        self.session.lock().ok().and_then(|s| s.clone())
    }

    fn run<'a>(&'a self, _: Action, tool: &'a str, arguments: &'a Value) -> Boxed<'a, Answer> {
        Box::pin(async move {
            let mut body = json!({"primitive": tool, "arguments": arguments});
            if let Some(id) = self.session() {
                body["session"] = json!(id);
            }
            // ureq blocks: off the runtime's threads.
            let answer = tokio::task::block_in_place(|| self.post(&body))?;
            if let (Some(id), Ok(mut session)) = (answer["session"].as_str(), self.session.lock()) {
                *session = Some(id.to_owned());
            }
            let seq = answer["seq"].as_u64();
            if answer["ok"] == true {
                return Ok(Ok(Done {
                    seq: seq.unwrap_or(0),
                    text: answer["text"].as_str().unwrap_or_default().to_owned(),
                    output: answer["output"].clone(),
                }));
            }
            Ok(Err(Refusal {
                seq,
                code: answer["code"].as_str().unwrap_or("unknown").to_owned(),
                message: answer["message"].as_str().unwrap_or_default().to_owned(),
                gate: answer["gate"].as_str().map(str::to_owned),
                details: answer.get("details").cloned(),
            }))
        })
    }

    fn reject<'a>(&'a self, _: &'a str, _: &'a str, _: &'a str) -> Boxed<'a, Option<u64>> {
        Box::pin(async { None })
    }
}

/// SIGINT or SIGTERM.
async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Say why the loop stopped; its exit code.
fn stopped(e: &AgentError) -> ExitCode {
    ExitCode::from(stopped_code(e))
}

fn stopped_code(e: &AgentError) -> u8 {
    eprintln!("aido: [{}] {e}", e.code());
    e.exit_code()
}

/// Plain lines on stdout, coloured only on a terminal and when `NO_COLOR` is not set.
struct Terminal {
    colour: bool,
    /// Said with the session's line.
    tools: usize,
    steps: u32,
    tokens: u64,
}

/// ANSI SGR parameters.
const DIM: &str = "2";
const CYAN: &str = "36";
const BLUE: &str = "34";
const GREEN: &str = "32";
const RED: &str = "31";
const YELLOW: &str = "33";
const BOLD: &str = "1";

impl Terminal {
    fn new(options: &Options) -> Self {
        Self {
            colour: std::io::stdout().is_terminal() && aido_watch::colour_wanted(),
            tools: options.tools.len(),
            steps: options.budget.steps_max(),
            tokens: options.budget.tokens_max(),
        }
    }

    fn paint(&self, sgr: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn print(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    fn session(&self, id: &str) {
        let short: String = id.chars().take(8).collect();
        self.print(&format!(
            "session {id} ({} tools, at most {} steps and {} tokens)",
            self.tools, self.steps, self.tokens
        ));
        self.print(&self.paint(
            DIM,
            &format!("  follow it: aido watch --session {short} · read it: aido replay show {id}"),
        ));
    }

    fn step(&self, step: u32, tag: &str, sgr: &str, text: &str) {
        let tag = self.paint(sgr, &format!("{tag:<7}"));
        let line = format!("step {step:>3} {tag} {text}");
        self.print(line.trim_end());
    }

    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Session { id } => self.session(id),
            Event::Model {
                step,
                seq,
                tokens,
                spent,
                max,
            } => {
                let estimated = if tokens.estimated { " (estimated)" } else { "" };
                let text = format!(
                    "llm_call seq {seq}: {} tokens{estimated}, {spent} of {max} used",
                    tokens.count
                );
                self.step(*step, "model", DIM, &self.paint(DIM, &text));
            }
            Event::Plan { step, text } => self.step(*step, "plan", CYAN, &one_line(text)),
            Event::Call {
                step,
                tool,
                arguments,
            } => {
                let text = format!("{tool} {}", shown(&arguments.to_string()));
                self.step(*step, "call", BLUE, &text);
            }
            Event::Result { step, tool, called } => self.result(*step, tool, called),
            Event::Unparsed { step, reply } => {
                let text = format!(
                    "[agent_reply_unparsed] neither a tool call nor an answer: {}",
                    shown(reply)
                );
                self.step(*step, "reply", YELLOW, &text);
            }
            Event::Answer { step, text } => {
                self.step(*step, "answer", BOLD, "");
                for line in text.lines() {
                    self.print(&format!("  {line}"));
                }
            }
        }
    }

    fn result(&self, step: u32, tool: &str, called: &Called) {
        let seq = called
            .seq()
            .map(|seq| format!("seq {seq}: "))
            .unwrap_or_default();
        match called {
            Called::Ran { text, .. } => {
                let text = format!("{seq}{tool} ran: {}", shown(text));
                self.step(step, "ok", GREEN, &text);
            }
            Called::Refused {
                code,
                gate: Some(gate),
                message,
                ..
            } => {
                let text = format!("{seq}{tool} denied by {gate} [{code}] {}", shown(message));
                self.step(step, "refused", RED, &text);
            }
            Called::Refused { code, message, .. } => {
                let text = format!("{seq}{tool} [{code}] {}", shown(message));
                self.step(step, "failed", YELLOW, &text);
            }
        }
    }

    fn finished(&self, finished: &aido_agent::Finished) {
        let estimated = if finished.estimated {
            " (some estimated)"
        } else {
            ""
        };
        self.print(&self.paint(
            DIM,
            &format!(
                "done in {} steps, {} tokens{estimated}",
                finished.steps, finished.tokens
            ),
        ));
    }
}

/// `text` on one line, whole.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` on one line, cut to [`SHOWN_CHARS_MAX`].
fn shown(text: &str) -> String {
    let line = one_line(text);
    let count = line.chars().count();
    if count <= SHOWN_CHARS_MAX {
        return line;
    }
    let cut: String = line.chars().take(SHOWN_CHARS_MAX).collect();
    format!("{cut}… ({count} chars)")
}
