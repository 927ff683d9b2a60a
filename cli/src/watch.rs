//! `aido watch`: where the runtime is, then aido-watch's terminal.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

/// Watch the runtime at `url` (default: this AIDO_HOME's `aido serve`) with the token in
/// `token_file` (default: this AIDO_HOME's).
pub fn watch(
    home: &Path,
    url: Option<String>,
    token_file: Option<PathBuf>,
    session: Option<String>,
) -> Result<ExitCode> {
    let mut endpoint = aido_watch::discover::this_host(home);
    if let Some(url) = url {
        endpoint.url = url.trim_end_matches('/').to_owned();
    }
    if let Some(file) = token_file {
        endpoint.token_file = file;
    }
    let options = aido_watch::Options {
        endpoint,
        session,
        colour: aido_watch::colour_wanted(),
    };
    aido_watch::run(options).map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    Ok(ExitCode::SUCCESS)
}
