//! Templates and the warm pool on real QEMU: a template saved once, machines restored from it
//! each with its own identity, clones restored paused and handed out with `cont`; and cloning a
//! running machine.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use common::{guest, no_qemu_left_but, qemu_pids};

use aido_vm::pool::clone_machine;
use aido_vm::{Machine, MachineSpec, Pool, Template};

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

/// A clone's resident memory next to a booted machine's: printed, and only compared (memory
/// targets are the benchmark's).
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
    // QEMU runs without transparent huge pages (a touched byte would make 2 MiB resident).
    for pid in [clone.pid().unwrap(), booted.pid().unwrap()] {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status.lines().any(|l| l == "THP_enabled:\t0"),
            "QEMU {pid} may use huge pages: {status}"
        );
    }
    eprintln!("VmRSS: pool clone {c} kB, booted machine {b} kB");
    assert!(
        c < b,
        "a clone restored from the zeroed template holds less: {c} vs {b} kB"
    );
    booted.shutdown().await;
    pool.release(clone).await;
    pool.shutdown().await;
}

/// `vm_start`'s path: a template made once and found after, machines restored from it that run
/// at once, each with its own hostname, and diverge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_start_from_a_template_each_with_its_own_identity() {
    let spec = MachineSpec::text_console(&guest());
    let root = tempfile::tempdir().unwrap();
    let template = Template::ensure(&spec, root.path()).await.unwrap();
    assert!(template.made(), "the first use makes the template");
    let found = Template::ensure(&spec, root.path()).await.unwrap();
    assert!(!found.made(), "the second finds it");
    assert_eq!(found.dir(), template.dir());
    let entries: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one template, no scratch left: {entries:?}"
    );

    let started = std::time::Instant::now();
    let a = template.start("alpha", &[1; 32]).await.unwrap();
    let took = started.elapsed();
    let b = found.start("beta", &[2; 32]).await.unwrap();
    eprintln!(
        "started from the template in {took:?} (restore {:?}) on {}",
        a.booted_in(),
        a.accel().name()
    );
    // Restored at its prompt: the screen is there without a boot.
    let screen = a.text_screen().await.unwrap();
    assert!(!screen.find("# ").is_empty(), "{}", screen.text());
    for (m, name) in [(&a, "alpha"), (&b, "beta")] {
        m.type_text("echo host-$(hostname) id-$(cat /etc/aido-identity)\n")
            .await
            .unwrap();
        m.wait_for_text(&format!("host-{name} id-{name}"), 30_000)
            .await
            .unwrap();
    }
    a.type_text("echo only-$((20+1))\n").await.unwrap();
    a.wait_for_text("only-21", 30_000).await.unwrap();
    assert!(!b.text_screen().await.unwrap().text().contains("only-21"));
    // A machine from a template is a whole machine: it snapshots and reverts.
    a.snapshot_save("s1").await.unwrap();
    a.type_text("echo after-$((30+3))\n").await.unwrap();
    a.wait_for_text("after-33", 30_000).await.unwrap();
    a.snapshot_load("s1").await.unwrap();
    assert!(!a.text_screen().await.unwrap().text().contains("after-33"));
    a.shutdown().await;
    b.shutdown().await;
}

/// A template whose guest never comes up is the boot's coded timeout, and leaves no template,
/// no scratch directory and no process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_never_boots_leaves_nothing() {
    let mut spec = MachineSpec::text_console(&guest());
    spec.ready_marker = "A-MARKER-THE-GUEST-NEVER-PRINTS".into();
    spec.boot_timeout_ms = 6_000;
    let root = tempfile::tempdir().unwrap();
    let before = qemu_pids();
    let err = Template::ensure(&spec, root.path()).await.unwrap_err();
    assert_eq!(err.code(), "vm_boot_timeout", "{err}");
    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "nothing left under the templates' directory"
    );
    no_qemu_left_but(&before);
    // A libvirt host has no templates: refused with its code, nothing booted.
    let mut remote = MachineSpec::text_console(&guest());
    remote.host = Some("qemu+ssh://nobody@127.0.0.1/system".into());
    let err = Template::ensure(&remote, root.path()).await.unwrap_err();
    assert_eq!(err.code(), "vm_unsupported_on_host");
}
