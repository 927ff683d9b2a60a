//! What the end-to-end tests of the binary share: a temp HOME and AIDO_HOME, and an `aido mcp`
//! spoken to in raw JSON-RPC lines.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use serde_json::{Value, json};

pub const AIDO: &str = env!("CARGO_BIN_EXE_aido");

pub struct Home {
    pub _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub aido_home: PathBuf,
}

pub fn home() -> Home {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    let aido_home = base.join("aido");
    std::fs::create_dir_all(&home).unwrap();
    Home {
        _dir: dir,
        home,
        aido_home,
    }
}

impl Home {
    /// A workspace `HOME/name` made the workdir in `AIDO_HOME/config.toml`, with `extra`
    /// config lines after it.
    pub fn workspace(&self, name: &str, extra: &str) -> PathBuf {
        let ws = self.home.join(name);
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&self.aido_home).unwrap();
        std::fs::write(
            self.aido_home.join("config.toml"),
            format!("workdir = \"{}\"\n{extra}", ws.display()),
        )
        .unwrap();
        ws
    }

    pub fn cmd(&self, args: &[&str]) -> Output {
        Command::new(AIDO)
            .args(args)
            .env("HOME", &self.home)
            .env("AIDO_HOME", &self.aido_home)
            .output()
            .unwrap()
    }
}

/// A running `aido mcp` spoken to in raw JSON-RPC lines.
pub struct Mcp {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    pub fn start(h: &Home, client: &str) -> Self {
        Self::start_with(h, client, &[])
    }

    /// Start with extra environment variables (e.g. `AIDO_FAULTS`).
    pub fn start_with(h: &Home, client: &str, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(AIDO)
            .arg("mcp")
            .envs(env.iter().copied())
            .env("HOME", &h.home)
            .env("AIDO_HOME", &h.aido_home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Self {
            child,
            stdin,
            stdout,
            next: 1,
        };
        let init = mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": client, "version": "1"}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    pub fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "aido mcp closed stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// One line of the server's output (0 at its end).
    pub fn read_line(&mut self, line: &mut String) -> usize {
        self.stdout.read_line(line).unwrap()
    }

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    pub fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "aido mcp exits cleanly when the client closes"
        );
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn session_of(h: &Home, client: &str) -> String {
    let out = h.cmd(&["replay", "sessions", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sessions: Value = serde_json::from_slice(&out.stdout).unwrap();
    sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["client"].as_str().is_some_and(|c| c.starts_with(client)))
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no session of {client} in {sessions}"))
}
