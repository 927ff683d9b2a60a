//! Artifacts: GETs of a served artifact page over one keep-alive connection, and
//! `artifact_create` + `artifact_serve` over MCP.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::harness::Server;
use crate::record::{Record, Section, Stats, Unit};

/// GETs of the served page timed.
pub const GETS: usize = 2000;
/// create + serve round trips timed.
pub const ROUND_TRIPS: usize = 50;

/// The judged rows, said not run when the section does not run.
pub const ROWS: [(&str, &str); 2] = [
    (
        "artifact_get",
        "a GET of a served artifact page on 127.0.0.1 (keep-alive; Host check, route, manifest, file read and blake3 check, headers), time per GET",
    ),
    (
        "artifact_create_serve",
        "`artifact_create` (2 files) then `artifact_serve` over MCP (stdio), the agent's round trip from files to a URL",
    ),
];

fn page() -> String {
    let rows: String = (0..100)
        .map(|i| format!("<tr><td>{i}</td><td>row {i}</td></tr>\n"))
        .collect();
    format!(
        "<!doctype html><html><head><title>bench</title><script src=\"app.js\"></script>\
         </head><body><table>\n{rows}</table></body></html>\n"
    )
}

/// Runs the section: GETs of a served page (p50, p99) and artifact_create + artifact_serve
/// over MCP.
pub async fn run(aido: &Path, temp: &Path) -> Result<Vec<Record>> {
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (ours, _home) =
        Server::aido(aido, work.path(), &["artifact_create", "artifact_serve"]).await?;
    let page = page();
    let files = json!([
        {"name": "index.html", "content": page},
        {"name": "app.js", "content": "document.title = 'bench';"},
    ]);
    let mut round_trips = Vec::with_capacity(ROUND_TRIPS);
    let mut url = String::new();
    // The first round trip starts the listener; it is timed with the rest.
    for _ in 0..ROUND_TRIPS {
        let start = Instant::now();
        let made = ours
            .json("artifact_create", json!({"files": files}))
            .await?;
        let id = made["manifest"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let served = ours.json("artifact_serve", json!({"id": id})).await?;
        round_trips.push(start.elapsed());
        url = served["url"].as_str().unwrap_or_default().to_owned();
    }
    let expected = page.len();
    let gets = tokio::task::spawn_blocking(move || get_many(&url, expected, GETS))
        .await
        .context("the GET thread")??;
    ours.stop().await?;
    let mut s = Section::new("artifact");
    for ((row, what), times) in ROWS.into_iter().zip([&gets, &round_trips]) {
        s.lane(row, None, Unit::Ns, Stats::latency(times), Vec::new())
            .what(what);
    }
    s.numbers(&[
        ("gets", gets.len() as f64),
        ("round_trips", round_trips.len() as f64),
        ("page_bytes", page.len() as f64),
    ]);
    Ok(s.finish())
}

/// GET `url` `n` times over one keep-alive connection, checking each answer is the page.
fn get_many(url: &str, expected: usize, n: usize) -> Result<Vec<Duration>> {
    let rest = url
        .strip_prefix("http://")
        .context("the served URL is http")?;
    let (authority, path) = rest.split_once('/').context("the URL has a path")?;
    let stream = std::net::TcpStream::connect(authority)
        .with_context(|| format!("connecting to {authority}"))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    // Warm up: the page cache and the listener's task.
    for _ in 0..20 {
        get_one(&mut writer, &mut reader, &request, expected)?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        get_one(&mut writer, &mut reader, &request, expected)?;
        out.push(start.elapsed());
    }
    Ok(out)
}

fn get_one(
    writer: &mut std::net::TcpStream,
    reader: &mut BufReader<std::net::TcpStream>,
    request: &str,
    expected: usize,
) -> Result<()> {
    writer.write_all(request.as_bytes())?;
    let mut status = String::new();
    reader.read_line(&mut status)?;
    if !status.starts_with("HTTP/1.1 200") {
        bail!("the served page answered {status:?}");
    }
    let mut length = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let length = length.context("the answer has a Content-Length")?;
    if length != expected {
        bail!("the page has {length} bytes, not {expected}");
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(())
}
