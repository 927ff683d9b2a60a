//! The per-process layers init applies to itself before it starts the command, which inherits
//! them: resource limits, no capabilities, no-new-privileges, Landlock and seccomp.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
};
use nix::sys::resource::{Resource, setrlimit};
use rustix::thread::{CapabilitiesSecureBits, CapabilitySet, CapabilitySets};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use serde::{Deserialize, Serialize};

use crate::error::{ConfineError, Layer};

/// Sets each of `rlimits` (soft = hard) and no core dumps.
pub fn set_rlimits(rlimits: &Rlimits) -> Result<(), ConfineError> {
    let limits = [
        (Resource::RLIMIT_NPROC, rlimits.processes_max, "nproc"),
        (Resource::RLIMIT_AS, rlimits.address_space_bytes_max, "as"),
        (Resource::RLIMIT_FSIZE, rlimits.file_size_bytes_max, "fsize"),
        (Resource::RLIMIT_NOFILE, rlimits.open_files_max, "nofile"),
        (Resource::RLIMIT_CPU, rlimits.cpu_time_s_max, "cpu"),
        (Resource::RLIMIT_CORE, 0, "core"),
    ];
    for (resource, value, name) in limits {
        setrlimit(resource, value, value).map_err(|errno| {
            ConfineError::setup(Layer::Rlimit, errno, format!("{name}={value}"))
        })?;
    }
    Ok(())
}

/// Drops every capability for good: the bounding set, the three sets, and the securebits that
/// would give uid 0 (the sandbox's own root) its capabilities back on exec.
pub fn drop_capabilities() -> Result<(), ConfineError> {
    let error = |error: rustix::io::Errno, detail: &str| ConfineError::SetupFailed {
        layer: Layer::Capabilities,
        errno: error.raw_os_error(),
        detail: detail.to_string(),
    };
    rustix::thread::set_capabilities_secure_bits(
        CapabilitiesSecureBits::NO_ROOT
            | CapabilitiesSecureBits::NO_ROOT_LOCKED
            | CapabilitiesSecureBits::NO_SETUID_FIXUP
            | CapabilitiesSecureBits::NO_SETUID_FIXUP_LOCKED
            | CapabilitiesSecureBits::KEEP_CAPS_LOCKED
            | CapabilitiesSecureBits::NO_CAP_AMBIENT_RAISE,
    )
    .map_err(|errno| error(errno, "securebits"))?;
    for bit in 0..64u32 {
        let capability = CapabilitySet::from_bits_retain(1u64 << bit);
        match rustix::thread::capability_is_in_bounding_set(capability) {
            Ok(true) => rustix::thread::remove_capability_from_bounding_set(capability)
                .map_err(|errno| error(errno, &format!("bounding set bit {bit}")))?,
            Ok(false) => {}
            // Past the kernel's last capability.
            Err(_) => break,
        }
    }
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|errno| error(errno, "capset"))?;
    Ok(())
}

/// `PR_SET_NO_NEW_PRIVS`: no exec gains privileges (set-id bits, file capabilities).
pub fn no_new_privs() -> Result<(), ConfineError> {
    nix::sys::prctl::set_no_new_privs()
        .map_err(|errno| ConfineError::setup(Layer::NoNewPrivs, errno, "PR_SET_NO_NEW_PRIVS"))
}

/// Read-only (and executable) everywhere, everything on `writable`, read-write on the device
/// files that must be writable; with ABI 6+ no abstract Unix sockets or signals outside the
/// sandbox. The ABI is a hard requirement.
pub fn landlock(abi_min: u8, writable: &[PathBuf]) -> Result<(), ConfineError> {
    let abi = abi_from(abi_min);
    let map = |error| ruleset_error(abi_min, error);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(map)?;
    // TCP is not Landlock's to bound: the command's network namespace is. It holds only its
    // own loopback (and, with egress, the proxy's port on it), so a dev server binds and its
    // tests connect there, and nothing else is reachable whatever the port.
    if abi_min >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(map)?;
    }
    let mut created = ruleset
        .create()
        .map_err(map)?
        .add_rule(PathBeneath::new(
            path_fd(Path::new("/"))?,
            AccessFs::from_read(abi),
        ))
        .map_err(map)?;
    for directory in writable
        .iter()
        .map(PathBuf::as_path)
        .chain([Path::new("/tmp"), Path::new("/dev/shm")])
    {
        created = created
            .add_rule(PathBeneath::new(
                path_fd(directory)?,
                AccessFs::from_all(abi),
            ))
            .map_err(map)?;
    }
    for device in ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"] {
        created = created
            .add_rule(PathBeneath::new(
                path_fd(Path::new(device))?,
                AccessFs::from_file(abi),
            ))
            .map_err(map)?;
    }
    let status = created.restrict_self().map_err(map)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(ConfineError::unavailable(
            format!("landlock_abi_v{abi_min}"),
            format!("ruleset {:?}", status.ruleset),
        ));
    }
    Ok(())
}

/// A Landlock domain made ready before a fork and entered by the child just before it runs
/// its program ([`PreparedLandlock::enter`]: two system calls, no allocation), for a program
/// aido starts without its sandbox child (the browser): read-only (and executable) everywhere
/// or beneath the directories it names, everything on `writable`, the device files, **TCP connect only to `connect_ports` and no TCP
/// bind** (ABI 4+), and no abstract Unix sockets or signals outside the domain (ABI 6+). The
/// ABI is a hard requirement: a kernel without it is `sandbox_unavailable`, never a weaker rule.
pub struct PreparedLandlock(Option<landlock::RulesetCreated>);

impl PreparedLandlock {
    /// Build the ruleset (in the parent), reads allowed everywhere.
    pub fn new(
        abi_min: u8,
        writable: &[PathBuf],
        connect_ports: &[u16],
    ) -> Result<Self, ConfineError> {
        Self::reading(abi_min, &[PathBuf::from("/")], writable, connect_ports)
    }

    /// Build the ruleset (in the parent), reads (and execution) allowed only beneath
    /// `readable` (a path that does not exist is left out) and the writable directories.
    pub fn reading(
        abi_min: u8,
        readable: &[PathBuf],
        writable: &[PathBuf],
        connect_ports: &[u16],
    ) -> Result<Self, ConfineError> {
        let abi_min = abi_min.max(6);
        let abi = abi_from(abi_min);
        let map = |error| ruleset_error(abi_min, error);
        let mut created = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .map_err(map)?
            .handle_access(AccessNet::from_all(abi))
            .map_err(map)?
            .scope(Scope::from_all(abi))
            .map_err(map)?
            .create()
            .map_err(map)?;
        for directory in readable.iter().filter(|d| d.exists()) {
            created = created
                .add_rule(PathBeneath::new(
                    path_fd(directory)?,
                    AccessFs::from_read(abi),
                ))
                .map_err(map)?;
        }
        for directory in writable {
            created = created
                .add_rule(PathBeneath::new(
                    path_fd(directory)?,
                    AccessFs::from_all(abi),
                ))
                .map_err(map)?;
        }
        for device in ["/dev/null", "/dev/zero", "/dev/full"] {
            created = created
                .add_rule(PathBeneath::new(
                    path_fd(Path::new(device))?,
                    AccessFs::from_file(abi),
                ))
                .map_err(map)?;
        }
        for port in connect_ports {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(map)?;
        }
        Ok(Self(Some(created)))
    }

    /// Enter the domain (in the child, between fork and exec): no-new-privileges, then the
    /// ruleset, which must be fully enforced.
    pub fn enter(&mut self) -> std::io::Result<()> {
        let ruleset = self
            .0
            .take()
            .ok_or_else(|| std::io::Error::other("the Landlock domain was entered already"))?;
        let status = ruleset.restrict_self().map_err(std::io::Error::other)?;
        if status.ruleset != RulesetStatus::FullyEnforced {
            return Err(std::io::Error::other(
                "the Landlock ruleset is not fully enforced",
            ));
        }
        Ok(())
    }
}

/// A ruleset's error: the ABI `abi_min` is missing (`sandbox_unavailable`, a hard floor), or
/// the setup failed.
fn ruleset_error(abi_min: u8, error: RulesetError) -> ConfineError {
    match &error {
        RulesetError::HandleAccesses(_)
        | RulesetError::Scope(_)
        | RulesetError::CreateRuleset(_) => {
            ConfineError::unavailable(format!("landlock_abi_v{abi_min}"), error.to_string())
        }
        _ => ConfineError::SetupFailed {
            layer: Layer::Landlock,
            errno: 0,
            detail: error.to_string(),
        },
    }
}

/// A directory or file opened for a Landlock rule.
fn path_fd(path: &Path) -> Result<PathFd, ConfineError> {
    PathFd::new(path).map_err(|error| ConfineError::SetupFailed {
        layer: Layer::Landlock,
        errno: 0,
        detail: format!("{path:?}: {error}"),
    })
}

fn abi_from(abi_min: u8) -> ABI {
    match abi_min {
        0 | 1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// Syscalls the command never needs and an attacker would: tracing, mounting, new
/// namespaces, kernel modules and images, BPF, perf, keyrings, io_uring (it bypasses this
/// filter), file handles (they bypass path checks), userfaultfd, and raw-ish socket families.
fn denied_syscalls() -> Vec<(i64, &'static str)> {
    let mut denied: Vec<(i64, &'static str)> = vec![
        (libc::SYS_ptrace, "ptrace"),
        (libc::SYS_process_vm_readv, "process_vm_readv"),
        (libc::SYS_process_vm_writev, "process_vm_writev"),
        (libc::SYS_mount, "mount"),
        (libc::SYS_umount2, "umount2"),
        (libc::SYS_pivot_root, "pivot_root"),
        (libc::SYS_chroot, "chroot"),
        (libc::SYS_open_tree, "open_tree"),
        (libc::SYS_move_mount, "move_mount"),
        (libc::SYS_fsopen, "fsopen"),
        (libc::SYS_fsconfig, "fsconfig"),
        (libc::SYS_fsmount, "fsmount"),
        (libc::SYS_fspick, "fspick"),
        (libc::SYS_mount_setattr, "mount_setattr"),
        (libc::SYS_unshare, "unshare"),
        (libc::SYS_setns, "setns"),
        (libc::SYS_kexec_load, "kexec_load"),
        (libc::SYS_kexec_file_load, "kexec_file_load"),
        (libc::SYS_init_module, "init_module"),
        (libc::SYS_finit_module, "finit_module"),
        (libc::SYS_delete_module, "delete_module"),
        (libc::SYS_bpf, "bpf"),
        (libc::SYS_perf_event_open, "perf_event_open"),
        (libc::SYS_keyctl, "keyctl"),
        (libc::SYS_add_key, "add_key"),
        (libc::SYS_request_key, "request_key"),
        (libc::SYS_io_uring_setup, "io_uring_setup"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_io_uring_register, "io_uring_register"),
        (libc::SYS_open_by_handle_at, "open_by_handle_at"),
        (libc::SYS_name_to_handle_at, "name_to_handle_at"),
        (libc::SYS_userfaultfd, "userfaultfd"),
        (libc::SYS_swapon, "swapon"),
        (libc::SYS_swapoff, "swapoff"),
        (libc::SYS_reboot, "reboot"),
        (libc::SYS_acct, "acct"),
        (libc::SYS_quotactl, "quotactl"),
        (libc::SYS_syslog, "syslog"),
        (libc::SYS_vhangup, "vhangup"),
    ];
    #[cfg(target_arch = "x86_64")]
    denied.extend([
        (libc::SYS_iopl, "iopl"),
        (libc::SYS_ioperm, "ioperm"),
        (libc::SYS_uselib, "uselib"),
    ]);
    denied
}

/// The namespace flags `clone` must not carry (`CLONE_NEWNS` … `CLONE_NEWNET`, `CLONE_NEWTIME`).
const CLONE_NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64
    | 0x80; // CLONE_NEWTIME

/// Socket families `socket(2)` refuses: packet sockets and vsock reach past the network
/// namespace. Unix sockets are made (stream and seqpacket: see [`UNIX_TYPES_ALLOWED`]), and
/// every `connect` is judged by init ([`crate::connect`]): a pathname socket is the one door
/// the read-only tree leaves open (connecting needs only write permission on the socket inode,
/// which a read-only mount does not remove and Landlock below ABI 9 does not check).
const SOCKET_FAMILIES_DENIED: [i32; 2] = [libc::AF_PACKET, libc::AF_VSOCK];

/// The Unix socket types `socket(2)` and `socketpair(2)` make. A datagram socket (and
/// `SOCK_RAW`, which the kernel makes a datagram one) takes an address with every `sendto`
/// and `sendmsg`, which no filter can read, so it could deliver to any host datagram socket by
/// path; a stream or seqpacket socket reaches another only by `connect`, which init judges,
/// and ignores or refuses an address on a send.
const UNIX_TYPES_ALLOWED: [i32; 2] = [libc::SOCK_STREAM, libc::SOCK_SEQPACKET];

/// The bits of `socket`'s and `socketpair`'s type argument that name the type (the rest are
/// `SOCK_NONBLOCK` and `SOCK_CLOEXEC`).
const SOCKET_TYPE_MASK: u64 = 0xf;

/// Builds the filters. The deny list answers EPERM; `clone3`, whose flags live in memory a
/// filter cannot read, answers ENOSYS so the C library falls back to `clone`, which is checked;
/// on x86_64 every x32 system call answers EPERM ([`x32_program`]). Each filter kills the
/// process on another architecture's calls (seccompiler's check of `seccomp_data.arch`), so
/// the i386 ABI (`int 0x80`) cannot sidestep the deny list either.
#[allow(clippy::too_many_lines)]
pub(crate) fn seccomp_programs() -> Result<Vec<BpfProgram>, ConfineError> {
    let failed = |error: seccompiler::BackendError| ConfineError::SetupFailed {
        layer: Layer::Seccomp,
        errno: 0,
        detail: error.to_string(),
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|error| {
        ConfineError::unavailable(
            format!("seccomp_arch_{}", std::env::consts::ARCH),
            error.to_string(),
        )
    })?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = denied_syscalls()
        .into_iter()
        .map(|(number, _)| (number, Vec::new()))
        .collect();
    // clone's first argument is its flags on x86_64, aarch64 and riscv64.
    let clone_flags_index = 0;
    rules.insert(
        libc::SYS_clone,
        (0..64)
            .filter(|bit| CLONE_NAMESPACE_FLAGS & (1u64 << bit) != 0)
            .map(|bit| {
                SeccompCondition::new(
                    clone_flags_index,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(1u64 << bit),
                    1u64 << bit,
                )
                .and_then(|condition| SeccompRule::new(vec![condition]))
            })
            .collect::<Result<_, _>>()
            .map_err(failed)?,
    );
    rules.insert(
        libc::SYS_ioctl,
        [libc::TIOCSTI, libc::TIOCLINUX]
            .into_iter()
            .map(|request| {
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)
                    .and_then(|condition| SeccompRule::new(vec![condition]))
            })
            .collect::<Result<_, _>>()
            .map_err(failed)?,
    );
    // A Unix socket of any type but stream and seqpacket, from socket and socketpair: a rule
    // per other value of the type's bits (a filter cannot say "masked, not equal").
    let unix_other_types = || {
        (0..=SOCKET_TYPE_MASK)
            .filter(|kind| !UNIX_TYPES_ALLOWED.contains(&(*kind as i32)))
            .map(|kind| {
                let family = SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    libc::AF_UNIX as u64,
                )?;
                let kind = SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(SOCKET_TYPE_MASK),
                    kind,
                )?;
                SeccompRule::new(vec![family, kind])
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let mut socket_rules = SOCKET_FAMILIES_DENIED
        .into_iter()
        .map(|family| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, family as u64)
                .and_then(|condition| SeccompRule::new(vec![condition]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    socket_rules.extend(unix_other_types().map_err(failed)?);
    rules.insert(libc::SYS_socket, socket_rules);
    rules.insert(libc::SYS_socketpair, unix_other_types().map_err(failed)?);
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(failed)?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(failed)?;
    let mut programs = Vec::new();
    for filter in [deny, clone3] {
        programs.push(
            BpfProgram::try_from(filter).map_err(|error| ConfineError::SetupFailed {
                layer: Layer::Seccomp,
                errno: 0,
                detail: error.to_string(),
            })?,
        );
    }
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_program());
    Ok(programs)
}

/// `__X32_SYSCALL_BIT`: x86_64's x32 ABI reaches the kernel's system calls with this bit set
/// in the number, under the same `AUDIT_ARCH_X86_64`.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The audit architecture of this build (`seccomp_data.arch`): `EM_* | __AUDIT_ARCH_64BIT |
/// __AUDIT_ARCH_LE`.
#[cfg(target_arch = "x86_64")]
pub(crate) const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
pub(crate) const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "riscv64")]
pub(crate) const AUDIT_ARCH: u32 = 243 | 0x8000_0000 | 0x4000_0000;

/// Refuses every x32 system call with EPERM. seccompiler checks the architecture, which x32
/// shares with x86_64, and compares whole numbers, so `unshare | __X32_SYSCALL_BIT` matches
/// no rule of the deny list and falls to its default, allow: on a kernel built with
/// `CONFIG_X86_X32_ABI` the deny list could be sidestepped with x32 numbers. Written by hand
/// (seven instructions) because seccompiler cannot test a bit of the number. EPERM rather
/// than the ENOSYS of a kernel without x32, so a refusal shows it was this filter's.
#[cfg(target_arch = "x86_64")]
fn x32_program() -> BpfProgram {
    use bpf::{answer, jump, load};
    [
        load(bpf::DATA_ARCH),
        jump(libc::BPF_JEQ, AUDIT_ARCH, 1, 0),
        answer(libc::SECCOMP_RET_KILL_PROCESS),
        load(bpf::DATA_NR),
        jump(libc::BPF_JSET, X32_SYSCALL_BIT, 0, 1),
        answer(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        answer(libc::SECCOMP_RET_ALLOW),
    ]
    .into_iter()
    .map(|(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
    .collect()
}

/// The instructions of the filters written by hand (classic BPF over `seccomp_data`).
pub(crate) mod bpf {
    use super::Instruction;

    /// `offsetof(struct seccomp_data, nr)`.
    pub(crate) const DATA_NR: u32 = 0;
    /// `offsetof(struct seccomp_data, arch)`.
    pub(crate) const DATA_ARCH: u32 = 4;
    /// `offsetof(struct seccomp_data, args[1])`, its low word (little-endian).
    pub(crate) const DATA_ARG1_LOW: u32 = 24;

    /// Load the word at `offset` of `seccomp_data`.
    pub(crate) fn load(offset: u32) -> Instruction {
        (
            (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            0,
            0,
            offset,
        )
    }

    /// Compare the loaded word with `k` by `op`; skip `jt` or `jf` instructions.
    pub(crate) fn jump(op: u32, k: u32, jt: u8, jf: u8) -> Instruction {
        ((libc::BPF_JMP | op | libc::BPF_K) as u16, jt, jf, k)
    }

    /// Return `k`.
    pub(crate) fn answer(k: u32) -> Instruction {
        ((libc::BPF_RET | libc::BPF_K) as u16, 0, 0, k)
    }
}

/// No limit (`RLIM_INFINITY`), for a limit a cgroup sets better.
pub const RLIMIT_UNLIMITED: u64 = u64::MAX;

/// Limits set with `setrlimit` on the command (soft = hard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rlimits {
    /// `RLIMIT_NPROC`: processes of the sandbox's user (counted per user namespace).
    pub processes_max: u64,
    /// `RLIMIT_AS`: address space of each process.
    pub address_space_bytes_max: u64,
    /// `RLIMIT_FSIZE`: the largest file a process may write.
    pub file_size_bytes_max: u64,
    /// `RLIMIT_NOFILE`: open descriptors per process.
    pub open_files_max: u64,
    /// `RLIMIT_CPU`: CPU seconds per process.
    pub cpu_time_s_max: u64,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            processes_max: 256,
            address_space_bytes_max: 4 << 30,
            file_size_bytes_max: 1 << 30,
            open_files_max: 1024,
            cpu_time_s_max: 600,
        }
    }
}

/// One BPF instruction as it travels in the plan: `(code, jt, jf, k)`.
pub type Instruction = (u16, u8, u8, u32);

/// The filters, compiled once per parent process (compiling takes milliseconds; applying
/// them, microseconds) and shipped to init in the plan.
pub fn seccomp_wire() -> Result<Vec<Vec<Instruction>>, ConfineError> {
    static COMPILED: std::sync::OnceLock<Result<Vec<Vec<Instruction>>, ConfineError>> =
        std::sync::OnceLock::new();
    COMPILED
        .get_or_init(|| {
            Ok(seccomp_programs()?
                .iter()
                .map(|program| {
                    program
                        .iter()
                        .map(|filter| (filter.code, filter.jt, filter.jf, filter.k))
                        .collect()
                })
                .collect())
        })
        .clone()
}

/// Loads the filters [`seccomp_wire`] compiled (in the parent), in order.
pub fn seccomp(programs: &[Vec<Instruction>]) -> Result<(), ConfineError> {
    for program in programs {
        let program: BpfProgram = program
            .iter()
            .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
            .collect();
        seccompiler::apply_filter(&program)
            .map_err(|error| ConfineError::unavailable("seccomp_filter", error.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_seccomp_programs_build_for_this_arch() {
        let programs = super::seccomp_programs().unwrap();
        let expected = if cfg!(target_arch = "x86_64") { 3 } else { 2 };
        assert_eq!(programs.len(), expected);
        assert!(programs.iter().all(|program| !program.is_empty()));
    }
}
