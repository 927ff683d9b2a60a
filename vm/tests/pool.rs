//! The warm pool on real QEMU: a template saved once, clones restored paused from it and handed
//! out with `cont`, each with its own identity; and cloning a running machine.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod common;

use common::guest;

use aido_vm::pool::clone_machine;
use aido_vm::{Machine, MachineSpec, Pool};

async fn wait_serial(m: &Machine, needle: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let log = m.serial();
        if let Some(line) = log
            .lines()
            .find(|l| l.contains(needle) && !l.contains("echo"))
        {
            return line.trim().to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{needle} never came: {log}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_come_warm_and_each_has_its_own_identity() {
    let spec = MachineSpec::text_console(&guest());
    let dir = tempfile::tempdir().unwrap();
    let mut pool = Pool::open(&spec, dir.path(), 2).await.unwrap();
    assert_eq!(pool.status().warm, 2);
    let whole = std::time::Instant::now();
    let (a, took_a) = pool.acquire(&[1; 32]).await.unwrap();
    let whole_a = whole.elapsed();
    let (b, took_b) = pool.acquire(&[2; 32]).await.unwrap();
    eprintln!(
        "acquired warm clones: running in {took_a:?} and {took_b:?}, the first with its identity in {whole_a:?} ({})",
        a.accel().name()
    );
    let id_a = wait_serial(&a, "AIDO-IDENTITY-aido-clone").await;
    let id_b = wait_serial(&b, "AIDO-IDENTITY-aido-clone").await;
    assert_ne!(id_a, id_b, "two clones, two identities");
    assert!(
        id_a.ends_with("AIDO-IDENTITY-aido-clone-1-01010101"),
        "{id_a}"
    );
    // The guest's own hostname is the new identity.
    a.type_text("echo host-$(hostname)\n").await.unwrap();
    a.wait_for_text("host-aido-clone-1-01010101", 30_000)
        .await
        .unwrap();
    // Both run: type on each screen and read the answer back.
    for (m, n) in [(&a, 3), (&b, 4)] {
        m.type_text(&format!("echo clone-$(({n}*10))\n"))
            .await
            .unwrap();
        m.wait_for_text(&format!("clone-{}0", n), 30_000)
            .await
            .unwrap();
    }
    assert_eq!(pool.status().warm, 0);
    pool.refill().await.unwrap();
    assert_eq!(pool.status().warm, 2);
    let pids: Vec<u32> = [a.pid(), b.pid()].into_iter().flatten().collect();
    pool.release(a).await;
    pool.release(b).await;
    pool.shutdown().await;
    std::thread::sleep(std::time::Duration::from_millis(300));
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_default()
                    .contains(") Z ")
        );
    }
    // The template is reused: a second pool does not boot again.
    let again = std::time::Instant::now();
    let mut second = Pool::open(&spec, dir.path(), 1).await.unwrap();
    eprintln!(
        "reopened the pool (template reused) in {:?}",
        again.elapsed()
    );
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_machine_can_be_cloned() {
    let spec = MachineSpec::text_console(&guest());
    let source = Machine::boot(&spec).await.unwrap();
    source.wait_for_text("# ", 30_000).await.unwrap();
    source.type_text("echo made-$((40+2))\n").await.unwrap();
    source.wait_for_text("made-42", 30_000).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let clone = clone_machine(&source, &spec, dir.path()).await.unwrap();
    clone.resume().await.unwrap();
    assert!(
        clone
            .text_screen()
            .await
            .unwrap()
            .text()
            .contains("made-42"),
        "the clone has the source's screen"
    );
    // They diverge from here.
    clone.type_text("echo only-in-$((1+1))\n").await.unwrap();
    clone.wait_for_text("only-in-2", 30_000).await.unwrap();
    source.type_text("echo still-$((3+3))\n").await.unwrap();
    source.wait_for_text("still-6", 30_000).await.unwrap();
    assert!(
        !source
            .text_screen()
            .await
            .unwrap()
            .text()
            .contains("only-in-2")
    );
    clone.shutdown().await;
    source.shutdown().await;
}

/// Resident memory of a process, from /proc (kB).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Printed, not asserted (memory targets are the benchmark's): a clone's resident memory next
/// to a booted machine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_holds_less_memory_than_a_booted_machine() {
    let spec = MachineSpec::text_console(&guest());
    let dir = tempfile::tempdir().unwrap();
    let mut pool = Pool::open(&spec, dir.path(), 1).await.unwrap();
    let (clone, _) = pool.acquire(&[7; 32]).await.unwrap();
    let booted = Machine::boot(&spec).await.unwrap();
    booted.wait_for_text("# ", 30_000).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (c, b) = (rss_kb(clone.pid().unwrap()), rss_kb(booted.pid().unwrap()));
    eprintln!("VmRSS: pool clone {c} kB, booted machine {b} kB");
    assert!(
        c < b,
        "a clone restored from the zeroed template holds less: {c} vs {b} kB"
    );
    booted.shutdown().await;
    pool.release(clone).await;
    pool.shutdown().await;
}
