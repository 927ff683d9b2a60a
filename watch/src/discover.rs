//! Finding the runtime to watch: the one `aido serve` of this AIDO_HOME said it listens on
//! (it writes `AIDO_HOME/serve/url` when it starts), or the default address; its token in
//! `AIDO_HOME/serve/token`. The other runtimes of the host (or of a fleet) are those its
//! `[fleet]` lists, asked through it.

use std::path::Path;

use crate::client::Endpoint;

/// Where `aido serve` writes the base URL it listens on, under AIDO_HOME.
pub const URL_FILE: &str = "serve/url";
/// Where `aido serve` keeps its bearer token, under AIDO_HOME.
pub const TOKEN_FILE: &str = "serve/token";
/// Where `aido serve` listens when told nothing.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7411";
/// Largest URL file read, in bytes.
pub const URL_FILE_BYTES_MAX: u64 = 4096;

/// The runtime of `home`: the URL its `aido serve` wrote, else the default one.
pub fn this_host(home: &Path) -> Endpoint {
    let written = std::fs::metadata(home.join(URL_FILE))
        .ok()
        .filter(|m| m.len() <= URL_FILE_BYTES_MAX)
        .and_then(|_| std::fs::read_to_string(home.join(URL_FILE)).ok())
        .map(|text| text.trim().trim_end_matches('/').to_owned())
        .filter(|url| url.starts_with("http://") || url.starts_with("https://"));
    Endpoint {
        url: written.unwrap_or_else(|| DEFAULT_URL.to_owned()),
        token_file: home.join(TOKEN_FILE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_serve_wrote_is_taken_else_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        assert_eq!(this_host(home).url, DEFAULT_URL);
        assert_eq!(this_host(home).token_file, home.join("serve/token"));
        std::fs::create_dir_all(home.join("serve")).unwrap();
        std::fs::write(home.join(URL_FILE), "http://127.0.0.1:40123/\n").unwrap();
        assert_eq!(this_host(home).url, "http://127.0.0.1:40123");
        std::fs::write(home.join(URL_FILE), "not a url").unwrap();
        assert_eq!(this_host(home).url, DEFAULT_URL);
    }
}
