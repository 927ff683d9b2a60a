//! Background commands through the same re-exec path: live input, TERM to the whole
//! namespace, KILL of a tree that ignores TERM (a double-forked, setsid'd child included), and
//! a pty.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;

use aido_sandbox::{Ended, Exit, Output, StartOptions, Started};
use common::*;

fn start(
    fixture: &Fixture,
    script: &str,
    options: StartOptions,
) -> (Started, mpsc::Receiver<Ended>) {
    let (sender, receiver) = mpsc::channel();
    let mut request = fixture.request(script);
    request.timeout_ms = 60_000;
    let started = fixture
        .sandbox()
        .start(
            &fixture.profile(),
            &request,
            options,
            Box::new(move |end| {
                let _ = sender.send(end.unwrap());
            }),
        )
        .unwrap_or_else(|error| panic!("sandbox refused ({}): {error}", error.code()));
    (started, receiver)
}

/// A background server in a shared namespace, started and past its `ready` line.
fn serve_shared(
    fixture: &Fixture,
    server: &str,
) -> (
    std::sync::Arc<aido_sandbox::Control>,
    aido_sandbox::SharedNetwork,
    mpsc::Receiver<Ended>,
) {
    let (started, ended) = start(
        fixture,
        server,
        StartOptions {
            share_network: true,
            ..StartOptions::default()
        },
    );
    let network = started.network.clone().expect("a shared namespace");
    let Output::Pipes {
        stdout: mut pipe, ..
    } = started.output
    else {
        panic!("pipes")
    };
    let mut ready = [0u8; 6];
    pipe.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    // It writes nothing more: its pipe may close now.
    drop(pipe);
    (started.control, network, ended)
}

fn read_all(output: Output) -> String {
    let mut text = Vec::new();
    match output {
        Output::Pipes { mut stdout, .. } => {
            stdout.read_to_end(&mut text).unwrap();
        }
        Output::Pty { mut master } => {
            // EIO once the last slave closes.
            let mut chunk = [0u8; 4096];
            while let Ok(count) = master.read(&mut chunk) {
                if count == 0 {
                    break;
                }
                text.extend_from_slice(&chunk[..count]);
            }
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Host processes whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    aido_testkit::pids_with(marker).len()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn input_written_live_reaches_cat_and_closing_it_ends_cat() {
    let fixture = Fixture::new();
    let (started, ended) = start(&fixture, "cat", StartOptions::default());
    started.control.write_stdin(b"first line\n").unwrap();
    started.control.write_stdin(b"second line\n").unwrap();
    started.control.close_stdin().unwrap();
    assert_eq!(read_all(started.output), "first line\nsecond line\n");
    let end = ended.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(end.exit, Exit::Code(0));
}

#[test]
fn terminate_ends_the_command_and_every_double_forked_child() {
    let fixture = Fixture::new();
    // A grandchild in its own session that ignores TERM, and a command that does not.
    let (started, ended) = start(
        &fixture,
        "M=9876; setsid sh -c \"trap '' TERM; exec sleep ${M}01\" & sleep ${M}02; echo after",
        StartOptions::default(),
    );
    wait_until("both sleeps", || {
        processes_with("987601") == 1 && processes_with("987602") == 1
    });
    started.control.terminate().unwrap();
    let end = ended.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(
        end.exit,
        Exit::Signal(libc::SIGTERM),
        "sh was killed by TERM"
    );
    // Init ended with the command, and took the namespace with it.
    wait_until("no sleep left", || {
        processes_with("987601") == 0 && processes_with("987602") == 0
    });
}

#[test]
fn kill_ends_a_tree_that_ignores_terminate() {
    let fixture = Fixture::new();
    let (started, ended) = start(
        &fixture,
        "M=9876; trap '' TERM; (setsid sh -c \"trap '' TERM; exec sleep ${M}03\" &); sleep ${M}04; sleep ${M}04",
        StartOptions::default(),
    );
    wait_until("both sleeps", || {
        processes_with("987603") == 1 && processes_with("987604") == 1
    });
    started.control.terminate().unwrap();
    assert!(
        ended.recv_timeout(Duration::from_millis(500)).is_err(),
        "the command ignores TERM: it must still run"
    );
    started.control.kill();
    let end = ended.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(end.exit, Exit::Signal(libc::SIGKILL));
    wait_until("no sleep left", || {
        processes_with("987603") == 0 && processes_with("987604") == 0
    });
}

#[test]
fn a_pty_is_the_commands_terminal() {
    let fixture = Fixture::new();
    let (started, ended) = start(
        &fixture,
        "test -t 0 && test -t 1 && echo tty; stty size; read line; echo got $line",
        StartOptions {
            pty: Some((33, 111)),
            ..StartOptions::default()
        },
    );
    started.control.write_stdin(b"hello\n").unwrap();
    let text = read_all(started.output);
    assert!(text.contains("tty\r\n"), "{text:?}");
    assert!(text.contains("33 111"), "{text:?}");
    assert!(text.contains("got hello"), "{text:?}");
    let end = ended.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(end.exit, Exit::Code(0));
}

/// A background command's network namespace, shared: a server it runs is reached by a later
/// command that joins the namespace, on its loopback; a command without it reaches nothing;
/// a second background command joins the same one; once every holder is gone, a new command
/// gets a namespace of its own again.
#[test]
fn a_shared_network_lets_later_commands_reach_a_background_server() {
    let fixture = Fixture::new();
    let server = "python3 -c 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, \
                  socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", 8765)); s.listen(); print(\"ready\", \
                  flush=True)\nwhile True:\n    c, _ = s.accept(); c.sendall(b\"hello\"); c.close()'";
    let (started, network, _ended) = serve_shared(&fixture, server);
    let client = "python3 -c 'import socket; print(socket.create_connection((\"127.0.0.1\", 8765), \
                  timeout=5).recv(10).decode())' 2>&1; readlink /proc/self/ns/net";
    let joined = fixture
        .sandbox()
        .with_network(Some(network.clone()))
        .run(&fixture.profile(), &fixture.request(client))
        .unwrap();
    let out = stdout(&joined);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("hello"), "{out}");
    assert_eq!(
        lines.next().map(str::to_owned),
        Some(format!("net:[{}]", network.inode())),
        "{out}"
    );
    // Without the namespace, the same client reaches nothing.
    let alone = fixture.sh(client);
    assert!(
        stdout(&alone).contains("ConnectionRefused"),
        "{}",
        stdout(&alone)
    );
    // A second background command of the session joins it too.
    let (second, _second_ended) = {
        let (sender, receiver) = mpsc::channel();
        let mut request = fixture.request(client);
        request.timeout_ms = 60_000;
        let started = fixture
            .sandbox()
            .with_network(Some(network.clone()))
            .start(
                &fixture.profile(),
                &request,
                StartOptions {
                    share_network: true,
                    ..StartOptions::default()
                },
                Box::new(move |end| {
                    let _ = sender.send(end.unwrap());
                }),
            )
            .unwrap();
        (started, receiver)
    };
    assert_eq!(
        second.network.as_ref().map(|n| n.inode()),
        Some(network.inode())
    );
    assert!(read_all(second.output).starts_with("hello\n"));
    started.kill();
}

/// A background server exposed on the host: the host's 127.0.0.1:PORT reaches it through the
/// relay, many connections over time and a few at once; the host address is loopback only;
/// once the exposure is dropped the host port is closed; a taken host port is refused.
#[test]
fn an_exposed_port_reaches_a_background_server_from_the_hosts_loopback() {
    let fixture = Fixture::new();
    // A port free on the host now, used inside the namespace and on the host alike.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!(
        "python3 -c 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, \
         socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", {port})); s.listen(); print(\"ready\", \
         flush=True)\nwhile True:\n    c, _ = s.accept(); d = c.recv(100); c.sendall(b\"echo:\" + d); c.close()'"
    );
    let (started, network, _ended) = serve_shared(&fixture, &server);
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_aido-sandbox"));
    let exposed = aido_sandbox::Exposed::start(&exe, &network, port, 4).unwrap();
    assert_eq!(exposed.host.to_string(), format!("127.0.0.1:{port}"));
    let ask = |what: &str| -> String {
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.write_all(what.as_bytes()).unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        answer
    };
    for i in 0..20 {
        assert_eq!(ask(&format!("hi{i}")), format!("echo:hi{i}"));
    }
    let together: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                tcp.write_all(format!("t{i}").as_bytes()).unwrap();
                let mut answer = String::new();
                tcp.read_to_string(&mut answer).unwrap();
                answer
            })
        })
        .collect();
    for (i, one) in together.into_iter().enumerate() {
        assert_eq!(one.join().unwrap(), format!("echo:t{i}"));
    }
    // Taken on the host: refused, naming the port.
    let taken = aido_sandbox::Exposed::start(&exe, &network, port, 4).unwrap_err();
    assert!(
        taken.to_string().contains(&format!("expose port {port}")),
        "{taken}"
    );
    drop(exposed);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    started.terminate().unwrap();
}
