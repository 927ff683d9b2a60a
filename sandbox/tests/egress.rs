//! The egress proxy (issue 9, point 2): with `Network::Proxy`, a confined command reaches the
//! hosts the allowlist admits, at addresses that pass the range check after DNS resolution,
//! through aido's proxy only; everything else is refused with a code, recorded in the outcome,
//! and reaches nothing. The servers are real listeners on the host's loopback, which the
//! profiles open explicitly (`allow_ranges`) where a test needs the connection to succeed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};

use aido_sandbox::{EgressRecord, Network, Outcome, Request};
use common::{Fixture, Server, assert_code, stdout};

fn run(fixture: &Fixture, network: Network, script: &str) -> Outcome {
    let mut profile = fixture.profile();
    profile.network = network;
    let mut request = Request::new(["python3", "-c", script], &fixture.root);
    request.timeout_ms = 30_000;
    fixture.sandbox().run(&profile, &request).unwrap()
}

fn proxy(allow: &[String], ranges: &[&str]) -> Network {
    Network::proxy(
        allow.to_vec(),
        ranges.iter().map(|r| r.to_string()).collect(),
    )
}

/// A plain GET through the proxy from the environment, and a CONNECT tunnel by hand, print
/// what came back (or the status the proxy refused with).
const CLIENT: &str = r#"
import os, socket, sys, urllib.request, urllib.error
def get(url):
    try:
        print("GET", url, urllib.request.urlopen(url, timeout=10).read().decode())
    except urllib.error.HTTPError as e:
        print("GET", url, "status", e.code, e.headers.get("X-Aido-Code"))
    except OSError as e:
        print("GET", url, "failed", e)
def tunnel(authority):
    s = socket.create_connection(("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    head, _, early = head.partition(b"\r\n\r\n")
    head = head.decode()
    status = head.split("\r\n")[0]
    if " 200 " not in status:
        code = [l.split(": ")[1] for l in head.split("\r\n") if l.startswith("X-Aido-Code")]
        print("CONNECT", authority, "status", status.split(" ")[1], code[0] if code else "-")
        return
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = early
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    print("CONNECT", authority, data.decode().split("\r\n\r\n", 1)[1])
for arg in sys.argv[1:]:
    kind, target = arg.split("=", 1)
    get(target) if kind == "get" else tunnel(target)
"#;

fn client(args: &[String]) -> String {
    let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "import sys\nsys.argv = ['client', {}]\n{CLIENT}",
        quoted.join(", ")
    )
}

fn codes(outcome: &Outcome) -> Vec<Option<String>> {
    outcome.egress.iter().map(|r| r.code.clone()).collect()
}

#[test]
fn an_admitted_host_is_reached_through_the_proxy_and_recorded() {
    let fixture = Fixture::new();
    let server = Server::start("hello through the proxy");
    let port = server.port;
    let outcome = run(
        &fixture,
        proxy(&[format!("localhost:{port}")], &["127.0.0.1/32", "::1/128"]),
        &client(&[
            format!("get=http://localhost:{port}/x?y=1"),
            format!("connect=localhost:{port}"),
        ]),
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert!(
        out.contains(&format!(
            "GET http://localhost:{port}/x?y=1 hello through the proxy"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("CONNECT localhost:{port} hello through the proxy")),
        "{out}"
    );
    assert_eq!(server.accepted(), 2, "{out}");
    assert_eq!(outcome.egress.len(), 2, "{:?}", outcome.egress);
    for record in &outcome.egress {
        let EgressRecord {
            host,
            port: asked,
            address,
            code,
            bytes_up,
            bytes_down,
            ..
        } = record;
        assert_eq!((host.as_str(), *asked), ("localhost", port));
        assert_eq!(code, &None, "{record:?}");
        let address = address.as_deref().unwrap_or_default();
        assert!(address.ends_with(&format!(":{port}")), "{record:?}");
        assert!(*bytes_up > 0 && *bytes_down > 0, "{record:?}");
    }
    assert_eq!(outcome.egress[0].method, "GET");
    assert_eq!(outcome.egress[1].method, "CONNECT");
}

#[test]
fn hosts_ports_and_spellings_the_allowlist_does_not_name_are_refused() {
    let fixture = Fixture::new();
    let server = Server::start("nope");
    let other = Server::start("nope either");
    let port = server.port;
    let outcome = run(
        &fixture,
        proxy(&[format!("localhost:{port}")], &["127.0.0.1/32", "::1/128"]),
        &client(&[
            // Another port of an admitted host, another spelling of its address, the metadata
            // address, a private address, and a name the list does not hold.
            format!("connect=localhost:{}", other.port),
            format!("connect=127.0.0.1:{port}"),
            format!("connect=2130706433:{port}"),
            format!("connect=[::ffff:127.0.0.1]:{port}"),
            "connect=169.254.169.254:80".into(),
            format!("get=http://10.0.0.1:{port}/"),
            "get=http://example.com/".into(),
        ]),
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert_eq!(out.matches("status 403 net_denied").count(), 7, "{out}");
    assert_eq!(server.accepted() + other.accepted(), 0, "{out}");
    assert_eq!(codes(&outcome), vec![Some("net_denied".to_string()); 7]);
}

#[test]
fn a_name_that_resolves_to_a_refused_range_is_refused_after_resolution() {
    let fixture = Fixture::new();
    let server = Server::start("must not be reached");
    let port = server.port;
    // The name is on the list; its address (loopback) is not opened by any range.
    let outcome = run(
        &fixture,
        proxy(&[format!("localhost:{port}")], &[]),
        &client(&[
            format!("get=http://localhost:{port}/"),
            format!("connect=localhost:{port}"),
        ]),
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert_eq!(
        out.matches("status 403 net_address_refused").count(),
        2,
        "{out}"
    );
    assert_eq!(server.accepted(), 0);
    assert_eq!(
        codes(&outcome),
        vec![Some("net_address_refused".to_string()); 2]
    );
    assert!(
        outcome.egress[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("loopback"),
        "{:?}",
        outcome.egress
    );
}

#[test]
fn the_proxy_is_the_only_way_out() {
    let fixture = Fixture::new();
    let server = Server::start("direct");
    let port = server.port;
    // Direct connections to the host's loopback, to the metadata address and over UDP, while
    // the proxy is there: the namespace routes nowhere else and Landlock allows one port.
    let script = format!(
        r#"
import socket
for host, port in [("127.0.0.1", {port}), ("169.254.169.254", 80), ("10.0.0.1", 80), ("127.0.0.1", 22)]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        print(host, port, "CONNECTED")
    except OSError as e:
        print(host, port, "refused", e.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
    print("udp SENT")
except OSError as e:
    print("udp refused", e.errno)
"#
    );
    let outcome = run(
        &fixture,
        proxy(&[format!("localhost:{port}")], &["127.0.0.1/32"]),
        &script,
    );
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert!(!out.contains("CONNECTED") && !out.contains("SENT"), "{out}");
    assert_eq!(out.matches("refused").count(), 5, "{out}");
    assert_eq!(server.accepted(), 0);
    assert!(outcome.egress.is_empty(), "{:?}", outcome.egress);
}

#[test]
fn without_a_proxy_there_is_no_proxy_and_no_network() {
    let fixture = Fixture::new();
    let script = r#"
import os, socket
print("proxy env:", os.environ.get("HTTP_PROXY"))
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(2)
try:
    s.connect(("127.0.0.1", 3128))
    print("CONNECTED")
except OSError as e:
    print("refused", e.errno)
"#;
    let outcome = run(&fixture, Network::None, script);
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert!(out.contains("proxy env: None"), "{out}");
    assert!(
        out.contains("refused") && !out.contains("CONNECTED"),
        "{out}"
    );
}

#[test]
fn a_malformed_allowlist_is_refused_before_anything_runs() {
    let fixture = Fixture::new();
    let marker = fixture.root.join("ran");
    let mut profile = fixture.profile();
    profile.network = proxy(&["https://example.com/".into()], &[]);
    let request = Request::new(
        ["sh", "-c", &format!("touch {}", marker.display())],
        &fixture.root,
    );
    let error = fixture.sandbox().run(&profile, &request).unwrap_err();
    assert!(
        matches!(error, aido_sandbox::SpawnError::RequestInvalid { .. }),
        "{error:?}"
    );
    assert!(!marker.exists());
}

#[test]
fn a_garbage_request_is_answered_400_and_recorded() {
    let fixture = Fixture::new();
    let script = r#"
import os, socket
s = socket.create_connection(("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])), timeout=10)
s.sendall(b"HELLO\r\n\r\n")
print(s.recv(4096).decode().split("\r\n")[0])
"#;
    let outcome = run(&fixture, proxy(&["example.com:443".into()], &[]), script);
    assert_code(&outcome, 0);
    assert!(
        stdout(&outcome).starts_with("HTTP/1.1 400"),
        "{}",
        stdout(&outcome)
    );
    assert_eq!(
        codes(&outcome),
        vec![Some("egress_request_invalid".to_string())]
    );
}

/// A background command gets a proxy of its own for as long as it runs: what it reaches and
/// what is refused is readable while it runs ([`aido_sandbox::Control::egress`]) and comes with
/// its end; when it ends, the proxy stops with it.
#[test]
fn a_background_command_has_its_own_proxy_for_as_long_as_it_runs() {
    use aido_sandbox::StartOptions;
    let fixture = Fixture::new();
    let server = Server::start("hello from the background");
    let port = server.port;
    let mut profile = fixture.profile();
    profile.network = proxy(&[format!("localhost:{port}")], &["127.0.0.1/32", "::1/128"]);
    // Two requests, a line to say so, then it waits on its input before a third.
    let script = format!(
        "{}\nimport sys\nprint('READY', flush=True)\nsys.stdin.readline()\nget('http://localhost:{port}/late')\nget('http://169.254.169.254/')\n",
        client(&[
            format!("get=http://localhost:{port}/early"),
            format!("connect=localhost:{port}"),
        ])
    );
    let mut request = Request::new(["python3", "-c", script.as_str()], &fixture.root);
    request.timeout_ms = 60_000;
    let (sender, receiver) = std::sync::mpsc::channel();
    let started = fixture
        .sandbox()
        .start(
            &profile,
            &request,
            StartOptions::default(),
            Box::new(move |end| {
                let _ = sender.send(end);
            }),
        )
        .unwrap_or_else(|error| panic!("sandbox refused ({}): {error}", error.code()));
    let aido_sandbox::Output::Pipes { stdout, .. } = started.output else {
        panic!("pipes were asked for");
    };
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let ready = line == "READY";
        seen.push(line);
        if ready {
            break;
        }
    }
    assert!(
        seen.iter()
            .any(|l| l.contains("GET http://localhost") && l.contains("hello from the background")),
        "{seen:?}"
    );
    // While it runs, its attempts so far.
    let so_far = started.control.egress();
    assert_eq!(so_far.len(), 2, "{so_far:?}");
    assert!(so_far.iter().all(|r| r.code.is_none()), "{so_far:?}");
    started.control.write_stdin(b"go\n").unwrap();
    let ended = receiver
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!(ended.exit, aido_sandbox::Exit::Code(0));
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("/late hello from the background")),
        "{rest:?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.contains("169.254.169.254") && l.contains("status 403")),
        "{rest:?}"
    );
    assert_eq!(server.accepted(), 3, "the refused one reached nothing");
    let codes: Vec<Option<&str>> = ended.egress.iter().map(|r| r.code.as_deref()).collect();
    assert_eq!(codes.len(), 4, "{:?}", ended.egress);
    assert_eq!(&codes[..3], &[None, None, None], "{:?}", ended.egress);
    assert!(
        codes[3].is_some(),
        "the metadata address is refused: {:?}",
        ended.egress
    );
}
