//! Boots the real guest (Debian kernel + busybox, built by vm/guest/build-image from Debian
//! packages) under QEMU: KVM where it really works, TCG otherwise (each test prints which).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::PathBuf;

use common::{guest, no_qemu_left_but, qemu_pids};

use aido_vm::{Machine, MachineSpec};

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_a_command_and_read_its_output_back() {
    let spec = MachineSpec::text_console(&guest());
    let vm = Machine::boot(&spec).await.unwrap();
    eprintln!("booted on {} in {:?}", vm.accel().name(), vm.booted_in());
    vm.wait_for_text("# ", 30_000).await.unwrap();
    vm.type_text("echo aido-$((6*7)) 'Quotes|Pipes{}[]'\n")
        .await
        .unwrap();
    let found = vm
        .wait_for_text("aido-42 Quotes|Pipes{}[]", 30_000)
        .await
        .unwrap();
    assert!(found.row > 0 && found.bbox[2] == 24 * 9, "{found:?}");
    let png = vm.screenshot_png().await.unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert_eq!(
        (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap())
        ),
        (720, 400)
    );
    assert_eq!(
        vm.type_text("é").await.unwrap_err().code(),
        "vm_unknown_key"
    );
    let pid = vm.pid().unwrap();
    vm.shutdown().await;
    assert!(!alive(pid), "no QEMU left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_brings_the_old_screen_back() {
    let spec = MachineSpec::text_console(&guest());
    let vm = Machine::boot(&spec).await.unwrap();
    vm.wait_for_text("# ", 30_000).await.unwrap();
    vm.type_text("echo before-snapshot\n").await.unwrap();
    vm.wait_for_text("before-snapshot\n".trim(), 30_000)
        .await
        .unwrap();
    vm.snapshot_save("s1").await.unwrap();
    // Wait for the output, not the typed line: `after-2` appears only once the command ran.
    vm.type_text("clear; echo after-$((1+1))\n").await.unwrap();
    vm.wait_for_text("after-2", 30_000).await.unwrap();
    assert!(
        !vm.text_screen()
            .await
            .unwrap()
            .text()
            .contains("echo before-snapshot")
    );
    vm.snapshot_load("s1").await.unwrap();
    let screen = vm.text_screen().await.unwrap().text();
    assert!(
        screen.contains("echo before-snapshot") && !screen.contains("after-"),
        "{screen}"
    );
    assert_eq!(
        vm.snapshot_load("missing").await.unwrap_err().code(),
        "vm_qmp_failed"
    );
    assert_eq!(
        vm.snapshot_save("bad name").await.unwrap_err().code(),
        "vm_qmp_failed"
    );
    vm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_never_boots_is_a_coded_timeout_and_leaves_no_process() {
    let mut spec = MachineSpec::text_console(&guest());
    spec.ready_marker = "A-MARKER-THE-GUEST-NEVER-PRINTS".into();
    spec.boot_timeout_ms = 6_000;
    let before: Vec<u32> = qemu_pids();
    let err = match Machine::boot(&spec).await {
        Err(e) => e,
        Ok(_) => panic!("it should not boot"),
    };
    assert_eq!(err.code(), "vm_boot_timeout");
    no_qemu_left_but(&before);

    let mut broken = MachineSpec::text_console(&guest());
    broken.kernel = PathBuf::from("/nonexistent/vmlinuz");
    let err = match Machine::boot(&broken).await {
        Err(e) => e,
        Ok(_) => panic!("no kernel, no boot"),
    };
    assert_eq!(err.code(), "vm_exited", "{err}");
}
