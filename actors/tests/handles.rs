//! Background commands through a real runtime and the real sandbox: this test binary is its
//! own sandbox child (its `main` calls `aido_sandbox::run_child_if_requested` first, as aido's
//! does), so `run_command` with `background` re-executes it exactly as it re-executes aido.
//! Hence `harness = false`: a small runner that answers `--list` and `--exact` as libtest does,
//! so `cargo test` and `cargo nextest` both run each test on its own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly
#![allow(clippy::print_stdout, clippy::print_stderr)] // the runner reports like libtest

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use serde_json::{Value, json};

use aido_testkit::runner::AsyncTest as Test;

const TESTS: &[(&str, Test)] = &[
    (
        "cat_takes_input_and_check_handle_reads_frames_by_cursor_with_a_long_poll",
        || Box::pin(cat_round_trip()),
    ),
    (
        "stop_handle_kills_the_whole_tree_double_forked_children_included",
        || Box::pin(stop_kills_the_tree()),
    ),
    (
        "a_background_commands_file_changes_are_applied_at_stop_and_rewound",
        || Box::pin(changes_applied_at_stop()),
    ),
    (
        "a_gigabyte_flood_keeps_the_buffer_bounded_and_other_calls_answer",
        || Box::pin(flood_is_bounded()),
    ),
    ("a_pty_command_is_driven_through_its_terminal", || {
        Box::pin(pty_command())
    }),
    (
        "a_handle_is_reachable_from_another_session_of_the_same_runtime",
        || Box::pin(other_session()),
    ),
    ("bad_calls_get_coded_errors", || Box::pin(coded_errors())),
    (
        "a_directory_a_command_made_whole_moves_in_as_staged_and_is_rewound",
        || Box::pin(whole_directory_moves_in()),
    ),
    (
        "a_directory_a_command_made_whole_never_replaces_what_appeared_at_its_path",
        || Box::pin(whole_directory_never_replaces()),
    ),
    (
        "a_new_directory_holding_what_is_not_staged_is_applied_entry_by_entry",
        || Box::pin(whole_directory_with_a_socket()),
    ),
    (
        "a_process_call_that_panics_fails_with_its_own_panic_and_the_body_goes_on",
        || Box::pin(process_panic_is_its_own()),
    ),
];

fn main() {
    aido_sandbox::run_child_if_requested();
    aido_testkit::runner::run(TESTS);
}

struct Aido {
    runtime: Runtime,
    session: Session,
    _dir: tempfile::TempDir,
    root: PathBuf,
}

/// A runtime working in a fresh project under the target dir (never under `/tmp`, which is
/// the sandbox's private tmpfs).
async fn aido() -> Aido {
    let mut parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if parent.starts_with("/tmp") {
        parent = PathBuf::from("/var/tmp/aido-handles-tests");
        eprintln!(
            "fixtures under {} (the target dir is under /tmp)",
            parent.display()
        );
    }
    std::fs::create_dir_all(&parent).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("handles-")
        .tempdir_in(&parent)
        .unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    let root = home.join("project");
    std::fs::create_dir_all(&root).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n", root.display());
    let runtime = common::runtime(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime.open_session(Some("handles".into())).await.unwrap();
    Aido {
        runtime,
        session,
        _dir: dir,
        root,
    }
}

impl Aido {
    async fn run_in(
        session: &Session,
        primitive: &str,
        args: Value,
    ) -> Result<(u64, Value), String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        match session.run(action, Hooks::default()).await {
            Ok(ran) => Ok((ran.seq, ran.outcome.output)),
            Err(e) => Err(e.failure.code),
        }
    }

    async fn ok(&self, primitive: &str, args: Value) -> Value {
        Self::run_in(&self.session, primitive, args.clone())
            .await
            .unwrap_or_else(|code| panic!("{primitive} {args} failed: {code}"))
            .1
    }

    async fn err(&self, primitive: &str, args: Value) -> String {
        match Self::run_in(&self.session, primitive, args).await {
            Ok((_, out)) => panic!("{primitive} succeeded: {out}"),
            Err(code) => code,
        }
    }

    async fn start(&self, shell: &str) -> String {
        let out = self
            .ok("run_command", json!({"shell": shell, "background": true}))
            .await;
        assert_eq!(out["background"], true, "{out}");
        out["handle"].as_str().unwrap().to_owned()
    }

    /// check_handle from `cursor` until `done` holds of the text read so far (bounded).
    async fn read_until(
        &self,
        handle: &str,
        mut cursor: u64,
        done: impl Fn(&str, &Value) -> bool,
    ) -> (String, Value) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut text = String::new();
        loop {
            let out = self
                .ok(
                    "check_handle",
                    json!({"handle": handle, "cursor": cursor, "wait_ms": 2000}),
                )
                .await;
            for frame in out["frames"].as_array().unwrap() {
                text.push_str(frame["text"].as_str().unwrap());
            }
            cursor = out["next_cursor"].as_u64().unwrap();
            if done(&text, &out) {
                return (text, out);
            }
            assert!(
                Instant::now() < deadline,
                "gave up; read so far: {text:?}, last {out}"
            );
        }
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        let journal = self.runtime.journal();
        let records = journal.all_records(self.session.id()).unwrap();
        aido_replay::playback::playback(journal, &records)
    }

    fn assert_played_back(&self) -> u64 {
        let played = self.playback();
        assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
        assert!(
            played.not_reproducible.is_empty(),
            "{:?}",
            played.not_reproducible
        );
        played.reproduced
    }
}

/// Host processes whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    aido_testkit::pids_with(marker).len()
}

async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn cat_round_trip() {
    let a = aido().await;
    let handle = a.start("cat").await;
    // Nothing yet: a short long-poll comes back empty, still running, cursor unchanged.
    let empty = a
        .ok("check_handle", json!({"handle": handle, "wait_ms": 200}))
        .await;
    assert_eq!(empty["state"], "running", "{empty}");
    assert_eq!(empty["frames"], json!([]));
    assert_eq!(empty["next_cursor"], 0);
    // A long-poll started before the input arrives returns with it.
    let (write, poll) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            a.ok("write_stdin", json!({"handle": handle, "text": "hello\n"}))
                .await
        },
        a.ok("check_handle", json!({"handle": handle, "wait_ms": 8000}))
    );
    assert_eq!(write["bytes_written"], 6);
    assert_eq!(poll["frames"][0]["text"], "hello\n", "{poll}");
    assert_eq!(poll["frames"][0]["stream"], "stdout");
    let cursor = poll["next_cursor"].as_u64().unwrap();
    a.ok(
        "write_stdin",
        json!({"handle": handle, "text": "bye\n", "close": true}),
    )
    .await;
    let (text, last) = a
        .read_until(&handle, cursor, |_, out| out["state"] == "exited")
        .await;
    assert_eq!(text, "bye\n");
    assert_eq!(last["exit_code"], 0);
    // Reading from the start again still finds everything (nothing was dropped).
    let again = a
        .ok("check_handle", json!({"handle": handle, "cursor": 0}))
        .await;
    let all: String = again["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(all, "hello\nbye\n");
    assert_eq!(again["missed_frames"], 0);
    assert_eq!(
        a.err("write_stdin", json!({"handle": handle, "text": "late"}))
            .await,
        "handle_ended"
    );
    let stopped = a.ok("stop_handle", json!({"handle": handle})).await;
    assert_eq!(stopped["stopped_by"], "already_ended", "{stopped}");
    assert_eq!(stopped["exit_code"], 0);
    let list = a.ok("list_handles", json!({})).await;
    assert_eq!(list["handles"][0]["handle"], handle.as_str());
    assert_eq!(list["handles"][0]["state"], "stopped");
    // Every result, frames included, from the journal alone: nothing is spawned.
    let reproduced = a.assert_played_back();
    assert!(reproduced >= 9, "{reproduced}");
    eprintln!("playback reproduced {reproduced} results");
    a.runtime.shutdown().await;
}

async fn stop_kills_the_tree() {
    let a = aido().await;
    // The command and a setsid'd grandchild both ignore TERM.
    let handle = a
        .start("M=8765; trap '' TERM; (setsid sh -c \"trap '' TERM; exec sleep ${M}01\" &); sleep ${M}02; sleep ${M}02")
        .await;
    wait_until("both sleeps", || {
        processes_with("876501") == 1 && processes_with("876502") == 1
    })
    .await;
    let stopped = a
        .ok("stop_handle", json!({"handle": handle, "grace_ms": 300}))
        .await;
    assert_eq!(stopped["stopped_by"], "kill", "{stopped}");
    assert_eq!(stopped["signal"], 9);
    wait_until("no sleep left", || {
        processes_with("876501") == 0 && processes_with("876502") == 0
    })
    .await;
    // A command that takes TERM is stopped by it.
    let handle = a.start("exec sleep 876503").await;
    wait_until("the sleep", || processes_with("876503") == 1).await;
    let stopped = a.ok("stop_handle", json!({"handle": handle})).await;
    assert_eq!(stopped["stopped_by"], "term", "{stopped}");
    assert_eq!(stopped["signal"], 15);
    assert_eq!(processes_with("876503"), 0);
    a.assert_played_back();
    a.runtime.shutdown().await;
}

async fn changes_applied_at_stop() {
    let a = aido().await;
    std::fs::write(a.root.join("kept.txt"), "before\n").unwrap();
    let handle = a
        .start("echo made > out.txt; echo after > kept.txt; mkdir d; echo y > d/y.txt; echo ready; exec sleep 876504")
        .await;
    a.read_until(&handle, 0, |text, _| text.contains("ready"))
        .await;
    // While it runs its writes are in its layer only.
    assert!(!a.root.join("out.txt").exists());
    assert_eq!(
        std::fs::read_to_string(a.root.join("kept.txt")).unwrap(),
        "before\n"
    );
    let (seq, stopped) = Aido::run_in(&a.session, "stop_handle", json!({"handle": handle}))
        .await
        .unwrap();
    assert_eq!(stopped["file_changes_journaled"], true, "{stopped}");
    let paths: Vec<&str> = stopped["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("{stopped}"))
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    assert!(paths.iter().any(|p| p.ends_with("out.txt")), "{paths:?}");
    assert_eq!(
        std::fs::read_to_string(a.root.join("out.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(a.root.join("kept.txt")).unwrap(),
        "after\n"
    );
    assert_eq!(
        std::fs::read_to_string(a.root.join("d/y.txt")).unwrap(),
        "y\n"
    );
    // A second stop has nothing left to apply.
    let again = a.ok("stop_handle", json!({"handle": handle})).await;
    assert_eq!(again["file_changes_journaled"], false);
    a.assert_played_back();
    // Undoing the stop undoes what the command did.
    a.ok("rewind", json!({"before_seq": seq})).await;
    assert!(!a.root.join("out.txt").exists());
    assert!(!a.root.join("d").exists());
    assert_eq!(
        std::fs::read_to_string(a.root.join("kept.txt")).unwrap(),
        "before\n"
    );
    a.runtime.shutdown().await;
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

async fn flood_is_bounded() {
    let a = aido().await;
    std::fs::write(a.root.join("note.txt"), "still here\n").unwrap();
    let before = rss_kib();
    let handle = a.start("yes | head -c 1073741824; echo done >&2").await;
    // While the flood runs, other calls answer (their results are asserted, not their time).
    let read = a.ok("read_file", json!({"path": "note.txt"})).await;
    assert!(read.to_string().contains("still here"), "{read}");
    let listed = a.ok("list_handles", json!({})).await;
    assert_eq!(listed["handles"][0]["handle"], handle.as_str());
    // Wait for the end without reading the flood: a cursor past the end long-polls until the
    // command ends (reading it all would journal a GiB of results).
    let deadline = Instant::now() + Duration::from_secs(180);
    let last = loop {
        let out = a
            .ok(
                "check_handle",
                json!({"handle": handle, "cursor": 1u64 << 62, "wait_ms": 8000}),
            )
            .await;
        if out["state"] == "exited" {
            break out;
        }
        assert!(Instant::now() < deadline, "{out}");
    };
    let peak = rss_kib();
    let tail = a
        .ok("check_handle", json!({"handle": handle, "cursor": 0}))
        .await;
    assert!(tail["missed_frames"].as_u64().unwrap() > 0, "{tail}");
    assert_eq!(last["exit_code"], 0, "{last}");
    assert_eq!(last["stdout_bytes_total"], 1u64 << 30, "{last}");
    let held = last["buffer_bytes"].as_u64().unwrap();
    assert!(held <= 1 << 20, "the ring holds {held} bytes");
    assert!(
        last["dropped_bytes"].as_u64().unwrap() >= (1 << 30) - (1 << 20) - (64 << 10) * 2,
        "{last}"
    );
    assert!(last["dropped_frames"].as_u64().unwrap() > 0);
    let growth = peak.saturating_sub(before);
    eprintln!(
        "1 GiB flood: ring {held} bytes, {} dropped; RSS grew {growth} KiB",
        last["dropped_bytes"]
    );
    assert!(growth < 64 << 10, "RSS grew {growth} KiB");
    a.ok("stop_handle", json!({"handle": handle})).await;
    a.assert_played_back();
    a.runtime.shutdown().await;
}

async fn pty_command() {
    let a = aido().await;
    let out = a
        .ok(
            "run_command",
            json!({"shell": "test -t 0 && test -t 1 && echo is-a-tty; stty size; read line; echo got $line", "background": true, "pty": true}),
        )
        .await;
    let handle = out["handle"].as_str().unwrap().to_owned();
    assert_eq!(out["pty"], true);
    a.ok("write_stdin", json!({"handle": handle, "text": "hi\n"}))
        .await;
    let (text, last) = a
        .read_until(&handle, 0, |_, out| out["state"] == "exited")
        .await;
    assert!(text.contains("is-a-tty"), "{text:?}");
    assert!(text.contains("24 80"), "{text:?}");
    assert!(text.contains("got hi"), "{text:?}");
    assert_eq!(
        last["frames"]
            .as_array()
            .map(|f| f.iter().all(|f| f["stream"] == "pty")),
        Some(true)
    );
    assert_eq!(last["exit_code"], 0);
    a.ok("stop_handle", json!({"handle": handle})).await;
    a.assert_played_back();
    a.runtime.shutdown().await;
}

async fn other_session() {
    let a = aido().await;
    let handle = a.start("echo from-the-first; exec sleep 876505").await;
    a.session.close("client gone").await;
    // A new client's session reaches the same handle.
    let second = a.runtime.open_session(Some("again".into())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, out) = Aido::run_in(
            &second,
            "check_handle",
            json!({"handle": handle, "wait_ms": 2000}),
        )
        .await
        .unwrap();
        if out["frames"].to_string().contains("from-the-first") {
            break;
        }
        assert!(Instant::now() < deadline, "{out}");
    }
    let (_, stopped) = Aido::run_in(&second, "stop_handle", json!({"handle": handle}))
        .await
        .unwrap();
    assert_eq!(stopped["stopped_by"], "term");
    assert_eq!(processes_with("876505"), 0);
    a.runtime.shutdown().await;
}

async fn coded_errors() {
    let a = aido().await;
    for primitive in ["check_handle", "write_stdin", "stop_handle"] {
        assert_eq!(
            a.err(primitive, json!({"handle": "h999"})).await,
            "handle_unknown",
            "{primitive}"
        );
    }
    assert_eq!(
        a.err("run_command", json!({"argv": ["true"], "pty": true}))
            .await,
        "command_invalid"
    );
    assert_eq!(
        a.err(
            "run_command",
            json!({"argv": ["true"], "background": true, "dry_run": true})
        )
        .await,
        "command_invalid"
    );
    a.assert_played_back();
    a.runtime.shutdown().await;
}

/// The paths the filesystem body reached with a write during the test (its check hook: one
/// call per entry applied on its own, one for a directory moved in whole).
fn writes_seen() -> (
    aido_actors::fs::hook::Guard,
    std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = seen.clone();
    let guard = aido_actors::fs::hook::add(move |op, path| {
        if op == aido_actors::fs::hook::Op::Write {
            into.lock().unwrap().push(path.to_owned());
        }
    });
    (guard, seen)
}

/// Issue 25: a directory a command made, with everything in it, lands with one rename, each
/// entry as the entry-by-entry apply would leave it (set-id bits stripped, times kept, a link
/// as written), journaled entry by entry, and a rewind takes it all back.
async fn whole_directory_moves_in() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let a = aido().await;
    let (_guard, seen) = writes_seen();
    let (seq, ran) = Aido::run_in(
        &a.session,
        "run_command",
        json!({"shell": "mkdir -p made/sub/deeper && for i in $(seq 50); do echo $i > made/f$i; done; \
                         echo deep > made/sub/deeper/d.txt; cp /bin/true made/tool; chmod 4755 made/tool; \
                         ln -s f1 made/link; touch -d '2001-02-03 04:05:06.123456789' made/sub/old.txt; \
                         chmod 2750 made/sub"}),
    )
    .await
    .unwrap();
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let made = a.root.join("made");
    let written: Vec<PathBuf> = seen.lock().unwrap().clone();
    assert_eq!(
        written,
        vec![made.clone()],
        "one write: the directory, moved in whole"
    );
    assert_eq!(std::fs::read_dir(&made).unwrap().count(), 50 + 3);
    assert_eq!(std::fs::read_to_string(made.join("f7")).unwrap(), "7\n");
    assert_eq!(
        std::fs::read_to_string(made.join("sub/deeper/d.txt")).unwrap(),
        "deep\n"
    );
    assert_eq!(
        std::fs::read_link(made.join("link")).unwrap(),
        PathBuf::from("f1")
    );
    let tool = std::fs::metadata(made.join("tool")).unwrap();
    assert_eq!(
        tool.permissions().mode() & 0o7777,
        0o755,
        "set-id bits stripped"
    );
    let sub = std::fs::metadata(made.join("sub")).unwrap();
    assert_eq!(
        sub.permissions().mode() & 0o7777,
        0o750,
        "set-id bits stripped"
    );
    let old = std::fs::metadata(made.join("sub/old.txt")).unwrap();
    assert_eq!((old.mtime(), old.mtime_nsec()), (981_173_106, 123_456_789));
    let owner = std::fs::metadata(&a.root).unwrap();
    for path in [&made, &made.join("f1"), &made.join("sub/deeper/d.txt")] {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (owner.uid(), owner.gid()),
            "{path:?}"
        );
    }
    // Journaled entry by entry: the result counts every one.
    assert_eq!(ran["changes_total"], 50 + 3 + 3 + 1, "{ran}");
    a.assert_played_back();
    a.ok("rewind", json!({"before_seq": seq})).await;
    assert!(!made.exists(), "the rewind takes it all back");
    a.runtime.shutdown().await;
}

/// A directory appears at the path of one a command made (a host process, between the
/// staging and the apply): the whole move refuses to replace it (a plain rename would replace
/// an empty one), the entry-by-entry apply that follows finds the conflict, and what appeared
/// is kept as it was.
async fn whole_directory_never_replaces() {
    use std::os::unix::fs::PermissionsExt;
    let a = aido().await;
    let made = a.root.join("made");
    let planted = made.clone();
    let _guard = aido_actors::fs::hook::add(move |op, path| {
        if op == aido_actors::fs::hook::Op::Write && path == planted && !planted.exists() {
            std::fs::create_dir(&planted).unwrap();
            std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    });
    let refused = a
        .err(
            "run_command",
            json!({"shell": "mkdir made && echo 1 > made/a && echo 2 > made/b"}),
        )
        .await;
    assert_eq!(refused, "command_changes_rolled_back");
    let kept = std::fs::metadata(&made).unwrap();
    assert_eq!(
        kept.permissions().mode() & 0o7777,
        0o700,
        "what appeared is kept"
    );
    assert_eq!(
        std::fs::read_dir(&made).unwrap().count(),
        0,
        "and nothing landed in it"
    );
    a.runtime.shutdown().await;
}

/// A new directory whose layer copy holds something that is no change (a socket the command
/// bound and left) is not moved whole (the socket would ride along): its entries are applied
/// one by one, and the socket never lands.
async fn whole_directory_with_a_socket() {
    let a = aido().await;
    let (_guard, seen) = writes_seen();
    let ran = a
        .ok(
            "run_command",
            json!({"shell": "mkdir made && echo 1 > made/a && echo 2 > made/b && \
                              python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"made/s.sock\")'"}),
        )
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let made = a.root.join("made");
    let mut names: Vec<String> = std::fs::read_dir(&made)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    let written = seen.lock().unwrap().clone();
    assert!(
        written.contains(&made.join("a")) && written.contains(&made.join("b")),
        "applied entry by entry: {written:?}"
    );
    a.runtime.shutdown().await;
}

/// Issue 29 (point 2's drift): a process call whose task panics fails as `body_crashed` with
/// its own panic — not with the last crash of another body (the filesystem's, here, just
/// before) — and the process body answers the next call.
async fn process_panic_is_its_own() {
    let a = aido().await;
    a.runtime.faults().panic_next();
    let crashed = Aido::run_in(&a.session, "read_file", json!({"path": "nothing.txt"})).await;
    assert_eq!(crashed.err().as_deref(), Some("body_crashed"));
    a.runtime.faults().panic_in_process_next();
    let action = Action::from_tool_call("run_command", json!({"argv": ["true"]})).unwrap();
    let failure = match a.session.run(action, Hooks::default()).await {
        Ok(ran) => panic!("the call succeeded: {}", ran.outcome.output),
        Err(e) => e.failure,
    };
    assert_eq!(failure.code, "body_crashed", "{failure:?}");
    assert!(
        failure
            .message
            .contains("injected fault: a process call panics")
            && !failure.message.contains("filesystem body panics"),
        "{failure:?}"
    );
    let after = a
        .ok("run_command", json!({"argv": ["echo", "after"]}))
        .await;
    assert_eq!(after["stdout"], "after\n", "{after}");
    a.runtime.shutdown().await;
}
