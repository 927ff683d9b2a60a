//! Issue point 6, "every mutation is openat-style": a directory on the path swapped for a
//! symlink to a directory outside the walls, between the body's check and its act, never
//! makes aido remove, move or create anything outside the checked root. Each test drives a
//! real runtime (sled journal on disk, the ractor tree, the filesystem body on a temp home)
//! and makes the swap at that very moment through the body's hidden check hook.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aido_actions::Action;
use aido_actors::fs::hook::{self, Op};
use aido_actors::{Hooks, Runtime, Session};
use serde_json::{Value, json};

struct World {
    _dir: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
    _runtime: Runtime,
    session: Session,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    std::fs::create_dir_all(home.join("project")).unwrap();
    std::fs::create_dir_all(base.join("outside")).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n", home.join("project").display());
    let runtime = common::runtime(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime
        .open_session(Some("test-client".into()))
        .await
        .unwrap();
    World {
        _dir: dir,
        base,
        home,
        _runtime: runtime,
        session,
    }
}

fn action(primitive: &str, args: Value) -> Action {
    Action::from_tool_call(primitive, args).unwrap()
}

impl World {
    fn p(&self, rel: &str) -> PathBuf {
        self.home.join("project").join(rel)
    }

    /// The directory outside every wall root that a swapped-in symlink points at.
    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    fn trash(&self) -> PathBuf {
        self.home.join(".local/share/Trash")
    }

    async fn run(&self, primitive: &str, args: Value) -> Result<(u64, Value), String> {
        match self
            .session
            .run(action(primitive, args), Hooks::default())
            .await
        {
            Ok(ran) => Ok((ran.seq, ran.outcome.output)),
            Err(e) => Err(e.failure.code),
        }
    }

    async fn ok(&self, primitive: &str, args: Value) -> (u64, Value) {
        match self.run(primitive, args).await {
            Ok(done) => done,
            Err(code) => panic!("{primitive} failed: {code}"),
        }
    }

    /// From the next time the body reaches `op` on `path` (after its check, before its act):
    /// `dir` is moved aside and a symlink to [`World::outside`] put in its place. The hook is
    /// removed when the guard is dropped; `fired` says whether it ran.
    fn swap_at(&self, op: Op, path: PathBuf, dir: PathBuf) -> (hook::Guard, Arc<AtomicBool>) {
        let fired = Arc::new(AtomicBool::new(false));
        let outside = self.outside();
        let seen = fired.clone();
        let guard = hook::add(move |at, checked| {
            if at == op && checked == path && !seen.swap(true, Ordering::SeqCst) {
                std::fs::rename(&dir, dir.with_extension("aside")).unwrap();
                std::os::unix::fs::symlink(&outside, &dir).unwrap();
            }
        });
        (guard, fired)
    }
}

/// Every entry under `root` (not following links) with its contents, a link's target or
/// `dir`: what a test compares before and after.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = path.symlink_metadata().unwrap();
            let seen = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_owned()
            } else {
                std::fs::read_to_string(&path).unwrap()
            };
            out.insert(rel, seen);
        }
    }
    out
}

fn outside_files(w: &World) -> BTreeMap<String, String> {
    std::fs::write(w.outside().join("f.txt"), "not aido's").unwrap();
    std::fs::create_dir_all(w.outside().join("dir/deeper")).unwrap();
    std::fs::write(w.outside().join("dir/deeper/g.txt"), "not aido's either").unwrap();
    tree(&w.outside())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_remove_never_follows_a_directory_swapped_for_a_link_out() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub")).unwrap();
    let (seq, _) = w
        .ok(
            "write_file",
            json!({"path": "sub/f.txt", "content": "agent"}),
        )
        .await;
    // The undo of a write that created sub/f.txt removes it.
    let (_guard, fired) = w.swap_at(Op::Remove, w.p("sub/f.txt"), w.p("sub"));
    let result = w.run("rewind", json!({"before_seq": seq})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing outside was removed");
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    assert_eq!(
        std::fs::read_to_string(w.p("sub.aside/f.txt")).unwrap(),
        "agent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_move_never_lands_outside() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub")).unwrap();
    std::fs::write(w.p("sub/back.txt"), "mine").unwrap();
    let (seq, out) = w.ok("move_to_trash", json!({"path": "sub/back.txt"})).await;
    let item = PathBuf::from(out["trashed_to"].as_str().unwrap());
    // The undo moves the item from the trash back to sub/back.txt.
    let (_guard, fired) = w.swap_at(Op::Move, w.p("sub/back.txt"), w.p("sub"));
    let result = w.run("rewind", json!({"before_seq": seq})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing was moved outside");
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    assert_eq!(
        std::fs::read_to_string(&item).unwrap(),
        "mine",
        "still kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_mkdir_never_creates_outside() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub")).unwrap();
    std::fs::write(w.p("sub/keep.txt"), "mine").unwrap();
    w.ok("create_snapshot", json!({})).await;
    let (seq, _) = w
        .ok(
            "write_file",
            json!({"path": "sub/new/f.txt", "content": "x", "create_parents": true}),
        )
        .await;
    // Rewinding to the write restores the snapshot, then redoes it: mkdir sub/new, write.
    let (_guard, fired) = w.swap_at(Op::Mkdir, w.p("sub/new"), w.p("sub"));
    let result = w.run("rewind", json!({"to_seq": seq})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing was made outside");
    assert!(!w.outside().join("new").exists());
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
}

/// The write step already went through cap-std from the root's handle before point 6 (it
/// refused with `permission_denied`); it now says what happened, and all four rewind steps
/// are pinned the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_write_never_lands_outside() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub")).unwrap();
    std::fs::write(w.p("sub/f.txt"), "one").unwrap();
    let (seq, _) = w
        .ok("write_file", json!({"path": "sub/f.txt", "content": "two"}))
        .await;
    // The undo writes "one" back.
    let (_guard, fired) = w.swap_at(Op::Write, w.p("sub/f.txt"), w.p("sub"));
    let result = w.run("rewind", json!({"before_seq": seq})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing was written outside");
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    assert_eq!(
        std::fs::read_to_string(w.p("sub.aside/f.txt")).unwrap(),
        "two"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trashing_a_file_never_takes_one_from_outside() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub")).unwrap();
    std::fs::write(w.p("sub/f.txt"), "mine").unwrap();
    let (_guard, fired) = w.swap_at(Op::Trash, w.p("sub/f.txt"), w.p("sub"));
    let result = w.run("move_to_trash", json!({"path": "sub/f.txt"})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing was taken from outside");
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    assert!(!w.trash().join("files/f.txt").exists());
    assert!(
        std::fs::read_dir(w.trash().join("info"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "no info file is left for an item that never went in"
    );
    assert_eq!(
        std::fs::read_to_string(w.p("sub.aside/f.txt")).unwrap(),
        "mine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trashing_a_directory_never_takes_one_from_outside() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub/dir/deeper")).unwrap();
    std::fs::write(w.p("sub/dir/deeper/g.txt"), "mine").unwrap();
    let (_guard, fired) = w.swap_at(Op::Trash, w.p("sub/dir"), w.p("sub"));
    let result = w.run("move_to_trash", json!({"path": "sub/dir"})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing was taken from outside");
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    assert!(!w.trash().join("files/dir").exists());
    assert_eq!(
        std::fs::read_to_string(w.p("sub.aside/dir/deeper/g.txt")).unwrap(),
        "mine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_from_the_trash_never_lands_outside() {
    let w = world().await;
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub")).unwrap();
    std::fs::write(w.p("sub/back.txt"), "mine").unwrap();
    let (_, out) = w.ok("move_to_trash", json!({"path": "sub/back.txt"})).await;
    let item = PathBuf::from(out["trashed_to"].as_str().unwrap());
    let (_guard, fired) = w.swap_at(Op::Restore, w.p("sub/back.txt"), w.p("sub"));
    let result = w
        .run("restore_from_trash", json!({"path": "sub/back.txt"}))
        .await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(tree(&w.outside()), before, "nothing was put outside");
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    assert_eq!(
        std::fs::read_to_string(&item).unwrap(),
        "mine",
        "still kept"
    );
    assert!(w.trash().join("info/back.txt.trashinfo").exists());
}

/// A tmpfs over `dir`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(Self(dir.to_owned()))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The trash on another filesystem (a tmpfs over `~/.local/share`): a swap before the act
/// still changes nothing outside (the copy-then-remove path used to copy and then
/// `remove_dir_all` whatever the path led to), and a directory with a file, a mode and a
/// symlink goes to the trash and back through handles, the link copied as a link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trashing_across_filesystems_copies_and_removes_through_handles() {
    let w = world().await;
    let mount = Tmpfs::mount(&w.home.join(".local/share"));
    match &mount {
        Ok(_) => eprintln!("path taken: the trash is on a tmpfs, another filesystem"),
        Err(why) => eprintln!(
            "path taken: one filesystem (mounting a tmpfs failed: {}); renameat only",
            why.trim()
        ),
    }
    let before = outside_files(&w);
    std::fs::create_dir_all(w.p("sub/dir/deeper")).unwrap();
    std::fs::write(w.p("sub/dir/deeper/g.txt"), "mine").unwrap();
    let (guard, fired) = w.swap_at(Op::Trash, w.p("sub/dir"), w.p("sub"));
    let result = w.run("move_to_trash", json!({"path": "sub/dir"})).await;
    assert!(fired.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(
        tree(&w.outside()),
        before,
        "nothing outside was copied away"
    );
    assert_eq!(result.unwrap_err(), "path_changed_during_check");
    drop(guard);

    // The round trip, by copy where the filesystems differ.
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(w.p("tree/inner")).unwrap();
    std::fs::write(w.p("tree/inner/a.txt"), "a").unwrap();
    std::fs::set_permissions(
        w.p("tree/inner/a.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::os::unix::fs::symlink(w.outside(), w.p("tree/out")).unwrap();
    let shape = tree(&w.p("tree"));
    w.ok("move_to_trash", json!({"path": "tree"})).await;
    assert!(!w.p("tree").exists());
    assert_eq!(tree(&w.trash().join("files/tree")), shape);
    assert_eq!(tree(&w.outside()), before, "the link was not followed");
    w.ok("restore_from_trash", json!({"path": "tree"})).await;
    assert_eq!(tree(&w.p("tree")), shape);
    let mode = std::fs::metadata(w.p("tree/inner/a.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    assert!(!w.trash().join("files/tree").exists());
    assert!(!w.trash().join("info/tree.trashinfo").exists());
    // The tmpfs goes before the temporary home that holds its mount point.
    drop(mount);
    drop(w);
}
