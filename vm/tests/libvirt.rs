//! The same machine on a libvirt host, through the helper that hosts libvirt (`aido-native`):
//! lifecycle, screen (screenshot and exact VGA text), input, snapshots, and no domain or
//! overlay left behind, also when aido dies. The host is inspected with `virsh`.
//!
//! The host is `AIDO_TEST_LIBVIRT_URI` (default `qemu:///system`, the libvirtd that .ci/run
//! starts). Where no libvirtd answers, outside CI the test says so and stops; in CI it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use common::guest;

use aido_vm::{Machine, MachineSpec};

use aido_testkit::libvirt::{host, virsh};

fn domains(uri: &str) -> Vec<String> {
    virsh(uri, &["list", "--all", "--name"])
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
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
    let Some(ssh) = aido_testkit::lacking("sshd on loopback", common::LoopbackSsh::start(&[]))
    else {
        return;
    };
    let uri = ssh.libvirt_uri();
    eprintln!("remote libvirt host: {uri}");
    drive(&uri).await;
}

async fn drive(uri: &str) {
    let uri = uri.to_owned();
    let mut spec = MachineSpec::text_console(&guest());
    spec.host = Some(uri.clone());
    // TCG on two cores shared with the other tests: a boot that takes 23 s alone took over
    // 60 s under load once. The test is about the remote host, not the boot's speed.
    spec.boot_timeout_ms = 180_000;
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
    virsh(&uri, &["pool-refresh", aido_vm::libvirt::POOL]).unwrap();
    let vols = virsh(&uri, &["vol-list", aido_vm::libvirt::POOL]).unwrap();
    assert!(!vols.contains(&ours[0]), "its overlay is gone: {vols:?}");
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
    // New domains of this machine whose helper is gone (other tests' helpers run on).
    let left: Vec<String> = domains(&uri)
        .into_iter()
        .filter(|d| {
            !before.contains(d)
                && aido_vm::libvirt::domain_pid(d)
                    .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
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
    let name = aido_vm::libvirt::domain_name(dead, 0);
    // Another machine's domain with the same pid is not this machine's to reap.
    let foreign = format!("aido-some_other_machine-{dead}-0");
    let dir = tempfile::tempdir().unwrap();
    for domain in [&name, &foreign] {
        let xml = format!(
            "<domain type='qemu'><name>{domain}</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>\
             <os><type arch='x86_64' machine='pc'>hvm</type></os><features><acpi/></features>\
             <devices><memballoon model='none'/></devices></domain>"
        );
        let file = dir.path().join(format!("{domain}.xml"));
        std::fs::write(&file, xml).unwrap();
        virsh(&uri, &["create", file.to_str().unwrap()]).unwrap();
    }
    assert!(domains(&uri).contains(&name));
    let reaped = aido_vm::libvirt::reap(&uri).unwrap();
    assert!(reaped.contains(&name), "{reaped:?}");
    assert!(!domains(&uri).contains(&name), "{name} is gone");
    assert!(domains(&uri).contains(&foreign), "{foreign} is not ours");
    virsh(&uri, &["destroy", &foreign]).unwrap();
}

/// The helper holds the guest: when aido dies (here: the helper's input closes without a word,
/// as when aido is killed), the helper destroys the domain and its overlay before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_whose_aido_dies_destroys_its_guest() {
    use aido_vm::native::{Helper, LIBVIRT_MODE, LibvirtRequest};
    let Some(uri) = host() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut spec = MachineSpec::text_console(&guest());
    spec.host = Some(uri.clone());
    let mut helper = Helper::start(LIBVIRT_MODE).unwrap();
    let request = LibvirtRequest::Create {
        uri: uri.clone(),
        spec,
        serial_log: dir.path().join("serial.log"),
    };
    let (name, _) = helper.call::<_, String>(&request, &[]).unwrap();
    assert!(domains(&uri).contains(&name), "{name} runs");
    helper.finish();
    assert!(
        !domains(&uri).contains(&name),
        "{name} went with its helper"
    );
    virsh(&uri, &["pool-refresh", aido_vm::libvirt::POOL]).unwrap();
    let vols = virsh(&uri, &["vol-list", aido_vm::libvirt::POOL]).unwrap();
    assert!(!vols.contains(&name), "its overlay is gone: {vols}");
}
