//! Real attacks from inside the sandbox. Each asserts the denial and that nothing happened on
//! the host, next to a control that shows the same probe works where it is allowed (so a
//! denial is the sandbox's doing, not a broken probe).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::time::Duration;

use aido_sandbox::Exit;
use common::*;

#[test]
fn credentials_and_host_secrets_read_as_empty() {
    let fixture = Fixture::new();
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap();
    assert!(
        shadow.contains("root:"),
        "the probe needs a real /etc/shadow"
    );
    let outcome = fixture.sh(
        "cat $H/visible.txt; echo; cat $H/.ssh/id_*; cat $H/.aws/credentials; cat /etc/shadow; \
         ls -A $H/.ssh; cat /proc/self/root$H/.ssh/id_ed25519; echo end",
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert!(out.starts_with("VISIBLE\n"), "control read failed: {out}");
    assert!(
        !out.contains("aido-test-secret"),
        "a credential leaked: {out}"
    );
    assert!(!out.contains("root:"), "/etc/shadow leaked: {out}");
    assert!(out.ends_with("end\n"));
    fixture.assert_untouched();
}

#[test]
fn a_deny_glob_hides_matching_files_and_directories() {
    let fixture = Fixture::new();
    std::fs::create_dir_all(fixture.root.join("app/secrets")).unwrap();
    std::fs::write(fixture.root.join("app/.env"), "TOKEN=aido-test-secret-env").unwrap();
    std::fs::write(fixture.root.join("app/secrets/key"), "aido-test-secret-key").unwrap();
    std::fs::write(fixture.root.join("app/main.py"), "print('ok')").unwrap();
    let mut profile = fixture.profile();
    profile.deny.extend(["**/.env".into(), "**/secrets".into()]);
    let outcome = fixture.sh_with(
        &profile,
        "cat app/main.py; echo; cat app/.env; cat app/secrets/key; ls app/secrets; \
         echo pwned > app/.env; echo pwned > app/secrets/new; mv app/.env app/env; rm -f app/.env; \
         mv app/secrets app/open; mv app app2; ln app/.env hard; echo end",
    );
    let out = stdout(&outcome);
    assert!(
        out.starts_with("print('ok')\n"),
        "control read failed: {out}"
    );
    assert!(!out.contains("aido-test-secret"), "{out}");
    assert!(
        stderr(&outcome).contains("app/.env"),
        "{}",
        stderr(&outcome)
    );
    assert_eq!(
        read(&fixture.root.join("app/.env")),
        "TOKEN=aido-test-secret-env"
    );
    assert_eq!(entries(&fixture.root.join("app/secrets")), vec!["key"]);
    assert_eq!(entries(&fixture.root), vec!["app"]);
    assert_eq!(
        entries(&fixture.root.join("app")),
        vec![".env", "main.py", "secrets"]
    );
}

#[test]
fn a_deny_glob_over_a_large_root_hides_what_appears_between_commands() {
    // A home-sized root: more entries than the first walk limit (50,000) that made every
    // command in a default setup fail, with a secret deep inside.
    let fixture = Fixture::new();
    let many = fixture.root.join("tree/many");
    std::fs::create_dir_all(&many).unwrap();
    for file in 0..51_000 {
        std::fs::write(many.join(format!("f{file}")), "").unwrap();
    }
    for top in 0..42 {
        std::fs::create_dir_all(fixture.root.join(format!("tree/d{top}/e{}", top % 7))).unwrap();
    }
    let deep = fixture.root.join("tree/d41/e6");
    std::fs::write(deep.join(".env"), "TOKEN=aido-test-secret-first").unwrap();
    let mut profile = fixture.profile();
    profile.deny.push("**/.env".into());
    // One sandbox for both commands, as the process body keeps it: the second expansion
    // reuses the first walk where nothing changed.
    let sandbox = fixture.sandbox();
    let script =
        "cat tree/d41/e6/.env tree/d7/e0/.env; ls -A tree/d7/e0; ls -A tree/many | wc -l; echo end";
    let first = sandbox.run(&profile, &fixture.request(script)).unwrap();
    assert_eq!(stdout(&first), "51000\nend\n", "{}", stderr(&first));
    // A secret that appears after the first command is hidden from the second.
    std::fs::write(
        fixture.root.join("tree/d7/e0/.env"),
        "TOKEN=aido-test-secret-second",
    )
    .unwrap();
    let second = sandbox.run(&profile, &fixture.request(script)).unwrap();
    let out = stdout(&second);
    assert!(!out.contains("aido-test-secret"), "{out}");
    assert_eq!(out, ".env\n51000\nend\n", "{}", stderr(&second));
    assert_eq!(read(&deep.join(".env")), "TOKEN=aido-test-secret-first");
}

#[test]
fn writes_outside_the_writable_roots_fail() {
    let fixture = Fixture::new();
    let outcome = fixture.sh("echo ok > inside.txt; \
         echo pwned >> $H/.bashrc; echo pwned > $H/new; echo pwned > $OUT/file.txt; \
         mkdir $OUT/dir; rm $OUT/file.txt; mv $H/visible.txt $H/moved; touch /usr/aido-pwned; \
         echo pwned > /etc/aido-pwned; echo end");
    assert_code(&outcome, 0);
    assert_eq!(read(&fixture.root.join("inside.txt")), "ok\n");
    let errors = stderr(&outcome);
    assert_eq!(
        errors.matches("Read-only file system").count(),
        8,
        "{errors}"
    );
    fixture.assert_untouched();
    assert!(!std::path::Path::new("/usr/aido-pwned").exists());
    assert!(!std::path::Path::new("/etc/aido-pwned").exists());
}

#[test]
fn denied_paths_that_do_not_exist_yet_cannot_be_created() {
    let fixture = Fixture::new();
    std::fs::create_dir(fixture.root.join("repo")).unwrap();
    std::fs::create_dir_all(fixture.root.join("other/.git")).unwrap();
    let mut profile = fixture.profile();
    profile.deny.extend([
        "**/.git/hooks".into(),
        "repo/.git/config".into(),
        "other/.git/hooks".into(),
    ]);
    let outcome = fixture.sh_with(
        &profile,
        "mkdir -p repo/.git/hooks; echo pwned > repo/.git/config; \
         mkdir other/.git/hooks; mkdir -p other/.git/hooks/x; echo pwned > other/.git/hooks/post-commit; \
         mv other/.git other/moved; rm -rf other/.git; mv other other2; mkdir other/.git/hooks; echo ok > other/.git/hooks/ok; \
         echo end",
    );
    assert!(stdout(&outcome).ends_with("end\n"));
    assert!(!stderr(&outcome).is_empty());
    // The placeholders are gone and nothing was created under them.
    assert_eq!(entries(&fixture.root.join("repo")), Vec::<String>::new());
    assert_eq!(entries(&fixture.root.join("other")), vec![".git"]);
    assert_eq!(
        entries(&fixture.root.join("other/.git")),
        Vec::<String>::new()
    );
}

#[test]
fn symlinks_from_a_writable_root_do_not_escape() {
    let fixture = Fixture::new();
    let outcome = fixture.sh(
        "ln -s $H/.bashrc rc; echo pwned >> rc; ln -s $OUT out; echo pwned > out/new; \
         echo pwned > out/file.txt; ln -s $H/.ssh ssh; cat ssh/id_ed25519; \
         ln -s / slash; echo pwned > slash/etc/aido-pwned; echo end",
    );
    assert!(stdout(&outcome).ends_with("end\n"));
    assert!(!stdout(&outcome).contains("aido-test-secret"));
    fixture.assert_untouched();
    assert!(!std::path::Path::new("/etc/aido-pwned").exists());
}

#[test]
fn hardlinks_to_outside_files_are_refused() {
    let fixture = Fixture::new();
    let outcome = fixture.sh(
        "ln $H/.bashrc rc && echo linked-rc; ln $OUT/file.txt out && echo linked-out; \
         ln $H/.ssh/id_ed25519 key && echo linked-key; echo end",
    );
    let out = stdout(&outcome);
    assert_eq!(out, "end\n", "a hardlink was made: {out}");
    assert_eq!(entries(&fixture.root), Vec::<String>::new());
    fixture.assert_untouched();
}

#[test]
fn proc_shows_only_the_sandbox() {
    let fixture = Fixture::new();
    let outcome = fixture.sh(
        "cd /proc; for pid in [0-9]*; do echo pid $pid; done; cat /proc/1/environ | tr '\\0' '\\n'; \
         ls /proc/self/root; readlink /proc/1/exe && echo init-exe-readable; readlink /proc/1/fd/0 && echo init-fds-readable; \
         head -c 1 /proc/1/mem && echo init-mem-readable; echo end",
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    let pids: Vec<&str> = out
        .lines()
        .filter_map(|line| line.strip_prefix("pid "))
        .collect();
    // init, sh and the for loop's subshell at most: the parent and the host are invisible.
    assert!(pids.len() <= 3 && pids.contains(&"1"), "{out}");
    let parent = std::process::id().to_string();
    assert!(
        !pids.iter().any(|pid| *pid == parent) || parent.len() <= 1,
        "{out}"
    );
    // init's environment is empty; the root is the sandbox's (the host /tmp is a fresh tmpfs).
    assert!(!out.contains("CARGO"), "{out}");
    // init is not dumpable: its descriptors (the control socket) and memory are closed.
    assert!(!out.contains("-readable"), "{out}");
    assert!(out.contains("end"));
}

#[test]
fn ptrace_and_process_vm_readv_are_refused() {
    let fixture = Fixture::new();
    let script = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    import time; time.sleep(5); os._exit(0)
r = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH to our own child
print("attach", r, ctypes.get_errno())
r = libc.ptrace(16, 1, 0, 0)     # and to init
print("attach-init", r, ctypes.get_errno())
buf = ctypes.create_string_buffer(8)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
remote = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
r = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
print("vm_readv", r, ctypes.get_errno())
os.kill(pid, 9)
"#;
    let outcome = fixture.python(&fixture.profile(), script, &[]);
    assert_code(&outcome, 0);
    assert_eq!(
        stdout(&outcome),
        "attach -1 1\nattach-init -1 1\nvm_readv -1 1\n"
    );
    let strace = fixture.sh("strace -f true 2>&1; echo rc=$?");
    assert!(
        stdout(&strace).contains("Operation not permitted"),
        "{}",
        stdout(&strace)
    );
}

/// Hardening issue: the seccomp filter compared whole system call numbers, so on x86_64 the
/// x32 numbering (`__X32_SYSCALL_BIT` set) matched no rule of the deny list. Every x32 call is
/// refused with EPERM by a filter of its own; a kernel without x32 (this one, say) would answer
/// ENOSYS, so EPERM shows the refusal is the sandbox's. The command's namespaces stay as they
/// were, and the 64-bit numbering of the same calls is refused by the deny list as before.
#[test]
fn x32_system_calls_are_refused_so_the_deny_list_cannot_be_sidestepped() {
    let fixture = Fixture::new();
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X32 = 0x40000000
def call(name, number, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    print(name, result, ctypes.get_errno())
namespaces = [os.readlink("/proc/self/ns/" + n) for n in ("user", "mnt", "net")]
call("unshare", 272, 0x10000000)                   # CLONE_NEWUSER, the 64-bit number
call("x32-unshare-user", X32 | 272, 0x10000000)
call("x32-unshare-mount", X32 | 272, 0x00020000)   # CLONE_NEWNS
call("x32-ptrace", X32 | 521, 16, 1, 0, 0)          # x32's own ptrace: PTRACE_ATTACH to init
call("x32-keyctl", X32 | 250, 0, 0)
call("x32-bpf", X32 | 321, 0, 0, 0)
call("x32-getpid", X32 | 39)
call("getpid", 39)
same = namespaces == [os.readlink("/proc/self/ns/" + n) for n in ("user", "mnt", "net")]
print("namespaces", "same" if same else "CHANGED")
"#;
    let outcome = fixture.python(&fixture.profile(), script, &[]);
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    let lines: Vec<&str> = out.lines().collect();
    let refused = [
        "unshare -1 1",
        "x32-unshare-user -1 1",
        "x32-unshare-mount -1 1",
        "x32-ptrace -1 1",
        "x32-keyctl -1 1",
        "x32-bpf -1 1",
        "x32-getpid -1 1",
    ];
    assert_eq!(&lines[..refused.len()], &refused, "{out}");
    // The control: the same probe reaches the kernel for an allowed call.
    let getpid = lines[refused.len()];
    assert!(
        getpid.starts_with("getpid ") && getpid.ends_with(" 0"),
        "{out}"
    );
    assert!(!getpid.starts_with("getpid -1"), "{out}");
    assert_eq!(lines[refused.len() + 1], "namespaces same", "{out}");
    fixture.assert_untouched();
}

/// A neighbour of the x32 row: the i386 ABI (`int 0x80` from a 64-bit process, which this
/// kernel's IA32 emulation serves) numbers system calls differently again. Every filter checks
/// the architecture first and kills the process on another one's calls, so an i386
/// `unshare(CLONE_NEWUSER)` ends the process with SIGSYS instead of running.
#[test]
fn i386_system_calls_kill_the_process() {
    let fixture = Fixture::new();
    let script = r#"
import ctypes, mmap
code = bytes([
    0x53,                          # push rbx (callee-saved)
    0xbb, 0x00, 0x00, 0x00, 0x10,  # mov ebx, CLONE_NEWUSER
    0xb8, 0x36, 0x01, 0x00, 0x00,  # mov eax, 310 (i386 unshare)
    0xcd, 0x80,                    # int 0x80
    0x5b,                          # pop rbx
    0xc3,                          # ret
])
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("calling", flush=True)
print("i386 unshare returned", call(), flush=True)
"#;
    let outcome = fixture.sh(&format!(
        "readlink /proc/self/ns/user > before; python3 -c '{script}'; echo rc=$?;          readlink /proc/self/ns/user | cmp -s - before && echo namespace-same"
    ));
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    // 128 + SIGSYS (31): killed by the filter, never returned.
    assert_eq!(
        out,
        "calling\nrc=159\nnamespace-same\n",
        "{}",
        stderr(&outcome)
    );
    fixture.assert_untouched();
}

#[test]
fn new_namespaces_and_mounts_are_refused() {
    let fixture = Fixture::new();
    let outcome = fixture.sh(
        "unshare -U true && echo unshare-ok; unshare -r true && echo unshare-r-ok; \
         mount -t tmpfs none /mnt && echo mount-ok; umount /proc && echo umount-ok; \
         umount $H/.ssh && echo umount-deny-ok; cat $H/.ssh/id_ed25519; echo end",
    );
    let out = stdout(&outcome);
    assert_eq!(out, "end\n", "{out}\n{}", stderr(&outcome));
    fixture.assert_untouched();
}

/// Every command has a loopback of its own: a server it starts binds there and a client in the
/// same command reaches it (a dev server and its tests), on any port, IPv4 and IPv6; the
/// host's loopback stays out of reach (the test above).
#[test]
fn a_command_has_a_loopback_of_its_own_for_its_servers() {
    let fixture = Fixture::new();
    let script = r#"
import socket, threading
for family, host in [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]:
    server = socket.socket(family, socket.SOCK_STREAM)
    server.bind((host, 8000 if family == socket.AF_INET else 0))
    server.listen()
    port = server.getsockname()[1]
    def serve():
        conn, _ = server.accept()
        conn.sendall(b"hello from " + host.encode())
        conn.close()
    threading.Thread(target=serve).start()
    client = socket.create_connection((host, port), timeout=5)
    print(client.recv(100).decode())
"#;
    let outcome = fixture.python(&fixture.profile(), script, &[]);
    assert_code(&outcome, 0);
    assert_eq!(
        stdout(&outcome),
        "hello from 127.0.0.1\nhello from ::1\n",
        "{}",
        String::from_utf8_lossy(&outcome.stderr)
    );
}

#[test]
fn no_network_not_even_the_hosts_loopback() {
    let fixture = Fixture::new();
    let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let v6 = std::net::TcpListener::bind("[::1]:0").unwrap();
    v4.set_nonblocking(true).unwrap();
    v6.set_nonblocking(true).unwrap();
    let script = format!(
        r#"
import socket
for family, host, port in [(socket.AF_INET, "127.0.0.1", {}), (socket.AF_INET6, "::1", {}),
                           (socket.AF_INET, "169.254.169.254", 80), (socket.AF_INET, "10.0.0.1", 80)]:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        print(host, "CONNECTED")
    except OSError as e:
        print(host, "refused", e.errno)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"x", ("8.8.8.8", 53))
    print("udp SENT")
except OSError as e:
    print("udp refused", e.errno)
"#,
        v4.local_addr().unwrap().port(),
        v6.local_addr().unwrap().port()
    );
    let outcome = fixture.python(&fixture.profile(), script.as_str(), &[]);
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert!(!out.contains("CONNECTED") && !out.contains("SENT"), "{out}");
    assert_eq!(out.matches("refused").count(), 5, "{out}");
    for listener in [&v4, &v6] {
        assert_eq!(
            listener.accept().map(|_| ()).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "a connection reached the parent's listener"
        );
    }
}

/// A command that opens 2,000 connections to its proxy, each trickling a request head a byte
/// at a time (one deadline per read would never fire), then makes one real request.
const SLOW_FLOOD: &str = r#"
import os, select, socket, sys, time, urllib.request
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
count, target = int(sys.argv[1]), sys.argv[2]
sockets, poll = {}, select.poll()
for _ in range(count):
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    try:
        s.send(b"C")
    except OSError:
        pass
    sockets[s.fileno()] = s
    poll.register(s, select.POLLIN)
print("OPENED", len(sockets), flush=True)
head = b"ONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Slow: " + b"a" * 4000
statuses, sent, deadline = {}, 0, time.time() + 60
while sockets and time.time() < deadline:
    for fd, _ in poll.poll(0):
        s = sockets.pop(fd)
        poll.unregister(fd)
        try:
            answer = s.recv(300)
        except OSError:
            answer = b""
        status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/1.1 ") else "reset"
        statuses[status] = statuses.get(status, 0) + 1
        s.close()
    for s in list(sockets.values()):
        try:
            s.send(head[sent:sent + 1])
        except OSError:
            pass
    sent += 1
    time.sleep(0.25)
print("OPEN", len(sockets), flush=True)
print("STATUSES", " ".join("%s=%d" % kv for kv in sorted(statuses.items())), flush=True)
print("GET", urllib.request.urlopen(target, timeout=10).read().decode(), flush=True)
"#;

/// Hardening issue: the egress proxy spent a host thread per connection, uncapped (2,700 slow
/// connections from one command gave aido 2,715 threads, far past the command's `pids.max`),
/// and its head timeout was per read, so a head trickled a byte at a time never ended. Now a
/// flood costs the command: past its connection cap each connection is answered 503 and
/// closed at once (`egress_connections_max`, counted in its totals), the ones under the cap
/// are cut at the whole-head deadline (`egress_head_timeout`), and aido's threads stay within
/// the egress runtime's fixed bound. Another command's request gets through during the flood,
/// and the flooding command's own request after it; nothing else reaches the host.
#[test]
#[allow(clippy::too_many_lines)]
fn a_slow_connection_flood_costs_the_command_not_aidos_threads() {
    use aido_sandbox::egress::{EGRESS_CONNECTIONS_MAX_DEFAULT, EGRESS_THREADS_MAX};
    let fixture = Fixture::new();
    let server = Server::start("served");
    let port = server.port;
    let network = aido_sandbox::Network::proxy(
        vec![format!("localhost:{port}"), "example.com:443".into()],
        vec!["127.0.0.1/32".into(), "::1/128".into()],
    );
    let mut profile = fixture.profile();
    profile.network = network;
    profile.rlimits.open_files_max = 4096;
    let flood = 2000;
    let target = format!("http://localhost:{port}/flooder");
    let mut request = aido_sandbox::Request::new(
        ["python3", "-c", SLOW_FLOOD, &flood.to_string(), &target],
        &fixture.root,
    );
    request.timeout_ms = 120_000;
    let (before, _) = threads();
    let watch = ThreadWatch::start();
    let (sender, receiver) = std::sync::mpsc::channel();
    let started = fixture
        .sandbox()
        .start(
            &profile,
            &request,
            aido_sandbox::StartOptions::default(),
            Box::new(move |end| {
                let _ = sender.send(end);
            }),
        )
        .unwrap_or_else(|error| panic!("sandbox refused ({}): {error}", error.code()));
    let aido_sandbox::Output::Pipes { stdout: out, .. } = started.output else {
        panic!("pipes were asked for");
    };
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(out));
    let opened = lines.next().unwrap().unwrap();
    assert_eq!(opened, format!("OPENED {flood}"));
    // The flood is on: the command holds its cap. Another command is judged as usual.
    let mut other = fixture.profile();
    other.network = profile.network.clone();
    let fetch = format!(
        "import urllib.request\nprint(urllib.request.urlopen('http://localhost:{port}/other', timeout=10).read().decode())"
    );
    let during = fixture
        .sandbox()
        .run(
            &other,
            &aido_sandbox::Request::new(["python3", "-c", fetch.as_str()], &fixture.root),
        )
        .unwrap();
    assert_code(&during, 0);
    assert_eq!(stdout(&during), "served\n");
    let ended = receiver
        .recv_timeout(Duration::from_secs(120))
        .expect("the flooding command ended")
        .unwrap();
    let (most, most_egress) = watch.most();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    eprintln!(
        "{flood} slow connections: at most {most} threads in this process ({before} before), \
         {most_egress} of them the egress runtime's; the command saw {rest:?}; totals {:?}",
        ended.egress_totals
    );
    assert_eq!(ended.exit, aido_sandbox::Exit::Code(0), "{rest:?}");
    // aido's side: the egress threads are the runtime's fixed few, whatever the command did.
    assert!(
        most_egress <= EGRESS_THREADS_MAX,
        "{most_egress} egress threads"
    );
    assert!(most <= before + EGRESS_THREADS_MAX + 16, "{most} threads");
    // The command's side: every connection was closed by the proxy, then its own request went
    // through.
    assert_eq!(rest[0], "OPEN 0", "{rest:?}");
    assert_eq!(rest[2], "GET served", "{rest:?}");
    let totals = ended.egress_totals.clone().unwrap();
    let refused = |code: &str| totals.refused.get(code).copied().unwrap_or(0);
    let over_cap = refused("egress_connections_max");
    let late = refused("egress_head_timeout");
    assert_eq!(totals.connections, flood + 1, "{totals:?}");
    assert_eq!(totals.admitted, 1, "{totals:?}");
    assert_eq!(over_cap + late, flood, "{totals:?}");
    assert!(over_cap >= flood / 2, "{totals:?}");
    assert!(
        late >= u64::from(EGRESS_CONNECTIONS_MAX_DEFAULT),
        "{totals:?}"
    );
    // Every refusal was answered: a status or, when the command's bytes were still unread at
    // the close, a reset.
    let statuses: std::collections::BTreeMap<&str, u64> = rest[1]
        .strip_prefix("STATUSES ")
        .unwrap()
        .split(' ')
        .map(|pair| {
            let (status, count) = pair.split_once('=').unwrap();
            (status, count.parse().unwrap())
        })
        .collect();
    assert_eq!(statuses.values().sum::<u64>(), flood, "{statuses:?}");
    assert!(
        statuses
            .keys()
            .all(|status| ["503", "408", "reset"].contains(status)),
        "{statuses:?}"
    );
    // One record per refusal code that named no target, the rest counted; the admitted one.
    let codes: Vec<Option<&str>> = ended.egress.iter().map(|r| r.code.as_deref()).collect();
    assert_eq!(codes.len(), 3, "{:?}", ended.egress);
    for code in ["egress_connections_max", "egress_head_timeout"] {
        assert_eq!(codes.iter().filter(|c| **c == Some(code)).count(), 1);
    }
    assert!(codes.contains(&None));
    assert_eq!(totals.records_dropped, flood - 2);
    // Nothing reached the host but the two real requests.
    assert_eq!(server.accepted(), 2);
    assert!(wait_until(Duration::from_secs(5), || {
        aido_sandbox::egress::connections_open() == 0
    }));
}

/// Hardening issue: `::ffff:0:7f00:1` (IPv4-translated, `::ffff:0:0:0/96`) was not
/// classified, so a command behind a proxy that admits the public web (`*:*`) could name
/// loopback, metadata or a private address in that form. Every IPv6 form that carries an IPv4
/// address is now judged as that address, and the forms whose IPv4 address cannot be located
/// are refused whole; the control (`127.0.0.1` named exactly by the allowlist) shows the same
/// probe reaches the listener when the policy says so.
#[test]
fn ipv6_forms_that_carry_a_refused_ipv4_address_are_refused_by_the_proxy() {
    let fixture = Fixture::new();
    let server = Server::start("must not be reached");
    let port = server.port;
    let mut profile = fixture.profile();
    profile.network =
        aido_sandbox::Network::proxy(vec![format!("127.0.0.1:{port}"), "*:*".into()], Vec::new());
    let carried = [
        format!("[::ffff:0:7f00:1]:{port}"),
        format!("[::ffff:0:127.0.0.1]:{port}"),
        format!("[::ffff:7f00:1]:{port}"),
        format!("[::127.0.0.1]:{port}"),
        format!("[64:ff9b::7f00:1]:{port}"),
        format!("[64:ff9b:1::7f00:1]:{port}"),
        format!("[64:ff9b:1:7f00:0:100::]:{port}"),
        format!("[2002:7f00:1::1]:{port}"),
        format!("[2606:4700:1:2:0:5efe:7f00:1]:{port}"),
        format!("[2001:0:53aa:64c::7f00:1]:{port}"),
        "[::ffff:0:a9fe:a9fe]:80".to_string(),
        "[::ffff:0:10.0.0.1]:80".to_string(),
        "[64:ff9b::a9fe:a9fe]:80".to_string(),
    ];
    let mut targets = carried.to_vec();
    targets.push(format!("127.0.0.1:{port}"));
    let mut request = connects(20, 0, &targets);
    request.cwd = fixture.root.clone();
    let outcome = fixture.sandbox().run(&profile, &request).unwrap();
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert_eq!(
        answers(&out),
        [
            ("200:-".to_string(), 1),
            ("403:net_address_refused".to_string(), carried.len() as u64),
        ]
        .into(),
        "{out}"
    );
    let refused: Vec<&str> = outcome
        .egress
        .iter()
        .filter(|r| r.code.as_deref() == Some("net_address_refused"))
        .map(|r| r.host.as_str())
        .collect();
    assert_eq!(refused.len(), carried.len(), "{:?}", outcome.egress);
    assert!(
        outcome
            .egress
            .iter()
            .all(|r| r.code.is_some() || r.host == "127.0.0.1"),
        "{:?}",
        outcome.egress
    );
    // Only the control reached the host's listener.
    assert!(wait_until(Duration::from_secs(5), || server.accepted() == 1));
    assert_eq!(server.accepted(), 1);
}

/// As root, commands without network borrow an empty namespace from aido's pool instead of
/// making one each: it is never the host's, never lent to two commands at once, and nothing a
/// command does leaves a trace in it (its capabilities live in its own user namespace, the
/// pooled one belongs to the host's).
#[test]
fn a_pooled_network_namespace_is_empty_unchangeable_and_lent_to_one_command_at_a_time() {
    let fixture = Fixture::new();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host = host.to_string_lossy().into_owned();
    let look = "readlink /proc/self/ns/net; ip -o link show; ip -o addr show; echo end";
    let first = fixture.sh(&format!(
        "{look}; ip link set lo up; echo up=$?; ip addr add 10.9.9.9/32 dev lo; echo addr=$?; \
         ip link add dummy0 type dummy; echo add=$?"
    ));
    let out = stdout(&first);
    assert!(out.contains("up=2") || out.contains("up=1"), "{out}");
    assert!(!out.contains("addr=0") && !out.contains("add=0"), "{out}");
    let namespace = |out: &str| out.lines().next().unwrap_or_default().to_owned();
    let mut seen = vec![namespace(&out)];
    for _ in 0..5 {
        let outcome = fixture.sh(look);
        let out = stdout(&outcome);
        // Only lo, up, with only the loopback addresses: nothing an earlier command did.
        let links: Vec<&str> = out.lines().filter(|l| l.contains(": <")).collect();
        assert_eq!(links.len(), 1, "{out}");
        assert!(
            links[0].contains(" lo: ") && links[0].contains("UP"),
            "{out}"
        );
        let addresses: Vec<&str> = out
            .lines()
            .filter(|l| l.contains(" inet"))
            .filter_map(|l| l.split_whitespace().nth(3))
            .collect();
        assert_eq!(addresses, ["127.0.0.1/8", "::1/128"], "{out}");
        seen.push(namespace(&out));
    }
    assert!(
        seen.iter().all(|n| n.starts_with("net:[") && *n != host),
        "{seen:?} {host}"
    );
    // Two at once never share one.
    let both: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| stdout(&fixture.sh("readlink /proc/self/ns/net; sleep 0.5"))))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert_ne!(both[0], both[1], "two running commands shared a namespace");
    if rustix::process::geteuid().is_root() {
        eprintln!("as root: the namespaces are pooled");
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() < seen.len(),
            "no later command reused a namespace: {seen:?}"
        );
        // The last runs' namespaces are back in the pool once their children are reaped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while aido_sandbox::netns::idle_count() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "nothing returned to the pool"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    } else {
        eprintln!("not root: every command makes its own namespace (nothing to pool)");
        let mut distinct = seen.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), seen.len(), "{seen:?}");
    }
}

#[test]
fn only_fds_0_to_2_reach_the_command_even_when_the_parent_leaks_one() {
    let fixture = Fixture::new();
    // A descriptor the parent forgot to mark close-on-exec (std marks its own, a C library
    // might not): clear the flag on purpose.
    let leaked = std::fs::File::open(fixture.home.join(".bashrc")).unwrap();
    nix::fcntl::fcntl(
        &leaked,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let script = "import os\nopen_fds = []\nfor fd in range(1024):\n    try:\n        os.fstat(fd)\n        open_fds.append(fd)\n    except OSError:\n        pass\nprint(open_fds)";
    let request = aido_sandbox::Request::new(["python3", "-c", script], &fixture.root);
    let outcome = fixture.sandbox().run(&fixture.profile(), &request).unwrap();
    assert_code(&outcome, 0);
    assert_eq!(stdout(&outcome), "[0, 1, 2]\n");
    drop(leaked);
}

#[test]
fn the_parents_environment_is_not_visible() {
    // The sandbox's own host binary runs as the parent here, with a secret in its environment.
    let fixture = Fixture::new();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_aido-sandbox"))
        .args([
            "sh",
            "-c",
            "env; cat /proc/1/environ; echo; cat /proc/*/environ; echo end",
        ])
        .current_dir(&fixture.root)
        .env("AIDO_TEST_SECRET_TOKEN", "aido-test-secret-env-value")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.contains("PATH=/usr/local/sbin"), "{out}");
    assert!(!out.contains("aido-test-secret"), "{out}");
    assert!(out.ends_with("end\n"));
}

/// RLIMIT_NPROC does not bind for host root (the kernel exempts the init user), so the bound
/// here is the cgroup's pids.max; the test says which hierarchy held it.
#[test]
fn a_fork_bomb_is_bounded_and_dies_with_the_sandbox() {
    let fixture = Fixture::new();
    let mut profile = fixture.profile();
    profile.rlimits.processes_max = 64;
    profile.cgroup = Some(aido_sandbox::CgroupLimits {
        pids_max: 64,
        memory_bytes_max: 1 << 30,
        cpu_percent_max: 100,
    });
    let marker = "aido-forkbomb-marker";
    let script = format!(
        r#"
import os, time
n = 0
try:
    while n < 10000:
        if os.fork() == 0:
            time.sleep(60)  # {marker}
            os._exit(0)
        n += 1
except OSError as e:
    print(n, e.errno)
"#
    );
    let mut request = aido_sandbox::Request::new(["python3", "-c", script.as_str()], &fixture.root);
    request.timeout_ms = 20_000;
    let outcome = match fixture.sandbox().run(&profile, &request) {
        Ok(outcome) => outcome,
        Err(error) => panic!(
            "this machine cannot bound a fork bomb ({}): {error}",
            error.code()
        ),
    };
    eprintln!(
        "fork bomb bounded by the cgroup {:?} hierarchy",
        outcome.cgroup
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    let (forked, errno) = out.trim().split_once(' ').unwrap();
    let forked: u32 = forked.parse().unwrap();
    assert!(forked < 64, "{out}");
    assert_eq!(errno, "11", "EAGAIN from pids.max: {out}");
    assert!(
        host_processes_with(marker).is_empty(),
        "{:?}",
        host_processes_with(marker)
    );
}

#[test]
fn a_memory_hog_is_bounded() {
    let fixture = Fixture::new();
    let mut profile = fixture.profile();
    profile.rlimits.address_space_bytes_max = 256 << 20;
    let request = aido_sandbox::Request::new(
        [
            "python3",
            "-c",
            "b = bytearray(1 << 30); print('allocated')",
        ],
        &fixture.root,
    );
    let outcome = fixture.sandbox().run(&profile, &request).unwrap();
    assert_code(&outcome, 1);
    assert!(
        stderr(&outcome).contains("MemoryError"),
        "{}",
        stderr(&outcome)
    );
    assert!(outcome.usage.max_rss_kib < 256 << 10, "{:?}", outcome.usage);
}

#[test]
fn a_cpu_spin_is_killed_at_the_timeout_with_its_whole_tree() {
    let fixture = Fixture::new();
    let marker = "aido-spin-marker";
    let mut request = fixture.request(&format!(
        "sh -c 'while :; do :; done # {marker}' & setsid sh -c 'sleep 60 # {marker}' & while :; do :; done"
    ));
    request.timeout_ms = 700;
    let outcome = fixture.sandbox().run(&fixture.profile(), &request).unwrap();
    assert_eq!(outcome.exit, Exit::TimedOut);
    assert!(outcome.duration_ms < 700 + 2000, "{}", outcome.duration_ms);
    assert!(
        host_processes_with(marker).is_empty(),
        "{:?}",
        host_processes_with(marker)
    );
}

#[test]
fn a_double_forked_child_dies_with_the_sandbox() {
    let fixture = Fixture::new();
    let marker = "aido-daemon-marker";
    let outcome = fixture.sh(&format!(
        "(setsid sh -c 'sleep 60 # {marker}' > /dev/null 2>&1 &) ; echo started"
    ));
    assert_code(&outcome, 0);
    assert_eq!(stdout(&outcome), "started\n");
    // init exited with the command, and the kernel killed the rest of its pid namespace.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !host_processes_with(marker).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        host_processes_with(marker).is_empty(),
        "{:?}",
        host_processes_with(marker)
    );
}

#[test]
fn setuid_binaries_gain_nothing() {
    let fixture = Fixture::new();
    let outcome = fixture.sh(
        "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
         echo x | su -c 'id' root 2>&1; echo end",
    );
    let out = stdout(&outcome);
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapPrm:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    assert!(
        !out.contains("uid=0(root) gid=0(root) groups=0(root)\nend"),
        "{out}"
    );
}

#[test]
fn a_memory_hog_is_bounded_by_the_cgroup_too() {
    let fixture = Fixture::new();
    let mut profile = fixture.profile();
    profile.cgroup = Some(aido_sandbox::CgroupLimits {
        pids_max: 64,
        memory_bytes_max: 128 << 20,
        cpu_percent_max: 100,
    });
    // Touch every page, so an address-space limit is not what stops it.
    let request = aido_sandbox::Request::new(
        [
            "python3",
            "-c",
            "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')",
        ],
        &fixture.root,
    );
    let outcome = fixture.sandbox().run(&profile, &request).unwrap();
    eprintln!(
        "memory bounded by the cgroup {:?} hierarchy: {:?}",
        outcome.cgroup, outcome.usage
    );
    assert_eq!(outcome.exit, Exit::Signal(9), "{}", stderr(&outcome));
    assert!(!stdout(&outcome).contains("survived"));
    let peak = outcome.usage.memory_peak_bytes.unwrap();
    assert!(peak <= 128 << 20, "{peak}");
}

#[test]
fn a_stdin_is_fed_and_the_exit_code_passes_through() {
    let fixture = Fixture::new();
    let mut request = fixture.request("cat; exit 7");
    request.stdin = b"from the parent".to_vec();
    let outcome = fixture.sandbox().run(&fixture.profile(), &request).unwrap();
    assert_code(&outcome, 7);
    assert_eq!(stdout(&outcome), "from the parent");
}

#[test]
fn refusals_are_coded_and_nothing_runs() {
    let fixture = Fixture::new();
    let marker = fixture.root.join("ran");
    let script = "touch ran";
    let mut profile = fixture.profile();
    profile.landlock_abi_min = 7;
    let error = fixture.try_sh(&profile, script).unwrap_err();
    assert_eq!(error.code(), "sandbox_unavailable");
    assert!(
        matches!(&error, aido_sandbox::SpawnError::SandboxUnavailable { missing, .. } if missing == "landlock_abi_v7")
    );
    let error = fixture
        .sandbox()
        .run(
            &fixture.profile(),
            &aido_sandbox::Request::new(["/no/such/program"], &fixture.root),
        )
        .unwrap_err();
    assert!(
        matches!(
            &error,
            aido_sandbox::SpawnError::ExecFailed { program, errno: 2, path }
                if program == "/no/such/program" && path.contains("/usr/bin")
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("does not exist in the sandbox"),
        "{error}"
    );
    // A bare name not in PATH says which PATH was searched and which setting gives another.
    let error = fixture
        .sandbox()
        .run(
            &fixture.profile(),
            &aido_sandbox::Request::new(["no-such-tool-anywhere"], &fixture.root),
        )
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("command not found: no-such-tool-anywhere")
            && message.contains("/usr/bin")
            && message.contains("[processes] env_inherit"),
        "{message}"
    );
    let error = fixture
        .sandbox()
        .run(
            &fixture.profile(),
            &aido_sandbox::Request::new(["true"], std::path::Path::new("/no/such/dir")),
        )
        .unwrap_err();
    assert_eq!(error.code(), "sandbox_setup_failed");
    let error = aido_sandbox::Sandbox::new("/no/such/exe")
        .run(&fixture.profile(), &fixture.request(script))
        .unwrap_err();
    assert_eq!(error.code(), "sandbox_launch_failed");
    assert!(!marker.exists());
}

#[test]
fn kill_from_inside_reaches_nothing_outside() {
    let fixture = Fixture::new();
    let marker = "aido-host-victim-marker";
    // A host process of the same uid: without a pid namespace, `kill -9 -1` would take it.
    let mut victim = std::process::Command::new("sh")
        .args(["-c", &format!("sleep 30 # {marker}")])
        .spawn()
        .unwrap();
    let outcome = fixture.sh(&format!(
        "kill -9 {victim} {parent}; echo kill=$?; kill -9 -1; echo after",
        victim = victim.id(),
        parent = std::process::id()
    ));
    // The host pids do not exist in the sandbox's pid namespace; -1 reaches only the sandbox.
    assert!(
        stdout(&outcome).starts_with("kill=1\n"),
        "{}",
        stdout(&outcome)
    );
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the host process was killed"
    );
    assert!(
        !host_processes_with(marker).is_empty(),
        "the victim is gone"
    );
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[test]
fn kernel_tunables_and_proc_are_read_only() {
    let fixture = Fixture::new();
    let before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let outcome = fixture.sh(
        "echo pwned > /proc/sys/kernel/hostname; echo 1 > /proc/sys/vm/drop_caches; \
         echo pwned > /proc/self/attr/current; echo 0 > /proc/self/oom_score_adj; \
         hostname; cat /proc/sys/kernel/hostname",
    );
    assert_eq!(
        stdout(&outcome),
        "aido-sandbox\naido-sandbox\n",
        "{}",
        stderr(&outcome)
    );
    assert_eq!(stderr(&outcome).lines().count(), 4, "{}", stderr(&outcome));
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        before
    );
}

/// The probe for the Unix socket tests: each attempt prints what came of it.
const UNIX_PROBE: &str = r#"
import os, socket, sys, threading
host = sys.argv[1]
def attempt(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, "refused", e.errno)
def connect(path, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_UNIX, kind)
    s.connect(path)
    s.sendall(b"hello")
    return "CONNECTED"
def own(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    def serve():
        c, _ = server.accept()
        c.sendall(c.recv(5).upper())
    t = threading.Thread(target=serve); t.start()
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    client.sendall(b"hello")
    got = client.recv(5).decode()
    t.join()
    return got
attempt("host", lambda: connect(host))
attempt("host seqpacket", lambda: connect(host, socket.SOCK_SEQPACKET))
attempt("dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("raw", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_RAW))
attempt("dgram pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
for made in ("link.sock", "rel.sock"):  # the root is written directly: left by a run before
    if os.path.lexists(made):
        os.remove(made)
os.symlink(host, "link.sock")
attempt("link", lambda: connect("link.sock"))
os.chdir(os.path.dirname(host))
attempt("relative", lambda: connect(os.path.basename(host)))
attempt("own tmp", lambda: own("/tmp/own.sock"))
os.chdir(sys.argv[2])
attempt("own relative", lambda: own("rel.sock"))
attempt("own abstract", lambda: own("\0aido-own"))
a, b = socket.socketpair()
a.send(b"pair")
print("pair", b.recv(4).decode())
"#;

/// What the Unix socket probe made of the host socket at `path`, under `profile`.
fn unix_probe(
    profile: &aido_sandbox::Profile,
    fixture: &Fixture,
    path: &std::path::Path,
) -> aido_sandbox::Outcome {
    let root = fixture.root.to_str().unwrap();
    fixture.python(profile, UNIX_PROBE, &[path.to_str().unwrap(), root])
}

#[test]
fn host_unix_sockets_are_refused_unless_named_and_the_commands_own_work() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let fixture = Fixture::new();
    let path = fixture.outside.join("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let outcome = unix_probe(&fixture.profile(), &fixture, &path);
    assert_code(&outcome, 0);
    let eacces = libc::EACCES;
    let eperm = libc::EPERM;
    assert_eq!(
        stdout(&outcome),
        format!(
            "host refused {eacces}\nhost seqpacket refused {eacces}\ndgram refused {eperm}\n\
             raw refused {eperm}\ndgram pair refused {eperm}\nlink refused {eacces}\n\
             relative refused {eacces}\nown tmp HELLO\nown relative HELLO\nown abstract HELLO\n\
             pair pair\n"
        ),
        "{}",
        stderr(&outcome)
    );
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "a connection reached the host socket"
    );
    let said = stderr(&outcome);
    assert!(
        said.contains(&format!("{} refused", path.display()))
            && said.contains("[processes] unix_sockets")
            && said.contains("unix_socket_denied"),
        "the refusal names the socket and the setting: {said}"
    );

    // Named by the policy: the same connect reaches it (and nothing else changes).
    let mut profile = fixture.profile();
    profile.unix_sockets = vec![path.clone()];
    let outcome = unix_probe(&profile, &fixture, &path);
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    for line in [
        "host CONNECTED",
        "link CONNECTED",
        "relative CONNECTED",
        "dgram refused",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    let mut reached = 0;
    while let Ok((mut stream, _)) = listener.accept() {
        let mut said = String::new();
        stream.set_nonblocking(false).unwrap();
        stream.read_to_string(&mut said).unwrap();
        if said == "hello" {
            reached += 1;
        }
    }
    assert_eq!(
        reached, 3,
        "each stream connect reached the named socket once"
    );
}

/// The neighbours of the Unix socket class: of every socket family and type, a command makes
/// only Unix stream and seqpacket sockets (whose connects init judges), IPv4 and IPv6 stream
/// and datagram sockets (its own network namespace, out only through the egress proxy) and
/// netlink (its own namespace too): no packet, vsock, XDP, Bluetooth or raw sockets.
#[test]
fn a_command_makes_sockets_only_of_the_families_its_namespace_holds() {
    let fixture = Fixture::new();
    let script = r#"
import socket
made = []
for family in range(1, 46):
    for kind in (1, 2, 3, 4, 5, 10):
        try:
            socket.socket(family, kind).close()
            made.append(f"{family}/{kind}")
        except OSError:
            pass
print(" ".join(made))
"#;
    let outcome = fixture.python(&fixture.profile(), script, &[]);
    assert_code(&outcome, 0);
    let (unix, inet, inet6, netlink) = (
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_NETLINK,
    );
    let (stream, dgram, raw, seqpacket) = (
        libc::SOCK_STREAM,
        libc::SOCK_DGRAM,
        libc::SOCK_RAW,
        libc::SOCK_SEQPACKET,
    );
    assert_eq!(
        stdout(&outcome).trim(),
        format!(
            "{unix}/{stream} {unix}/{seqpacket} {inet}/{stream} {inet}/{dgram} \
             {inet6}/{stream} {inet6}/{dgram} {netlink}/{dgram} {netlink}/{raw}"
        ),
        "{}",
        stderr(&outcome)
    );
}

/// The command cannot take its connects away from init: a seccomp filter of its own with a
/// listener (which would get them first and could let them through) is refused, and so is
/// `pidfd_getfd` (init's tool); a plain filter of its own is still allowed.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_command_cannot_take_a_listener_of_its_own_or_another_process_descriptors() {
    let fixture = Fixture::new();
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
allow = (F * 1)(F(0x06, 0, 0, 0x7FFF0000))
program = P(1, allow)
def call(*args):
    r = libc.syscall(*args)
    return r if r >= 0 else -ctypes.get_errno()
print("listener", call(317, 1, 8, ctypes.byref(program)))
pidfd = call(434, os.getpid(), 0)
print("pidfd_getfd", call(438, pidfd, 1, 0))
print("plain filter", call(317, 1, 0, ctypes.byref(program)))
"#;
    let outcome = fixture.python(&fixture.profile(), script, &[]);
    assert_code(&outcome, 0);
    assert_eq!(
        stdout(&outcome),
        format!(
            "listener -{eperm}\npidfd_getfd -{eperm}\nplain filter 0\n",
            eperm = libc::EPERM
        ),
        "{}",
        stderr(&outcome)
    );
}

/// If the sandbox child dies (aido killed, a bug), init gets SIGKILL from the kernel
/// (`PR_SET_PDEATHSIG`) and with it the whole pid namespace: nothing is ever orphaned.
#[test]
fn killing_the_sandbox_child_kills_the_tree() {
    let fixture = Fixture::new();
    let marker = "aido-orphan-marker";
    let mut request = fixture.request(&format!("sleep 60 # {marker}"));
    request.timeout_ms = 30_000;
    let sandbox = fixture.sandbox();
    let profile = fixture.profile();
    let runner = std::thread::spawn(move || sandbox.run(&profile, &request));
    // Wait for the command, then find its sandbox child and kill it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while host_processes_with(marker).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Other tests run sandboxes from this process too: walk up from our command to the
    // ancestor whose parent is this process.
    let parent_of = |pid: i32| -> i32 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|line| line.strip_prefix("PPid:\t"))
            .unwrap()
            .parse()
            .unwrap()
    };
    let command: i32 = host_processes_with(marker)[0]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut child = command;
    while parent_of(child) != std::process::id() as i32 {
        child = parent_of(child);
        assert!(child > 1, "the command is not our descendant");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let result = runner.join().unwrap();
    assert_eq!(result.unwrap_err().code(), "sandbox_protocol_failed");
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !host_processes_with(marker).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        host_processes_with(marker).is_empty(),
        "{:?}",
        host_processes_with(marker)
    );
}
