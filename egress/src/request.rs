//! A request head: read within its bounds, then parsed into what the proxy judges.

use aido_net::Target;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{EGRESS_HEAD_BYTES_MAX, EGRESS_METHOD_BYTES_MAX, ProxyError};

/// The request head (through the blank line) and whatever followed it in the same reads. The
/// caller bounds the time ([`super::EGRESS_HEAD_TIMEOUT_MS`] for the whole head); this bounds
/// the size, and looks for the blank line only in the bytes each read added, so a head
/// trickled a byte at a time costs as much to scan as one sent whole.
pub(super) async fn read_head<R: AsyncRead + Unpin>(
    client: &mut R,
) -> Result<(Vec<u8>, Vec<u8>), ProxyError> {
    const END: &[u8] = b"\r\n\r\n";
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let read = client
            .read(&mut chunk)
            .await
            .map_err(|error| ProxyError::RequestInvalid {
                reason: format!("reading the request head: {error}"),
            })?;
        if read == 0 {
            return Err(ProxyError::RequestInvalid {
                reason: "the connection closed before a request head".into(),
            });
        }
        // The blank line may straddle the previous read: look from three bytes before it.
        let from = buffer.len().saturating_sub(END.len() - 1);
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer[from..].windows(END.len()).position(|w| w == END) {
            let rest = buffer.split_off(from + at + END.len());
            return Ok((buffer, rest));
        }
        if buffer.len() > EGRESS_HEAD_BYTES_MAX {
            return Err(ProxyError::HeadBytesMax);
        }
    }
}

/// A parsed proxy request.
pub(super) struct ProxyRequest {
    pub(super) method: String,
    pub(super) host: String,
    pub(super) port: u16,
    /// For plain HTTP: the head to send upstream (origin-form, `Connection: close`, no proxy
    /// headers). `None` for `CONNECT`.
    pub(super) forward: Option<Vec<u8>>,
}

/// The request a head makes: `CONNECT host:port` or an absolute-form plain-HTTP request.
pub(super) fn parse_head(head: &[u8]) -> Result<ProxyRequest, ProxyError> {
    parse(head).map_err(|reason| ProxyError::RequestInvalid { reason })
}

fn parse(head: &[u8]) -> Result<ProxyRequest, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a request head that is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("a malformed request line {line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("{version} (only HTTP/1.x)"));
    }
    // A method is recorded with the attempt: a token of a few bytes, never a head's worth.
    if method.is_empty()
        || method.len() > EGRESS_METHOD_BYTES_MAX
        || !method.bytes().all(is_token_byte)
    {
        return Err(format!(
            "a method that is not a token of at most {EGRESS_METHOD_BYTES_MAX} bytes"
        ));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("CONNECT {target:?} names no host:port"))?;
        let target = Target::tcp(host, port).map_err(|e| e.to_string())?;
        return Ok(ProxyRequest {
            method: "CONNECT".into(),
            host: target.host.to_string(),
            port: target.port,
            forward: None,
        });
    }
    let (url, target) = Target::from_url(target).map_err(|e| e.to_string())?;
    if url.scheme() != "http" {
        return Err(format!(
            "{} through the proxy (plain http only; use CONNECT for the rest)",
            url.scheme()
        ));
    }
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let mut forward = format!("{method} {path} {version}\r\n");
    for header in lines.filter(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        let drop = [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h));
        if !drop {
            forward.push_str(header);
            forward.push_str("\r\n");
        }
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(ProxyRequest {
        method: method.to_owned(),
        host: target.host.to_string(),
        port: target.port,
        forward: Some(forward.into_bytes()),
    })
}

/// A byte of an HTTP token (RFC 9110 `tchar`).
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that sends one byte per read, as a slowloris does.
    struct Trickle(std::collections::VecDeque<u8>);

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(byte) = self.0.pop_front() {
                buf.put_slice(&[byte]);
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_head_is_found_whole_or_trickled_and_what_follows_is_kept() {
        let sent = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\nearly bytes";
        let (head, rest) = block_on(read_head(&mut &sent[..])).unwrap();
        assert!(head.ends_with(b"\r\n\r\n"));
        assert_eq!(rest, b"early bytes");
        let mut trickle = Trickle(sent.iter().copied().collect());
        let (head, rest) = block_on(read_head(&mut trickle)).unwrap();
        assert_eq!(head.len(), sent.len() - "early bytes".len());
        assert!(
            rest.is_empty(),
            "one byte per read: nothing after the blank line yet"
        );
    }

    #[test]
    fn a_head_past_its_bound_or_cut_short_is_refused() {
        let mut endless = Trickle(std::iter::repeat_n(b'a', EGRESS_HEAD_BYTES_MAX + 10).collect());
        assert_eq!(
            block_on(read_head(&mut endless)).unwrap_err(),
            ProxyError::HeadBytesMax
        );
        let cut = b"CONNECT example.com:443 HTTP/1.1\r\n";
        let error = block_on(read_head(&mut &cut[..])).unwrap_err();
        assert_eq!(error.code(), "egress_request_invalid");
    }

    #[test]
    fn requests_are_parsed_and_bad_ones_refused() {
        let connect = parse_head(b"CONNECT Example.COM:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            (connect.method.as_str(), connect.host.as_str(), connect.port),
            ("CONNECT", "example.com", 443)
        );
        assert!(connect.forward.is_none());
        let get = parse_head(
            b"GET http://example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(get.forward.unwrap()).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
        );
        let long = "a.".repeat(200) + "com";
        for head in [
            "HELLO\r\n\r\n".to_owned(),
            "CONNECT example.com HTTP/1.1\r\n\r\n".to_owned(),
            "GET https://example.com/ HTTP/1.1\r\n\r\n".to_owned(),
            "CONNECT example.com:443 HTTP/2\r\n\r\n".to_owned(),
            format!("CONNECT {long}:443 HTTP/1.1\r\n\r\n"),
            format!("GET http://{long}/ HTTP/1.1\r\n\r\n"),
            format!("{} http://example.com/ HTTP/1.1\r\n\r\n", "A".repeat(33)),
            "G(T http://example.com/ HTTP/1.1\r\n\r\n".to_owned(),
        ] {
            assert!(parse_head(head.as_bytes()).is_err(), "{head}");
        }
    }
}
