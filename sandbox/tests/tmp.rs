//! The command's `/tmp`: a private tmpfs each run, or a shared host directory (a session's),
//! which what one command leaves there the next one sees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{Fixture, assert_code, stdout};

fn shared_dir(fixture: &Fixture, name: &str) -> std::path::PathBuf {
    let dir = fixture.base.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

#[test]
fn without_a_shared_tmp_each_run_has_a_fresh_one() {
    let fixture = Fixture::new();
    assert_code(&fixture.sh("echo left > /tmp/left"), 0);
    let second = fixture.sh("cat /tmp/left 2>/dev/null || echo gone");
    assert_eq!(stdout(&second), "gone\n");
}

#[test]
fn a_shared_tmp_carries_files_from_one_run_to_the_next_and_is_sealed() {
    let fixture = Fixture::new();
    let dir = shared_dir(&fixture, "session-tmp");
    let mut profile = fixture.profile();
    profile.shared_tmp = Some(dir.clone());
    assert_code(&fixture.sh_with(&profile, "echo left > /tmp/left"), 0);
    let second = fixture.sh_with(
        &profile,
        "cat /tmp/left; awk '$5 == \"/tmp\" {print $6}' /proc/self/mountinfo",
    );
    let out = stdout(&second);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("left"), "{out}");
    let options = lines.next().unwrap_or_default();
    assert!(
        options.contains("nosuid") && options.contains("nodev"),
        "{out}"
    );
    // The file is on the host, in the shared directory, and nowhere in the writable root.
    assert_eq!(common::read(&dir.join("left")), "left\n");
    assert!(common::entries(&fixture.root).is_empty());
    fixture.assert_untouched();
}

#[test]
fn a_shared_tmp_that_is_not_the_commands_own_or_overlaps_a_root_is_refused() {
    let fixture = Fixture::new();
    // Inside the writable root: its files would be changes to apply.
    let inside = fixture.root.join("tmp");
    std::fs::create_dir(&inside).unwrap();
    let mut profile = fixture.profile();
    profile.shared_tmp = Some(inside);
    let refused = fixture.try_sh(&profile, "true").unwrap_err();
    assert_eq!(refused.code(), "sandbox_request_invalid", "{refused}");
    assert!(refused.to_string().contains("overlaps"), "{refused}");
    // A link, not a directory.
    let link = fixture.base.join("tmp-link");
    std::os::unix::fs::symlink(&fixture.outside, &link).unwrap();
    profile.shared_tmp = Some(link);
    let refused = fixture.try_sh(&profile, "true").unwrap_err();
    assert!(refused.to_string().contains("not a directory"), "{refused}");
    // Owned by someone else (only root can make one here).
    if rustix::process::geteuid().is_root() {
        let theirs = shared_dir(&fixture, "theirs");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        profile.shared_tmp = Some(theirs);
        let refused = fixture.try_sh(&profile, "true").unwrap_err();
        assert!(
            refused.to_string().contains("owned by uid 65534"),
            "{refused}"
        );
    } else {
        eprintln!("not root: a directory another user owns cannot be made; that case skipped");
    }
}

#[test]
fn a_command_run_as_an_unprivileged_user_shares_a_tmp_it_owns() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: run_as needs root; the shared tmp of aido's own user is tested above");
        return;
    }
    let fixture = Fixture::new();
    let dir = shared_dir(&fixture, "session-tmp");
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    // The fixture's base is root's (mode 0700 from tempfile): the command could not pass
    // through it by path, so the child hands init the directory itself.
    std::fs::set_permissions(&fixture.base, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut profile = fixture.profile();
    profile.shared_tmp = Some(dir.clone());
    profile.run_as = Some(aido_sandbox::RunAs {
        uid: 65534,
        gid: 65534,
    });
    // The root's owner becomes the command's own through its idmapped wall.
    assert_code(&fixture.sh_with(&profile, "echo mine > /tmp/mine"), 0);
    let second = fixture.sh_with(&profile, "cat /tmp/mine");
    assert_eq!(stdout(&second), "mine\n");
    assert_eq!(std::fs::metadata(dir.join("mine")).unwrap().uid(), 65534);
}

#[test]
fn a_shared_tmpfs_is_sized_shared_by_runs_and_in_no_host_mount_table() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: a tmpfs cannot be made; the shared directory is tested above");
        let refused =
            aido_sandbox::SharedTmp::tmpfs(1 << 20, aido_sandbox::RunAs { uid: 1, gid: 1 })
                .unwrap_err();
        assert_eq!(refused.code(), "sandbox_unavailable", "{refused}");
        return;
    }
    let fixture = Fixture::new();
    let run_as = aido_sandbox::RunAs {
        uid: 65534,
        gid: 65534,
    };
    let tmp = aido_sandbox::SharedTmp::tmpfs(4 << 20, run_as).unwrap();
    let mut profile = fixture.profile();
    profile.run_as = Some(run_as);
    let sandbox = fixture.sandbox().with_tmp(Some(tmp.clone()));
    let run = |script: &str| sandbox.run(&profile, &fixture.request(script)).unwrap();
    let first = run(
        "echo left > /tmp/left; dd if=/dev/zero of=/tmp/big bs=1M count=8 2>&1 | grep -o 'No space left'; rm -f /tmp/big",
    );
    assert!(
        stdout(&first).contains("No space left"),
        "{}",
        stdout(&first)
    );
    let second = run(
        "cat /tmp/left; stat -f -c %T /tmp; awk '$5 == \"/tmp\" {print $6}' /proc/self/mountinfo",
    );
    let out = stdout(&second);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["left", "tmpfs"], "{out}");
    assert!(
        lines[2].contains("nosuid") && lines[2].contains("nodev"),
        "{out}"
    );
    // A second session's tmpfs is another.
    let other = fixture.sandbox().with_tmp(Some(
        aido_sandbox::SharedTmp::tmpfs(4 << 20, run_as).unwrap(),
    ));
    let theirs = other
        .run(
            &profile,
            &fixture.request("cat /tmp/left 2>/dev/null || echo none"),
        )
        .unwrap();
    assert_eq!(stdout(&theirs), "none\n");
    // Without run_as the child could not clone it with the host's privileges: refused.
    let refused = fixture
        .sandbox()
        .with_tmp(Some(tmp))
        .run(&fixture.profile(), &fixture.request("true"))
        .unwrap_err();
    assert_eq!(refused.code(), "sandbox_request_invalid", "{refused}");
    fixture.assert_untouched();
}

/// A workspace under `/dev/shm`, which the sandbox replaces with a private tmpfs of its own,
/// behind a directory only root may pass (tempfile's 0700): the way down is made afresh inside
/// the private one, as under `/tmp`, and the command writes where the host sees it.
#[test]
fn a_root_under_dev_shm_behind_a_closed_directory_is_reached() {
    let base = tempfile::Builder::new()
        .prefix("aido-sandbox-shm-")
        .tempdir_in("/dev/shm")
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = base.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let mut profile = aido_sandbox::Profile::new(vec![root.clone()]);
    if rustix::process::geteuid().is_root() {
        profile.run_as = Some(aido_sandbox::RunAs {
            uid: 65534,
            gid: 65534,
        });
    } else {
        eprintln!("not root: run as aido's own user (no idmapped wall, no cover)");
    }
    let request = aido_sandbox::Request::new(["sh", "-c", "echo here > made && cat made"], &root);
    let sandbox = Fixture::new().sandbox();
    let outcome = match sandbox.run(&profile, &request) {
        Ok(outcome) => outcome,
        Err(error) => panic!("sandbox refused ({}): {error}", error.code()),
    };
    assert_code(&outcome, 0);
    assert_eq!(stdout(&outcome), "here\n");
    assert_eq!(common::read(&root.join("made")), "here\n");
}
