//! The runtime's `service.instance.id`: 32 hex digits made once and kept in
//! `AIDO_HOME/instance-id`, so a runtime is the same instance across restarts and every
//! AIDO_HOME (every runtime of a fleet) is a different one.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file in AIDO_HOME.
pub const INSTANCE_FILE: &str = "instance-id";

/// Where the id of `home` is kept.
pub fn instance_path(home: &Path) -> PathBuf {
    home.join(INSTANCE_FILE)
}

/// The id kept in `home`, made with `random` (16 bytes) if there is none yet. An existing
/// file that does not hold 32 hex digits is an error, never replaced: another id would make
/// this runtime a new instance.
pub fn load_or_create(home: &Path, random: impl FnOnce(&mut [u8])) -> std::io::Result<String> {
    let path = instance_path(home);
    match std::fs::read_to_string(&path) {
        Ok(text) => return parse(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 16];
    random(&mut bytes);
    let id = hex::encode(bytes);
    std::fs::create_dir_all(home)?;
    // create_new: of two processes starting on one home, the second reads the first's id.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(mut file) => {
            file.write_all(format!("{id}\n").as_bytes())?;
            file.sync_all()?;
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            parse(&std::fs::read_to_string(&path)?)
        }
        Err(e) => Err(e),
    }
}

fn parse(text: &str) -> std::io::Result<String> {
    let id = text.trim();
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id.to_owned())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the instance id is not 32 hex digits",
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_id_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = super::load_or_create(dir.path(), |b| b.fill(7)).unwrap();
        assert_eq!(first, "07".repeat(16));
        let again = super::load_or_create(dir.path(), |b| b.fill(9)).unwrap();
        assert_eq!(again, first);
    }

    #[test]
    fn a_corrupt_id_is_an_error_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(super::instance_path(dir.path()), "nope").unwrap();
        let err = super::load_or_create(dir.path(), |b| b.fill(7)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            std::fs::read_to_string(super::instance_path(dir.path())).unwrap(),
            "nope"
        );
    }
}
