//! The same machine on a libvirt host, through the virt crate: lifecycle, screen (screenshot
//! and exact VGA text), input, snapshots, and no domain or overlay left behind.
//!
//! The host is `AIDO_TEST_LIBVIRT_URI` (default `qemu:///system`, the libvirtd that .ci/run
//! starts). Where no libvirtd answers, outside CI the test says so and stops; in CI it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod common;

use common::guest;

use aido_vm::{Machine, MachineSpec};

fn host() -> Option<String> {
    let uri = std::env::var("AIDO_TEST_LIBVIRT_URI").unwrap_or_else(|_| "qemu:///system".into());
    match aido_vm::libvirt::connect(&uri) {
        Ok(_) => {
            eprintln!("libvirt host: {uri}");
            Some(uri)
        }
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "SKIPPED: no libvirt host at {uri} ({e}); start one with `virtlogd -d; libvirtd -d`"
            );
            None
        }
        Err(e) => panic!("CI must have a libvirt host at {uri}: {e}"),
    }
}

fn domains(uri: &str) -> Vec<String> {
    let conn = aido_vm::libvirt::connect(uri).unwrap();
    conn.list_all_domains(0)
        .unwrap()
        .iter()
        .filter_map(|d| d.name().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_on_a_libvirt_host_boots_types_reads_snapshots_and_goes() {
    let Some(uri) = host() else { return };
    drive(&uri).await;
}

/// The same, as a remote host: `qemu+ssh://` through an sshd of the test's own on loopback, so
/// every file goes through libvirt's storage API and the console and screenshots through
/// libvirt streams over ssh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_on_a_remote_libvirt_host_over_ssh() {
    let Some(_) = host() else { return };
    let ssh = match common::LoopbackSsh::start() {
        Ok(s) => s,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: no sshd on loopback: {e}");
            return;
        }
        Err(e) => panic!("CI must be able to run sshd on loopback: {e}"),
    };
    let uri = ssh.libvirt_uri();
    eprintln!("remote libvirt host: {uri}");
    drive(&uri).await;
}

async fn drive(uri: &str) {
    let uri = uri.to_owned();
    let mut spec = MachineSpec::text_console(&guest());
    spec.host = Some(uri.clone());
    let vm = Machine::boot(&spec).await.unwrap();
    eprintln!(
        "booted on libvirt ({}) in {:?}",
        vm.accel().name(),
        vm.booted_in()
    );
    assert_eq!(vm.host().as_deref(), Some(uri.as_str()));
    assert!(
        vm.serial().contains("AIDO-GUEST-READY"),
        "the console was read"
    );
    let ours = vec![vm.domain().unwrap()];
    assert!(domains(&uri).contains(&ours[0]), "{ours:?} runs");

    // Input and exact screen text, through the monitor passthrough.
    vm.wait_for_text("# ", 30_000).await.unwrap();
    vm.type_text("echo virt-$((6*7))\n").await.unwrap();
    vm.wait_for_text("virt-42", 30_000).await.unwrap();
    let png = vm.screenshot_png().await.unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 720);

    // Snapshot, change the screen, revert, read the old screen back.
    vm.snapshot_save("before").await.unwrap();
    assert_eq!(vm.snapshot_list().await.unwrap(), vec!["before".to_owned()]);
    vm.type_text("clear; echo after-snapshot\n").await.unwrap();
    vm.wait_for_text("after-snapshot", 30_000).await.unwrap();
    vm.snapshot_load("before").await.unwrap();
    let screen = vm.text_screen().await.unwrap();
    assert!(screen.text().contains("virt-42"), "{}", screen.text());
    assert!(!screen.text().contains("after-snapshot"));
    vm.snapshot_delete("before").await.unwrap();
    assert!(vm.snapshot_list().await.unwrap().is_empty());
    assert_eq!(
        vm.snapshot_load("nope").await.unwrap_err().code(),
        "vm_libvirt_failed"
    );

    // What a libvirt host cannot do says so with a code.
    let err = vm
        .save_state(&std::env::temp_dir().join("x.state"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "vm_unsupported_on_host");

    vm.shutdown().await;
    assert!(
        !domains(&uri).iter().any(|d| ours.contains(d)),
        "the domain is gone"
    );
    // A second machine on the same host reuses the uploaded files (remembered per host).
    let again = Machine::boot(&spec).await.unwrap();
    assert!(again.serial().contains("AIDO-GUEST-READY"));
    again.shutdown().await;
    let pool = aido_vm::libvirt::connect(&uri)
        .unwrap()
        .lookup_storage_pool_by_name(aido_vm::libvirt::POOL)
        .unwrap();
    pool.refresh(0).unwrap();
    let vols = pool.list_volumes().unwrap();
    assert!(
        !vols.iter().any(|v| v.contains(&ours[0])),
        "its overlay is gone: {vols:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_never_boots_on_libvirt_times_out_and_leaves_nothing() {
    let Some(uri) = host() else { return };
    let mut spec = MachineSpec::text_console(&guest());
    spec.host = Some(uri.clone());
    spec.ready_marker = "A-MARKER-THE-GUEST-NEVER-PRINTS".into();
    spec.boot_timeout_ms = 3_000;
    let before = domains(&uri);
    let err = match Machine::boot(&spec).await {
        Ok(_) => panic!("booted without its marker"),
        Err(e) => e,
    };
    assert_eq!(err.code(), "vm_boot_timeout");
    let left: Vec<String> = domains(&uri)
        .into_iter()
        // This process's domains (nextest runs a test per process).
        .filter(|d| {
            let ours = aido_vm::libvirt::domain_name(0);
            !before.contains(d) && d.starts_with(ours.trim_end_matches('0'))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// libvirt owns a domain's QEMU, so a domain aido left behind (its process killed) would run
/// on; the next connection to that host destroys domains named after a process that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_left_by_a_dead_aido_are_reaped() {
    let Some(uri) = host() else { return };
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let ours = aido_vm::libvirt::domain_name(0);
    let prefix = ours.rsplitn(3, '-').nth(2).unwrap();
    let name = format!("{prefix}-{dead}-0");
    // Another machine's domain with the same pid is not this machine's to reap.
    let foreign = format!("aido-some_other_machine-{dead}-0");
    let conn = aido_vm::libvirt::connect(&uri).unwrap();
    let xml = format!(
        "<domain type='qemu'><name>{name}</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os><features><acpi/></features>\
         <devices><memballoon model='none'/></devices></domain>"
    );
    conn.create_domain_xml(&xml, 0).unwrap();
    conn.create_domain_xml(&xml.replace(&name, &foreign), 0)
        .unwrap();
    assert!(domains(&uri).contains(&name));
    let reaped = aido_vm::libvirt::reap(&conn);
    assert!(reaped.contains(&name), "{reaped:?}");
    assert!(!domains(&uri).contains(&name), "{name} is gone");
    assert!(domains(&uri).contains(&foreign), "{foreign} is not ours");
    conn.lookup_domain_by_name(&foreign)
        .unwrap()
        .destroy()
        .unwrap();
}
