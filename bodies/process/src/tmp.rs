//! A session's `/tmp`, which its commands share (what one leaves there the next finds): as
//! root, a tmpfs of `tmp_bytes_max` in no mount table ([`aido_sandbox::SharedTmp`]); as
//! another user, who cannot make one, a host directory in aido's own layers directory (mode
//! 0700, outside every write root), bounded only by the disk. Either goes when the session has
//! ended and none of its background commands still runs. Nothing in it is journaled or
//! rewound: it is scratch, like a shell's `/tmp`. A command that asks for `private_tmp` (and
//! every dry run) gets a private tmpfs instead.

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The name of a session's directory: `tmp-PID-SESSION`, so the leftovers of an aido process
/// that was killed can be told from those of one still running.
const PREFIX: &str = "tmp-";

/// The shared `/tmp` of every live session of this aido process.
pub struct SessionTmps {
    base: PathBuf,
    live: Mutex<HashMap<String, Arc<SessionTmp>>>,
}

/// One session's `/tmp`; freed when the last holder (the session, a background command still
/// running) lets go.
pub enum SessionTmp {
    Tmpfs(aido_sandbox::SharedTmp),
    Dir(PathBuf),
}

impl SessionTmp {
    /// Points a command at it: the directory through its profile, the tmpfs through the
    /// sandbox (returned for [`aido_sandbox::Sandbox::with_tmp`]).
    pub fn apply(&self, profile: &mut aido_sandbox::Profile) -> Option<aido_sandbox::SharedTmp> {
        match self {
            SessionTmp::Tmpfs(tmp) => Some(tmp.clone()),
            SessionTmp::Dir(dir) => {
                profile.shared_tmp = Some(dir.clone());
                None
            }
        }
    }
}

impl Drop for SessionTmp {
    fn drop(&mut self) {
        let SessionTmp::Dir(dir) = self else {
            return;
        };
        // remove_dir_all never follows a link a command left there.
        if let Err(error) = std::fs::remove_dir_all(&*dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), %error, "a session's /tmp could not be removed");
        }
    }
}

impl SessionTmps {
    /// The session directories under `base` (the layers directory), the leftovers of aido
    /// processes that are gone removed first.
    pub fn new(base: &Path) -> Self {
        sweep(base);
        SessionTmps {
            base: base.to_owned(),
            live: Mutex::new(HashMap::new()),
        }
    }

    fn locked<T>(&self, f: impl FnOnce(&mut HashMap<String, Arc<SessionTmp>>) -> T) -> T {
        let mut live = match self.live.lock() {
            Ok(live) => live,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut live)
    }

    /// `session`'s `/tmp`, made on first use: with `owner` (aido as root runs commands as that
    /// user) a tmpfs of `bytes_max` it owns, else a directory (mode 1777) in the base, which
    /// must be aido's own, as for layers.
    pub fn of(
        &self,
        session: &str,
        owner: Option<aido_sandbox::RunAs>,
        bytes_max: u64,
    ) -> std::io::Result<Arc<SessionTmp>> {
        // Made under the lock: two first commands of a session must not make two (the loser's
        // drop would remove the winner's directory).
        self.locked(|live| {
            if let Some(known) = live.get(session) {
                return Ok(Arc::clone(known));
            }
            let tmpfs = owner.map(|owner| aido_sandbox::SharedTmp::tmpfs(bytes_max, owner));
            let made = Arc::new(match tmpfs {
                Some(Ok(tmpfs)) => SessionTmp::Tmpfs(tmpfs),
                // A kernel that cannot: the directory, owned by the user commands run as.
                Some(Err(error)) => {
                    tracing::warn!(%error, "a session's /tmp is a directory instead of a tmpfs");
                    let dir = self.dir_of(session)?;
                    if let Some(owner) = owner {
                        std::os::unix::fs::lchown(&dir, Some(owner.uid), Some(owner.gid))?;
                    }
                    SessionTmp::Dir(dir)
                }
                None => SessionTmp::Dir(self.dir_of(session)?),
            });
            live.insert(session.to_owned(), Arc::clone(&made));
            Ok(made)
        })
    }

    fn dir_of(&self, session: &str) -> std::io::Result<PathBuf> {
        if session.is_empty() || !session.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
            return Err(std::io::Error::other(format!(
                "a session id of letters and digits, not {session:?}"
            )));
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        aido_sandbox::open_layers(&self.base).map_err(std::io::Error::other)?;
        let dir = self
            .base
            .join(format!("{PREFIX}{}-{session}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?;
        Ok(dir)
    }

    /// `session` ended: its directory goes once no background command of it holds it.
    pub fn end(&self, session: &str) {
        let ended = self.locked(|live| live.remove(session));
        drop(ended);
    }
}

/// Removes the session directories of aido processes that no longer run.
fn sweep(base: &Path) {
    for left in aido_sandbox::leftovers_of_gone_processes(base, PREFIX) {
        let _ = std::fs::remove_dir_all(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_tmp_is_shared_until_the_session_and_its_holders_let_go() {
        let base = tempfile::tempdir().unwrap();
        let layers = base.path().join("layers");
        let tmps = SessionTmps::new(&layers);
        let dir_of = |tmp: &SessionTmp| match tmp {
            SessionTmp::Dir(dir) => dir.clone(),
            SessionTmp::Tmpfs(_) => panic!("no owner, no tmpfs"),
        };
        let first = tmps.of("ab12", None, 1 << 20).unwrap();
        let again = tmps.of("ab12", None, 1 << 20).unwrap();
        let dir = dir_of(&first);
        assert_eq!(dir, dir_of(&again));
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            0o1777
        );
        std::fs::write(dir.join("left"), "x").unwrap();
        drop((first, again));
        // The session still holds it.
        assert!(dir.join("left").exists());
        let held = tmps.of("ab12", None, 1 << 20).unwrap();
        tmps.end("ab12");
        assert!(dir.exists(), "a background command still holds it");
        drop(held);
        assert!(!dir.exists());
        assert!(tmps.of("../x", None, 1 << 20).is_err());
    }

    #[test]
    fn leftovers_of_a_gone_process_are_swept_and_a_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir(base.path().join("tmp-4194399-aa")).unwrap();
        let mine = base.path().join(format!("tmp-{}-bb", std::process::id()));
        std::fs::create_dir(&mine).unwrap();
        std::fs::create_dir(base.path().join("7-12")).unwrap();
        SessionTmps::new(base.path());
        assert!(!base.path().join("tmp-4194399-aa").exists());
        assert!(mine.exists() && base.path().join("7-12").exists());
    }
}
