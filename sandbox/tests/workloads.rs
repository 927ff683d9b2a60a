//! Real workloads inside the sandbox: they must work, not merely be denied things.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use aido_sandbox::{Request, WriteMode};
use common::*;

#[test]
fn a_shell_writes_in_its_writable_root() {
    let fixture = Fixture::new();
    let outcome = fixture.sh("echo hi > out.txt && cat out.txt && mkdir -p a/b && mv out.txt a/b/");
    assert_code(&outcome, 0);
    assert_eq!(stdout(&outcome), "hi\n");
    assert_eq!(read(&fixture.root.join("a/b/out.txt")), "hi\n");
    assert!(outcome.duration_ms > 0);
}

#[test]
fn a_python_test_suite_runs() {
    let fixture = Fixture::new();
    std::fs::write(
        fixture.root.join("test_math.py"),
        "import unittest, json, tempfile, os\n\
         class T(unittest.TestCase):\n\
         \x20   def test_add(self): self.assertEqual(1 + 1, 2)\n\
         \x20   def test_tmp(self):\n\
         \x20       with tempfile.NamedTemporaryFile() as f: f.write(b'x')\n\
         \x20   def test_write(self):\n\
         \x20       open('result.json', 'w').write(json.dumps({'ok': True}))\n",
    )
    .unwrap();
    let outcome = fixture
        .sandbox()
        .run(
            &fixture.profile(),
            &Request::new(
                ["python3", "-m", "unittest", "-v", "test_math"],
                &fixture.root,
            ),
        )
        .unwrap();
    assert_code(&outcome, 0);
    assert!(
        stderr(&outcome).contains("Ran 3 tests"),
        "{}",
        stderr(&outcome)
    );
    assert_eq!(read(&fixture.root.join("result.json")), "{\"ok\": true}");
}

#[test]
fn git_init_and_commit_in_a_writable_root() {
    let fixture = Fixture::new();
    let outcome = fixture.sh(
        "git init -q repo && cd repo && echo content > file.txt && git add file.txt && \
         git -c user.name=aido -c user.email=aido@example.invalid commit -qm first && \
         git log --oneline | wc -l",
    );
    assert_code(&outcome, 0);
    assert_eq!(stdout(&outcome).trim(), "1");
    assert!(fixture.root.join("repo/.git/HEAD").exists());
}

#[test]
fn overlay_mode_collects_changes_in_the_upper_layer_and_leaves_the_host_alone() {
    let fixture = Fixture::new();
    std::fs::write(fixture.root.join("existing.txt"), "before").unwrap();
    std::fs::write(fixture.root.join("gone.txt"), "doomed").unwrap();
    let layers = fixture.base.join("layers");
    std::fs::create_dir(&layers).unwrap();
    let mut profile = fixture.profile();
    profile.writes = WriteMode::Overlay {
        layers_dir: layers.clone(),
    };
    profile.deny.push(".git/hooks".into());
    let outcome = fixture.sh_with(
        &profile,
        "cat existing.txt; echo; echo new > new.txt; echo after > existing.txt; rm gone.txt; \
         mkdir -p .git/hooks; echo pwned > .git/hooks/x; ls -A",
    );
    // The denied `.git/hooks/x` did not exist: in overlay mode it is made in the layer, where
    // the caller's judgement of the changes (a deny glob) refuses it.
    assert_eq!(stdout(&outcome), "before\n.git\nexisting.txt\nnew.txt\n");
    // The host tree is as it was.
    assert_eq!(entries(&fixture.root), vec!["existing.txt", "gone.txt"]);
    assert_eq!(read(&fixture.root.join("existing.txt")), "before");
    // The upper layer holds exactly the changes (gone.txt as a whiteout), the denied path
    // among them, for the caller to refuse.
    let upper = layers.join("0/upper");
    assert_eq!(read(&upper.join(".git/hooks/x")), "pwned\n");
    assert_eq!(read(&upper.join("new.txt")), "new\n");
    assert_eq!(read(&upper.join("existing.txt")), "after\n");
    let whiteout = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(whiteout.file_type().is_char_device(), "{whiteout:?}");
    assert_eq!(
        entries(&upper),
        vec![".git", "existing.txt", "gone.txt", "new.txt"]
    );
}

#[test]
#[allow(clippy::too_many_lines)]
fn the_changes_of_an_overlay_run_are_read_back_as_a_list_and_the_host_is_untouched() {
    use aido_sandbox::Change;
    let fixture = Fixture::new();
    let root = &fixture.root;
    std::fs::write(root.join("same.txt"), "same").unwrap();
    std::fs::write(root.join("edit.txt"), "old").unwrap();
    std::fs::write(root.join("gone.txt"), "doomed").unwrap();
    std::fs::write(root.join("tool.sh"), "echo").unwrap();
    std::fs::create_dir_all(root.join("old/deep")).unwrap();
    std::fs::write(root.join("old/deep/x"), "x").unwrap();
    std::fs::create_dir_all(root.join("remade")).unwrap();
    std::fs::write(root.join("remade/stale"), "s").unwrap();
    std::fs::create_dir_all(root.join("opened")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("opened"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let layers = fixture.base.join("layers");
    std::fs::create_dir(&layers).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&layers, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mut profile = fixture.profile();
    profile.writes = WriteMode::Overlay {
        layers_dir: layers.clone(),
    };
    let outcome = fixture.sh_with(
        &profile,
        "set -e; touch same.txt; echo new > edit.txt; rm gone.txt; chmod +x tool.sh; \
         rm -r old; rm -r remade; mkdir remade; echo fresh > remade/f; \
         mkdir -p made/sub; echo n > made/sub/n.txt; ln -s edit.txt link; mkfifo pipe; \
         chmod 701 opened; \
         python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"left.sock\")'",
    );
    assert_code(&outcome, 0);
    let held = aido_sandbox::open_layers(&layers).unwrap();
    let changes = aido_sandbox::collect_changes(
        &held,
        std::slice::from_ref(root),
        aido_sandbox::ChangeCaps::default(),
    )
    .unwrap();
    let shown: Vec<String> = changes
        .iter()
        .map(|change| {
            let rel = change
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            match change {
                Change::File {
                    created,
                    mode,
                    bytes,
                    contents,
                    ..
                } => {
                    let mut text = String::new();
                    std::io::Read::read_to_string(
                        &mut contents.as_ref().unwrap().open().unwrap(),
                        &mut text,
                    )
                    .unwrap();
                    format!("file {rel} created={created} mode={mode:o} bytes={bytes} {text:?}")
                }
                Change::Dir { mode, .. } => format!("dir {rel} mode={mode:o}"),
                Change::DirMode { mode, before, .. } => {
                    format!("dir mode {rel} {before:o} -> {mode:o}")
                }
                Change::Symlink { target, .. } => format!("link {rel} -> {}", target.display()),
                Change::Removed { dir, .. } => format!("removed {rel} dir={dir}"),
                Change::Unsupported { what, code, .. } => {
                    format!("unsupported {rel}: {what} ({code})")
                }
            }
        })
        .collect();
    let umask_file = |mode: u32| format!("{mode:o}");
    let file_mode = std::fs::metadata(root.join("edit.txt"))
        .unwrap()
        .permissions();
    use std::os::unix::fs::PermissionsExt;
    let plain = umask_file(file_mode.mode() & 0o7777);
    let exec = umask_file((file_mode.mode() & 0o7777) | 0o111);
    assert_eq!(
        shown,
        vec![
            format!("file edit.txt created=false mode={plain} bytes=4 \"new\\n\""),
            "removed gone.txt dir=false".to_string(),
            "link link -> edit.txt".to_string(),
            format!("dir made mode={}", shown_dir_mode(&shown)),
            format!("dir made/sub mode={}", shown_dir_mode(&shown)),
            format!("file made/sub/n.txt created=true mode={plain} bytes=2 \"n\\n\""),
            "removed old dir=true".to_string(),
            "dir mode opened 755 -> 701".to_string(),
            "unsupported pipe: a fifo (command_change_unsupported)".to_string(),
            // The socket the command bound and left (left.sock) is no change: it listened
            // only while the command lived.
            "removed remade dir=true".to_string(),
            format!("dir remade mode={}", shown_dir_mode(&shown)),
            format!("file remade/f created=true mode={plain} bytes=6 \"fresh\\n\""),
            // Touched: the same bytes with a new time is a change (build tools read times).
            format!("file same.txt created=false mode={plain} bytes=4 \"same\""),
            format!("file tool.sh created=false mode={exec} bytes=4 \"echo\""),
        ],
        "{shown:#?}"
    );
    // The host tree is as it was.
    assert_eq!(read(&root.join("edit.txt")), "old");
    assert_eq!(read(&root.join("gone.txt")), "doomed");
    assert_eq!(read(&root.join("old/deep/x")), "x");
    assert_eq!(entries(&root.join("remade")), vec!["stale"]);
    assert!(!root.join("made").exists());
}

/// The mode a `mkdir` in the sandbox gives (the umask there), taken from the listing itself.
fn shown_dir_mode(shown: &[String]) -> String {
    shown
        .iter()
        .find_map(|line| line.strip_prefix("dir made mode="))
        .unwrap_or("?")
        .to_string()
}
