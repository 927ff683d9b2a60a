//! No read or change made by a snapshot, a restore or a delete reaches outside the workspace,
//! even when one of its directories is swapped for a symlink at the worst moment. The store's
//! test hook runs the swap between planning and acting on an entry, so every moment is hit
//! deterministically instead of by racing threads. Each test runs on the copy backend (any
//! filesystem) and on reflink (btrfs on a loop device, as root), and says which it took.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::support::{Volume, btrfs_volume, digest};
use aido_snapshots::{Backend, Entry, Manifest, Step, Store};

/// The contents of every file outside the workspace: never to be found in a store.
const SECRET: &str = "OUTSIDE-SECRET";

/// Where the tests run: the copy backend on the temp dir, and reflink on a btrfs loop volume
/// when this machine can mount one.
struct Places {
    _temp: tempfile::TempDir,
    _volume: Option<Volume>,
    bases: Vec<(Backend, PathBuf)>,
}

fn places() -> Places {
    let temp = tempfile::tempdir().unwrap();
    let mut bases = vec![(Backend::Copy, temp.path().to_owned())];
    let volume = btrfs_volume();
    match &volume {
        Some(v) => bases.push((Backend::Reflink, v.mount.clone())),
        None => eprintln!("btrfs unavailable: reflink is not tested here, copy only"),
    }
    Places {
        _temp: temp,
        _volume: volume,
        bases,
    }
}

/// One case's directories: `root/{ws, outside, aido}`, with the store's own files beside `ws`.
struct Case {
    root: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    aido: PathBuf,
}

impl Case {
    fn new(base: &Path, name: &str) -> Self {
        let root = base.join(name);
        let (ws, outside, aido) = (root.join("ws"), root.join("outside"), root.join("aido"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&aido).unwrap();
        // The names a write or a remove through a swapped directory would land on.
        for dir in ["", "sub", "gone"] {
            std::fs::create_dir_all(outside.join(dir)).unwrap();
            for file in ["f", "g", "x", "extra", "keep", "top"] {
                std::fs::write(outside.join(dir).join(file), SECRET).unwrap();
            }
        }
        Self {
            root,
            ws,
            outside,
            aido,
        }
    }

    fn store(&self, wanted: Backend) -> Store {
        let store = Store::open_with(&self.ws, &self.aido, Some(wanted)).unwrap();
        assert_eq!(store.backend(), wanted, "{}", store.why());
        store
    }

    /// Nothing outside changed, and nothing of it was read into the store (no file under
    /// the case's root but outside holds its bytes; symlinks are not followed).
    fn assert_contained(&self, before: &crate::support::Tree, what: &str) {
        assert_eq!(
            &digest(&self.outside),
            before,
            "{what}: the directory outside the workspace changed"
        );
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for item in std::fs::read_dir(&dir).unwrap() {
                let path = item.unwrap().path();
                if path == self.outside {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path);
                } else if meta.is_file() {
                    let bytes = std::fs::read(&path).unwrap();
                    assert!(
                        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                        "{what}: {} holds bytes read from outside the workspace",
                        path.display()
                    );
                }
            }
        }
    }
}

/// Replace the directory `victim` by a symlink to `to`; the directory is moved aside (within
/// the workspace) when `keep`, removed otherwise.
fn swap(victim: &Path, to: &Path, keep: bool) {
    if keep {
        let mut aside = victim.as_os_str().to_owned();
        aside.push(".moved");
        std::fs::rename(victim, aside).unwrap();
    } else {
        std::fs::remove_dir_all(victim).unwrap();
    }
    std::os::unix::fs::symlink(to, victim).unwrap();
}

/// Run `act` once, the first time the store reaches `step` on `rel`; the flag says it ran.
fn once(
    store: &mut Store,
    step: Step,
    rel: &str,
    act: impl Fn() + Send + Sync + 'static,
) -> Arc<AtomicBool> {
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    let rel = rel.to_owned();
    store.set_hook(move |s, r| {
        if s == step && r == rel && !flag.swap(true, Ordering::SeqCst) {
            act();
        }
    });
    fired
}

#[test]
fn a_directory_swapped_for_a_symlink_before_the_scan_opens_it_is_never_read() {
    let places = places();
    for (backend, base) in &places.bases {
        eprintln!("backend {backend}");
        let case = Case::new(base, "scan");
        std::fs::create_dir(case.ws.join("sub")).unwrap();
        std::fs::write(case.ws.join("sub/f"), "mine").unwrap();
        std::fs::write(case.ws.join("top"), "top").unwrap();
        let before = digest(&case.outside);
        let mut store = case.store(*backend);
        let (victim, to) = (case.ws.join("sub"), case.outside.clone());
        let fired = once(&mut store, Step::Scan, "sub", move || {
            swap(&victim, &to, false)
        });
        let err = store.create("s1", 1).unwrap_err();
        assert!(fired.load(Ordering::SeqCst));
        assert_eq!(err.code(), "workspace_entry_swapped", "{err}");
        case.assert_contained(&before, "scan");
        // Taken again, the symlink is recorded as a symlink, and nothing under it.
        let again = store.create("s2", 2).unwrap();
        assert_eq!(again.files, Some(1));
        let scanned = Manifest::scan(&case.ws, &[]).unwrap();
        assert_eq!(
            scanned.entries.get("sub"),
            Some(&Entry::Symlink {
                target: case.outside.display().to_string()
            })
        );
        assert!(!scanned.entries.keys().any(|k| k.starts_with("sub/")));
        case.assert_contained(&before, "scan, taken again");
    }
}

#[test]
fn a_directory_swapped_for_a_symlink_before_a_snapshot_opens_a_file_in_it_is_never_read() {
    let places = places();
    for (backend, base) in &places.bases {
        eprintln!("backend {backend}");
        let case = Case::new(base, "open");
        std::fs::create_dir(case.ws.join("a")).unwrap();
        std::fs::write(case.ws.join("a/f"), "mine too").unwrap();
        std::fs::create_dir(case.ws.join("sub")).unwrap();
        std::fs::write(case.ws.join("sub/f"), "mine").unwrap();
        let before = digest(&case.outside);
        let mut store = case.store(*backend);
        let (victim, to) = (case.ws.join("sub"), case.outside.clone());
        let fired = once(&mut store, Step::Snapshot, "sub/f", move || {
            swap(&victim, &to, true)
        });
        // `a/f` is opened first, so the walk has left `sub` (whichever directory the scan
        // ended in) and opens it anew after the swap.
        let err = store.create("s1", 1).unwrap_err();
        assert!(fired.load(Ordering::SeqCst));
        assert_eq!(err.code(), "workspace_entry_swapped", "{err}");
        case.assert_contained(&before, "snapshot");
    }
}

#[test]
fn a_restore_never_removes_through_a_directory_swapped_for_a_symlink() {
    let places = places();
    for (backend, base) in &places.bases {
        eprintln!("backend {backend}");
        let case = Case::new(base, "remove");
        std::fs::create_dir(case.ws.join("sub")).unwrap();
        std::fs::write(case.ws.join("sub/keep"), "keep").unwrap();
        std::fs::write(case.ws.join("top"), "top").unwrap();
        let first = digest(&case.ws);
        let before = digest(&case.outside);
        let mut store = case.store(*backend);
        store.create("s1", 1).unwrap();
        std::fs::write(case.ws.join("sub/extra"), "to be removed").unwrap();
        let (victim, to) = (case.ws.join("sub"), case.outside.clone());
        let fired = once(&mut store, Step::Remove, "sub/extra", move || {
            swap(&victim, &to, false)
        });
        store.restore("s1").unwrap();
        assert!(fired.load(Ordering::SeqCst));
        case.assert_contained(&before, "remove");
        assert_eq!(
            digest(&case.ws),
            first,
            "the symlink was replaced, not followed"
        );
    }
}

#[test]
fn a_restore_never_writes_through_a_directory_swapped_for_a_symlink() {
    let places = places();
    for (backend, base) in &places.bases {
        eprintln!("backend {backend}");
        let case = Case::new(base, "write");
        std::fs::create_dir(case.ws.join("sub")).unwrap();
        std::fs::write(case.ws.join("sub/keep"), "keep").unwrap();
        let first = digest(&case.ws);
        let before = digest(&case.outside);
        let mut store = case.store(*backend);
        store.create("s1", 1).unwrap();
        std::fs::write(case.ws.join("sub/keep"), "changed since").unwrap();
        let (victim, to) = (case.ws.join("sub"), case.outside.clone());
        let fired = once(&mut store, Step::Restore, "sub/keep", move || {
            swap(&victim, &to, true)
        });
        let err = store.restore("s1").unwrap_err();
        assert!(fired.load(Ordering::SeqCst));
        assert_eq!(err.code(), "workspace_entry_swapped", "{err}");
        case.assert_contained(&before, "write");
        store.restore("s1").unwrap();
        assert_eq!(digest(&case.ws), first, "run again, the restore finishes");
        let again = store.restore("s1").unwrap();
        assert_eq!((again.written, again.removed), (0, 0), "{again:?}");
    }
}

#[test]
fn deleting_a_snapshot_never_follows_a_symlink_in_it() {
    let places = places();
    for (backend, base) in &places.bases {
        // (the moment, and whether the directory is moved aside or removed)
        for (row, (rel, keep)) in [("s1/sub", false), ("s1/sub/f", true)]
            .into_iter()
            .enumerate()
        {
            let case = Case::new(base, &format!("delete-{row}"));
            std::fs::create_dir(case.ws.join("sub")).unwrap();
            std::fs::write(case.ws.join("sub/f"), "mine").unwrap();
            std::os::unix::fs::symlink(&case.outside, case.ws.join("out")).unwrap();
            let before = digest(&case.outside);
            let mut store = case.store(*backend);
            store.create("s1", 1).unwrap();
            let data = case.root.join(".aido-snapshots/ws/s1");
            let (victim, to) = (data.join("sub"), case.outside.clone());
            let fired = once(&mut store, Step::Delete, rel, move || {
                swap(&victim, &to, keep)
            });
            let first = store.delete("s1");
            case.assert_contained(&before, "delete");
            match backend {
                Backend::Reflink => {
                    assert!(fired.load(Ordering::SeqCst));
                    if let Err(e) = &first {
                        assert_eq!(e.code(), "workspace_entry_swapped", "{e}");
                        store.delete("s1").unwrap();
                    }
                    assert!(data.symlink_metadata().is_err(), "the copy is gone");
                    eprintln!("backend reflink, {rel}: the tree removed by handles ({first:?})");
                }
                _ => {
                    first.unwrap();
                    assert!(!fired.load(Ordering::SeqCst));
                    eprintln!("backend {backend}: a delete removes objects by hash, no tree");
                }
            }
            case.assert_contained(&before, "delete");
            assert_eq!(
                store.restore("s1").unwrap_err().code(),
                "snapshot_not_found"
            );
        }
    }
}

/// The snapshot every row of the table restores.
fn build(ws: &Path) {
    std::fs::create_dir_all(ws.join("dir/sub")).unwrap();
    std::fs::write(ws.join("dir/g"), "g").unwrap();
    std::fs::write(ws.join("dir/sub/f"), "f").unwrap();
    std::fs::write(ws.join("top"), "top").unwrap();
    std::os::unix::fs::symlink("dir/g", ws.join("link")).unwrap();
}

/// Changes that make the restore act on every entry: files rewritten, extras to remove.
fn mutate(ws: &Path) {
    std::fs::write(ws.join("dir/g"), "g changed").unwrap();
    std::fs::write(ws.join("dir/sub/f"), "f changed").unwrap();
    std::fs::write(ws.join("top"), "top changed").unwrap();
    std::fs::write(ws.join("dir/extra"), "extra").unwrap();
    std::fs::write(ws.join("dir/sub/extra"), "extra").unwrap();
    std::fs::create_dir(ws.join("dir/gone")).unwrap();
    std::fs::write(ws.join("dir/gone/x"), "x").unwrap();
}

/// When the swap happens: before the restore starts, or at a hook moment on an entry.
#[derive(Clone, Copy, Debug)]
enum When {
    Before,
    At(Step, &'static str),
}

#[test]
fn a_restore_through_a_symlinked_directory_entry_never_writes_through_it() {
    // (when, the directory swapped for a symlink)
    let moments: &[(When, &str)] = &[
        (When::Before, "dir"),
        (When::Before, "dir/sub"),
        (When::At(Step::Remove, "dir/sub/extra"), "dir/sub"),
        (When::At(Step::Remove, "dir/extra"), "dir"),
        (When::At(Step::Remove, "dir/gone/x"), "dir/gone"),
        (When::At(Step::Remove, "dir/gone"), "dir/gone"),
        (When::At(Step::Remove, "dir/gone"), "dir"),
        (When::At(Step::Restore, "dir"), "dir"),
        (When::At(Step::Restore, "dir/g"), "dir"),
        (When::At(Step::Restore, "dir/sub"), "dir/sub"),
        (When::At(Step::Restore, "dir/sub"), "dir"),
        (When::At(Step::Restore, "dir/sub/f"), "dir/sub"),
        (When::At(Step::Restore, "dir/sub/f"), "dir"),
        (When::At(Step::Restore, "top"), "dir"),
        (When::At(Step::Restore, "link"), "dir"),
    ];
    let places = places();
    for (backend, base) in &places.bases {
        let mut row = 0;
        for &(when, victim) in moments {
            // The link absolute or relative; the directory moved aside or removed.
            for (relative, keep) in [(false, true), (true, false), (false, false)] {
                row += 1;
                let what = format!(
                    "{backend} row {row}: {when:?}, {victim} -> {} outside, {}",
                    if relative { "relative" } else { "absolute" },
                    if keep { "moved aside" } else { "removed" }
                );
                let case = Case::new(base, &format!("table-{row}"));
                build(&case.ws);
                let first = digest(&case.ws);
                let before = digest(&case.outside);
                let mut store = case.store(*backend);
                store.create("s1", 1).unwrap();
                mutate(&case.ws);
                let depth = victim.split('/').count();
                let to = if relative {
                    PathBuf::from(format!("{}outside", "../".repeat(depth)))
                } else {
                    case.outside.clone()
                };
                let path = case.ws.join(victim);
                let fired = match when {
                    When::Before => {
                        swap(&path, &to, keep);
                        None
                    }
                    When::At(step, rel) => {
                        Some(once(&mut store, step, rel, move || swap(&path, &to, keep)))
                    }
                };
                let result = store.restore("s1");
                if let Some(fired) = fired {
                    assert!(
                        fired.load(Ordering::SeqCst),
                        "{what}: the moment never came"
                    );
                }
                match &result {
                    Ok(_) => {}
                    Err(e) => assert_eq!(e.code(), "workspace_entry_swapped", "{what}: {e}"),
                }
                eprintln!(
                    "{what}: first restore {}",
                    result.map_or_else(|e| e.code().to_owned(), |s| format!("{s:?}"))
                );
                case.assert_contained(&before, &what);
                store.restore("s1").unwrap();
                assert_eq!(digest(&case.ws), first, "{what}: run again, it finishes");
                let again = store.restore("s1").unwrap();
                assert_eq!((again.written, again.removed), (0, 0), "{what}: {again:?}");
                case.assert_contained(&before, &what);
            }
        }
    }
}

#[test]
fn a_forged_manifest_path_out_of_the_workspace_is_refused_before_anything_changes() {
    let places = places();
    for (backend, base) in &places.bases {
        eprintln!("backend {backend}");
        let case = Case::new(base, "forged");
        std::fs::write(case.ws.join("a"), "a").unwrap();
        let store = case.store(*backend);
        store.create("s1", 1).unwrap();
        std::fs::write(case.ws.join("a"), "changed").unwrap();
        std::fs::write(case.ws.join("b"), "new").unwrap();
        let meta = if *backend == Backend::Copy {
            let dirs = std::fs::read_dir(case.aido.join("snapshots")).unwrap();
            dirs.map(|d| d.unwrap().path().join("s1.json"))
                .find(|p| p.exists())
                .unwrap()
        } else {
            case.root.join(".aido-snapshots/ws/s1.json")
        };
        let mut stored: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
        let a = stored["manifest"]["entries"]["a"].clone();
        stored["manifest"]["entries"]["../escape"] = a;
        std::fs::write(&meta, serde_json::to_vec(&stored).unwrap()).unwrap();
        let before = digest(&case.ws);
        let err = store.restore("s1").unwrap_err();
        assert_eq!(err.code(), "snapshot_entry_invalid", "{err}");
        assert!(case.root.join("escape").symlink_metadata().is_err());
        assert_eq!(digest(&case.ws), before, "nothing was changed half way");
    }
}

#[test]
fn a_restore_refuses_a_workspace_swapped_for_a_symlink() {
    let places = places();
    for (backend, base) in &places.bases {
        eprintln!("backend {backend}");
        let case = Case::new(base, "root");
        std::fs::write(case.ws.join("top"), "top").unwrap();
        let before = digest(&case.outside);
        let store = case.store(*backend);
        store.create("s1", 1).unwrap();
        swap(&case.ws, &case.outside, true);
        let err = store.restore("s1").unwrap_err();
        assert_eq!(err.code(), "workspace_not_a_directory", "{err}");
        case.assert_contained(&before, "root");
    }
    // The btrfs backend swaps subvolumes by name in a handle on the workspace's parent, and
    // refuses a symlink standing in for the workspace at the moment of the exchange.
    let Some(volume) = btrfs_volume() else {
        eprintln!("btrfs unavailable: the subvolume exchange is not tested here");
        return;
    };
    let aido = volume.mount.join("aido-home");
    let ws = aido_snapshots::volume::init(&volume.mount.join("ws"), &aido, None).unwrap();
    let outside = aido_snapshots::volume::init(&volume.mount.join("outside"), &aido, None).unwrap();
    assert!(ws.subvolume && outside.subvolume);
    std::fs::write(outside.path.join("keep"), SECRET).unwrap();
    std::fs::write(ws.path.join("top"), "top").unwrap();
    let mut store = Store::open(&ws.path, &aido).unwrap();
    assert_eq!(store.backend(), Backend::BtrfsSubvolume, "{}", store.why());
    eprintln!("backend {}", store.backend());
    store.create("s1", 1).unwrap();
    let before = digest(&outside.path);
    let (victim, to) = (ws.path.clone(), outside.path.clone());
    let fired = once(&mut store, Step::Restore, "", move || {
        swap(&victim, &to, true)
    });
    let err = store.restore("s1").unwrap_err();
    assert!(fired.load(Ordering::SeqCst));
    assert_eq!(err.code(), "workspace_not_a_directory", "{err}");
    assert_eq!(
        digest(&outside.path),
        before,
        "the subvolume outside is untouched"
    );
    assert!(
        std::fs::symlink_metadata(&ws.path)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link standing in for the workspace was not exchanged"
    );
}
