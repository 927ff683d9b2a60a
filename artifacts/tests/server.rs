//! The artifact server over real TCP: raw requests (so no client normalises a path or fills
//! in a Host), the Host check, traversal in every spelling, the headers, and the lifetime.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aido_artifacts::{Limits, Server, Store};

const ID: &str = "0123456789abcdef0123456789abcdef";
const OTHER: &str = "fedcba9876543210fedcba9876543210";

struct Fixture {
    _dir: tempfile::TempDir,
    server: Server,
    store: Arc<Store>,
    now: Arc<AtomicU64>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("artifacts"), Limits::default()).unwrap());
    let files = vec![
        (
            "index.html".to_owned(),
            b"<!doctype html><p id=x>hello</p>".to_vec(),
        ),
        ("js/app.js".to_owned(), b"document.title='t'".to_vec()),
    ];
    let made = store.create(ID, "demo", None, files, 1).unwrap();
    store
        .create(
            OTHER,
            "other",
            None,
            vec![("index.html".into(), b"other".to_vec())],
            1,
        )
        .unwrap();
    let now = Arc::new(AtomicU64::new(1_000));
    let clock = now.clone();
    let server = Server::start(
        0,
        store.clone(),
        Arc::new(move || clock.load(Ordering::SeqCst)),
    )
    .await
    .unwrap();
    server.serve(made, 2_000, Vec::new());
    Fixture {
        _dir: dir,
        server,
        store,
        now,
    }
}

/// One raw HTTP/1.1 exchange: the status, the headers (lowercased names) and the body.
async fn raw(port: u16, request: String) -> (u16, Vec<(String, String)>, Vec<u8>) {
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8(answer[..split].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.trim().to_ascii_lowercase(), v.trim().to_owned())
            })
            .collect();
        (status, headers, answer[split + 4..].to_vec())
    })
    .await
    .unwrap()
}

async fn get(port: u16, host: &str, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    raw(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_served_page_comes_with_the_sandboxing_headers_and_no_cookie() {
    let f = fixture().await;
    let port = f.server.port();
    let host = format!("127.0.0.1:{port}");
    let (status, headers, body) = get(port, &host, &format!("/a/{ID}/")).await;
    assert_eq!(status, 200);
    assert_eq!(body, b"<!doctype html><p id=x>hello</p>");
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = header(&headers, "content-security-policy").unwrap();
    assert!(csp.starts_with("sandbox allow-scripts"), "{csp}");
    assert!(csp.contains("connect-src 'none'"), "{csp}");
    assert!(!csp.contains("allow-same-origin"), "{csp}");
    assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
    assert_eq!(header(&headers, "referrer-policy"), Some("no-referrer"));
    assert_eq!(
        header(&headers, "cross-origin-resource-policy"),
        Some("same-origin")
    );
    assert!(header(&headers, "set-cookie").is_none());
    // A file by name, with its type; localhost is this listener too.
    let (status, headers, body) = get(
        port,
        &format!("localhost:{port}"),
        &format!("/a/{ID}/js/app.js"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, b"document.title='t'");
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/javascript; charset=utf-8")
    );
    // The page's opaque origin loads its own files cross-origin.
    assert_eq!(
        header(&headers, "cross-origin-resource-policy"),
        Some("cross-origin")
    );
    assert!(header(&headers, "content-security-policy").is_some());
    // Without the slash: redirected to the entry's directory.
    let (status, headers, _) = get(port, &host, &format!("/a/{ID}")).await;
    assert_eq!(status, 308);
    assert_eq!(
        header(&headers, "location"),
        Some(format!("/a/{ID}/").as_str())
    );
    // Only GET and HEAD.
    let (status, _, _) = raw(
        port,
        format!("POST /a/{ID}/ HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 405);
}

#[tokio::test]
async fn any_other_host_is_refused() {
    let f = fixture().await;
    let port = f.server.port();
    for host in [
        "rebound.example:".to_owned() + &port.to_string(),
        "127.0.0.1".to_owned(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("localhost.evil.example:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (status, headers, body) = get(port, &host, &format!("/a/{ID}/")).await;
        assert_eq!(status, 403, "{host}");
        assert!(!String::from_utf8_lossy(&body).contains("hello"));
        // The refusal carries the same headers, and never names the refused host.
        let csp = header(&headers, "content-security-policy").unwrap();
        assert!(!csp.contains("example"), "{csp}");
    }
    // No Host at all (HTTP/1.0).
    let (status, _, _) = raw(port, format!("GET /a/{ID}/ HTTP/1.0\r\n\r\n")).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn traversal_escapes_and_listings_are_refused() {
    let f = fixture().await;
    let port = f.server.port();
    let host = format!("127.0.0.1:{port}");
    for path in [
        format!("/a/{ID}/../{OTHER}/index.html"),
        format!("/a/{ID}/%2e%2e/{OTHER}/index.html"),
        format!("/a/{ID}/%2E%2E%2F{OTHER}%2Findex.html"),
        format!("/a/{ID}/js%2fapp.js"),
        format!("/a/{ID}/js/..%2f..%2f..%2fmanifest.json"),
        format!("/a/{ID}/..\\manifest.json"),
        format!("/a/{ID}/./index.html"),
        format!("/a/{ID}//index.html"),
        format!("/a/{ID}/.hidden"),
    ] {
        let (status, _, body) = get(port, &host, &path).await;
        assert_eq!(status, 400, "{path}");
        assert!(!String::from_utf8_lossy(&body).contains("other"), "{path}");
    }
    for path in [
        // A directory is not listed, the manifest is not a file of the artifact, the store's
        // own files are not reachable.
        format!("/a/{ID}/js/"),
        format!("/a/{ID}/js"),
        format!("/a/{ID}/manifest.json"),
        format!("/a/{ID}/files/index.html"),
        // Another artifact that exists but is not served.
        format!("/a/{OTHER}/"),
        "/a/".to_owned(),
        "/".to_owned(),
        "/etc/passwd".to_owned(),
    ] {
        let (status, _, _) = get(port, &host, &path).await;
        assert_eq!(status, 404, "{path}");
    }
}

#[tokio::test]
async fn a_page_stops_being_served_at_the_end_of_its_lifetime_or_when_stopped() {
    let f = fixture().await;
    let port = f.server.port();
    let host = format!("127.0.0.1:{port}");
    let path = format!("/a/{ID}/");
    assert_eq!(get(port, &host, &path).await.0, 200);
    assert_eq!(f.server.serving(ID), Some(2_000));
    f.now.store(2_000, Ordering::SeqCst);
    assert_eq!(get(port, &host, &path).await.0, 404, "its lifetime is over");
    assert_eq!(f.server.serving(ID), None);
    // Served again, then stopped.
    f.server.serve(f.store.get(ID).unwrap(), 5_000, Vec::new());
    assert_eq!(get(port, &host, &path).await.0, 200);
    assert!(f.server.stop(ID));
    assert_eq!(get(port, &host, &path).await.0, 404, "stopped");
    assert!(!f.server.stop(ID));
    // A file changed on disk after it was made is not served.
    f.server.serve(f.store.get(ID).unwrap(), 5_000, Vec::new());
    let file = f
        ._dir
        .path()
        .join("artifacts")
        .join(ID)
        .join("files/index.html");
    std::fs::write(file, b"tampered").unwrap();
    let (status, _, body) = get(port, &host, &path).await;
    assert_eq!(status, 500);
    assert!(!String::from_utf8_lossy(&body).contains("tampered"));
}

#[tokio::test]
async fn connect_src_is_widened_only_by_what_serve_was_given() {
    let f = fixture().await;
    let port = f.server.port();
    f.server.serve(
        f.store.get(ID).unwrap(),
        5_000,
        vec!["http://127.0.0.1:9".into()],
    );
    let (_, headers, _) = get(port, &format!("127.0.0.1:{port}"), &format!("/a/{ID}/")).await;
    let csp = header(&headers, "content-security-policy").unwrap();
    assert!(csp.contains("connect-src http://127.0.0.1:9;"), "{csp}");
}
