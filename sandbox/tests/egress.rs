//! The egress proxy (issue 9, point 2): with `Network::Proxy`, a confined command reaches the
//! hosts the allowlist admits, at addresses that pass the range check after DNS resolution,
//! through aido's proxy only; everything else is refused with a code, recorded in the outcome,
//! and reaches nothing. The servers are real listeners on the host's loopback, which the
//! profiles open explicitly (`allow_ranges`) where a test needs the connection to succeed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};

use aido_sandbox::{EgressRecord, Network, Outcome, Request};
use common::{Fixture, Server, answers, assert_code, connects, stdout};

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

// ---- What a command's network costs aido: bounds and their neighbours ----------------------

/// The process-wide cap (`connections_total_max`) binds across commands: while one command
/// holds six connections, another gets two of the eight and is refused the rest with
/// `egress_connections_total_max`; once the first ends, a third is served as usual.
#[test]
fn the_process_wide_connection_cap_binds_across_commands() {
    use common::wait_until;
    use std::time::Duration;
    let fixture = Fixture::new();
    let server = Server::start("after the cap");
    let port = server.port;
    let mut profile = fixture.profile();
    profile.network = Network::Proxy {
        allow: vec![format!("localhost:{port}"), "example.com:443".into()],
        allow_ranges: vec!["127.0.0.1/32".into(), "::1/128".into()],
        connections_max: 100,
        connections_total_max: 8,
    };
    let partial = |count: usize| vec!["partial:example.com:443".to_string(); count];
    let mut holder = connects(0, 0, &partial(6));
    holder.cwd = fixture.root.clone();
    holder.env.insert("HOLD".into(), "1".into());
    let (sender, receiver) = std::sync::mpsc::channel();
    let started = fixture
        .sandbox()
        .start(
            &profile,
            &holder,
            aido_sandbox::StartOptions::default(),
            Box::new(move |end| {
                let _ = sender.send(end);
            }),
        )
        .unwrap_or_else(|error| panic!("sandbox refused ({}): {error}", error.code()));
    let aido_sandbox::Output::Pipes { stdout: out, .. } = started.output else {
        panic!("pipes were asked for");
    };
    let mut lines = BufReader::new(out).lines();
    assert!(lines.any(|line| line.unwrap() == "HELD"));
    assert!(
        wait_until(Duration::from_secs(10), || {
            aido_sandbox::egress::connections_open() == 6
        }),
        "{} open",
        aido_sandbox::egress::connections_open()
    );
    let mut second = connects(10, 2, &partial(4));
    second.cwd = fixture.root.clone();
    let outcome = fixture.sandbox().run(&profile, &second).unwrap();
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert_eq!(
        answers(&out),
        [("503:egress_connections_total_max".to_string(), 2)].into(),
        "{out}"
    );
    assert!(out.contains("UNANSWERED 2"), "{out}");
    let totals = outcome.egress_totals.unwrap();
    assert_eq!(totals.connections, 4, "{totals:?}");
    assert_eq!(
        totals.refused.get("egress_connections_total_max"),
        Some(&2),
        "{totals:?}"
    );
    started.control.write_stdin(b"go\n").unwrap();
    let ended = receiver
        .recv_timeout(Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!(ended.exit, aido_sandbox::Exit::Code(0));
    assert!(wait_until(Duration::from_secs(5), || {
        aido_sandbox::egress::connections_open() == 0
    }));
    let after = run(
        &fixture,
        profile.network.clone(),
        &client(&[format!("get=http://localhost:{port}/")]),
    );
    assert!(
        stdout(&after).contains("after the cap"),
        "{}",
        stdout(&after)
    );
    assert_eq!(server.accepted(), 1, "nothing else reached the host");
}

/// A listening socket whose queue is full: a connect to it hangs (its SYNs are dropped) until
/// the connecting side gives up, like an address behind a firewall that drops packets.
fn black_hole() -> (u16, std::net::TcpStream, std::os::fd::OwnedFd) {
    use rustix::net::{AddressFamily, SocketType, ipproto};
    let socket =
        rustix::net::socket(AddressFamily::INET, SocketType::STREAM, Some(ipproto::TCP)).unwrap();
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    rustix::net::bind(&socket, &any).unwrap();
    rustix::net::listen(&socket, 0).unwrap();
    let bound = rustix::net::getsockname(&socket).unwrap();
    let port = std::net::SocketAddr::try_from(bound).unwrap().port();
    // With a backlog of 0 the queue holds one connection; this one fills it.
    let filler = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    (port, filler, socket)
}

/// Many parallel CONNECTs to an address that never answers hang in connect: each is a task,
/// not a thread (aido's egress threads stay within their bound), and each ends at the connect
/// deadline with `504 egress_connect_timeout`; nothing reaches the address.
#[test]
fn connects_to_a_black_hole_cost_no_threads_and_end_at_their_deadline() {
    use aido_sandbox::egress::EGRESS_THREADS_MAX;
    let fixture = Fixture::new();
    let (port, _filler, hole) = black_hole();
    let target = format!("127.0.0.1:{port}");
    let mut profile = fixture.profile();
    // An entry naming the address exactly opens it (it is loopback).
    profile.network = proxy(std::slice::from_ref(&target), &[]);
    let mut request = connects(60, 0, &vec![target.clone(); 40]);
    request.cwd = fixture.root.clone();
    let watch = common::ThreadWatch::start();
    let outcome = fixture.sandbox().run(&profile, &request).unwrap();
    let (most, most_egress) = watch.most();
    eprintln!("40 connects to a black hole: at most {most} threads, {most_egress} egress");
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert_eq!(
        answers(&out),
        [("504:egress_connect_timeout".to_string(), 40)].into(),
        "{out}"
    );
    assert!(most_egress <= EGRESS_THREADS_MAX, "{most_egress}");
    assert_eq!(
        codes(&outcome),
        vec![Some("egress_connect_timeout".to_string()); 40]
    );
    assert!(outcome.egress.iter().all(|r| r.address.is_none()));
    // Only the filler ever reached the queue.
    rustix::net::accept(&hole).unwrap();
    rustix::io::ioctl_fionbio(&hole, true).unwrap();
    assert_eq!(
        rustix::net::accept(&hole).unwrap_err(),
        rustix::io::Errno::AGAIN
    );
}

/// Set in the re-executed test that runs with a resolver that never answers.
const SLOW_RESOLVER: &str = "AIDO_TEST_SLOW_RESOLVER";

/// The proxy resolves names on the host with the C library's `getaddrinfo`, which blocks a
/// thread for as long as the resolver takes (here: a name server that never answers, with a
/// 30 s timeout). Each name gets one deadline (`504 egress_resolve_timeout`), a command has at
/// most two lookups in flight and the process eight, so a command asking for 20 slow names
/// holds at most two resolver threads; another command still gets lookups of its own, and a
/// request to an address needs none. A host name DNS cannot carry is refused before any lookup.
///
/// The test re-executes itself in a mount and network namespace of its own (`unshare`), with a
/// `resolv.conf` bound over the host's that names a silent server on its own loopback: the
/// host's resolver configuration is never touched.
#[test]
fn name_resolution_by_the_proxy_is_bounded_whatever_the_resolver_does() {
    if std::env::var_os(SLOW_RESOLVER).is_some() {
        return slow_resolver_inner();
    }
    let hosts = std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default();
    let line = hosts
        .lines()
        .find(|line| line.starts_with("hosts:"))
        .unwrap_or("hosts: files dns");
    assert!(
        line.contains(" dns") && !line.contains("resolve"),
        "this test needs getaddrinfo to ask resolv.conf's name server ({line})"
    );
    let fixture = Fixture::new();
    let conf = fixture.outside.join("resolv.conf");
    std::fs::write(
        &conf,
        "nameserver 127.0.0.1\noptions timeout:30 attempts:1\n",
    )
    .unwrap();
    let output = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--net",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
        ])
        .arg("ip link set lo up && mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"")
        .arg(&conf)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "egress::name_resolution_by_the_proxy_is_bounded_whatever_the_resolver_does",
            "--nocapture",
        ])
        .env(SLOW_RESOLVER, "1")
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{said}");
    assert!(output.status.success(), "the inner test failed: {said}");
    assert!(
        said.contains("1 passed"),
        "the inner test did not run: {said}"
    );
}

/// A name server on 127.0.0.1:53 that never answers: the names it was asked, in order.
fn silent_name_server() -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:53").unwrap();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    std::thread::spawn(move || {
        let mut packet = [0u8; 512];
        while let Ok((size, _)) = socket.recv_from(&mut packet) {
            // The question's name: labels from byte 12, each its length then its bytes.
            let mut labels = Vec::new();
            let mut at = 12;
            while at < size && packet[at] != 0 {
                let length = packet[at] as usize;
                let end = (at + 1 + length).min(size);
                labels.push(String::from_utf8_lossy(&packet[at + 1..end]).into_owned());
                at = end;
            }
            log.lock().unwrap().push(labels.join("."));
        }
    });
    asked
}

fn slow_resolver_inner() {
    use aido_sandbox::egress::{EGRESS_RESOLUTIONS_MAX, EGRESS_THREADS_MAX};
    let asked = silent_name_server();
    let fixture = Fixture::new();
    let server = Server::start("no lookup needed");
    // Five labels of 60 bytes: each a valid label, the name past the 253 bytes DNS carries.
    let long_name = format!("{}slow.test", format!("{}.", "a".repeat(60)).repeat(5));
    let mut profile = fixture.profile();
    profile.network = proxy(
        &[
            "*.slow.test:443".to_string(),
            format!("127.0.0.1:{}", server.port),
        ],
        &[],
    );
    let mut slow: Vec<String> = (0..20).map(|n| format!("n{n}.slow.test:443")).collect();
    slow.push(format!("{long_name}:443"));
    let mut request = connects(60, 0, &slow);
    request.cwd = fixture.root.clone();
    let watch = common::ThreadWatch::start();
    let outcome = fixture.sandbox().run(&profile, &request).unwrap();
    assert_code(&outcome, 0);
    let out = stdout(&outcome);
    assert_eq!(
        answers(&out),
        [
            ("400:egress_request_invalid".to_string(), 1),
            ("504:egress_resolve_timeout".to_string(), 20),
        ]
        .into(),
        "{out}"
    );
    let refused_long = outcome
        .egress
        .iter()
        .find(|r| r.code.as_deref() == Some("egress_request_invalid"))
        .unwrap();
    assert!(
        refused_long
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("DNS carries at most 253"),
        "{refused_long:?}"
    );
    let first: Vec<String> = asked.lock().unwrap().clone();
    let mut names: Vec<&String> = first.iter().collect();
    names.sort();
    names.dedup();
    eprintln!("the name server was asked {first:?}");
    assert!(
        !names.is_empty() && names.len() <= EGRESS_RESOLUTIONS_MAX,
        "one command had more than {EGRESS_RESOLUTIONS_MAX} lookups in flight: {names:?}"
    );
    assert!(names.iter().all(|name| name.ends_with(".slow.test")));
    assert!(
        !first.iter().any(|name| name.starts_with("aaaa")),
        "{first:?}"
    );
    // Another command, while the first one's lookups still hang: its own lookup goes out,
    // and a request to an address is served at once.
    let mut other = connects(60, 0, &["other.slow.test:443".to_string()]);
    other.cwd = fixture.root.clone();
    let outcome = fixture.sandbox().run(&profile, &other).unwrap();
    assert_eq!(
        answers(&stdout(&outcome)),
        [("504:egress_resolve_timeout".to_string(), 1)].into()
    );
    assert!(
        asked
            .lock()
            .unwrap()
            .iter()
            .any(|name| name == "other.slow.test"),
        "the second command's lookup was starved"
    );
    let direct = run(
        &fixture,
        profile.network.clone(),
        &client(&[format!("get=http://127.0.0.1:{}/", server.port)]),
    );
    assert!(
        stdout(&direct).contains("no lookup needed"),
        "{}",
        stdout(&direct)
    );
    let (most, most_egress) = watch.most();
    eprintln!("21 slow lookups: at most {most} threads, {most_egress} egress");
    assert!(most_egress <= EGRESS_THREADS_MAX, "{most_egress}");
}
