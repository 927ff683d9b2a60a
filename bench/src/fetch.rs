//! Fetch: aido's `fetch_url` against `mcp-server-fetch` on the same local pages (served by the
//! harness on 127.0.0.1): the time per fetch, and the bytes each hands the agent.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Run, Server, median};
use crate::record::{Record, Section};

/// Characters asked of each side per fetch (mcp-server-fetch's default `max_length`).
pub const WINDOW_CHARS: u64 = 5000;

/// The pages: a name and how many paragraphs of body it has.
pub const PAGES: &[(&str, usize)] = &[("small", 10), ("medium", 200), ("large", 2000)];

/// The judged row, said not run when the section does not run.
pub const ROWS: [(&str, &str); 1] = [(
    "fetch_url_vs_mcp_server_fetch",
    "`fetch_url` through aido (MCP, policy and address judged, journaled, htmd) / `fetch` of `mcp-server-fetch`, same local pages, first 5,000 characters as markdown, time per fetch",
)];

/// The HTML of a page with `paragraphs` paragraphs.
pub fn html(paragraphs: usize) -> String {
    let mut page = String::from(
        "<!doctype html><html><head><title>Bench page</title><meta charset=\"utf-8\">\
         <style>body{font-family:sans-serif} .nav{display:none}</style>\
         <script>window.analytics={track:function(){}};</script></head><body>\
         <nav class=\"nav\"><a href=\"/\">Home</a> <a href=\"/docs\">Docs</a></nav>\
         <h1>Release notes</h1>",
    );
    for n in 0..paragraphs {
        if n % 10 == 0 {
            page.push_str(&format!("<h2>Section {}</h2>", n / 10));
        }
        page.push_str(&format!(
            "<p>Paragraph {n}: the runtime judges <strong>every</strong> action, records it in \
             the <a href=\"/journal#{n}\">journal</a> and replays it <em>exactly</em>.</p>"
        ));
        if n % 25 == 24 {
            page.push_str("<ul><li>allowlist</li><li>ranges</li><li>redirects</li></ul>");
        }
    }
    page.push_str("</body></html>");
    page
}

/// Serve the pages on 127.0.0.1 until the task is dropped; its port.
pub async fn serve() -> Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let pages: Vec<(String, String)> = PAGES
        .iter()
        .map(|(name, n)| (format!("/{name}"), html(*n)))
        .collect();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let pages = pages.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let path = line.split_whitespace().nth(1).unwrap_or("/");
                let (status, body) = match pages.iter().find(|(p, _)| p == path) {
                    Some((_, body)) => ("200 OK", body.clone()),
                    None => ("404 Not Found", String::new()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok((port, task))
}

/// Runs the section: every page fetched `repeats` times by each side, alternating; the time
/// per fetch of each, and the bytes each hands the agent per page.
pub async fn run(aido: &Path, peer_python: &Path, temp: &Path, repeats: usize) -> Run<Vec<Record>> {
    // Absolute: the peer is spawned in a temp dir (and the venv's python is a link, kept).
    let peer_python = &std::path::absolute(peer_python).unwrap_or_else(|_| peer_python.to_owned());
    let peer = match peer_version(peer_python).await {
        Ok(version) => format!("`mcp-server-fetch` {version}"),
        Err(error) => return Run::Skipped(format!("{error:#}")),
    };
    measure(aido, peer_python, peer, temp, repeats).await.into()
}

async fn peer_version(python: &Path) -> Result<String> {
    let out = tokio::process::Command::new(python)
        .args([
            "-c",
            "from importlib.metadata import version; print(version('mcp-server-fetch'))",
        ])
        .output()
        .await
        .with_context(|| {
            format!(
                "running {} (bench/run installs mcp-server-fetch)",
                python.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "mcp-server-fetch is not installed for {} (bench/run installs it)",
            python.display()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

async fn measure(
    aido: &Path,
    python: &Path,
    peer: String,
    temp: &Path,
    repeats: usize,
) -> Result<Vec<Record>> {
    let (port, server) = serve().await?;
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (ours, home) = Server::aido_with(
        aido,
        work.path(),
        Some(&format!("[net]\nallow = [\"127.0.0.1:{port}\"]\n")),
        &["fetch_url"],
    )
    .await?;
    let mut command = tokio::process::Command::new(python);
    command
        .args([
            "-m",
            "mcp_server_fetch",
            "--ignore-robots-txt",
            "--allow-private-ips",
        ])
        .env("HOME", &home)
        .current_dir(work.path());
    let theirs = Server::start(
        "mcp-server-fetch",
        command,
        work.path().join("peer.stderr"),
        &["fetch"],
    )
    .await?;

    let (mut aido_all, mut peer_all, mut cells) = (Vec::new(), Vec::new(), Vec::new());
    for (name, paragraphs) in PAGES {
        let url = format!("http://127.0.0.1:{port}/{name}");
        let (mut aido_bytes, mut peer_bytes) = (0, 0);
        let (ours_times, theirs_times) = crate::harness::paired(
            repeats.max(1),
            async || {
                let arguments = json!({"url": url, "length": WINDOW_CHARS});
                aido_bytes = call(&ours, "fetch_url", arguments).await?;
                Ok(())
            },
            async || {
                let arguments = json!({"url": url, "max_length": WINDOW_CHARS});
                peer_bytes = call(&theirs, "fetch", arguments).await?;
                Ok(())
            },
        )
        .await?;
        let ms = |d: &[Duration]| format!("{:.2}", median(d).as_secs_f64() * 1000.0);
        cells.push(vec![
            format!("`{name}`"),
            html(*paragraphs).len().to_string(),
            ms(&ours_times),
            ms(&theirs_times),
            aido_bytes.to_string(),
            peer_bytes.to_string(),
        ]);
        aido_all.extend(ours_times);
        peer_all.extend(theirs_times);
    }
    ours.stop().await?;
    theirs.stop().await?;
    server.abort();
    let mut s = Section::new("fetch");
    let [(row, what)] = ROWS;
    s.versus(row, what, &aido_all, &peer, &peer_all);
    s.fact("peer", peer);
    s.numbers(&[
        ("calls", aido_all.len() as f64),
        ("pages", PAGES.len() as f64),
    ]);
    let columns = [
        "page",
        "HTML bytes",
        "aido median (ms)",
        "mcp-server-fetch median (ms)",
        "bytes to the agent, aido",
        "bytes to the agent, mcp-server-fetch",
    ];
    s.table("pages", &columns, cells);
    Ok(s.finish())
}

/// One call; the bytes of its result as the agent receives it (the JSON of content and
/// structuredContent).
async fn call(server: &Server, tool: &str, arguments: Value) -> Result<usize> {
    let result = server.call(tool, arguments).await?;
    let content = serde_json::to_string(&result.content)?.len();
    let structured = result
        .structured_content
        .as_ref()
        .map_or(0, |v| v.to_string().len());
    Ok(content + structured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_grow_and_carry_what_converters_drop() {
        let sizes: Vec<usize> = PAGES.iter().map(|(_, n)| html(*n).len()).collect();
        assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
        assert!(html(1).contains("<script>") && html(1).contains("<style>"));
    }
}
