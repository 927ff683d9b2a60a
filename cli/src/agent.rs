//! `aido agent "GOAL"`: aido-agent's loop on a session of an in-process runtime, streamed to
//! the terminal as plain lines.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use aido_agent::{AgentError, Budget, Called, Event, Options};
use aido_policy::Layered;
use anyhow::Result;

/// The most of a call's arguments or result shown on one line, in chars.
const SHOWN_CHARS_MAX: usize = 160;
/// The exit code of a run stopped by SIGINT or SIGTERM.
const EXIT_INTERRUPTED: u8 = 130;

/// What `aido agent` was asked.
pub struct AgentArgs {
    pub goal: String,
    pub toolsets: Vec<String>,
    pub read_only: bool,
    pub steps: u32,
    pub tokens: u64,
    pub model: Option<String>,
}

/// Check the input, then run the loop; a coded error on stderr and its exit code when it
/// stops without an answer.
pub fn agent(layered: Layered, home: &Path, args: AgentArgs) -> Result<ExitCode> {
    let options = match options(&layered, args) {
        Ok(options) => options,
        Err(e) => return Ok(stopped(&e)),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let code = runtime.block_on(run(layered, home, options));
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

fn options(layered: &Layered, args: AgentArgs) -> Result<Options, AgentError> {
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
    aido_agent::check_llm(&config.llm, args.model.as_deref())?;
    Ok(Options {
        goal: args.goal,
        tools,
        budget: Budget::new(args.steps, args.tokens)?,
        model: args.model,
        reply_tokens_max: config.llm.max_tokens_default,
        argument_bytes_max: config.limits.argument_bytes_max,
    })
}

async fn run(layered: Layered, home: &Path, options: Options) -> Result<ExitCode> {
    if options.tools.contains(&"run_command") {
        crate::expect_commands(&layered.config);
    }
    let runtime = crate::open_runtime(layered, home).await?;
    let session = runtime
        .open_session(Some("aido agent".into()))
        .await
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let mut terminal = Terminal::new();
    terminal.session(&session.id().to_string(), &options);
    let hooks = aido_actors::Hooks::default();
    let ran = {
        let mut on = |event: Event<'_>| terminal.event(&event);
        let looped = aido_agent::run(&session, &options, &hooks, &mut on);
        tokio::select! {
            ran = looped => Some(ran),
            () = interrupted() => None,
        }
    };
    let (code, reason) = match ran {
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
    };
    session.close(&reason).await;
    runtime.shutdown().await;
    crate::exit_committed(code)
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
    fn new() -> Self {
        Self {
            colour: std::io::stdout().is_terminal() && aido_watch::colour_wanted(),
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

    fn session(&self, id: &str, options: &Options) {
        let short: String = id.chars().take(8).collect();
        self.print(&format!(
            "session {id} ({} tools, at most {} steps and {} tokens)",
            options.tools.len(),
            options.budget.steps_max(),
            options.budget.tokens_max()
        ));
        self.print(&self.paint(
            DIM,
            &format!("  follow it: aido watch --session {short} · read it: aido replay show {id}"),
        ));
    }

    fn step(&self, step: u32, tag: &str, sgr: &str, text: &str) {
        let tag = self.paint(sgr, &format!("{tag:<7}"));
        self.print(&format!("step {step:>3} {tag} {text}"));
    }

    fn event(&mut self, event: &Event<'_>) {
        match event {
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
