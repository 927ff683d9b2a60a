//! The comparison harness every section shares: one way to spawn an MCP server over stdio and
//! time its calls ([`Server`]), and one order of lanes per round ([`alternate`]: A B, B A,
//! A B, ...) so drift on a shared machine hits aido and its peer alike.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// How long a server gets to exit after its stdin closes (then SIGTERM, then kill).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);

/// How a section ran: measured, or why not.
pub enum Run<T> {
    /// Not run, and why.
    Skipped(String),
    /// Started and failed, and how.
    Failed(String),
    /// Measured.
    Ran(T),
}

impl<T> From<Result<T>> for Run<T> {
    /// A measurement's result: measured, or failed with the error's whole chain.
    fn from(result: Result<T>) -> Self {
        match result {
            Ok(t) => Self::Ran(t),
            Err(e) => Self::Failed(format!("{e:#}")),
        }
    }
}

/// The order in which round `round` runs `lanes` lanes: forward on even rounds, backward on
/// odd ones (A B, B A, A B, ...), so neither side always goes first.
pub fn alternate(round: usize, lanes: usize) -> Vec<usize> {
    if round.is_multiple_of(2) {
        (0..lanes).collect()
    } else {
        (0..lanes).rev().collect()
    }
}

/// `rounds` rounds of `lanes` lanes in the order [`alternate`] gives, `per_round` calls of a
/// lane in a row; `call(lane, n)` makes a lane's call `n` (counted over all rounds) and gives
/// its time. Each lane's times, in order.
pub async fn rounds(
    rounds: usize,
    lanes: usize,
    per_round: usize,
    mut call: impl AsyncFnMut(usize, usize) -> Result<Duration>,
) -> Result<Vec<Vec<Duration>>> {
    let mut times = vec![Vec::with_capacity(rounds * per_round); lanes];
    for round in 0..rounds {
        for lane in alternate(round, lanes) {
            for k in 0..per_round {
                let took = call(lane, round * per_round + k).await?;
                times[lane].push(took);
            }
        }
    }
    Ok(times)
}

/// Times `rounds` rounds of two lanes, aido's (`ours`) and its peer's (`theirs`), in the order
/// [`alternate`] gives, each call timed whole; the two lanes' times.
pub async fn paired(
    rounds: usize,
    mut ours: impl AsyncFnMut() -> Result<()>,
    mut theirs: impl AsyncFnMut() -> Result<()>,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let times = self::rounds(rounds, 2, 1, async |lane, _| {
        let start = Instant::now();
        if lane == 0 {
            ours().await?;
        } else {
            theirs().await?;
        }
        Ok(start.elapsed())
    })
    .await?;
    let [ours, theirs]: [Vec<Duration>; 2] = times.try_into().unwrap_or_default();
    Ok((ours, theirs))
}

/// The median (the lower middle for an even count, the nearest-rank 50th percentile); zero
/// when empty.
pub fn median(values: &[Duration]) -> Duration {
    percentile(values, 50.0)
}

/// The nearest-rank percentile of unsorted samples; zero when there are none.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// An MCP client session.
pub type Client = RunningService<RoleClient, ()>;

/// One MCP server under test, spoken to over its stdin/stdout (or one HTTP session).
pub struct Server {
    /// Shown in the report.
    pub name: String,
    /// The tool called for a read (it differs between servers).
    pub tool: String,
    /// The server process.
    pub pid: u32,
    client: Client,
    stderr: PathBuf,
}

/// `aido SUB` with `work/home` as its home and `work/aido_home` as its AIDO_HOME (both made
/// here), nothing of this process's environment but `PATH`, killed when dropped.
pub fn aido_command(aido: &Path, work: &Path, sub: &str) -> Result<tokio::process::Command> {
    let home = work.join("home");
    let aido_home = work.join("aido_home");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&aido_home)?;
    let mut command = tokio::process::Command::new(aido);
    command
        .arg(sub)
        .env_clear()
        .env("HOME", &home)
        .env("AIDO_HOME", &aido_home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&home)
        .kill_on_drop(true);
    Ok(command)
}

/// Runs `command` to its end: its output, or an error naming it, its exit status and its
/// stderr.
pub fn exec(command: &mut std::process::Command) -> Result<std::process::Output> {
    let out = command
        .output()
        .with_context(|| format!("running {:?}", command.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} {:?} failed ({}): {}",
            command.get_program(),
            command.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

/// A `/proc/PID/status` field (`VmRSS:`, `VmHWM:`) in bytes.
pub fn status_bytes(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status_kb(&status, field.trim_end_matches(':'));
    Ok(kib.with_context(|| format!("{field} of {pid}"))? * 1024)
}

/// A `Key:   123 kB` value of a /proc/PID/status (or smaps) text, in kB.
pub fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().trim_end_matches("kB").trim().parse().ok())?
    })
}

/// `aido serve` on a loopback port (its URL and bearer token from its first two lines),
/// spoken to over streamable HTTP.
pub struct Http {
    /// The server process.
    pub pid: u32,
    child: tokio::process::Child,
    url: String,
    token: String,
    stderr: PathBuf,
}

impl Http {
    /// Starts `aido serve` in `work` (as [`aido_command`]), its stderr in `work/serve.stderr`.
    pub async fn start(aido: &Path, work: &Path) -> Result<Self> {
        let stderr = work.join("serve.stderr");
        let mut command = aido_command(aido, work, "serve")?;
        command
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&stderr)?));
        let mut child = command.spawn().context("spawning aido serve")?;
        let pid = child.id().context("aido serve's pid")?;
        let stdout = child.stdout.take().context("aido serve's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut said = async |prefix: &str| -> Result<String> {
            let line = lines.next_line().await?.unwrap_or_default();
            let rest = line.strip_prefix(prefix);
            let rest = rest.with_context(|| format!("aido serve said {line:?}{}", tail(&stderr)));
            Ok(rest?.trim().to_owned())
        };
        let url = said("aido serve: MCP at ").await?;
        let token_file = said("aido serve: bearer token in ").await?;
        let token = std::fs::read_to_string(&token_file)?.trim().to_owned();
        Ok(Self {
            pid,
            child,
            url,
            token,
            stderr,
        })
    }

    /// A new initialized MCP session, its connections made from `from` when given (another
    /// loopback address: the server caps connections per peer address).
    pub async fn session(&self, from: Option<std::net::IpAddr>) -> Result<Client> {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .auth_header(self.token.clone());
        let mut http = reqwest::Client::builder();
        if let Some(from) = from {
            http = http.local_address(from);
        }
        let http = http.build().context("an HTTP client")?;
        let transport = StreamableHttpClientTransport::with_client(http, config);
        ().serve(transport)
            .await
            .with_context(|| format!("the MCP handshake over HTTP{}", tail(&self.stderr)))
    }

    /// One session as a [`Server`] whose read tool is `tool`.
    pub async fn server(&self, tool: &str) -> Result<Server> {
        Ok(Server {
            name: "aido serve".into(),
            tool: tool.into(),
            pid: self.pid,
            client: self.session(None).await?,
            stderr: self.stderr.clone(),
        })
    }

    /// SIGTERM through the CLI's own signal path (a bounded drain), then reaps it.
    pub async fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT, self.child.wait()).await;
    }
}

impl Server {
    /// Spawns `command`, runs the MCP handshake, and picks the first of `tools` the server lists.
    /// The child's stderr goes to `stderr`, shown if anything fails.
    pub async fn start(
        name: &str,
        mut command: tokio::process::Command,
        stderr: PathBuf,
        tools: &[&str],
    ) -> Result<Self> {
        let log = std::fs::File::create(&stderr)
            .with_context(|| format!("creating {}", stderr.display()))?;
        command.kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        let pid = transport.id().with_context(|| format!("{name}'s pid"))?;
        let client = ()
            .serve(transport)
            .await
            .with_context(|| format!("MCP handshake with {name}{}", tail(&stderr)))?;
        // No tools named: no tools/list either (the soak's first memory sample follows the
        // handshake alone).
        let tool = if tools.is_empty() {
            ""
        } else {
            let listed = client
                .peer()
                .list_all_tools()
                .await
                .with_context(|| format!("tools/list on {name}{}", tail(&stderr)))?;
            let Some(tool) = tools
                .iter()
                .find(|wanted| listed.iter().any(|t| t.name == **wanted))
            else {
                let names: Vec<_> = listed.iter().map(|t| t.name.to_string()).collect();
                bail!("{name} lists none of {tools:?}; it has {names:?}");
            };
            tool
        };
        Ok(Self {
            name: name.to_owned(),
            tool: (*tool).to_owned(),
            pid,
            client,
            stderr,
        })
    }

    /// `aido mcp` in `work/home` with its journal in `work/aido_home` (made here), nothing of
    /// this process's environment but `PATH`, its stderr in `work/aido.stderr`; the home.
    pub async fn aido(aido: &Path, work: &Path, tools: &[&str]) -> Result<(Self, PathBuf)> {
        Self::aido_with(aido, work, None, tools).await
    }

    /// [`Server::aido`] with `config` (TOML) as its `--config` file, when given.
    pub async fn aido_with(
        aido: &Path,
        work: &Path,
        config: Option<&str>,
        tools: &[&str],
    ) -> Result<(Self, PathBuf)> {
        let mut command = aido_command(aido, work, "mcp")?;
        if let Some(config) = config {
            let file = work.join("config.toml");
            std::fs::write(&file, config)?;
            command.arg("--config").arg(file);
        }
        let server = Self::start("aido", command, work.join("aido.stderr"), tools).await?;
        Ok((server, work.join("home")))
    }

    /// One `tools/call` of the read tool; the text of its first content block.
    pub async fn read(&self, path: &Path) -> Result<String> {
        let result = self
            .call(&self.tool, json!({"path": path.to_string_lossy()}))
            .await?;
        first_text(&result)
            .with_context(|| format!("{} returned no text for {}", self.name, path.display()))
    }

    /// One `tools/call` of `tool` with `arguments` (an object); the whole result. A result
    /// marked as an error is an error.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<CallToolResult> {
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let result = self
            .client
            .peer()
            .call_tool(params)
            .await
            .with_context(|| format!("{} {tool}{}", self.name, tail(&self.stderr)))?;
        if result.is_error == Some(true) {
            let text = first_text(&result).unwrap_or_default();
            let structured = &result.structured_content;
            bail!("{} {tool} failed: {structured:?} {text}", self.name);
        }
        Ok(result)
    }

    /// Closes stdin and waits for the child to exit (SIGTERM, then kill, if it does not).
    pub async fn stop(mut self) -> Result<()> {
        let quit = self
            .client
            .close_with_timeout(SHUTDOWN_TIMEOUT)
            .await
            .with_context(|| format!("stopping {}", self.name))?;
        if quit.is_none() {
            bail!(
                "{} did not stop within {SHUTDOWN_TIMEOUT:?}{}",
                self.name,
                tail(&self.stderr)
            );
        }
        Ok(())
    }
}

/// The last lines of a server's stderr, for error messages.
fn tail(stderr: &Path) -> String {
    let text = std::fs::read_to_string(stderr).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(20);
    if lines.is_empty() {
        String::new()
    } else {
        format!("\n--- its stderr ---\n{}", lines[start..].join("\n"))
    }
}

impl Server {
    /// One `tools/call` of `tool`: its structured content (or its first text block, parsed as
    /// JSON when it is); a result marked as an error is an error.
    pub async fn json(&self, tool: &str, arguments: Value) -> Result<Value> {
        Ok(self.timed(tool, arguments).await?.0)
    }

    /// [`Server::json`] and the call's round trip time.
    pub async fn timed(&self, tool: &str, arguments: Value) -> Result<(Value, Duration)> {
        let start = Instant::now();
        let result = self.call(tool, arguments).await?;
        let took = start.elapsed();
        let value = match result.structured_content {
            Some(value) => value,
            None => {
                let text = first_text(&result).unwrap_or_default();
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            }
        };
        Ok((value, took))
    }
}

/// The text of a result's first content block.
fn first_text(result: &CallToolResult) -> Option<String> {
    let block = result.content.first()?.as_text()?;
    Some(block.text.clone())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn paired_lanes_alternate_and_each_call_is_timed() {
        let order = std::cell::RefCell::new(Vec::new());
        let lane = |name: &'static str| {
            let order = &order;
            async move || {
                order.borrow_mut().push(name);
                tokio::time::sleep(Duration::from_millis(2)).await;
                anyhow::Ok(())
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (ours, theirs) = runtime
            .block_on(super::paired(3, lane("aido"), lane("peer")))
            .unwrap();
        assert_eq!(
            *order.borrow(),
            ["aido", "peer", "peer", "aido", "aido", "peer"]
        );
        assert_eq!((ours.len(), theirs.len()), (3, 3));
        assert!(
            ours.iter()
                .chain(&theirs)
                .all(|t| *t >= Duration::from_millis(2))
        );
    }

    #[test]
    fn status_values_in_kb() {
        let status = "Name:\tqemu-system-x86\nVmHWM:\t  210000 kB\nVmRSS:\t  123456 kB\n\
                      RssAnon:\t  100000 kB\nRssFile:\t 23456 kB\n";
        assert_eq!(super::status_kb(status, "VmRSS"), Some(123_456));
        assert_eq!(super::status_kb(status, "VmHWM"), Some(210_000));
        assert_eq!(super::status_kb(status, "RssFile"), Some(23_456));
        assert_eq!(super::status_kb(status, "RssShmem"), None);
        assert_eq!(super::status_kb(status, "Name"), None);
        let me = super::status_bytes(std::process::id(), "VmRSS:").unwrap();
        assert!(me > 1 << 20, "{me}");
    }

    #[test]
    fn medians() {
        let ms = Duration::from_millis;
        assert_eq!(super::median(&[]), Duration::ZERO);
        assert_eq!(super::median(&[ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(super::median(&[ms(4), ms(1), ms(3), ms(2)]), ms(2));
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let samples: Vec<Duration> = [5, 1, 4, 2, 3, 10, 9, 8, 7, 6]
            .map(Duration::from_millis)
            .into();
        let p = |q| super::percentile(&samples, q);
        assert_eq!(p(50.0), Duration::from_millis(5));
        assert_eq!(p(99.0), Duration::from_millis(10));
        assert_eq!(p(10.0), Duration::from_millis(1));
        assert_eq!(super::percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn rounds_alternate_which_lane_goes_first() {
        assert_eq!(super::alternate(0, 2), [0, 1]);
        assert_eq!(super::alternate(1, 2), [1, 0]);
        assert_eq!(super::alternate(2, 3), [0, 1, 2]);
    }
}
