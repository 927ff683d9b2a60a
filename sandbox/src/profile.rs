//! What a confined command may touch ([`Profile`]), what to run ([`Request`]) and what came of it
//! ([`Outcome`]). Plain data, serde, so the profile can be journaled and hashed as an input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aido_confine::{CgroupLimits, Rlimits};
use serde::{Deserialize, Serialize};

/// The highest Landlock ABI the pinned `landlock` crate (0.4.4) can enforce.
pub const LANDLOCK_ABI_KNOWN_MAX: u8 = 6;

/// The confinement of one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The only host paths the command may write (existing directories). Everything else of
    /// the host is read-only; `/tmp` and `/dev/shm` are private tmpfs.
    pub writable_roots: Vec<PathBuf>,
    /// Paths and globs hidden from the command: an existing directory becomes an empty
    /// read-only tmpfs, an existing file an empty read-only file. A literal path that does not
    /// exist yet is denied too (see [`crate`] docs). `~/` means the parent's `$HOME`; a
    /// relative pattern applies under every writable root.
    pub deny: Vec<String>,
    /// Names of the parent's environment variables passed through when set. Everything else
    /// of the parent's environment is dropped.
    pub env_allow: Vec<String>,
    /// The Landlock ABI the kernel must provide; below it the spawn fails with
    /// `sandbox_unavailable` (never best effort). 1..=[`LANDLOCK_ABI_KNOWN_MAX`].
    pub landlock_abi_min: u8,
    /// Per-process resource limits.
    pub rlimits: Rlimits,
    /// Limits on the whole process tree. `Some` demands a cgroup with the pids, memory and cpu
    /// controllers: a delegated v2 subtree, or on a hybrid host the v1 hierarchies (as root);
    /// without one the spawn fails with `sandbox_unavailable`. Note that `RLIMIT_NPROC` does
    /// not bind when aido runs as host root, so only this bounds a fork bomb there.
    pub cgroup: Option<CgroupLimits>,
    /// Size of the private `/tmp` (and `/dev/shm`).
    pub tmp_bytes_max: u64,
    /// The command's `/tmp` is this host directory (a session's, shared by its commands)
    /// instead of a private tmpfs: it must be an existing directory the command's user owns,
    /// outside every writable root, and it is mounted `nosuid,nodev`. Nothing in it is
    /// journaled; whoever made it removes it.
    #[serde(default)]
    pub shared_tmp: Option<PathBuf>,
    /// How writes to the writable roots reach the host.
    pub writes: WriteMode,
    /// The command's network: none, or only aido's egress proxy (see [`crate::egress`]).
    #[serde(default)]
    pub network: aido_egress::Network,
    /// Host directories the command may read besides what the host lets any user read (the
    /// policy's read walls). With [`Profile::run_as`] these and the writable roots are the
    /// only host files the command owns; without it, they change nothing.
    #[serde(default)]
    pub readable_roots: Vec<PathBuf>,
    /// Run the command as this unprivileged host user instead of aido's own (aido as root):
    /// the walls (readable and writable roots) are idmapped mounts in which the files of the
    /// user who owns them appear as the command's own, and everything else of the host is
    /// seen with its real owners, so files, keys and sockets only root may use are out of the
    /// command's reach by the kernel's own checks.
    #[serde(default)]
    pub run_as: Option<RunAs>,
    /// Host Unix sockets (pathname, stream or seqpacket) the command may connect to. Every
    /// other host socket is refused (`EACCES`, and a line on the command's standard error
    /// coded `unix_socket_denied`); the command's own sockets (bound in its network namespace)
    /// are always reachable. Datagram Unix sockets are never made. The command's user must
    /// still be allowed to write the socket (its mode and group).
    #[serde(default)]
    pub unix_sockets: Vec<PathBuf>,
}

/// An unprivileged host user and group a command runs as (see [`Profile::run_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAs {
    /// The host uid (not 0).
    pub uid: u32,
    /// The host gid (not 0).
    pub gid: u32,
}

/// How the writable roots are mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum WriteMode {
    /// A read-write bind: writes land on the host at once.
    Direct,
    /// An overlayfs per writable root whose upper directory collects the changes, leaving the
    /// host tree untouched. `layers_dir` must be an empty existing directory outside every
    /// writable root; root number `i` gets `layers_dir/i/upper` and `layers_dir/i/work`.
    Overlay {
        /// Where the upper and work directories are created.
        layers_dir: PathBuf,
    },
}

impl Profile {
    /// Bound the command's tree by a cgroup of its own (`None`: none). With one, its memory is
    /// the cgroup's to bound and there is no address-space limit, as in the user's own shell:
    /// it stops programs that reserve large virtual ranges they never touch (V8's WebAssembly
    /// memories, so node's own fetch; Chromium's pointer cage).
    pub fn bound_by(&mut self, limits: Option<CgroupLimits>) {
        if limits.is_some() {
            self.rlimits.address_space_bytes_max = aido_confine::RLIMIT_UNLIMITED;
        }
        self.cgroup = limits;
    }

    /// A profile with the given writable roots and the deny list every profile should start
    /// from: credentials in `$HOME` and the host's secret files.
    pub fn new(writable_roots: Vec<PathBuf>) -> Self {
        Profile {
            writable_roots,
            deny: Self::secret_denies(),
            env_allow: Vec::new(),
            landlock_abi_min: LANDLOCK_ABI_KNOWN_MAX,
            rlimits: Rlimits::default(),
            cgroup: None,
            tmp_bytes_max: 256 << 20,
            writes: WriteMode::Direct,
            network: aido_egress::Network::None,
            readable_roots: Vec::new(),
            run_as: None,
            shared_tmp: None,
            unix_sockets: Vec::new(),
        }
    }

    /// Credentials and host secrets hidden by default.
    pub fn secret_denies() -> Vec<String> {
        [
            "~/.ssh",
            "~/.aws",
            "~/.gnupg",
            "~/.config/gcloud",
            "~/.azure",
            "~/.kube",
            "~/.docker",
            "~/.netrc",
            "~/.git-credentials",
            "~/.npmrc",
            "~/.pypirc",
            "~/.cargo/credentials.toml",
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/shadow-",
            "/etc/gshadow-",
            "/etc/sudoers",
            "/etc/sudoers.d",
            "/etc/ssh",
        ]
        .iter()
        .map(|path| path.to_string())
        .collect()
    }
}

/// One command to run confined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The program and its arguments; `argv[0]` is looked up in the sandbox's `PATH`.
    pub argv: Vec<String>,
    /// The working directory (absolute, visible in the sandbox).
    pub cwd: PathBuf,
    /// Variables set for the command, over the defaults and the profile's allowlist.
    pub env: BTreeMap<String, String>,
    /// Bytes written to the command's standard input, which is then closed.
    pub stdin: Vec<u8>,
    /// Wall-clock bound from the spawn; past it the whole pid namespace is killed.
    pub timeout_ms: u64,
    /// Standard output kept; the rest is counted and dropped.
    pub stdout_bytes_max: usize,
    /// Standard error kept; the rest is counted and dropped.
    pub stderr_bytes_max: usize,
}

impl Request {
    /// A request with a 10 s timeout and 1 MiB output caps.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>, cwd: &Path) -> Self {
        Request {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: cwd.to_path_buf(),
            env: BTreeMap::new(),
            stdin: Vec::new(),
            timeout_ms: 10_000,
            stdout_bytes_max: 1 << 20,
            stderr_bytes_max: 1 << 20,
        }
    }
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// The timeout passed and the sandbox killed the whole tree.
    TimedOut,
}

/// Resources the command's tree used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// User CPU time of the reaped tree.
    pub user_ms: u64,
    /// System CPU time of the reaped tree.
    pub system_ms: u64,
    /// Largest resident set of one process.
    pub max_rss_kib: u64,
    /// The whole tree's peak memory, from its cgroup (when the profile has cgroup limits).
    pub memory_peak_bytes: Option<u64>,
}

/// What a confined command did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// How it ended.
    pub exit: Exit,
    /// The first `stdout_bytes_max` bytes of standard output.
    pub stdout: Vec<u8>,
    /// The first `stderr_bytes_max` bytes of standard error.
    pub stderr: Vec<u8>,
    /// All bytes written to standard output, kept or not.
    pub stdout_bytes_total: u64,
    /// All bytes written to standard error, kept or not.
    pub stderr_bytes_total: u64,
    /// Whether standard output was cut.
    pub stdout_truncated: bool,
    /// Whether standard error was cut.
    pub stderr_truncated: bool,
    /// CPU and memory use (zero when the tree was killed before init could measure it).
    pub usage: Usage,
    /// The cgroup hierarchy that held the limits (`v2`, or `v1` on a hybrid host), if any.
    pub cgroup: Option<String>,
    /// Wall time from spawn to the end of the tree.
    pub duration_ms: u64,
    /// Every connection the command attempted through the egress proxy, admitted or refused
    /// (empty without [`aido_egress::Network::Proxy`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<aido_egress::EgressRecord>,
    /// Every connection to the egress proxy counted, recorded or not (`None` without
    /// [`aido_egress::Network::Proxy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_totals: Option<aido_egress::EgressTotals>,
}
