//! A `[[downstream]]` entry of aido's configuration, its validation, and the sandbox profile
//! and request a stdio downstream runs with.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// The prefix Claude Code puts before aido's own tools (`mcp__<server>__`, aido's server
/// being named `aido`), and the longest tool name it accepts with that prefix.
pub const CLIENT_PREFIX: &str = "mcp__aido__";
/// The longest tool name the clients accept, prefix included.
pub const CLIENT_TOOL_NAME_LEN_MAX: usize = 64;
/// The longest namespaced tool name the gateway gives (`<server>__<tool>`), so that the
/// client's prefixed name stays within [`CLIENT_TOOL_NAME_LEN_MAX`].
pub const TOOL_NAME_LEN_MAX: usize = CLIENT_TOOL_NAME_LEN_MAX - CLIENT_PREFIX.len();
/// The longest downstream name: room is left for a shortened tool name after it.
pub const NAME_LEN_MAX: usize = 24;
/// Tool patterns one entry may list.
pub const TOOL_PATTERNS_MAX: usize = 256;
/// Hosts one entry's network allowlist may list.
pub const NETWORK_HOSTS_MAX: usize = 64;
/// The most restarts a budget may allow within its window.
pub const RESTARTS_MAX: u32 = 100;
/// How long a stdio downstream may live: the sandbox kills it past this (its request's
/// timeout, at most the sandbox's one day), and the next call starts a new one (counted as
/// a crash).
pub const LIFETIME_MS_MAX: u64 = 24 * 3600 * 1000;
/// Processes a downstream's tree may have, when it runs in a cgroup.
pub const CGROUP_PIDS_MAX: u64 = 512;
/// Memory a downstream's tree may use, when it runs in a cgroup (a browser server needs room).
pub const CGROUP_MEMORY_BYTES_MAX: u64 = 4 << 30;

/// One downstream MCP server: a `[[downstream]]` entry.
///
/// Either `command` (with `args` and `env`): a stdio server started inside aido's sandbox; or
/// `url` (with `token_file`): a streamable HTTP server, which aido reaches itself, so the
/// sandbox's fields (`args`, `env`, `cwd`, `writable`, `network`, `deny`) are refused with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownstreamConfig {
    /// The server's name, the first part of its tools' namespaced names: `[a-z0-9_-]`, at most
    /// [`NAME_LEN_MAX`] characters, no `__`, starting and ending with a letter or digit.
    pub name: String,
    /// The program of a stdio server, looked up in the sandbox's `PATH`.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it (the rest of aido's environment is not passed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory (absolute); the first writable root by default, else `/`.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// A file holding the bearer token sent to the HTTP server (read at each connection).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Which of its tools to expose: names or globs (`git_*`). All of them when absent.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The toolset its tools are put in (the server's name when absent).
    #[serde(default)]
    pub toolset: Option<String>,
    /// The hosts (`host:port`, `*.suffix:443`) its egress proxy admits; no network at all when
    /// empty.
    #[serde(default)]
    pub network: Vec<String>,
    /// The directories it may write (existing); everything else of the host is read-only.
    #[serde(default)]
    pub writable: Vec<PathBuf>,
    /// Paths and globs hidden from it, over the secrets every profile hides.
    #[serde(default)]
    pub deny: Vec<String>,
    /// How often it may crash and be restarted.
    #[serde(default)]
    pub restarts: RestartBudget,
    /// The deadline of one tool call.
    #[serde(default = "call_timeout_ms_default")]
    pub call_timeout_ms: u64,
    /// The deadline of a start: the sandbox, the handshake and the first tool list.
    #[serde(default = "start_timeout_ms_default")]
    pub start_timeout_ms: u64,
}

fn call_timeout_ms_default() -> u64 {
    60_000
}

fn start_timeout_ms_default() -> u64 {
    30_000
}

/// How often a downstream may crash: at most `count` restarts within `window_secs`; past it
/// calls fail with `downstream_unavailable` until the oldest crash leaves the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartBudget {
    /// Restarts allowed within the window.
    pub count: u32,
    /// The window.
    pub window_secs: u64,
}

impl Default for RestartBudget {
    fn default() -> Self {
        RestartBudget {
            count: 3,
            window_secs: 300,
        }
    }
}

/// How a downstream is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport<'a> {
    /// A process of ours, inside the sandbox, speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: &'a str,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The URL.
        url: &'a str,
        /// The bearer token's file.
        token_file: Option<&'a Path>,
    },
}

impl DownstreamConfig {
    /// A stdio downstream running `command` with `args`, everything else by default.
    pub fn stdio<S: Into<String>>(
        name: &str,
        command: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        DownstreamConfig {
            name: name.to_owned(),
            command: Some(command.to_owned()),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            token_file: None,
            tools: None,
            toolset: None,
            network: Vec::new(),
            writable: Vec::new(),
            deny: Vec::new(),
            restarts: RestartBudget::default(),
            call_timeout_ms: call_timeout_ms_default(),
            start_timeout_ms: start_timeout_ms_default(),
        }
    }

    /// A streamable HTTP downstream at `url`, everything else by default.
    pub fn http(name: &str, url: &str, token_file: Option<PathBuf>) -> Self {
        DownstreamConfig {
            command: None,
            url: Some(url.to_owned()),
            token_file,
            ..DownstreamConfig::stdio(name, "", Vec::<String>::new())
        }
    }

    /// The entry checked: its name, its transport, its bounds and its tool patterns.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_name(&self.name)?;
        self.transport()?;
        let invalid = |why: String| ConfigError::Invalid {
            server: self.name.clone(),
            why,
        };
        if self.restarts.window_secs == 0 || self.restarts.count > RESTARTS_MAX {
            return Err(invalid(format!(
                "restarts must have a window of at least 1 s and at most {RESTARTS_MAX} restarts"
            )));
        }
        if self.call_timeout_ms == 0 || self.start_timeout_ms == 0 {
            return Err(invalid("a timeout of 0 ms".into()));
        }
        if self.network.len() > NETWORK_HOSTS_MAX {
            return Err(invalid(format!(
                "more than {NETWORK_HOSTS_MAX} network hosts"
            )));
        }
        if let Err(error) = self.network().policy() {
            return Err(invalid(format!("network: {error}")));
        }
        for root in self.writable.iter().chain(&self.cwd) {
            if !root.is_absolute() {
                return Err(invalid(format!(
                    "{} is not an absolute path",
                    root.display()
                )));
            }
        }
        self.tool_filter().map(|_| ())
    }

    /// How the downstream is reached: exactly one of `command` and `url`.
    pub fn transport(&self) -> Result<Transport<'_>, ConfigError> {
        let invalid = |why: &str| ConfigError::Invalid {
            server: self.name.clone(),
            why: why.to_owned(),
        };
        match (&self.command, &self.url) {
            (Some(command), None) if !command.is_empty() => {
                if self.token_file.is_some() {
                    return Err(invalid("token_file is for a url, not a command"));
                }
                Ok(Transport::Stdio { command })
            }
            (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                // aido reaches an HTTP server itself: nothing of a sandbox applies to it.
                let sandboxed = !self.args.is_empty()
                    || !self.env.is_empty()
                    || !self.writable.is_empty()
                    || !self.network.is_empty()
                    || !self.deny.is_empty()
                    || self.cwd.is_some();
                if sandboxed {
                    return Err(invalid(
                        "args, env, cwd, writable, network and deny are for a command, not a url",
                    ));
                }
                Ok(Transport::Http {
                    url,
                    token_file: self.token_file.as_deref(),
                })
            }
            (None, Some(_)) => Err(invalid("the url is not http:// or https://")),
            (Some(_), Some(_)) => Err(invalid("both a command and a url")),
            _ => Err(invalid("neither a command nor a url")),
        }
    }

    /// The toolset its tools go in.
    pub fn toolset(&self) -> &str {
        self.toolset.as_deref().unwrap_or(&self.name)
    }

    /// Which of the server's tools are exposed.
    pub fn tool_filter(&self) -> Result<ToolFilter, ConfigError> {
        let Some(patterns) = &self.tools else {
            return Ok(ToolFilter { set: None });
        };
        let invalid = |why: String| ConfigError::Invalid {
            server: self.name.clone(),
            why,
        };
        if patterns.len() > TOOL_PATTERNS_MAX {
            return Err(invalid(format!(
                "more than {TOOL_PATTERNS_MAX} tool patterns"
            )));
        }
        let mut builder = globset::GlobSetBuilder::new();
        for pattern in patterns {
            let glob = globset::Glob::new(pattern)
                .map_err(|error| invalid(format!("tool pattern {pattern:?}: {error}")))?;
            builder.add(glob);
        }
        let set = builder
            .build()
            .map_err(|error| invalid(format!("tool patterns: {error}")))?;
        Ok(ToolFilter { set: Some(set) })
    }

    /// Its egress: the proxy with its own allowlist, or no network when the list is empty.
    pub fn network(&self) -> aido_sandbox::Network {
        if self.network.is_empty() {
            aido_sandbox::Network::None
        } else {
            aido_sandbox::Network::proxy(self.network.clone(), Vec::new())
        }
    }

    /// The sandbox profile built from the entry: its writable roots as the only writable
    /// walls, the secrets every profile hides and its own deny globs hidden, and its network.
    pub fn profile(&self) -> aido_sandbox::Profile {
        let mut profile = aido_sandbox::Profile::new(self.writable.clone());
        profile.deny.extend(self.deny.iter().cloned());
        profile.network = self.network();
        // Its tree in a cgroup of its own where one can be made (memory, processes, CPU).
        let limits = aido_sandbox::CgroupLimits {
            pids_max: CGROUP_PIDS_MAX,
            memory_bytes_max: CGROUP_MEMORY_BYTES_MAX,
            cpu_percent_max: 100,
        };
        profile.bound_by(limits.probe().is_ok().then_some(limits));
        profile
    }

    /// The sandbox request that runs the server: its command and arguments, its environment,
    /// its working directory, bounded by [`LIFETIME_MS_MAX`]. `None` for an HTTP downstream.
    pub fn request(&self) -> Option<aido_sandbox::Request> {
        let command = self.command.as_ref()?;
        let cwd = self
            .cwd
            .clone()
            .or_else(|| self.writable.first().cloned())
            .unwrap_or_else(|| PathBuf::from("/"));
        let argv = std::iter::once(command.clone()).chain(self.args.iter().cloned());
        let mut request = aido_sandbox::Request::new(argv, &cwd);
        request.env = self.env.clone();
        request.timeout_ms = LIFETIME_MS_MAX;
        Some(request)
    }
}

/// Checks a list of entries: each valid, no name twice.
pub fn validate_all(entries: &[DownstreamConfig]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for entry in entries {
        entry.validate()?;
        if !seen.insert(entry.name.as_str()) {
            return Err(ConfigError::NameDuplicate {
                name: entry.name.clone(),
            });
        }
    }
    Ok(())
}

/// A downstream name checked: `[a-z0-9_-]`, 1 to [`NAME_LEN_MAX`] characters, starting and
/// ending with a letter or digit, no `__` (the separator of namespaced tool names).
pub fn validate_name(name: &str) -> Result<(), ConfigError> {
    let invalid = |why: &str| ConfigError::NameInvalid {
        name: name.to_owned(),
        why: why.to_owned(),
    };
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.is_empty() || name.len() > NAME_LEN_MAX {
        return Err(invalid("it must have 1 to 24 characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    {
        return Err(invalid("only a-z, 0-9, _ and - are allowed"));
    }
    if !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Err(invalid("it must start and end with a letter or a digit"));
    }
    if name.contains("__") {
        return Err(invalid("__ separates the server from the tool"));
    }
    Ok(())
}

/// Which tools of a server are exposed: all, or those matching one of the entry's patterns.
#[derive(Clone, Debug)]
pub struct ToolFilter {
    set: Option<globset::GlobSet>,
}

impl ToolFilter {
    /// Whether the tool named `name` (the server's own name) is exposed.
    pub fn admits(&self, name: &str) -> bool {
        self.set.as_ref().is_none_or(|set| set.is_match(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first entry of a configuration file's `[[downstream]]` list.
    fn parse(text: &str) -> Result<DownstreamConfig, String> {
        #[derive(Deserialize)]
        struct File {
            downstream: Vec<DownstreamConfig>,
        }
        let file: File = toml::from_str(text).map_err(|error| error.to_string())?;
        file.downstream
            .into_iter()
            .next()
            .ok_or_else(|| "none".into())
    }

    #[test]
    fn names_are_checked() {
        for good in [
            "git",
            "server-everything",
            "a",
            "a_b",
            "x1",
            "abcdefghijklmnopqrstuvwx",
        ] {
            assert_eq!(validate_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "Git",
            "a__b",
            "_a",
            "a-",
            "a.b",
            "a b",
            "abcdefghijklmnopqrstuvwxy",
            "é",
        ] {
            let error = validate_name(bad).unwrap_err();
            assert_eq!(error.code(), "downstream_name_invalid", "{bad}");
        }
    }

    #[test]
    fn an_entry_has_exactly_one_transport() {
        let stdio = parse(
            "[[downstream]]\nname = \"git\"\ncommand = \"uvx\"\nargs = [\"mcp-server-git\"]\n",
        )
        .unwrap();
        assert_eq!(stdio.transport(), Ok(Transport::Stdio { command: "uvx" }));
        assert_eq!(stdio.validate(), Ok(()));
        let http = parse(r#"downstream = [{name = "gh", url = "https://example.com/mcp", token_file = "/etc/token"}]"#)
            .unwrap();
        assert!(matches!(http.transport(), Ok(Transport::Http { .. })));
        for bad in [
            r#"downstream = [{name = "x"}]"#,
            r#"downstream = [{name = "x", command = "a", url = "http://h/"}]"#,
            r#"downstream = [{name = "x", url = "ftp://h/"}]"#,
            r#"downstream = [{name = "x", command = "a", token_file = "/t"}]"#,
            r#"downstream = [{name = "x", url = "http://h/", network = ["h:80"]}]"#,
            r#"downstream = [{name = "x", command = "a", restarts = {count = 1, window_secs = 0}}]"#,
            r#"downstream = [{name = "x", command = "a", tools = ["a[b"]}]"#,
            r#"downstream = [{name = "x", command = "a", writable = ["relative"]}]"#,
        ] {
            let entry = parse(bad).unwrap();
            assert_eq!(
                entry.validate().map_err(|e| e.code()),
                Err("downstream_config_invalid"),
                "{bad}"
            );
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let error =
            parse(r#"downstream = [{name = "x", command = "a", comand = "b"}]"#).unwrap_err();
        assert!(error.contains("unknown field"), "{error}");
    }

    #[test]
    fn names_are_unique_in_a_list() {
        let entry = DownstreamConfig::stdio("git", "git-server", ["--x"]);
        let error = validate_all(&[entry.clone(), entry]).unwrap_err();
        assert_eq!(error.code(), "downstream_name_duplicate");
    }

    #[test]
    fn tools_are_filtered_by_names_and_globs() {
        let mut entry = DownstreamConfig::stdio("git", "git-server", Vec::<String>::new());
        assert!(entry.tool_filter().unwrap().admits("anything"));
        entry.tools = Some(vec!["git_status".into(), "git_log*".into()]);
        let filter = entry.tool_filter().unwrap();
        assert!(filter.admits("git_status"));
        assert!(filter.admits("git_log_all"));
        assert!(!filter.admits("git_commit"));
    }

    #[test]
    fn the_profile_has_no_network_unless_hosts_are_listed() {
        let mut entry = DownstreamConfig::stdio("web", "server", Vec::<String>::new());
        entry.writable = vec![PathBuf::from("/srv/work")];
        entry.deny = vec!["*.key".into()];
        let profile = entry.profile();
        assert_eq!(profile.network, aido_sandbox::Network::None);
        assert_eq!(profile.writable_roots, vec![PathBuf::from("/srv/work")]);
        assert!(profile.deny.contains(&"~/.ssh".to_owned()));
        assert!(profile.deny.contains(&"*.key".to_owned()));
        entry.network = vec!["api.github.com:443".into()];
        assert!(matches!(
            entry.profile().network,
            aido_sandbox::Network::Proxy { .. }
        ));
        let request = entry.request().unwrap();
        assert_eq!(request.argv, vec!["server".to_owned()]);
        assert_eq!(request.cwd, PathBuf::from("/srv/work"));
    }
}
