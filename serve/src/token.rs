//! The bearer token of `aido serve`: `AIDO_HOME/serve/token`, 32 random bytes as hex, made
//! on first serve with mode 0600 (its directory 0700) and reused after. A token file anyone
//! else can read is refused, not served with.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why the token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Reading or writing the file failed.
    #[error("the token file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The file can be read by others than its owner.
    #[error(
        "the token file {path} has mode {mode:o}; it must be 0600 (chmod 600 it, or delete it for a new one)"
    )]
    Exposed { path: String, mode: u32 },
    /// The file holds no token.
    #[error("the token file {path} is empty or not one line of text; delete it for a new one")]
    Invalid { path: String },
}

aido_actions::coded!(TokenError {
    Io => "serve_token_io",
    Exposed => "serve_token_exposed",
    Invalid => "serve_token_invalid",
});

/// Where the token of `home` lives.
pub fn token_path(home: &Path) -> PathBuf {
    home.join("serve").join("token")
}

/// The token (made if missing) and whether it was just made. `random` fills bytes.
pub fn load_or_create(
    home: &Path,
    random: impl FnOnce(&mut [u8]),
) -> Result<(String, bool), TokenError> {
    let path = token_path(home);
    let io = |source| TokenError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    match std::fs::metadata(&path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(TokenError::Exposed {
                    path: path.display().to_string(),
                    mode,
                });
            }
            let text = std::fs::read_to_string(&path).map_err(io)?;
            let token = text.trim();
            if token.is_empty() || token.contains(char::is_whitespace) {
                return Err(TokenError::Invalid {
                    path: path.display().to_string(),
                });
            }
            Ok((token.to_owned(), false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut secret = [0u8; 32];
            random(&mut secret);
            let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            file.write_all(format!("{token}\n").as_bytes())
                .map_err(io)?;
            Ok((token, true))
        }
        Err(e) => Err(io(e)),
    }
}
