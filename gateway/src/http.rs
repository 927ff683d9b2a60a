//! A streamable HTTP downstream: rmcp's client transport, with the bearer token read from
//! its file at each connection (so a rotated token is picked up by the next restart).

use std::io::Read;
use std::path::Path;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::error::DownstreamError;

/// The largest token file read.
pub const TOKEN_BYTES_MAX: u64 = 16 * 1024;

/// The transport to `url`, with the token of `token_file` when there is one, refusing a
/// response or an event larger than `message_bytes_max`.
pub(crate) fn transport(
    server: &str,
    url: &str,
    token_file: Option<&Path>,
    message_bytes_max: usize,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, DownstreamError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    config.max_json_response_size = message_bytes_max;
    config.max_sse_event_size = message_bytes_max;
    if let Some(path) = token_file {
        config = config.auth_header(read_token(server, path)?);
    }
    Ok(StreamableHttpClientTransport::from_config(config))
}

/// The token in `path`: its text, trimmed; one line, not empty, at most [`TOKEN_BYTES_MAX`].
pub(crate) fn read_token(server: &str, path: &Path) -> Result<String, DownstreamError> {
    let unreadable = |why: String| DownstreamError::TokenUnreadable {
        server: server.to_owned(),
        path: path.to_path_buf(),
        why,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(TOKEN_BYTES_MAX + 1).read_to_string(&mut text))
        .map_err(|error| unreadable(error.to_string()))?;
    if text.len() as u64 > TOKEN_BYTES_MAX {
        return Err(unreadable(format!("larger than {TOKEN_BYTES_MAX} bytes")));
    }
    let token = text.trim();
    if token.is_empty() || token.contains(['\n', '\r']) {
        return Err(unreadable("not one non-empty line".into()));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_one_trimmed_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "secret-token\n").unwrap();
        assert_eq!(read_token("gh", &path).unwrap(), "secret-token");
        for bad in ["", "\n", "a\nb\n"] {
            std::fs::write(&path, bad).unwrap();
            let error = read_token("gh", &path).unwrap_err();
            assert_eq!(error.code(), "downstream_token_unreadable", "{bad:?}");
        }
        let error = read_token("gh", &dir.path().join("missing")).unwrap_err();
        assert_eq!(error.code(), "downstream_token_unreadable");
    }
}
