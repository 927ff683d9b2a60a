use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The built-in defaults, as TOML: the first layer under every config.
pub const DEFAULTS_TOML: &str = r#"
# readonly | confirm | normal
mode = "normal"
# Relative paths in actions are resolved against this directory.
workdir = "~"
# Other MCP servers whose tools aido offers beside its own, each started inside aido's sandbox
# (the gateway), as [[downstream]] tables: name, command and args (stdio) or url and token_file
# (streamable HTTP), tools (names or globs to expose), toolset, network (hosts its egress proxy
# admits), writable (its walls), deny, restarts, call_timeout_ms, start_timeout_ms; and for the
# policy: deny_tools (names or globs refused, downstream_tool_denied), classes (a tool's class
# instead of the one its annotations give, e.g. { git_status = "read_only" }), path_arguments
# (arguments holding paths, judged by the walls) and url_arguments (holding URLs, judged by
# [net]).
downstream = []

[paths]
# Roots an agent may read from (write roots are readable too).
read = ["~"]
# Roots an agent may write to.
write = ["~"]
# Globs that are refused whatever the roots say. Deny lists add up across layers.
deny = ["**/.ssh/**", "/etc/shadow", "**/.env"]
# Globs that may be read but never written, created or removed, by any primitive or by a
# command's file changes (also paths that do not exist yet): shell start-up files and git's
# hooks and config, which would run code the next time a human opens a shell or commits.
protect = ["~/.bashrc", "~/.bash_profile", "~/.bash_login", "~/.profile", "~/.bash_logout", "~/.zshrc", "~/.zshenv", "~/.zprofile", "~/.zlogin", "~/.config/fish/**", "**/.git/hooks/**", "**/.git/config"]

[actions]
# Meta primitives that skip every gate.
always_allow = ["session_history", "simulate", "policy_check"]
# Primitives that always ask a human first, whatever the mode.
confirm = []
# Per-primitive switch; a primitive not listed is enabled.
enabled = {}

[desktop]
# Host desktop actions are refused unless this is true. Machines (vm_* and computer) answer
# to vm.enabled instead: their screens are contained.
enabled = false
# "owned": aido starts a private headless session (Xvfb and the window manager, or sway; a
# D-Bus bus) in a runtime dir of its own. "attach": drive the live display named below (an
# explicit opt-in). Either way the backend is chosen by probing the server: wlr for a
# Wayland compositor with the wlroots protocols and sway IPC, x11 for an X server.
session = "owned"
# owned: the headless server, "xvfb" (with window_manager; the x11 backend) or "sway"
# (WLR_BACKENDS=headless, pixman; the wlr backend).
server = "xvfb"
# attach: the X display (":0") or the Wayland socket ("wayland-1" in XDG_RUNTIME_DIR, or a
# path), and the session bus address for notifications ("" for none).
display = ""
bus = ""
# owned: the screen, the window manager ("" for none) and programs started in the session,
# each an argv (e.g. [["xterm"], ["dunst"]]).
width = 1280
height = 800
window_manager = "openbox"
autostart = []
# App rules, each { class = "WM_CLASS or app_id", title = "regex" } (a rule with both needs
# both). deny wins and adds up across layers; deny-listed windows are blacked out of
# screenshots and their titles hidden. With allow rules set, every other window is refused.
allow = []
deny = []
# Windows of these classes are terminals: what is typed into them is judged as run_command.
terminals = ["xterm", "uxterm", "foot", "footclient", "urxvt", "rxvt", "alacritty", "kitty", "wezterm", "st", "gnome-terminal-server", "org.gnome.terminal", "org.gnome.console", "konsole", "org.kde.konsole", "xfce4-terminal", "terminator", "tilix", "lxterminal", "mate-terminal", "qterminal"]
# Largest clipboard text read or written, in bytes.
clipboard_bytes_max = 65536
# Most characters one type_text sends.
text_chars_max = 4096
# Most input events per second (more wait).
events_per_second_max = 1000

[vm]
# Contained QEMU machines (vm_* primitives). Unlike the host desktop they are on by default:
# the agent's input reaches only the guest.
enabled = true
# Most machines running at once.
machines_max = 4
# Largest guest memory, in MiB.
memory_mb_max = 2048
# Longest a guest may take to boot, in milliseconds.
boot_timeout_ms = 120000
# Clones the warm pool keeps paused and ready (vm_pool_acquire).
pool_size = 2
# Serve the live view and the `aido vm` control channel on 127.0.0.1 (token-protected).
live_view = true
# Run vm_start's machines on a libvirt host instead of starting QEMU here: a URI such as
# "qemu:///system" or "qemu+ssh://user@host/system". Empty: direct QEMU over QMP (the fast path).
# The warm pool and vm_clone need direct QEMU.
libvirt_uri = ""

[computer]
# The screenshots Anthropic's computer-use tools send (computer, computer_toolset,
# desktop_computer, desktop_computer_toolset), and so what their coordinates mean. 0 x 0: the
# screen as it is when it fits the image limits below, else the largest size of its shape
# that does; a size such as 1024 x 768 (XGA): exactly that. Coordinates the agent gives are
# scaled back to the real screen; cursor_position is answered in screenshot pixels.
width = 0
height = 0
# Anthropic's image limits for computer use: the longest edge, in pixels, and the most pixels.
# A toolset zoom is scaled up to fill them.
long_edge_max = 1568
pixels_max = 1150000

[memory]
# remember, recall, forget and list_memory (AIDO_HOME/memory.sqlite, shared by every aido
# process of this AIDO_HOME).
enabled = true

[artifacts]
# artifact_create, artifact_list, artifact_serve, artifact_save, artifact_stop and
# artifact_destroy (AIDO_HOME/artifacts, shared by every aido process of this AIDO_HOME).
enabled = true
# The port artifact_serve's listener takes on 127.0.0.1 (one per aido process); 0: a port the
# system picks. Requests must name it as Host 127.0.0.1:PORT or localhost:PORT.
port = 0
# How long artifact_serve serves an artifact when the call names no ttl_ms, and the most it
# may name, in milliseconds.
ttl_ms_default = 3600000
ttl_ms_max = 86400000
# Largest file, artifact and store (every artifact together), in bytes; most files in one
# artifact and artifacts in the store.
file_bytes_max = 8388608
artifact_bytes_max = 33554432
total_bytes_max = 268435456
files_max = 256
artifacts_max = 256

[processes]
# list_processes with host = true lists the host's processes from /proc (not only the ones
# aido started). Off by default: a refusal coded host_processes_hidden.
host_visible = false
# The fields shown of each host process, from pid, ppid, uid, state, comm, argv, start_ticks.
# argv is shown with secret-looking arguments redacted; environments are never shown.
host_fields = ["pid", "ppid", "uid", "state", "comm"]
# The network of run_command and aido exec: none when this is empty (the default); otherwise
# only aido's egress proxy, which admits these targets ("host:port", "*.example.com:443",
# "host:80,443", "host:*") at addresses outside the loopback, private, link-local, CGNAT and
# metadata ranges (checked after DNS resolution), unless egress_allow_ranges opens a block.
# Commands find the proxy through HTTP_PROXY/HTTPS_PROXY; it is also the only way out of their
# network namespace. A background command gets a proxy of its own for as long as it runs.
egress = []
egress_allow_ranges = []
# The egress proxy's bounds, in connections: how many one command may have open through it at
# once, and all commands of this aido process together (each holds two of aido's file
# descriptors: keep twice the total under aido's open-file limit). Past either, a new
# connection is answered 503 and closed, coded egress_connections_max or
# egress_connections_total_max in the command's egress_totals.
egress_connections_max = 64
egress_connections_total_max = 256
# Ports a background command's servers may be reached at from the host, for a person's
# browser: run_command with background and expose_ports = [PORT] binds the host's
# 127.0.0.1:PORT (never another address) to the command's own 127.0.0.1:PORT for as long as it
# runs, journaled with its start. None by default (refused, coded expose_port_refused).
expose_ports = []
# Host Unix sockets (absolute paths or ~/...) a command may connect to: an ssh or gpg agent, a
# database's socket, a container engine's. Every other host socket is refused (the connect
# fails with EACCES, and the command's stderr gets a line coded unix_socket_denied); the
# command's own sockets (bound by it or by its session's servers) always work. Datagram Unix
# sockets are never made. The command's user must still be allowed to write the socket.
unix_sockets = []
# Limits on a command's whole process tree, from a cgroup of its own (v2, or v1 on a hybrid
# host): "required" (no cgroup: sandbox_unavailable, nothing runs), "auto" (required when aido
# runs as root, where RLIMIT_NPROC does not bind, so only a cgroup bounds a fork bomb; used
# when it can be made otherwise, and the journaled profile says whether it was), "off".
cgroup = "auto"
pids_max = 1024
memory_mb = 4096
# cpu.max, in percent of one CPU.
cpu_percent = 200
# Running a command WITHOUT the sandbox: "never" (the default: a host that cannot build one
# gets sandbox_unavailable and nothing runs), "if_unavailable" (only when the sandbox is
# unavailable on this host), "always". Unconfined, a command sees and changes whatever aido's
# user can, has the host's network, and its file changes are not journaled effects (a rewind
# does not undo them); every such run says `unconfined` with why in its journaled record and
# result. Background commands and dry runs are never run unconfined.
unconfined = "never"
# The most one command's file changes may hold: entries (files, directories, links and
# removals) and bytes of new contents. A command past either is refused whole
# (command_changes_too_large), before anything reaches the workspace; so is one whose contents
# would leave the journal's disk with less than [limits] journal_free_bytes_min free. A command
# may write a file as large as change_bytes_max (its RLIMIT_FSIZE); past that the write fails
# inside the command (EFBIG, SIGXFSZ).
change_files_max = 250000
change_bytes_max = 8589934592
# The user's environment a command starts with: the variables of aido's own environment (the
# client's, or the shell that ran aido exec) whose names match these globs (`*` any run of
# characters), so PATH, HOME and the toolchains' homes are the user's. A name that looks secret
# (containing KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH) is never inherited,
# whatever the list says; a call passes such a value with `env` itself. In a call's `env` and
# `cwd`, `~` and `$HOME` mean the user's home. Each command's journaled record holds the
# environment it had (secret-looking values as their blake3).
env_inherit = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ",
  "TERM", "COLORTERM", "NO_COLOR", "EDITOR", "PAGER", "XDG_CONFIG_HOME",
  "XDG_DATA_HOME", "XDG_CACHE_HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN",
  "RUSTFLAGS", "GOPATH", "GOROOT", "GOBIN", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY",
  "NVM_DIR", "NVM_BIN", "VOLTA_HOME", "FNM_*", "NODE_PATH", "NPM_CONFIG_CACHE", "PYENV_ROOT",
  "PYENV_VERSION", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
  "PIP_FIND_LINKS", "UV_CACHE_DIR", "JAVA_HOME", "GRADLE_USER_HOME", "MAVEN_HOME", "M2_HOME",
  "RBENV_ROOT", "GEM_HOME", "GEM_PATH", "DENO_DIR", "BUN_INSTALL"]
# When aido runs as root, commands run as this unprivileged host user and group instead (never
# uid 0): the walls ([paths] read and write) are idmapped so the files of their owner are the
# command's own, and every other root-only file, key and socket of the host is out of its
# reach by the kernel's own checks. Pick ids no host user or process has.
sandbox_uid = 1879048192
sandbox_gid = 1879048192

[net]
# Hosts http_request, fetch_url, port_check and dns_lookup may reach: "host:port", "host"
# (ports 80 and 443), "host:*" (every port), "*.example.com" (names under it, with the same
# port forms), an address ("127.0.0.1:8080", "[::1]:11434"), or "*" (every host: the public
# web, since the refused ranges below stay refused). Empty (the default): no network at all. Every redirect hop is judged again.
allow = []
# Loopback, private, link-local, CGNAT, metadata and reserved addresses are refused even for
# an allowed host (a name that resolves there, or an address literal) unless a block here
# holds them, e.g. ["127.0.0.0/8"] for a server on this machine. An allow entry that is an
# address names that address.
allow_ranges = []
# Largest response body kept, in bytes (a longer one is cut and marked truncated).
response_bytes_max = 10485760
# Longest one exchange may take, redirects included, in milliseconds.
timeout_ms_max = 120000
# Most redirects followed.
redirects_max = 10
# Most port_check calls per minute (it is a scanner).
port_checks_per_minute_max = 60

[browser]
# The browser_* primitives: one headless Chromium per session, started on its first browser
# call with a private profile under AIDO_HOME/browser, and closed with the session. Every
# request it makes, loopback included, goes through aido's egress proxy and is judged by [net]
# above (allow and allow_ranges), as fetch_url is; with [net] allow empty it reaches nothing.
enabled = true
# browser_evaluate (and the browser toolset's javascript_exec) runs the agent's JavaScript in
# the page: refused unless this is true.
allow_script = false
# Where a page's downloads land: a directory under the walls (relative to the workdir), each
# file written as a journaled change set (rewind takes it away) before the agent hears of it.
downloads = "downloads"
# The Chromium executable (Debian's package).
executable = "/usr/bin/chromium"
# The viewport every tab gets, in CSS pixels.
width = 1280
height = 800

[ssh]
# Hosts ssh_exec may reach, each a table: name (what the agent calls it; default its host),
# host, port (default 22), user, host_key (the server's key as an OpenSSH public key line, or
# its "SHA256:..." fingerprint: any other key is refused before authenticating) and key_file
# (the private key, OpenSSH format, no passphrase). Nothing is read from ~/.ssh: no config, no
# known_hosts, no agent. Empty (the default): ssh_exec is refused. For example
# hosts = [{ name = "build", host = "10.0.0.5", user = "ci", host_key = "SHA256:...", key_file = "/etc/aido/ci_ed25519" }]
hosts = []

[containers]
# Images run_in_sandbox and run_container_group may run, exactly as podman names them
# ("localhost/aido-test:latest"). They must already be on the host: aido never pulls.
# Empty (the default): none.
images = []
# The podman program (a name looked up in PATH, or a path) and its OCI runtime ("runc",
# "crun"; "" for podman's own default). Debian 12's crun 1.8 refuses hosts with hybrid
# cgroups; runc runs there and on cgroup v2.
podman = "podman"
runtime = "runc"
# Most processes and memory (MiB) one container may have; a call may ask for less.
pids_max = 256
memory_mb_max = 1024

[llm]
# llm_call's endpoint: "openai" (any OpenAI-compatible /chat/completions: OpenAI, vLLM,
# Ollama's /v1, llama.cpp's server) or "anthropic" (the messages API).
provider = "openai"
# Up to and including the version: "https://api.openai.com/v1", "https://api.anthropic.com/v1",
# "http://127.0.0.1:11434/v1". It must pass [net] allow like any other URL. Empty: llm_call
# is refused.
base_url = ""
# The model llm_call uses when the call names none.
model = ""
# The environment variable of aido's process that holds the key (agents never see it, and it
# is never journaled). api_key is the key itself, for a config file only root can read.
api_key_env = ""
api_key = ""
# Tokens llm_call asks for when the call names no max_tokens (Anthropic requires one).
max_tokens_default = 1024
# The anthropic-version header.
anthropic_version = "2023-06-01"

[ollama]
# ollama_chat's and ollama_api's server; it must pass [net] allow (a server on this machine
# also needs allow_ranges, or an allow entry that is its address, such as "127.0.0.1:11434").
base_url = "http://127.0.0.1:11434"

[snapshots]
# The directory snapshots, restores and rewinds cover; empty means the workdir.
workspace = ""
# auto | btrfs_subvolume | reflink | copy (auto picks the best the workspace supports).
backend = "auto"

[journal]
# When records are made durable. "mutations": an action that can change the world runs only
# after its proposal is flushed, and is answered only after its outcome is; the records of
# actions that change nothing are answered once written to the journal's tail (they survive
# kill -9 of aido; a power loss can cost the last 20 ms of them). "every_record": every record
# is flushed before anything goes on (a power loss costs nothing acknowledged; reads are slower).
sync = "mutations"

[retention]
# What `aido gc` removes when it is given no rule, and what `aido mcp` and `aido serve` remove
# in the background when they start (see at_start). A session goes whole, with the blobs,
# objects, snapshots and audit lines only it uses, once its last record is older than
# older_than_days; a session that began before then and goes on after loses its older records
# (to an action boundary; a `pruned` record keeps the chain verifiable). Never a live session
# (its journal held by a running aido, or not ended and active within the last day).
# 0: no age rule.
older_than_days = 30
# The most bytes the journal, its audit files and the sessions' snapshots may take, together;
# the oldest sessions go first until what they alone held brings it under. 0: no budget.
max_bytes = 0
# The most sessions kept, newest first (every session counts, retention's own included).
# 0: no bound.
keep_sessions = 0
# Run the rules above in the background when aido mcp or aido serve starts, at most once a
# day per AIDO_HOME; what it removes is journaled (a `collected` record).
at_start = true
# Compact a journal's database after removing from it (sled gives the space of removed keys
# back only slowly): a copy swapped in under its lock. The journal of a running aido is not
# compacted.
compact = true

[telemetry]
# OpenTelemetry: a span per action, metrics, and every journal record as a log record, sent
# over OTLP to this endpoint (e.g. "http://127.0.0.1:4318"; the standard
# OTEL_EXPORTER_OTLP_ENDPOINT is used when this is empty). Off when neither is set.
otlp_endpoint = ""
# "http/protobuf" (port 4318) or "grpc" (port 4317); empty: OTEL_EXPORTER_OTLP_PROTOCOL, else
# "http/protobuf".
otlp_protocol = ""
# Serve the metrics at /metrics on `aido serve`'s listener (behind its bearer token).
prometheus = true
# A loopback address ("127.0.0.1:9464") where `aido mcp` (a stdio runtime, which has no
# listener of its own) serves the same /metrics for a Prometheus on this machine. Empty: none.
metrics_listen = ""

[fleet]
# Other runtimes Mission Control (`aido serve`'s page at /mc/) shows beside this one, each
# { url = "http://HOST:PORT", token_file = "PATH" } (that runtime's AIDO_HOME/serve/token,
# readable by this one). Fetched by this server; the page never sees their tokens.
peers = []
# A discovery file: JSON lines {"url": ..., "token_file": ...} (a relative token_file is taken
# from the file's directory), re-read on every look, so a scheduler's template can keep it.
# Empty: none.
discovery = ""

[mcp]
# Which tools the MCP server lists and accepts: toolsets and profiles by name, and single
# tools. Toolsets: files, process, search, safety, history, snapshots, memory, human, net,
# llm, script, artifacts, events, remote, grants, vm, computer, desktop. Profiles: all, and
# coding (24 tools, about 7,000 tokens: the files toolset but checksum and render_template,
# process, search_code, pipeline, safe_change, simulate, session_history, rewind); a single
# tool's name works too. read_only keeps only the tools
# that change nothing. A tool left out is not listed, and a call of it is refused
# (tool_not_enabled). `aido mcp --toolsets coding --tools recall --read-only` says the same.
toolsets = ["all"]
tools = []
read_only = false

[limits]
# Largest tools/call arguments, in bytes.
argument_bytes_max = 8388608
# Largest file read_file returns whole, in bytes.
read_bytes_max = 8388608
# Largest journal record after large strings move to blobs, in bytes.
record_bytes_max = 1048576
# Largest contents the journal keeps for one file or output, in bytes (kept on disk beside it).
# A write whose new or previous contents are larger is refused before it runs.
blob_bytes_max = 1099511627776
# Free space the journal's file system must keep after storing a write's contents, in bytes.
# A write that would leave less is refused before it runs (journal_space_low).
journal_free_bytes_min = 268435456
# Most records one session may hold.
records_per_session_max = 1000000
# Most actions one session may run at once.
in_flight_actions_max = 8
# Longest one body call may take, in milliseconds.
action_timeout_ms = 120000
# Longest a human may take to answer a confirmation, in milliseconds; also the most an
# ask_human, confirm, ask_multiple_choice or check_answer may wait (their timeout_ms, wait_ms).
confirm_timeout_ms = 300000
"#;

/// How much the agent may do without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Only read_only, meta and composite-of-those actions run.
    Readonly,
    /// Every action that changes the world asks a human first.
    Confirm,
    /// Actions within the walls run.
    Normal,
}

/// The effective configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// See [`Mode`].
    pub mode: Mode,
    /// Where relative paths start.
    pub workdir: String,
    /// `[[downstream]]`: the gateway's other MCP servers.
    pub downstream: Vec<Downstream>,
    /// Path walls and deny globs.
    pub paths: Paths,
    /// Per-primitive switches.
    pub actions: Actions,
    /// The desktop gate.
    pub desktop: Desktop,
    /// What snapshots cover and how they are taken.
    pub snapshots: Snapshots,
    /// Contained machines.
    pub vm: Vm,
    /// The computer-use tools' screenshot size.
    pub computer: Computer,
    /// The memory store.
    pub memory: Memory,
    /// Artifacts: the store's caps and the listener.
    pub artifacts: Artifacts,
    /// The browser body.
    pub browser: Browser,
    /// What list_processes may show of the host.
    pub processes: Processes,
    /// The network primitives' allowlist and bounds.
    pub net: Net,
    /// ssh_exec's hosts.
    pub ssh: Ssh,
    /// run_in_sandbox's and run_container_group's images and limits.
    pub containers: Containers,
    /// llm_call's endpoint and key.
    pub llm: Llm,
    /// The Ollama server.
    pub ollama: Ollama,
    /// When records are durable.
    pub journal: JournalConfig,
    /// What `aido gc` and the retention at start remove.
    pub retention: Retention,
    /// OpenTelemetry export.
    pub telemetry: Telemetry,
    /// The other runtimes Mission Control shows.
    pub fleet: Fleet,
    /// Named limits.
    pub limits: Limits,
    /// Which tools the MCP server gives its client.
    #[serde(default)]
    pub mcp: McpTools,
}

/// `[mcp]`: which tools the MCP server lists and accepts (`aido mcp --toolsets`, `--tools`,
/// `--read-only` say the same for one run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpTools {
    /// Toolsets and profiles by name ([`aido_actions::toolsets`]); `all` is every tool.
    #[serde(default = "McpTools::toolsets_default")]
    pub toolsets: Vec<String>,
    /// Single tools given besides the toolsets.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Only the tools that change nothing (read-only and meta classes).
    #[serde(default)]
    pub read_only: bool,
}

impl McpTools {
    fn toolsets_default() -> Vec<String> {
        vec!["all".into()]
    }

    /// The primitives these settings give, in table order, and the downstream names they give:
    /// a name that is a `[[downstream]]` entry's toolset (its `toolset`, else its name) or a
    /// namespaced tool of one (`git__git_status`) gives those downstream tools only.
    pub fn given(
        &self,
        downstream: &[Downstream],
    ) -> Result<(Vec<&'static str>, std::collections::BTreeSet<String>), ConfigError> {
        let is_downstream = |name: &str| {
            downstream.iter().any(|entry| {
                entry.toolset() == name
                    || name
                        .split_once("__")
                        .is_some_and(|(server, _)| server == entry.name)
            })
        };
        let (theirs, ours): (Vec<&String>, Vec<&String>) =
            self.toolsets.iter().partition(|name| is_downstream(name));
        let (their_tools, our_tools): (Vec<&String>, Vec<&String>) =
            self.tools.iter().partition(|name| is_downstream(name));
        let narrowed = Self {
            toolsets: ours.into_iter().cloned().collect(),
            tools: our_tools.into_iter().cloned().collect(),
            read_only: self.read_only,
        };
        let primitives = if narrowed.toolsets.is_empty() && narrowed.tools.is_empty() {
            Vec::new()
        } else {
            narrowed.primitives()?
        };
        let names = theirs.into_iter().chain(their_tools).cloned().collect();
        Ok((primitives, names))
    }

    /// The primitives these settings give, in table order.
    pub fn primitives(&self) -> Result<Vec<&'static str>, ConfigError> {
        let mut given = aido_actions::toolsets::resolve(self.toolsets.iter().map(String::as_str))
            .map_err(|reason| ConfigError::Value {
            key: "mcp.toolsets".into(),
            reason,
        })?;
        for name in &self.tools {
            let known = aido_actions::action::PRIMITIVE_NAMES
                .iter()
                .find(|known| *known == name)
                .ok_or_else(|| ConfigError::Value {
                    key: "mcp.tools".into(),
                    reason: format!("{name:?} is not a tool"),
                })?;
            given.insert(*known);
        }
        Ok(aido_actions::action::PRIMITIVE_NAMES
            .iter()
            .copied()
            .filter(|name| given.contains(name))
            .filter(|name| {
                !self.read_only
                    || aido_actions::Action::class_of(name)
                        .is_some_and(|class| class.read_only_hint())
            })
            .collect())
    }
}

impl Default for McpTools {
    fn default() -> Self {
        Self {
            toolsets: Self::toolsets_default(),
            tools: Vec::new(),
            read_only: false,
        }
    }
}

/// `[journal]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalConfig {
    /// See [`Sync`].
    pub sync: Sync,
}

/// `[retention]`: what `aido gc` removes with no rule given, and what the runtimes remove at
/// start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Sessions (and older records of long ones) older than this many days go; 0: none.
    pub older_than_days: u64,
    /// The most bytes journal, audit files and snapshots may take; 0: no budget.
    pub max_bytes: u64,
    /// The most sessions kept; 0: no bound.
    pub keep_sessions: u64,
    /// Whether `aido mcp` and `aido serve` run these rules in the background at start.
    pub at_start: bool,
    /// Whether a journal's database is compacted after removing from it.
    pub compact: bool,
}

impl Retention {
    /// The largest `older_than_days` (about 2,700 years; its milliseconds fit in 64 bits with
    /// room to spare).
    pub const OLDER_THAN_DAYS_MAX: u64 = 1_000_000;

    /// True when no rule is set (retention removes nothing).
    pub fn is_off(&self) -> bool {
        self.older_than_days == 0 && self.max_bytes == 0 && self.keep_sessions == 0
    }
}

/// `[telemetry]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    /// The OTLP endpoint; empty: `OTEL_EXPORTER_OTLP_ENDPOINT`; neither: no OTLP export.
    pub otlp_endpoint: String,
    /// `http/protobuf` or `grpc`; empty: `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
    pub otlp_protocol: String,
    /// Whether `aido serve` serves `/metrics`.
    pub prometheus: bool,
    /// Where `aido mcp` serves `/metrics` (a loopback address); empty: nowhere.
    #[serde(default)]
    pub metrics_listen: String,
}

/// `[fleet]`: the runtimes Mission Control shows beside its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// A static list.
    pub peers: Vec<Peer>,
    /// A discovery file of JSON lines (`url`, `token_file`); empty: none.
    pub discovery: String,
}

/// One other runtime: its `aido serve` and the file holding its bearer token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// `http://HOST:PORT` of its `aido serve`.
    pub url: String,
    /// Its token file.
    pub token_file: String,
}

/// When records are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sync {
    /// Mutations are write-ahead and flushed; records of actions that change nothing are
    /// written to the tail (they survive kill -9; a power loss can cost the last few ms).
    Mutations,
    /// Every record is flushed before it is acknowledged.
    EveryRecord,
}

/// `[paths]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paths {
    /// Read roots.
    pub read: Vec<String>,
    /// Write roots.
    pub write: Vec<String>,
    /// Deny globs.
    pub deny: Vec<String>,
    /// Globs readable but never written.
    #[serde(default)]
    pub protect: Vec<String>,
}

/// `[actions]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Actions {
    /// Meta primitives that skip every gate.
    pub always_allow: Vec<String>,
    /// Primitives that always ask first.
    pub confirm: Vec<String>,
    /// Per-primitive enable map.
    pub enabled: BTreeMap<String, bool>,
}

/// `[desktop]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Desktop {
    /// Whether host desktop actions may run at all (machines answer to `vm.enabled`).
    pub enabled: bool,
    /// Owned (a private headless session) or attach (a live display).
    pub session: DesktopSession,
    /// owned: the headless display server.
    pub server: DesktopServer,
    /// attach: the X display or the Wayland socket.
    pub display: String,
    /// attach: the session bus address ("" for none).
    pub bus: String,
    /// owned: screen width.
    pub width: u32,
    /// owned: screen height.
    pub height: u32,
    /// owned: the window manager ("" for none).
    pub window_manager: String,
    /// owned: programs started in the session.
    pub autostart: Vec<Vec<String>>,
    /// Apps that may be driven (empty: any not denied).
    pub allow: Vec<AppRule>,
    /// Apps that may not be driven or seen.
    pub deny: Vec<AppRule>,
    /// Terminal classes (their input is judged as run_command).
    pub terminals: Vec<String>,
    /// Largest clipboard text, in bytes.
    pub clipboard_bytes_max: usize,
    /// Most characters one type_text sends.
    pub text_chars_max: usize,
    /// Most input events per second.
    pub events_per_second_max: u32,
}

/// Which desktop session the desktop body drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesktopSession {
    /// A private headless session aido starts.
    Owned,
    /// The live display in `display`.
    Attach,
}

/// Which headless display server an owned desktop session runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesktopServer {
    /// Xvfb with the window manager (the x11 backend).
    Xvfb,
    /// sway with its headless backend (the wlr backend).
    Sway,
}

/// A desktop app rule: a WM_CLASS / app_id and/or a title regex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppRule {
    /// WM_CLASS instance or class, or app_id (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// A regex on the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `[vm]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    /// Whether machine actions (vm_* and computer) may run.
    pub enabled: bool,
    /// Most machines at once.
    pub machines_max: u32,
    /// Largest guest memory.
    pub memory_mb_max: u32,
    /// Longest boot.
    pub boot_timeout_ms: u64,
    /// Warm clones kept ready.
    pub pool_size: u32,
    /// Serve the live view on loopback.
    pub live_view: bool,
    /// A libvirt host for vm_start's machines; empty for direct QEMU.
    pub libvirt_uri: String,
}

/// `[computer]`: the size of the screenshots the computer-use tools send.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Computer {
    /// Screenshot width (0 with height 0: fitted to the limits).
    pub width: u32,
    /// Screenshot height.
    pub height: u32,
    /// Longest edge of any image sent, in pixels.
    pub long_edge_max: u32,
    /// Most pixels of any image sent.
    pub pixels_max: u64,
}

/// `[memory]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Whether memory actions (remember, recall, forget, list_memory) may run.
    pub enabled: bool,
}

/// A `[[downstream]]` entry as the policy reads it: its name, the tools it refuses and the
/// classes it gives; the rest (how to start the server) is the gateway's to read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Downstream {
    /// The server's name, the first part of its tools' namespaced names.
    pub name: String,
    /// Tools (their own names, or globs) refused: `downstream_tool_denied`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_tools: Vec<String>,
    /// A tool's class (by its own name) instead of the one its annotations give.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, aido_actions::SideEffectClass>,
    /// Arguments (top-level, by name) that hold paths: judged by the walls like a path of
    /// aido's own primitives (read for a read-only tool, written otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_arguments: Vec<String>,
    /// Arguments that hold URLs: judged by `[net]` like fetch_url's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub url_arguments: Vec<String>,
    /// Everything else of the entry: the gateway's.
    #[serde(flatten)]
    pub server: toml::Table,
}

impl Downstream {
    /// The toolset its tools are in: its `toolset`, else its name.
    pub fn toolset(&self) -> &str {
        self.server
            .get("toolset")
            .and_then(toml::Value::as_str)
            .unwrap_or(&self.name)
    }
}

/// `[browser]`: the browser body's switch, its script switch and its Chromium.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Browser {
    /// Whether browser actions may run.
    pub enabled: bool,
    /// Whether browser_evaluate may run the agent's JavaScript.
    pub allow_script: bool,
    /// Where downloads land (relative to the workdir, or absolute), judged by the walls.
    pub downloads: String,
    /// The Chromium executable.
    pub executable: String,
    /// The viewport's width, in CSS pixels.
    pub width: u32,
    /// The viewport's height.
    pub height: u32,
}

/// `[artifacts]`: the artifact store's caps and the listener that serves them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifacts {
    /// Whether artifact actions may run.
    pub enabled: bool,
    /// The listener's port on 127.0.0.1 (0: any).
    pub port: u16,
    /// How long artifact_serve serves when the call names no ttl_ms.
    pub ttl_ms_default: u64,
    /// The longest ttl_ms a call may name.
    pub ttl_ms_max: u64,
    /// Largest file of an artifact.
    pub file_bytes_max: u64,
    /// Largest artifact.
    pub artifact_bytes_max: u64,
    /// Largest store (every artifact together).
    pub total_bytes_max: u64,
    /// Most files in one artifact.
    pub files_max: u32,
    /// Most artifacts in the store.
    pub artifacts_max: u32,
}

/// `[processes]`: what list_processes may show of the host's own processes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Processes {
    /// Whether `list_processes` with `host` may list the host's processes (from /proc).
    pub host_visible: bool,
    /// The fields shown of each (see [`Processes::FIELDS`]); environments never are.
    pub host_fields: Vec<String>,
    /// The egress proxy's host:port allowlist for run_command and aido exec; empty: no
    /// network.
    #[serde(default)]
    pub egress: Vec<String>,
    /// Refused ranges the egress proxy opens anyway (CIDR blocks).
    #[serde(default)]
    pub egress_allow_ranges: Vec<String>,
    /// Connections one command may have open through its egress proxy at once.
    #[serde(default = "Processes::egress_connections_max_default")]
    pub egress_connections_max: u32,
    /// Connections every command of this aido process may have open through their egress
    /// proxies together.
    #[serde(default = "Processes::egress_connections_total_max_default")]
    pub egress_connections_total_max: u32,
    /// Ports a background command may expose on the host's 127.0.0.1 (`expose_ports`).
    #[serde(default)]
    pub expose_ports: Vec<u16>,
    /// Host Unix sockets commands may connect to (`unix_sockets`).
    #[serde(default)]
    pub unix_sockets: Vec<String>,
    /// `required`, `auto` or `off`: whether a command's tree gets a cgroup with the limits
    /// below.
    #[serde(default = "Processes::cgroup_default")]
    pub cgroup: String,
    /// `pids.max` of a command's tree.
    #[serde(default = "Processes::pids_max_default")]
    pub pids_max: u64,
    /// `memory.max` of a command's tree, MiB.
    #[serde(default = "Processes::memory_mb_default")]
    pub memory_mb: u64,
    /// `cpu.max` of a command's tree, percent of one CPU.
    #[serde(default = "Processes::cpu_percent_default")]
    pub cpu_percent: u32,
    /// `never` (the default), `if_unavailable` or `always`: when run_command and aido exec
    /// run a command without the sandbox. Every such call says so in its journaled record.
    #[serde(default = "Processes::unconfined_default")]
    pub unconfined: String,
    /// Most entries one command's change set may hold.
    #[serde(default = "Processes::change_files_max_default")]
    pub change_files_max: u64,
    /// Most bytes of new contents one command's change set may hold.
    #[serde(default = "Processes::change_bytes_max_default")]
    pub change_bytes_max: u64,
    /// Globs of the names of aido's environment variables a command inherits (never one
    /// whose name looks secret).
    #[serde(default = "Processes::env_inherit_default")]
    pub env_inherit: Vec<String>,
    /// The unprivileged host uid commands run as when aido is root.
    #[serde(default = "Processes::sandbox_id_default")]
    pub sandbox_uid: u32,
    /// The unprivileged host gid commands run as when aido is root.
    #[serde(default = "Processes::sandbox_id_default")]
    pub sandbox_gid: u32,
}

impl Processes {
    fn cgroup_default() -> String {
        "auto".into()
    }
    fn pids_max_default() -> u64 {
        1024
    }
    fn memory_mb_default() -> u64 {
        4096
    }
    fn cpu_percent_default() -> u32 {
        200
    }
    fn unconfined_default() -> String {
        "never".into()
    }
    fn change_files_max_default() -> u64 {
        250_000
    }
    fn change_bytes_max_default() -> u64 {
        8 << 30
    }
    fn env_inherit_default() -> Vec<String> {
        [
            "PATH",
            "HOME",
            "USER",
            "LOGNAME",
            "SHELL",
            "LANG",
            "LANGUAGE",
            "LC_*",
            "TZ",
            "TERM",
            "COLORTERM",
            "NO_COLOR",
            "EDITOR",
            "PAGER",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "RUSTFLAGS",
            "GOPATH",
            "GOROOT",
            "GOBIN",
            "GOCACHE",
            "GOMODCACHE",
            "GOFLAGS",
            "GOPROXY",
            "NVM_DIR",
            "NVM_BIN",
            "VOLTA_HOME",
            "FNM_*",
            "NODE_PATH",
            "NPM_CONFIG_CACHE",
            "PYENV_ROOT",
            "PYENV_VERSION",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "CONDA_DEFAULT_ENV",
            "PIP_FIND_LINKS",
            "UV_CACHE_DIR",
            "JAVA_HOME",
            "GRADLE_USER_HOME",
            "MAVEN_HOME",
            "M2_HOME",
            "RBENV_ROOT",
            "GEM_HOME",
            "GEM_PATH",
            "DENO_DIR",
            "BUN_INSTALL",
        ]
        .map(String::from)
        .to_vec()
    }
    fn sandbox_id_default() -> u32 {
        1_879_048_192
    }
    fn egress_connections_max_default() -> u32 {
        64
    }
    fn egress_connections_total_max_default() -> u32 {
        256
    }

    /// Every field a host process can show.
    pub const FIELDS: &'static [&'static str] =
        &["pid", "ppid", "uid", "state", "comm", "argv", "start_ticks"];
}

/// `[net]`: what the network primitives may reach, and their bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Net {
    /// Allowed hosts and ports (`host:port`, `host`, `host:*`, `*.suffix`, addresses).
    pub allow: Vec<String>,
    /// Refused address blocks reached anyway (CIDR or single addresses).
    pub allow_ranges: Vec<String>,
    /// Largest response body kept.
    pub response_bytes_max: u64,
    /// Longest exchange, redirects included.
    pub timeout_ms_max: u64,
    /// Most redirects followed.
    pub redirects_max: u32,
    /// Most port checks per minute.
    pub port_checks_per_minute_max: u32,
}

/// `[ssh]`: the hosts ssh_exec may reach.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ssh {
    /// The hosts.
    pub hosts: Vec<SshHost>,
}

/// One `[ssh] hosts` entry: where, as whom, with which keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshHost {
    /// What the agent calls it (empty: its host).
    #[serde(default)]
    pub name: String,
    /// A name or an address.
    pub host: String,
    /// The port.
    #[serde(default = "ssh_port")]
    pub port: u16,
    /// The remote user.
    pub user: String,
    /// The pinned host key: an OpenSSH public key line or its `SHA256:` fingerprint.
    pub host_key: String,
    /// The private key file (absolute).
    pub key_file: String,
}

fn ssh_port() -> u16 {
    22
}

impl SshHost {
    /// The name the agent uses for it.
    pub fn called(&self) -> &str {
        if self.name.is_empty() {
            &self.host
        } else {
            &self.name
        }
    }
}

/// `[containers]`: the images and limits of run_in_sandbox and run_container_group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Containers {
    /// Allowed image references, exact.
    pub images: Vec<String>,
    /// The podman program.
    pub podman: String,
    /// The OCI runtime (empty: podman's default).
    pub runtime: String,
    /// Most processes per container.
    pub pids_max: u32,
    /// Most memory per container, in MiB.
    pub memory_mb_max: u32,
}

/// `[llm]`: llm_call's endpoint and key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Llm {
    /// `openai` or `anthropic`.
    pub provider: LlmProvider,
    /// The API's base URL, up to and including the version.
    pub base_url: String,
    /// The default model.
    pub model: String,
    /// The environment variable holding the key.
    pub api_key_env: String,
    /// The key itself.
    pub api_key: String,
    /// max_tokens when the call names none.
    pub max_tokens_default: u32,
    /// The anthropic-version header.
    pub anthropic_version: String,
}

/// Which wire shape llm_call speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmProvider {
    /// OpenAI-compatible chat completions.
    Openai,
    /// Anthropic's messages API.
    Anthropic,
}

/// `[ollama]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ollama {
    /// The server's base URL.
    pub base_url: String,
}

/// `[snapshots]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshots {
    /// The workspace directory; empty for the workdir.
    pub workspace: String,
    /// auto, btrfs_subvolume, reflink or copy.
    pub backend: String,
}

/// `[limits]`: every bound aido enforces, with its unit last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest tools/call arguments.
    pub argument_bytes_max: u64,
    /// Largest whole-file read.
    pub read_bytes_max: u64,
    /// Largest encoded journal record.
    pub record_bytes_max: u64,
    /// Largest contents kept for one file or output (new or previous).
    pub blob_bytes_max: u64,
    /// Free space the journal's file system keeps after a write's contents are stored.
    pub journal_free_bytes_min: u64,
    /// Most records per session.
    pub records_per_session_max: u64,
    /// Most concurrent actions per session.
    pub in_flight_actions_max: u32,
    /// Longest body call.
    pub action_timeout_ms: u64,
    /// Longest wait for a human (a confirm verdict, and the ask primitives' timeouts).
    pub confirm_timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        // The defaults are a constant parsed by a test; failing here is a build defect.
        #[allow(clippy::expect_used)]
        Layered::from_layers(&[])
            .expect("built-in defaults parse")
            .config
    }
}

/// Where a layer came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "source", content = "path")]
pub enum Source {
    /// Compiled into aido.
    Defaults,
    /// A file (`~/.aido/config.toml` or `--config`).
    File(String),
    /// How aido was started: `--workdir`, or the directory it was started in.
    Started(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Defaults => f.write_str("defaults"),
            Self::File(p) => f.write_str(p),
            Self::Started(how) => f.write_str(how),
        }
    }
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML.
    #[error("{source_name}: {error}")]
    Syntax {
        /// Which layer.
        source_name: String,
        /// The parser's message.
        error: String,
    },
    /// TOML, but not aido's shape (unknown key, wrong type).
    #[error("invalid config: {error}")]
    Shape {
        /// The message.
        error: String,
    },
    /// A value that makes no sense (always_allow of a non-meta primitive, a bad glob).
    #[error("invalid config value {key}: {reason}")]
    Value {
        /// Dotted key.
        key: String,
        /// Why.
        reason: String,
    },
}

aido_actions::coded!(ConfigError {
    Syntax => "config_syntax",
    Shape => "config_shape",
    Value => "config_value",
});

/// The effective config and, for every leaf key, the layer it came from.
#[derive(Clone, Debug)]
pub struct Layered {
    /// The merged config.
    pub config: Config,
    /// Dotted key -> the layers that set it (more than one only for lists that add up).
    pub sources: BTreeMap<String, Vec<Source>>,
}

/// Keys whose lists add up across layers instead of being replaced: a later layer can never
/// remove a deny glob.
const ADDITIVE_KEYS: &[&str] = &["paths.deny", "desktop.deny"];

impl Layered {
    /// Merge the defaults with `layers` (lowest first). Tables merge key by key; a value in a
    /// later layer replaces the earlier one, except lists in [`ADDITIVE_KEYS`], which add up.
    pub fn from_layers(layers: &[(Source, &str)]) -> Result<Self, ConfigError> {
        let mut merged = toml::Table::new();
        let mut sources = BTreeMap::new();
        let all = std::iter::once((Source::Defaults, DEFAULTS_TOML))
            .chain(layers.iter().map(|(s, t)| (s.clone(), *t)));
        for (source, text) in all {
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Syntax {
                        source_name: source.to_string(),
                        error: e.to_string(),
                    })?;
            merge(&mut merged, table, "", &source, &mut sources);
        }
        let config: Config =
            toml::Value::Table(merged)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Shape {
                    error: e.to_string(),
                })?;
        config.check()?;
        Ok(Self { config, sources })
    }
}

fn merge(
    into: &mut toml::Table,
    from: toml::Table,
    prefix: &str,
    source: &Source,
    sources: &mut BTreeMap<String, Vec<Source>>,
) {
    for (key, value) in from {
        let dotted = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(existing)), toml::Value::Table(table)) => {
                merge(existing, table, &dotted, source, sources);
            }
            (Some(toml::Value::Array(existing)), toml::Value::Array(items))
                if ADDITIVE_KEYS.contains(&dotted.as_str()) =>
            {
                for item in items {
                    if !existing.contains(&item) {
                        existing.push(item);
                    }
                }
                sources.entry(dotted).or_default().push(source.clone());
            }
            (_, value) => {
                if let toml::Value::Table(t) = &value {
                    for k in t.keys() {
                        sources.insert(format!("{dotted}.{k}"), vec![source.clone()]);
                    }
                }
                into.insert(key, value);
                sources.insert(dotted, vec![source.clone()]);
            }
        }
    }
}

impl Config {
    /// Every value the types cannot refuse, in the order the sections are checked: the first
    /// bad value is the error.
    fn check(&self) -> Result<(), ConfigError> {
        self.mcp.given(&self.downstream)?;
        self.check_stores()?;
        self.check_host_fields()?;
        self.check_telemetry()?;
        self.check_processes()?;
        self.check_actions()?;
        self.check_remote()
    }

    /// `[retention]` and `[snapshots]`.
    fn check_stores(&self) -> Result<(), ConfigError> {
        if self.retention.older_than_days > Retention::OLDER_THAN_DAYS_MAX {
            return Err(ConfigError::Value {
                key: "retention.older_than_days".into(),
                reason: format!(
                    "{} is more than {} days",
                    self.retention.older_than_days,
                    Retention::OLDER_THAN_DAYS_MAX
                ),
            });
        }
        if !["auto", "btrfs_subvolume", "reflink", "copy"]
            .contains(&self.snapshots.backend.as_str())
        {
            return Err(ConfigError::Value {
                key: "snapshots.backend".into(),
                reason: format!(
                    "{} is not auto, btrfs_subvolume, reflink or copy",
                    self.snapshots.backend
                ),
            });
        }
        Ok(())
    }

    /// `[processes] host_fields`: fields of the host's processes, never their environments.
    fn check_host_fields(&self) -> Result<(), ConfigError> {
        if let Some(field) = self
            .processes
            .host_fields
            .iter()
            .find(|f| !Processes::FIELDS.contains(&f.as_str()))
        {
            return Err(ConfigError::Value {
                key: "processes.host_fields".into(),
                reason: format!(
                    "{field} is not one of {} (environments are never shown)",
                    Processes::FIELDS.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// `[telemetry] metrics_listen`: loopback only.
    fn check_telemetry(&self) -> Result<(), ConfigError> {
        if !self.telemetry.metrics_listen.is_empty() {
            let loopback = self
                .telemetry
                .metrics_listen
                .parse::<std::net::SocketAddr>()
                .map(|a| a.ip().is_loopback());
            if loopback != Ok(true) {
                return Err(ConfigError::Value {
                    key: "telemetry.metrics_listen".into(),
                    reason: format!(
                        "{} is not a loopback address:port (e.g. 127.0.0.1:9464)",
                        self.telemetry.metrics_listen
                    ),
                });
            }
        }
        Ok(())
    }

    /// `[processes]`: confinement, ids, inherited environment, cgroup limits and egress.
    fn check_processes(&self) -> Result<(), ConfigError> {
        if !["never", "if_unavailable", "always"].contains(&self.processes.unconfined.as_str()) {
            return Err(ConfigError::Value {
                key: "processes.unconfined".into(),
                reason: format!(
                    "{} is not never, if_unavailable or always",
                    self.processes.unconfined
                ),
            });
        }
        for (key, id) in [
            ("processes.sandbox_uid", self.processes.sandbox_uid),
            ("processes.sandbox_gid", self.processes.sandbox_gid),
        ] {
            if id == 0 || id == u32::MAX {
                return Err(ConfigError::Value {
                    key: key.into(),
                    reason: format!("{id} is not an unprivileged id (commands never run as root)"),
                });
            }
        }
        for glob in &self.processes.env_inherit {
            let name_like = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '*';
            if glob.is_empty() || !glob.chars().all(name_like) {
                return Err(ConfigError::Value {
                    key: "processes.env_inherit".into(),
                    reason: format!(
                        "{glob:?} is not a variable name or a glob of one (letters, digits, _ and *)"
                    ),
                });
            }
        }
        if !["required", "auto", "off"].contains(&self.processes.cgroup.as_str()) {
            return Err(ConfigError::Value {
                key: "processes.cgroup".into(),
                reason: format!("{} is not required, auto or off", self.processes.cgroup),
            });
        }
        if self.processes.pids_max == 0
            || self.processes.memory_mb == 0
            || self.processes.cpu_percent == 0
        {
            return Err(ConfigError::Value {
                key: "processes.pids_max".into(),
                reason: "pids_max, memory_mb and cpu_percent must be above 0".into(),
            });
        }
        if self.processes.egress_connections_max == 0
            || self.processes.egress_connections_total_max == 0
        {
            return Err(ConfigError::Value {
                key: "processes.egress_connections_max".into(),
                reason: "egress_connections_max and egress_connections_total_max must be above 0"
                    .into(),
            });
        }
        if let Err(error) =
            aido_net::NetPolicy::new(&self.processes.egress, &self.processes.egress_allow_ranges)
        {
            return Err(ConfigError::Value {
                key: "processes.egress".into(),
                reason: error.to_string(),
            });
        }
        Ok(())
    }

    /// `[actions]`: every name a primitive, and only meta primitives always allowed.
    fn check_actions(&self) -> Result<(), ConfigError> {
        for name in &self.actions.always_allow {
            match aido_actions::Action::class_of(name) {
                Some(aido_actions::SideEffectClass::Meta) => {}
                Some(class) => {
                    return Err(ConfigError::Value {
                        key: "actions.always_allow".into(),
                        reason: format!(
                            "{name} is {class}; only meta primitives may skip the gates"
                        ),
                    });
                }
                None => {
                    return Err(ConfigError::Value {
                        key: "actions.always_allow".into(),
                        reason: format!("no primitive is named {name}"),
                    });
                }
            }
        }
        for name in self
            .actions
            .confirm
            .iter()
            .chain(self.actions.enabled.keys())
        {
            if aido_actions::Action::class_of(name).is_none() {
                return Err(ConfigError::Value {
                    key: "actions".into(),
                    reason: format!("no primitive is named {name}"),
                });
            }
        }
        Ok(())
    }

    /// `[ssh] hosts` and `[containers]`.
    fn check_remote(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, reason: String| ConfigError::Value {
            key: key.into(),
            reason,
        };
        let mut names = std::collections::BTreeSet::new();
        for host in &self.ssh.hosts {
            if host.host.is_empty() || host.user.is_empty() || host.host_key.trim().is_empty() {
                return Err(bad(
                    "ssh.hosts",
                    format!("{} needs host, user and host_key", host.called()),
                ));
            }
            if !std::path::Path::new(&host.key_file).is_absolute() {
                return Err(bad(
                    "ssh.hosts",
                    format!("{}: key_file must be an absolute path", host.called()),
                ));
            }
            if !names.insert(host.called().to_owned()) {
                return Err(bad(
                    "ssh.hosts",
                    format!("{} is named twice", host.called()),
                ));
            }
        }
        if self.containers.pids_max == 0 || self.containers.memory_mb_max < 6 {
            return Err(bad(
                "containers",
                "pids_max must be at least 1 and memory_mb_max at least 6".into(),
            ));
        }
        Ok(())
    }

    /// The effective config as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal names the setting that decides it: each key a code's
    /// [`aido_actions::DenyCode::setting`] names is a key of the defaults, so an agent or a
    /// person can change it; the rest say no setting allows it, or name the grant.
    #[test]
    fn every_refusal_names_a_setting_that_exists() {
        let defaults: toml::Value = toml::from_str(DEFAULTS_TOML).unwrap();
        for code in aido_actions::DenyCode::ALL {
            let setting = code.setting();
            if setting.starts_with("none: ") || setting.contains("capability grant") {
                continue;
            }
            let mut named = 0;
            let mut rest = setting;
            while let Some(open) = rest.find('[') {
                let spelled = rest[open..].trim_start_matches('[');
                let close = spelled.find(']').unwrap();
                let table = &spelled[..close];
                let after = spelled[close..].trim_start_matches(']').trim_start();
                let key = after
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("");
                let (table, key) = match table.split_once('.') {
                    Some((table, key)) => (table, key),
                    None => (table, key),
                };
                assert!(
                    defaults[table].get(key).is_some(),
                    "{code}: [{table}] {key} is not a setting"
                );
                named += 1;
                rest = &spelled[close..];
            }
            if named == 0 {
                assert!(
                    defaults.get(setting).is_some(),
                    "{code}: {setting} is not a setting"
                );
            }
        }
    }

    #[test]
    fn defaults_parse_and_say_where_they_came_from() {
        let layered = Layered::from_layers(&[]).unwrap();
        assert_eq!(layered.config.mode, Mode::Normal);
        assert!(layered.config.paths.deny.contains(&"**/.ssh/**".to_owned()));
        assert!(!layered.config.desktop.enabled);
        assert_eq!(layered.sources["mode"], vec![Source::Defaults]);
        let retention = &layered.config.retention;
        assert_eq!(retention.older_than_days, 30);
        assert!(retention.at_start && retention.compact && !retention.is_off());
    }

    #[test]
    fn a_file_overrides_values_and_adds_deny_globs() {
        let file = Source::File("/x/config.toml".into());
        let layered = Layered::from_layers(&[(
            file.clone(),
            "mode = \"readonly\"\n[paths]\ndeny = [\"**/secrets/**\"]\n[limits]\nread_bytes_max = 10\n",
        )])
        .unwrap();
        let c = &layered.config;
        assert_eq!(c.mode, Mode::Readonly);
        assert_eq!(c.limits.read_bytes_max, 10);
        assert_eq!(
            c.limits.blob_bytes_max, 1099511627776,
            "untouched keys keep their default"
        );
        assert!(
            c.paths.deny.contains(&"**/.ssh/**".to_owned()),
            "a layer cannot drop a deny"
        );
        assert!(c.paths.deny.contains(&"**/secrets/**".to_owned()));
        assert_eq!(layered.sources["mode"], vec![file.clone()]);
        assert_eq!(layered.sources["limits.read_bytes_max"], vec![file.clone()]);
        assert_eq!(
            layered.sources["limits.blob_bytes_max"],
            vec![Source::Defaults]
        );
        assert_eq!(layered.sources["paths.deny"], vec![Source::Defaults, file]);
    }

    /// Desktop deny rules add up across layers like deny globs: a later layer cannot drop one.
    #[test]
    fn desktop_deny_rules_add_up_across_layers() {
        let (a, b) = (Source::File("a.toml".into()), Source::File("b.toml".into()));
        let layered = Layered::from_layers(&[
            (a, "[desktop]\ndeny = [{ class = \"keepassxc\" }]\n"),
            (b, "[desktop]\ndeny = [{ title = \"(?i)password\" }]\nallow = [{ class = \"xterm\" }]\n"),
        ])
        .unwrap();
        let d = &layered.config.desktop;
        assert_eq!(d.deny.len(), 2);
        assert_eq!(d.deny[0].class.as_deref(), Some("keepassxc"));
        assert_eq!(d.deny[1].title.as_deref(), Some("(?i)password"));
        assert_eq!(d.allow.len(), 1);
        assert_eq!(d.session, DesktopSession::Owned);
        assert!(d.terminals.iter().any(|t| t == "xterm"));
    }

    #[test]
    fn bad_configs_are_coded() {
        let f = || Source::File("c.toml".into());
        let cases: &[(&str, &str)] = &[
            ("mode = ", "config_syntax"),
            ("colour = true", "config_shape"),
            ("mode = \"yolo\"", "config_shape"),
            ("[actions]\nalways_allow = [\"write_file\"]", "config_value"),
            ("[actions]\nconfirm = [\"nope\"]", "config_value"),
            ("[retention]\nolder_than_days = 99999999", "config_value"),
            ("[retention]\nolder_than = 3", "config_shape"),
        ];
        for (text, code) in cases {
            let err = Layered::from_layers(&[(f(), text)]).unwrap_err();
            assert_eq!(err.code(), *code, "{text}");
        }
    }
}
