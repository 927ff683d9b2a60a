//! The explicit escape hatch, `run_unconfined`: a plain child process, killed with everything
//! it started in its group at the timeout, its input written, its output capped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use aido_sandbox::{Exit, Request, run_unconfined};

fn request(script: &str) -> Request {
    let mut request = Request::new(["sh", "-c", script], &std::env::temp_dir());
    request.timeout_ms = 10_000;
    request
}

#[test]
fn it_runs_with_its_input_and_capped_output_and_passes_the_exit_through() {
    let mut asked = request("cat; head -c 5000 /dev/zero | tr '\\0' x; exit 7");
    asked.stdin = b"from stdin\n".to_vec();
    asked.stdout_bytes_max = 100;
    let done = run_unconfined(&asked).unwrap();
    assert_eq!(done.exit, Exit::Code(7));
    assert_eq!(&done.stdout[..11], b"from stdin\n");
    assert_eq!(done.stdout.len(), 100);
    assert!(done.stdout_truncated);
    assert_eq!(done.stdout_bytes_total, 11 + 5000);
}

#[test]
fn the_timeout_kills_the_whole_group_it_started() {
    let marker = format!("aido-unconfined-{}", std::process::id());
    // bash, for `exec -a` (names the process so that only this test's sleeps are counted).
    let mut asked = request(&format!(
        "(exec -a {marker} sleep 30) & exec -a {marker} sleep 30"
    ));
    asked.argv[0] = "bash".into();
    asked.timeout_ms = 300;
    let started = Instant::now();
    let done = run_unconfined(&asked).unwrap();
    assert_eq!(done.exit, Exit::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Neither sleep survives (the background one was in the same group).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|c| String::from_utf8_lossy(c).contains(&marker))
            .count();
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} process(es) outlived the timeout"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_program_that_is_not_there_is_a_coded_error() {
    let mut asked = request("true");
    asked.argv = vec!["/nonexistent/program".into()];
    let error = run_unconfined(&asked).unwrap_err();
    assert_eq!(error.code(), "sandbox_exec_failed");
}
