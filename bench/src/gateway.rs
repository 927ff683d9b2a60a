//! The gateway and the browser beside their peers: a downstream tool through aido (judged,
//! journaled, relayed to the server aido runs in its sandbox) beside the same server called
//! directly, and a local page opened and read by aido's browser beside `@playwright/mcp` doing
//! the same, both on Debian's Chromium.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::json;

use crate::harness::{Server, paired};
use crate::record::{Record, Section};

/// The judged rows, said not run when the section does not run.
pub const ROWS: [(&str, &str); 3] = [
    (
        "gateway_call_added",
        "what aido's gateway adds to one downstream call: the median through aido less the median of the same server called directly",
    ),
    (
        "gateway_call_vs_direct",
        "`everything__echo` through aido's gateway (a `downstream_call`: judged, journaled, relayed to server-everything running in aido's sandbox) / `echo` of the same server-everything called directly, time per call",
    ),
    (
        "browser_open_read_vs_playwright_mcp",
        "`browser_navigate` + `browser_text` of aido's browser (every request through its egress proxy, the answers journaled) / `browser_navigate` + `browser_snapshot` of `@playwright/mcp`, the same local page, Debian's Chromium both, time per open and read",
    ),
];

/// Calls made before the timed rounds, so both lanes are warm.
const WARM_UP: usize = 5;

/// The section: `rounds` alternating rounds of each pair.
pub async fn run(
    aido: &Path,
    temp: &Path,
    node_modules: &Path,
    rounds: usize,
) -> Result<Vec<Record>> {
    let mut s = Section::new("gateway");
    // Absolute: aido starts the server in its sandbox, elsewhere than this directory.
    let node_modules = &std::fs::canonicalize(node_modules)
        .with_context(|| format!("the peers in {}", node_modules.display()))?;
    let everything = node_modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (gateway, direct) = gateway_pair(aido, work.path(), &everything, rounds).await?;
    let [
        (added_row, added_what),
        (row, what),
        (browser_row, browser_what),
    ] = ROWS;
    s.versus(row, what, &gateway, "server-everything, direct", &direct);
    let added = crate::harness::median(&gateway).saturating_sub(crate::harness::median(&direct));
    s.once(added_row, None, added).what(added_what);
    s.number("rounds", rounds as f64);
    let playwright = node_modules.join("@playwright/mcp/cli.js");
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (ours, theirs) = browser_pair(aido, work.path(), &playwright, rounds).await?;
    s.versus(browser_row, browser_what, &ours, "@playwright/mcp", &theirs);
    Ok(s.finish())
}

async fn gateway_pair(
    aido: &Path,
    work: &Path,
    everything: &Path,
    rounds: usize,
) -> Result<(Vec<std::time::Duration>, Vec<std::time::Duration>)> {
    let config = format!(
        "[[downstream]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
        everything.display().to_string()
    );
    let (ours, _) = Server::aido_with(aido, work, Some(&config), &["everything__echo"]).await?;
    let mut command = tokio::process::Command::new("node");
    command.current_dir(work).arg(everything).arg("stdio");
    let theirs = Server::start(
        "server-everything",
        command,
        work.join("everything.stderr"),
        &["echo"],
    )
    .await?;
    let message = json!({"message": "bench"});
    for _ in 0..WARM_UP {
        ours.call("everything__echo", message.clone()).await?;
        theirs.call("echo", message.clone()).await?;
    }
    let times = paired(
        rounds,
        async || {
            ours.call("everything__echo", message.clone())
                .await
                .map(drop)
        },
        async || theirs.call("echo", message.clone()).await.map(drop),
    )
    .await?;
    ours.stop().await?;
    theirs.stop().await?;
    Ok(times)
}

async fn browser_pair(
    aido: &Path,
    work: &Path,
    playwright: &Path,
    rounds: usize,
) -> Result<(Vec<std::time::Duration>, Vec<std::time::Duration>)> {
    let (port, _site) = crate::fetch::serve().await?;
    let url = format!("http://127.0.0.1:{port}/medium");
    let config = format!("[net]\nallow = [\"127.0.0.1:{port}\"]\n");
    let (ours, _) = Server::aido_with(aido, work, Some(&config), &["browser_navigate"]).await?;
    // In the work dir: it writes its snapshots and console logs under the current one.
    let mut command = tokio::process::Command::new("node");
    command.current_dir(work).arg(playwright).args([
        "--headless",
        "--browser",
        "chromium",
        "--executable-path",
        "/usr/bin/chromium",
        "--no-sandbox",
        "--isolated",
    ]);
    let theirs = Server::start(
        "@playwright/mcp",
        command,
        work.join("playwright.stderr"),
        &["browser_navigate"],
    )
    .await?;
    let open = json!({"url": url});
    let ours_once = async || -> Result<()> {
        ours.call("browser_navigate", open.clone()).await?;
        ours.call("browser_text", json!({})).await.map(drop)
    };
    let theirs_once = async || -> Result<()> {
        theirs.call("browser_navigate", open.clone()).await?;
        theirs.call("browser_snapshot", json!({})).await.map(drop)
    };
    for _ in 0..WARM_UP {
        ours_once().await?;
        theirs_once().await?;
    }
    let times = paired(rounds, ours_once, theirs_once).await?;
    ours.stop().await?;
    theirs.stop().await?;
    Ok(times)
}
