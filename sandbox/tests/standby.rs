//! The standby child: from a process's second command on, the next sandbox child is started
//! ahead (spawned, in its cgroup, blocked on its launch frame). This test binary is its own
//! process, so it sees the first command start none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use common::*;

/// Children of this process that host the sandbox child and have not entered any namespace
/// yet: standbys (a child tearing down after its command is in namespaces of its own).
fn standbys() -> Vec<u32> {
    let me = std::process::id();
    let our_user_ns = std::fs::metadata("/proc/self/ns/user").unwrap().ino();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let user_ns = std::fs::metadata(format!("/proc/{pid}/ns/user")).map(|m| m.ino());
        if ppid == Some(me)
            && String::from_utf8_lossy(&cmdline).contains(aido_sandbox::CHILD_ARG)
            && user_ns.is_ok_and(|ns| ns == our_user_ns)
        {
            found.push(pid);
        }
    }
    found
}

fn wait_for_standby() -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = standbys().first() {
            return *pid;
        }
        assert!(Instant::now() < deadline, "no standby child appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_next_child_waits_in_its_cgroup_and_a_dead_one_is_replaced() {
    let fixture = Fixture::new();
    let mut profile = fixture.profile();
    let limits = aido_sandbox::CgroupLimits {
        pids_max: 64,
        memory_bytes_max: 256 << 20,
        cpu_percent_max: 100,
    };
    let with_cgroup = match limits.probe() {
        Ok(()) => {
            profile.cgroup = Some(limits);
            true
        }
        Err(error) => {
            eprintln!(
                "no cgroup here ({}): the standby is checked without one",
                aido_sandbox::SpawnError::from(error).code()
            );
            false
        }
    };
    let run = |script: &str| fixture.sh_with(&profile, script);

    assert_code(&run("echo one"), 0);
    std::thread::sleep(Duration::from_millis(200));
    assert!(standbys().is_empty(), "the first command started a standby");

    assert_eq!(stdout(&run("echo two")), "two\n");
    let standby = wait_for_standby();
    if with_cgroup {
        let membership = std::fs::read_to_string(format!("/proc/{standby}/cgroup")).unwrap();
        assert!(
            membership.contains("aido-sandbox-"),
            "the standby is not in its cgroup yet: {membership}"
        );
    }
    // The standby runs the next command: it is gone from the list, and a new one waits.
    let outcome = run("echo three; cat /proc/self/cgroup");
    assert!(
        stdout(&outcome).starts_with("three\n"),
        "{}",
        stdout(&outcome)
    );
    let next = wait_for_standby();
    assert_ne!(next, standby, "the standby was not used");
    if with_cgroup {
        assert!(outcome.cgroup.is_some());
    }

    // A standby that died is discarded, and the command runs in a fresh child.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(next as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(stdout(&run("echo four")), "four\n");
    assert_eq!(stdout(&run("echo five")), "five\n");
}
