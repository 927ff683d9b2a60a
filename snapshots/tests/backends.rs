//! Every backend, on a real filesystem: btrfs on a loop device (as root), reflink on the same
//! btrfs, and the copy store on whatever the temp dir is. Each runs one scenario: take a
//! snapshot, change files of every kind, restore, compare the whole tree.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::{btrfs_volume, digest};
use aido_snapshots::{Backend, Store, volume};

fn build(ws: &Path) {
    std::fs::create_dir_all(ws.join("dir/sub")).unwrap();
    std::fs::create_dir_all(ws.join("empty")).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(ws.join("dir/b.txt"), "bravo\n").unwrap();
    std::fs::set_permissions(ws.join("dir/b.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(ws.join("dir/sub/c.bin"), [0u8, 1, 2, 255]).unwrap();
    std::os::unix::fs::symlink("a.txt", ws.join("link")).unwrap();
}

fn mutate(ws: &Path) {
    std::fs::write(ws.join("a.txt"), "ALPHA, changed\n").unwrap();
    std::fs::remove_file(ws.join("dir/b.txt")).unwrap();
    std::fs::write(ws.join("new.txt"), "new").unwrap();
    std::fs::remove_dir_all(ws.join("dir/sub")).unwrap();
    std::fs::write(ws.join("dir/sub"), "now a file").unwrap();
    std::fs::remove_file(ws.join("link")).unwrap();
    std::os::unix::fs::symlink("new.txt", ws.join("link")).unwrap();
    std::fs::set_permissions(ws.join("a.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn scenario(store: &Store, ws: &Path) {
    eprintln!(
        "backend {} for {}: {}",
        store.backend(),
        ws.display(),
        store.why()
    );
    build(ws);
    let first = digest(ws);
    let s1 = store.create("s1", 1).unwrap();
    assert_eq!(s1.backend, store.backend());
    let counted = if store.backend() == Backend::BtrfsSubvolume {
        None
    } else {
        Some(3)
    };
    assert_eq!(
        s1.files, counted,
        "btrfs snapshots are not walked to count files"
    );
    mutate(ws);
    let second = digest(ws);
    assert_ne!(first, second);
    store.create("s2", 2).unwrap();
    assert_eq!(store.create("s2", 3).unwrap_err().code(), "snapshot_exists");

    let stats = store.restore("s1").unwrap();
    assert_eq!(
        digest(ws),
        first,
        "restore s1 gives back the first tree exactly"
    );
    if store.backend() != Backend::BtrfsSubvolume {
        assert!(stats.written >= 3 && stats.removed >= 2, "{stats:?}");
        let again = store.restore("s1").unwrap();
        assert_eq!(
            (again.written, again.removed),
            (0, 0),
            "a second restore changes nothing: {again:?}"
        );
    }
    store.restore("s2").unwrap();
    assert_eq!(digest(ws), second);

    let ids: Vec<_> = store.list().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, ["s1", "s2"]);
    store.delete("s1").unwrap();
    assert_eq!(
        store.restore("s1").unwrap_err().code(),
        "snapshot_not_found"
    );
    assert_eq!(
        store.create("../x", 4).unwrap_err().code(),
        "snapshot_id_invalid"
    );
    store.restore("s2").unwrap();
    assert_eq!(digest(ws), second);
}

#[test]
fn copy_backend_restores_every_kind_of_change() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let store = Store::open_with(&ws, &dir.path().join("aido"), Some(Backend::Copy)).unwrap();
    assert_eq!(store.backend(), Backend::Copy);
    scenario(&store, &ws);
}

#[test]
fn the_copy_store_keeps_one_object_per_content_and_collects_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    for i in 0..10 {
        std::fs::write(ws.join(format!("same{i}")), "identical contents").unwrap();
    }
    std::fs::write(ws.join("other"), "different").unwrap();
    let aido = dir.path().join("aido");
    let store = Store::open_with(&ws, &aido, Some(Backend::Copy)).unwrap();
    store.create("a", 1).unwrap();
    store.create("b", 2).unwrap();
    let objects = || {
        std::fs::read_dir(aido.join("snapshots/objects"))
            .unwrap()
            .count()
    };
    assert_eq!(objects(), 2, "11 files, 2 contents, 2 snapshots: 2 objects");
    std::fs::write(ws.join("other"), "changed").unwrap();
    store.create("c", 3).unwrap();
    assert_eq!(objects(), 3);
    store.delete("a").unwrap();
    store.delete("b").unwrap();
    assert_eq!(
        objects(),
        2,
        "the old version of `other` is gone with the snapshots that held it"
    );
}

#[test]
fn aido_home_inside_the_workspace_is_never_snapshotted() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("home");
    let aido = ws.join(".aido");
    std::fs::create_dir_all(aido.join("journal")).unwrap();
    std::fs::write(aido.join("journal/db"), "journal").unwrap();
    std::fs::write(ws.join("work.txt"), "w").unwrap();
    let store = Store::open(&ws, &aido).unwrap();
    store.create("s", 1).unwrap();
    std::fs::write(aido.join("journal/db"), "journal grew").unwrap();
    std::fs::write(ws.join("work.txt"), "changed").unwrap();
    store.restore("s").unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("work.txt")).unwrap(), "w");
    assert_eq!(
        std::fs::read_to_string(aido.join("journal/db")).unwrap(),
        "journal grew"
    );
}

#[test]
fn btrfs_subvolume_and_reflink_backends_on_a_loop_device() {
    let Some(volume) = btrfs_volume() else {
        // The next real path: the copy backend, on the temp dir's filesystem.
        eprintln!("btrfs unavailable: taking the copy backend instead");
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let store = Store::open(&ws, &dir.path().join("aido")).unwrap();
        assert_eq!(store.backend(), Backend::Copy);
        scenario(&store, &ws);
        return;
    };
    let aido = volume.mount.join("aido-home");
    // A subvolume: O(1) snapshots, restored by an atomic swap.
    let made = volume::init(&volume.mount.join("sub"), &aido, None).unwrap();
    assert!(made.subvolume);
    let store = Store::open(&made.path, &aido).unwrap();
    assert_eq!(store.backend(), Backend::BtrfsSubvolume, "{}", store.why());
    scenario(&store, &made.path);
    // A plain directory on the same filesystem: reflink clones.
    let plain = volume.mount.join("plain");
    std::fs::create_dir(&plain).unwrap();
    let store = Store::open(&plain, &aido).unwrap();
    assert_eq!(store.backend(), Backend::Reflink, "{}", store.why());
    scenario(&store, &plain);
}

#[test]
fn workspace_init_with_a_btrfs_loop_file_gives_subvolume_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let aido = dir.path().join("aido");
    let path = dir.path().join("project");
    match volume::init(&path, &aido, Some(256 << 20)) {
        Ok(made) => {
            assert!(made.subvolume && made.image.as_ref().is_some_and(|i| i.exists()));
            assert_eq!(std::fs::canonicalize(&path).unwrap(), made.resolved);
            let store = Store::open(&path, &aido).unwrap();
            assert_eq!(store.backend(), Backend::BtrfsSubvolume, "{}", store.why());
            scenario(&store, &path);
            volume::unmount(&made).unwrap();
        }
        Err(e) => {
            eprintln!("workspace init --btrfs is unavailable here ({e}); taking a plain workspace");
            let made = volume::init(&path, &aido, None).unwrap();
            let store = Store::open(&made.path, &aido).unwrap();
            scenario(&store, &made.path);
        }
    }
}
