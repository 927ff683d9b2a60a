//! Real workloads inside the sandbox: they must work, not merely be denied things.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod common;

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
    // `.git` is the placeholder of the denied path, covered read-only.
    assert_eq!(stdout(&outcome), "before\n.git\nexisting.txt\nnew.txt\n");
    // The host tree is as it was.
    assert_eq!(entries(&fixture.root), vec!["existing.txt", "gone.txt"]);
    assert_eq!(read(&fixture.root.join("existing.txt")), "before");
    // The upper layer holds exactly the changes (gone.txt as a whiteout), and the
    // placeholder of the denied .git is gone again.
    let upper = layers.join("0/upper");
    assert_eq!(read(&upper.join("new.txt")), "new\n");
    assert_eq!(read(&upper.join("existing.txt")), "after\n");
    let whiteout = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(whiteout.file_type().is_char_device(), "{whiteout:?}");
    assert_eq!(entries(&upper), vec!["existing.txt", "gone.txt", "new.txt"]);
}
