use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Component, Path};

use aido_actions::AccessKind;
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use aido_search::{EntryKind, Judge, Opened, Verdict};

/// The policy's walls and deny globs, asked about every entry before aido-search opens it.
///
/// The root was resolved and admitted by `PolicyEngine::check_path` (inside a read wall, not
/// denied, not in `AIDO_HOME`). The walk never follows a link, so an entry it meets is the root
/// joined with plain names: it lies inside the root's wall, and what is left to judge is the
/// deny globs (`PolicyEngine::denied_by_pattern`) and `AIDO_HOME` below the root, with no
/// system call. Any other path gets the whole `check_path`. A path that is not UTF-8 cannot be
/// judged and is denied.
///
/// Check then use, as the filesystem body does. A file below the root is opened with one
/// `openat2(RESOLVE_NO_SYMLINKS)` of its judged path: the root is resolved and the rest plain
/// names, so what opens is the file judged, and a directory swapped for a link after the walk
/// judged it makes the open fail (`ELOOP`: denied, unread). Where `openat2` is missing, or for
/// any other path, the file is opened and the path it really opened (`/proc/self/fd/N`) must
/// be the path judged, or pass `check_path` itself.
pub struct Walls<'a> {
    /// The policy.
    pub policy: &'a PolicyEngine,
    /// The calling session (its working directory).
    pub session: &'a SessionContext,
    /// The search's root, as `check_path` resolved and admitted it.
    pub root: &'a Path,
    /// `AIDO_HOME`, resolved.
    pub aido_home: &'a Path,
}

impl Walls<'_> {
    /// The whole check: resolution, walls, `AIDO_HOME`, deny globs.
    fn check(&self, given: &str) -> Verdict {
        match self
            .policy
            .check_path(given, AccessKind::Read, self.session, &FsResolver)
        {
            Ok(_) => Verdict::Allow,
            Err(_) => Verdict::Deny,
        }
    }
}

/// Set once `openat2` turned out to be missing (a kernel before 5.6, or a seccomp filter).
static OPENAT2_MISSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Walls<'_> {
    /// The root joined with plain names: inside the root's wall, with no `.`, `..` or
    /// symlink the walk followed.
    fn below_root(&self, path: &Path) -> bool {
        path.starts_with(self.root)
            && path
                .components()
                .all(|part| matches!(part, Component::RootDir | Component::Normal(_)))
    }
}

impl Judge for Walls<'_> {
    fn judge(&self, path: &Path, _kind: EntryKind) -> Verdict {
        let Some(given) = path.to_str() else {
            return Verdict::Deny;
        };
        if !self.below_root(path) {
            return self.check(given);
        }
        if path.starts_with(self.aido_home) || self.policy.denied_by_pattern(path).is_some() {
            return Verdict::Deny;
        }
        Verdict::Allow
    }

    fn open(&self, path: &Path) -> Option<Opened> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        use std::sync::atomic::Ordering;
        if OPENAT2_MISSING.load(Ordering::Relaxed) || !self.below_root(path) {
            return None;
        }
        let opened = rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        );
        Some(match opened {
            Ok(fd) => Opened::File(File::from(fd)),
            Err(rustix::io::Errno::LOOP) => Opened::Denied,
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                OPENAT2_MISSING.store(true, Ordering::Relaxed);
                return None;
            }
            Err(_) => Opened::Unreadable,
        })
    }

    fn opened(&self, path: &Path, file: &File) -> Verdict {
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        match std::fs::read_link(link) {
            Ok(real) if real == path => Verdict::Allow,
            Ok(real) => real.to_str().map_or(Verdict::Deny, |real| self.check(real)),
            Err(_) => Verdict::Deny,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aido_policy::{Environment, Layered, Source};

    /// The walk judged `project/d/key` (a plain file in the walls); then `d` became a link to
    /// a directory outside them. The open follows the link; `opened` sees where it landed.
    #[test]
    fn a_directory_swapped_for_a_link_out_of_the_walls_is_closed_unread() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (home, outside) = (base.join("home"), base.join("outside"));
        let project = home.join("project");
        std::fs::create_dir_all(project.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(project.join("d/key"), "fine\n").unwrap();
        std::fs::write(outside.join("key"), "secret\n").unwrap();
        let text = format!("workdir = \"{}\"\n", project.display());
        let config = Layered::from_layers(&[(Source::File("test".into()), &text)])
            .unwrap()
            .config;
        let env = Environment {
            home: home.clone(),
            aido_home: base.join("aido"),
        };
        let policy = PolicyEngine::new(&config, &env, &FsResolver).unwrap();
        let session = SessionContext::new(project.clone());
        let aido_home = base.join("aido");
        let walls = Walls {
            policy: &policy,
            session: &session,
            root: &project,
            aido_home: &aido_home,
        };
        let judged = project.join("d/key");
        assert_eq!(walls.judge(&judged, EntryKind::File), Verdict::Allow);
        let file = File::open(&judged).unwrap();
        assert_eq!(walls.opened(&judged, &file), Verdict::Allow);

        match walls.open(&judged) {
            Some(Opened::File(mut f)) => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut f, &mut text).unwrap();
                assert_eq!(text, "fine\n");
            }
            other => panic!("the judged file opens: {other:?}"),
        }

        std::fs::rename(project.join("d"), project.join("d.old")).unwrap();
        std::os::unix::fs::symlink(&outside, project.join("d")).unwrap();
        let swapped = File::open(&judged).unwrap();
        assert_eq!(walls.opened(&judged, &swapped), Verdict::Deny);
        // Opened the fast way, the link on the way is refused by the kernel: denied, unread.
        assert!(
            matches!(walls.open(&judged), Some(Opened::Denied)),
            "{:?}",
            walls.open(&judged)
        );
        // The final name a link: refused too (O_NOFOLLOW and RESOLVE_NO_SYMLINKS).
        std::os::unix::fs::symlink(outside.join("key"), project.join("d.old/link")).unwrap();
        assert!(matches!(
            walls.open(&project.join("d.old/link")),
            Some(Opened::Denied)
        ));
        // Not below the root: no fast open, the search opens it and asks `opened`.
        assert!(walls.open(&outside.join("key")).is_none());
        // A path not below the root gets the whole check, which sees the link.
        assert_eq!(
            walls.judge(&project.join("d/../d/key"), EntryKind::File),
            Verdict::Deny
        );
        assert_eq!(
            walls.judge(&outside.join("key"), EntryKind::File),
            Verdict::Deny
        );
        // Below the root: deny globs and AIDO_HOME without a system call.
        assert_eq!(
            walls.judge(&project.join("x/.env"), EntryKind::File),
            Verdict::Deny
        );
        assert_eq!(
            walls.judge(&project.join("x/.ssh/id"), EntryKind::File),
            Verdict::Deny
        );
        assert_eq!(
            walls.judge(&project.join("x/y.rs"), EntryKind::File),
            Verdict::Allow
        );
        let inside = Walls {
            aido_home: &project.join("x"),
            ..walls
        };
        assert_eq!(
            inside.judge(&project.join("x/y.rs"), EntryKind::File),
            Verdict::Deny
        );
    }
}
