//! Fixtures shared by the sandbox's end-to-end tests.
//!
//! Every fixture lives under `CARGO_TARGET_TMPDIR` (or `/var/tmp` when that is under `/tmp`),
//! never under `/tmp`: the sandbox's `/tmp` is a private tmpfs, so a secret under the host's
//! `/tmp` would be invisible for the wrong reason.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aido_sandbox::{Exit, Outcome, Profile, Request, Sandbox, SpawnError};

pub struct Fixture {
    _base: tempfile::TempDir,
    /// The canonical directory holding everything below.
    pub base: PathBuf,
    /// The only writable root.
    pub root: PathBuf,
    /// A fake `$HOME` (outside the root) with credentials in it.
    pub home: PathBuf,
    /// A directory outside the root and the home.
    pub outside: PathBuf,
}

pub const SSH_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- aido-test-secret-ssh";
pub const AWS_KEY: &str = "aws_secret_access_key = aido-test-secret-aws";
pub const BASHRC: &str = "# the original bashrc\n";

impl Fixture {
    pub fn new() -> Self {
        // A checkout under /tmp (a CI clone) has its target dir there too, which the
        // sandbox's private /tmp would hide: then the fixtures go under /var/tmp.
        let mut parent = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if parent.starts_with("/tmp") {
            parent = std::path::PathBuf::from("/var/tmp/aido-sandbox-tests");
            std::fs::create_dir_all(&parent).unwrap();
            eprintln!(
                "fixtures under {} (the target dir is under /tmp)",
                parent.display()
            );
        }
        let base = tempfile::Builder::new()
            .prefix("sandbox-")
            .tempdir_in(&parent)
            .unwrap();
        let path = base.path().canonicalize().unwrap();
        let root = path.join("root");
        let home = path.join("home");
        let outside = path.join("outside");
        for directory in [
            &root,
            &home,
            &outside,
            &home.join(".ssh"),
            &home.join(".aws"),
        ] {
            std::fs::create_dir_all(directory).unwrap();
        }
        std::fs::write(home.join(".ssh/id_ed25519"), SSH_KEY).unwrap();
        std::fs::write(home.join(".aws/credentials"), AWS_KEY).unwrap();
        std::fs::write(home.join(".bashrc"), BASHRC).unwrap();
        std::fs::write(home.join("visible.txt"), "VISIBLE").unwrap();
        std::fs::write(outside.join("file.txt"), "OUTSIDE").unwrap();
        Fixture {
            _base: base,
            base: path,
            root,
            home,
            outside,
        }
    }

    pub fn sandbox(&self) -> Sandbox {
        Sandbox::new(env!("CARGO_BIN_EXE_aido-sandbox")).with_home(Some(self.home.clone()))
    }

    pub fn profile(&self) -> Profile {
        Profile::new(vec![self.root.clone()])
    }

    /// `sh -c script` in the root, with `$H` the fake home and `$OUT` the outside directory.
    pub fn request(&self, script: &str) -> Request {
        let mut request = Request::new(["sh", "-c", script], &self.root);
        request
            .env
            .insert("H".into(), self.home.display().to_string());
        request
            .env
            .insert("OUT".into(), self.outside.display().to_string());
        request
    }

    /// `python3 -c script ARGS...` in the root under `profile`.
    pub fn python(&self, profile: &Profile, script: &str, args: &[&str]) -> Outcome {
        let mut argv = vec!["python3", "-c", script];
        argv.extend_from_slice(args);
        self.sandbox()
            .run(profile, &Request::new(argv, &self.root))
            .unwrap()
    }

    pub fn try_sh(&self, profile: &Profile, script: &str) -> Result<Outcome, SpawnError> {
        self.sandbox().run(profile, &self.request(script))
    }

    pub fn sh(&self, script: &str) -> Outcome {
        self.sh_with(&self.profile(), script)
    }

    pub fn sh_with(&self, profile: &Profile, script: &str) -> Outcome {
        match self.try_sh(profile, script) {
            Ok(outcome) => outcome,
            Err(error) => panic!("sandbox refused ({}): {error}", error.code()),
        }
    }

    /// The host's files of the fixture are exactly as created.
    pub fn assert_untouched(&self) {
        assert_eq!(read(&self.home.join(".ssh/id_ed25519")), SSH_KEY);
        assert_eq!(read(&self.home.join(".aws/credentials")), AWS_KEY);
        assert_eq!(read(&self.home.join(".bashrc")), BASHRC);
        assert_eq!(read(&self.outside.join("file.txt")), "OUTSIDE");
        assert_eq!(
            entries(&self.home),
            vec![".aws", ".bashrc", ".ssh", "visible.txt"]
        );
        assert_eq!(entries(&self.home.join(".ssh")), vec!["id_ed25519"]);
        assert_eq!(entries(&self.outside), vec!["file.txt"]);
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{path:?}: {error}"))
}

pub fn entries(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub fn stdout(outcome: &Outcome) -> String {
    String::from_utf8_lossy(&outcome.stdout).into_owned()
}

pub fn stderr(outcome: &Outcome) -> String {
    String::from_utf8_lossy(&outcome.stderr).into_owned()
}

pub fn assert_code(outcome: &Outcome, code: i32) {
    assert_eq!(
        outcome.exit,
        Exit::Code(code),
        "stdout: {}\nstderr: {}",
        stdout(outcome),
        stderr(outcome)
    );
}

/// Host processes whose command line contains `marker` (none may outlive a sandbox).
pub fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|byte| byte.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!("{name}: {cmdline}"));
            }
        }
    }
    found
}

/// A one-line HTTP server on the host's loopback: answers every request with `body`, and
/// counts the connections it accepted.
pub struct Server {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    pub fn start(body: &'static str) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    // The request head, through the blank line.
                    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                        if line == "\r\n" {
                            break;
                        }
                        line.clear();
                    }
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Server { port, accepted }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// This process's threads: all of them, and the egress proxies' (named `aido-egress`).
pub fn threads() -> (usize, usize) {
    let mut total = 0;
    let mut egress = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        total += 1;
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("aido-egress") {
            egress += 1;
        }
    }
    (total, egress)
}

/// Samples [`threads`] every few milliseconds on a thread of its own (counted in the total)
/// until [`ThreadWatch::most`].
pub struct ThreadWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<(usize, usize)>,
}

impl ThreadWatch {
    pub fn start() -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = Arc::clone(&stop);
        let sampler = std::thread::spawn(move || {
            let mut most = (0, 0);
            while !done.load(Ordering::SeqCst) {
                let (total, egress) = threads();
                most = (most.0.max(total), most.1.max(egress));
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            most
        });
        ThreadWatch { stop, sampler }
    }

    /// The most threads seen, and the most egress threads.
    pub fn most(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        self.sampler.join().unwrap()
    }
}

/// Polls `condition` until it holds or `timeout` passes; whether it held.
pub fn wait_until(timeout: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Opens one connection to the proxy per target and sends `CONNECT target` (a target written
/// `partial:host:port` sends the request line only, a head that never ends), then waits up to
/// `wait` seconds for `expect` answers (0: every one) and prints them as `status:code=count`.
/// With `HOLD` set it then says `HELD` and keeps its connections until a line on its input.
pub const CONNECTS: &str = r#"
import os, select, socket, sys, time
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
wait, expect, targets = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
expect = expect or len(targets)
sockets, poll = {}, select.poll()
for target in targets:
    s = socket.create_connection(("127.0.0.1", port))
    if target.startswith("partial:"):
        s.sendall(("CONNECT %s HTTP/1.1\r\n" % target[len("partial:"):]).encode())
    else:
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    sockets[s.fileno()] = s
    poll.register(s, select.POLLIN)
answers, answered, deadline = {}, 0, time.time() + wait
while sockets and answered < expect and time.time() < deadline:
    for fd, _ in poll.poll(100):
        s = sockets.pop(fd)
        poll.unregister(fd)
        try:
            lines = s.recv(4096).decode().split("\r\n")
        except OSError:
            lines = [""]
        status = lines[0].split(" ")[1] if lines[0].startswith("HTTP/1.1 ") else "reset"
        code = next((l.split(": ")[1] for l in lines if l.startswith("X-Aido-Code: ")), "-")
        answers[status + ":" + code] = answers.get(status + ":" + code, 0) + 1
        answered += 1
print("ANSWERS", " ".join("%s=%d" % kv for kv in sorted(answers.items())), flush=True)
print("UNANSWERED", len(sockets), flush=True)
if os.environ.get("HOLD"):
    print("HELD", flush=True)
    sys.stdin.readline()
"#;

/// The `ANSWERS` line of [`CONNECTS`], as `status:code` → count.
pub fn answers(out: &str) -> std::collections::BTreeMap<String, u64> {
    let line = out
        .lines()
        .find_map(|line| line.strip_prefix("ANSWERS"))
        .unwrap_or_else(|| panic!("no answers in {out:?}"));
    line.split_whitespace()
        .map(|pair| {
            let (key, count) = pair.rsplit_once('=').unwrap();
            (key.to_owned(), count.parse().unwrap())
        })
        .collect()
}

pub fn connects(wait_s: u32, expect: usize, targets: &[String]) -> Request {
    let mut argv = vec![
        "python3".to_string(),
        "-c".into(),
        CONNECTS.into(),
        wait_s.to_string(),
        expect.to_string(),
    ];
    argv.extend(targets.iter().cloned());
    let mut request = Request::new(argv, Path::new("/"));
    request.timeout_ms = 120_000;
    request
}
