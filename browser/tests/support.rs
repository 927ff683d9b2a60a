//! The tests' own world: a site on 127.0.0.1, a recording HTTP proxy, the lacking rule.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use aido_browser::{Browser, CHROMIUM_PATH, Options, Snapshot};

/// The downloaded file's bytes.
pub const REPORT: &[u8] = b"quarterly report: all green\n";

/// Bytes of a request head either server reads.
const HEAD_BYTES_MAX: usize = 64 << 10;

/// One running browser and its world; the profile and servers live as long as it.
pub struct Fixture {
    pub browser: Browser,
    pub site: Site,
    pub proxy: Proxy,
    pub profile: tempfile::TempDir,
}

/// The machine must have Chromium: outside CI a test without it says so and stops; under
/// `CI` it fails, since CI installs Debian's chromium (scripts/setup-debian).
fn chromium() -> bool {
    let found = if Path::new(CHROMIUM_PATH).is_file() {
        Ok(())
    } else {
        Err(format!("{CHROMIUM_PATH} is not installed"))
    };
    aido_testkit::lacking("chromium", found).is_some()
}

/// A browser (options from `options(proxy, profile)`) behind a fresh recording proxy, and a
/// fresh site. `None` when the machine has no Chromium (outside CI).
pub async fn fixture(
    options: impl FnOnce(SocketAddr, std::path::PathBuf) -> Options,
) -> Option<Fixture> {
    if !chromium() {
        return None;
    }
    let site = Site::start();
    let proxy = Proxy::start();
    let profile = tempfile::tempdir().unwrap();
    let browser = Browser::launch(options(proxy.addr, profile.path().to_path_buf()))
        .await
        .unwrap();
    Some(Fixture {
        browser,
        site,
        proxy,
        profile,
    })
}

/// The reference of the node with this role and name.
pub fn reference(snapshot: &Snapshot, role: &str, name: &str) -> String {
    snapshot
        .nodes
        .iter()
        .find(|n| n.role == role && n.name == name)
        .and_then(|n| n.reference.clone())
        .unwrap_or_else(|| panic!("no {role} {name:?} in {:#?}", snapshot.nodes))
}

pub use aido_testkit::pids_with as processes_with;

/// A request's head: its request line's parts, its headers, and its body.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    let mut read = line.len();
    loop {
        let mut header = String::new();
        read += reader.read_line(&mut header).ok()?;
        assert!(read < HEAD_BYTES_MAX, "request head too large");
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

/// The site: a login form with a stylesheet, two linked pages, a tall page, a download.
pub struct Site {
    pub addr: SocketAddr,
    served: Arc<Mutex<Vec<String>>>,
}

impl Site {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || serve(stream, &log));
            }
        });
        Self { addr, served }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request answered, as `METHOD /path`.
    pub fn served(&self) -> Vec<String> {
        self.served.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    log.lock()
        .unwrap()
        .push(format!("{} {}", request.method, request.target));
    let (status, kind, extra, body) = page(&request);
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    let mut stream = stream;
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

const LOGIN: &str = r#"<!doctype html><html><head><title>Login</title>
<link rel="stylesheet" href="/style.css"></head><body>
<h1>Sign in</h1>
<form method="post" action="/login">
<label for="user">User name</label> <input id="user" name="user"><br>
<label for="pass">Password</label> <input id="pass" name="pass" type="password"><br>
<label for="role">Role</label> <select id="role" name="role"><option value="dev">Developer</option><option value="ops">Operator</option></select><br>
<button type="submit">Sign in</button>
</form>
<a href="/a">Page A</a>
</body></html>"#;

const TALL: &str = r#"<!doctype html><html><head><title>Tall</title></head><body style="margin:0">
<button style="position:absolute;left:10px;top:10px;width:100px;height:40px"
 onclick="document.body.insertAdjacentHTML('beforeend', '<p>clicked!</p>')">Press</button>
<div style="height:5000px"></div></body></html>"#;

type Page = (&'static str, &'static str, String, Vec<u8>);

fn page(request: &Request) -> Page {
    let html = |body: String| {
        (
            "200 OK",
            "text/html; charset=utf-8",
            String::new(),
            body.into_bytes(),
        )
    };
    match (request.method.as_str(), request.target.as_str()) {
        ("GET", "/") => html(LOGIN.to_owned()),
        ("GET", "/style.css") => (
            "200 OK",
            "text/css",
            String::new(),
            b"body { font-family: sans-serif }".to_vec(),
        ),
        ("POST", "/login") => {
            let form = String::from_utf8_lossy(&request.body).into_owned();
            let field = |name: &str| {
                form.split('&')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
                    .unwrap_or("")
                    .to_owned()
            };
            html(format!(
                "<!doctype html><title>Welcome</title><p>Welcome, {} ({})</p>",
                field("user"),
                field("role")
            ))
        }
        ("GET", "/a") => html(
            "<!doctype html><title>Page A</title><p id=a>This is page A</p><a href=/b>to B</a>"
                .to_owned(),
        ),
        ("GET", "/b") => {
            html("<!doctype html><title>Page B</title><p id=b>This is page B</p>".to_owned())
        }
        ("GET", "/tall") => html(TALL.to_owned()),
        ("GET", "/upload") => html(
            "<!doctype html><title>Upload</title><label for=f>Attachment</label> <input type=file id=f>"
                .to_owned(),
        ),
        ("GET", "/download") => html(
            "<!doctype html><title>Files</title><a href=/file.txt>Get the report</a>".to_owned(),
        ),
        ("GET", "/file.txt") => (
            "200 OK",
            "text/plain",
            "Content-Disposition: attachment; filename=\"report.txt\"\r\n".to_owned(),
            REPORT.to_vec(),
        ),
        _ => (
            "404 Not Found",
            "text/plain",
            String::new(),
            b"not found".to_vec(),
        ),
    }
}

/// A plain-HTTP forward proxy that records every request (`METHOD absolute-url`) and
/// forwards it with `Connection: close`. CONNECT is refused: the tests speak plain HTTP.
pub struct Proxy {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || forward(stream, &log));
            }
        });
        Self { addr, seen }
    }

    /// Every request the proxy was asked for.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn forward(client: TcpStream, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    log.lock()
        .unwrap()
        .push(format!("{} {}", request.method, request.target));
    let mut client = client;
    let upstream = request.target.strip_prefix("http://").and_then(|rest| {
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        Some((TcpStream::connect(host).ok()?, path.to_owned()))
    });
    let Some((mut upstream, path)) = upstream else {
        let _ = client.write_all(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    };
    let mut head = format!("{} {path} HTTP/1.1\r\n", request.method);
    for (name, value) in &request.headers {
        if !name.eq_ignore_ascii_case("connection")
            && !name.eq_ignore_ascii_case("proxy-connection")
        {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    if upstream.write_all(head.as_bytes()).is_err() || upstream.write_all(&request.body).is_err() {
        return;
    }
    let _ = std::io::copy(&mut upstream, &mut client);
}
