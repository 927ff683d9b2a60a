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
pub const ROWS: [(&str, &str); 5] = [
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
    (
        "gateway_call_8_downstreams_vs_1",
        "cost growth with downstreams: `e0__echo` through aido with 8 server-everything entries running / the same with 1, time per call",
    ),
    (
        "browser_4_sessions_at_once_vs_1",
        "cost growth with sessions: 4 sessions (4 aido servers, a Chromium each) each opening and reading the page at the same time / 1 session doing it alone, time per round (2 cores)",
    ),
];

/// Downstream entries in the scaling row.
const DOWNSTREAMS_MANY: usize = 8;
/// Browser sessions at once in the scaling row.
const SESSIONS_MANY: usize = 4;

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
        (downstreams_row, downstreams_what),
        (sessions_row, sessions_what),
    ] = ROWS;
    s.versus(row, what, &gateway, "server-everything, direct", &direct);
    let added = crate::harness::median(&gateway).saturating_sub(crate::harness::median(&direct));
    s.once(added_row, None, added).what(added_what);
    s.number("rounds", rounds as f64);
    let playwright = node_modules.join("@playwright/mcp/cli.js");
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (ours, theirs) = browser_pair(aido, work.path(), &playwright, rounds).await?;
    s.versus(browser_row, browser_what, &ours, "@playwright/mcp", &theirs);
    let (many, one) = downstreams_pair(aido, temp, &everything, rounds).await?;
    s.versus(
        downstreams_row,
        downstreams_what,
        &many,
        "1 downstream",
        &one,
    );
    let (many, one, rss) = sessions_pair(aido, temp, rounds / 4 + 1).await?;
    s.versus(sessions_row, sessions_what, &many, "1 session", &one);
    s.number("browser_session_pss_mib", rss as f64 / f64::from(1 << 20));
    Ok(s.finish())
}

/// The same downstream call through aido with one entry and with [`DOWNSTREAMS_MANY`].
async fn downstreams_pair(
    aido: &Path,
    temp: &Path,
    everything: &Path,
    rounds: usize,
) -> Result<(Vec<std::time::Duration>, Vec<std::time::Duration>)> {
    let entries = |n: usize| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "[[downstream]]\nname = \"e{i}\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
                    everything.display().to_string()
                )
            })
            .collect()
    };
    let many_work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let one_work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (many, _) = Server::aido_with(
        aido,
        many_work.path(),
        Some(&entries(DOWNSTREAMS_MANY)),
        &["e0__echo"],
    )
    .await?;
    let (one, _) =
        Server::aido_with(aido, one_work.path(), Some(&entries(1)), &["e0__echo"]).await?;
    let message = json!({"message": "bench"});
    for _ in 0..WARM_UP {
        many.call("e0__echo", message.clone()).await?;
        one.call("e0__echo", message.clone()).await?;
    }
    let times = paired(
        rounds,
        async || many.call("e0__echo", message.clone()).await.map(drop),
        async || one.call("e0__echo", message.clone()).await.map(drop),
    )
    .await?;
    many.stop().await?;
    one.stop().await?;
    Ok(times)
}

/// Bytes the processes whose command line names `dir` hold (a session's Chromium: its profile
/// is under the session's AIDO_HOME), as their proportional set sizes: pages shared between
/// them (Chromium's code, its zygote's) counted once.
fn resident_under(dir: &Path) -> u64 {
    let needle = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(false)
        })
        .filter_map(|e| {
            let rollup = std::fs::read_to_string(e.path().join("smaps_rollup")).ok()?;
            crate::harness::status_kb(&rollup, "Pss")
        })
        .sum::<u64>()
        * 1024
}

/// [`SESSIONS_MANY`] sessions opening and reading the page at once, beside one alone; and the
/// memory one session's Chromium holds.
async fn sessions_pair(
    aido: &Path,
    temp: &Path,
    rounds: usize,
) -> Result<(Vec<std::time::Duration>, Vec<std::time::Duration>, u64)> {
    let (port, _site) = crate::fetch::serve().await?;
    let url = format!("http://127.0.0.1:{port}/medium");
    let config = format!("[net]\nallow = [\"127.0.0.1:{port}\"]\n");
    let mut works = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..=SESSIONS_MANY {
        let work = tempfile::tempdir_in(temp).context("a temp dir")?;
        let (server, _) =
            Server::aido_with(aido, work.path(), Some(&config), &["browser_navigate"]).await?;
        works.push(work);
        servers.push(server);
    }
    let open = json!({"url": url});
    let once = async |server: &Server| -> Result<()> {
        server.call("browser_navigate", open.clone()).await?;
        server.call("browser_text", json!({})).await.map(drop)
    };
    for server in &servers {
        once(server).await?;
    }
    let rss = resident_under(&works[0].path().join("aido_home"));
    let (alone, many) = servers.split_at(1);
    let times = paired(
        rounds,
        async || {
            futures::future::try_join_all(many.iter().map(&once))
                .await
                .map(drop)
        },
        async || once(&alone[0]).await,
    )
    .await?;
    for server in servers {
        server.stop().await?;
    }
    Ok((times.0, times.1, rss))
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
