//! Code search: `search_code` through aido against `rg` on the same tree and patterns, in
//! alternating rounds; `search_and_read` against the calls it saves, in calls and bytes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::harness::{Run, Server};
use crate::record::{Record, Section, Unit};

/// rg with search_code's walk defaults: no config file, `.gitignore` outside git too, no global
/// git excludes, hidden files skipped.
const RG: &[&str] = &[
    "--no-config",
    "--no-require-git",
    "--no-ignore-global",
    "--no-messages",
];

/// The patterns searched at once in the timed comparison (few enough hits to stay inside
/// search_code's default hit and byte bounds, so both sides return every hit).
pub const PATTERNS: &[&str] = &[r"fn new_with_\w+", r"todo!\(", r"impl Drop for"];

/// The patterns `search_and_read` is compared on, one call each.
pub const READ_PATTERNS: &[&str] = &[r"fn try_search_fwd\(", r"fn next_state\(", r"fn is_match\("];

/// The judged row, said not run when the section does not run.
pub const ROWS: [(&str, &str); 1] = [(
    "search_code_vs_rg",
    "`search_code` through aido (MCP, every file judged, journaled) / the `rg` binary, same tree and patterns",
)];

/// search_and_read against the calls it saves, for one pattern.
struct ReadCase {
    /// The pattern.
    pub pattern: String,
    /// Definitions (entries) in the answer.
    pub definitions: usize,
    /// Callers in the answer.
    pub callers: usize,
    /// Bytes of the one search_and_read result.
    pub bytes: usize,
    /// Calls the agent would otherwise make.
    pub calls_without: usize,
    /// Bytes of those calls' results.
    pub bytes_without: usize,
}

/// The cargo registry's sources, where the timed comparison searches.
pub fn registry_tree() -> Option<PathBuf> {
    let home = cargo_home()?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir())
        .collect();
    found.sort();
    found.pop()
}

/// `$CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// `path` as the report shows it: below the cargo home as `$CARGO_HOME/...`, so the report
/// names no directory of the machine it ran on.
fn shown(path: &Path) -> String {
    match cargo_home().and_then(|home| path.strip_prefix(home).ok().map(Path::to_owned)) {
        Some(rest) => format!("$CARGO_HOME/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// Runs the section: `repeats` alternating rounds of one search_code call and one rg run.
pub async fn run(aido: &Path, temp: &Path, repeats: usize) -> Run<Vec<Record>> {
    let Some(tree) = registry_tree() else {
        return Run::Skipped("no cargo registry sources to search".into());
    };
    measure(aido, temp, &tree, repeats).await.into()
}

/// search_code beside rg (time per search), and search_and_read beside the calls it saves
/// (bytes).
async fn measure(aido: &Path, temp: &Path, tree: &Path, repeats: usize) -> Result<Vec<Record>> {
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (server, _) = Server::aido_with(
        aido,
        work.path(),
        Some(&format!(
            "[paths]\nread = [{:?}]\n",
            tree.display().to_string()
        )),
        &["search_code"],
    )
    .await?;

    let files = rg_files(tree)?;
    let arguments = json!({
        "patterns": PATTERNS,
        "path": tree.display().to_string(),
        "mode": "content",
        "limit": 2000,
        "bytes_max": 262_144,
    });
    // One unmeasured round each warms the page cache and the server.
    let first = search(&server, arguments.clone()).await?;
    let theirs = rg_hits(tree)?;
    let ours = hits_of(&first, tree);
    if first["found"]["truncated"] == true {
        bail!(
            "search_code cut its result short: {}",
            first["found"]["truncation"]
        );
    }
    if ours != theirs {
        let only_ours = ours.difference(&theirs).take(5).collect::<Vec<_>>();
        let only_theirs = theirs.difference(&ours).take(5).collect::<Vec<_>>();
        bail!("search_code and rg disagree: only aido {only_ours:?}, only rg {only_theirs:?}");
    }
    let (aido_times, rg_times) = crate::harness::paired(
        repeats,
        async || search(&server, arguments.clone()).await.map(drop),
        async || rg_plain(tree).map(drop),
    )
    .await?;

    let read_tree = tree
        .read_dir()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("regex-automata-"))
        })
        .max()
        .context("regex-automata in the registry (a dependency of aido-search)")?;
    let mut reads = Vec::new();
    for pattern in READ_PATTERNS {
        reads.push(read_case(&server, &read_tree, pattern).await?);
    }
    server.stop().await?;
    let mut s = Section::new("search");
    let [(row, what)] = ROWS;
    s.versus(row, what, &aido_times, "rg", &rg_times);
    s.number("patterns", PATTERNS.len() as f64);
    s.fact("tree", shown(tree));
    s.numbers(&[
        ("files", files as f64),
        ("hits", ours.len() as f64),
        ("repeats", aido_times.len() as f64),
    ]);
    s.fact("read_tree", shown(&read_tree));
    let mut cells = Vec::new();
    for (k, case) in reads.iter().enumerate() {
        let row = format!("search_and_read_bytes_{}", k + 1);
        s.value(&row, None, Unit::Bytes, case.bytes as f64).what(format!(
            "`search_and_read` `{}` (1 call) / search_code + read_file ({} calls), bytes received",
            case.pattern, case.calls_without
        ));
        let without = case.bytes_without as f64;
        s.value(&row, Some("search_code + read_file"), Unit::Bytes, without);
        s.ratio(&row, (without > 0.0).then(|| case.bytes as f64 / without));
        cells.push(vec![
            format!("`{}`", case.pattern),
            case.definitions.to_string(),
            case.callers.to_string(),
            "1".into(),
            case.bytes.to_string(),
            case.calls_without.to_string(),
            case.bytes_without.to_string(),
        ]);
    }
    let columns = [
        "pattern",
        "definitions",
        "callers",
        "search_and_read calls",
        "its bytes",
        "calls without it",
        "their bytes",
    ];
    s.table("reads", &columns, cells);
    Ok(s.finish())
}

/// Bytes of a result as the client receives it (its JSON).
fn size(result: &rmcp::model::CallToolResult) -> usize {
    serde_json::to_string(result).map_or(0, |text| text.len())
}

async fn call(server: &Server, tool: &str, arguments: Value) -> Result<(Value, usize)> {
    let result = server.call(tool, arguments).await?;
    let bytes = size(&result);
    Ok((result.structured_content.unwrap_or_default(), bytes))
}

async fn search(server: &Server, arguments: Value) -> Result<Value> {
    Ok(call(server, "search_code", arguments).await?.0)
}

fn hits_of(found: &Value, _tree: &Path) -> BTreeSet<(String, u64)> {
    let mut hits = BTreeSet::new();
    for file in found["found"]["files"].as_array().into_iter().flatten() {
        let path = file["path"].as_str().unwrap_or_default().to_owned();
        for hit in file["hits"].as_array().into_iter().flatten() {
            hits.insert((path.clone(), hit["line"].as_u64().unwrap_or_default()));
        }
    }
    hits
}

fn rg(tree: &Path, args: &[&str]) -> Result<String> {
    let output = std::process::Command::new("rg")
        .args(RG)
        .args(args)
        .current_dir(tree)
        .output()
        .context("running rg (apt-get install ripgrep)")?;
    if !matches!(output.status.code(), Some(0 | 1)) {
        bail!("rg failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn rg_args() -> Vec<&'static str> {
    let mut args = vec!["-n"];
    for pattern in PATTERNS {
        args.extend(["-e", pattern]);
    }
    args
}

/// What an agent's shell gets from rg: `path:line:text` lines.
fn rg_plain(tree: &Path) -> Result<String> {
    rg(tree, &rg_args())
}

fn rg_files(tree: &Path) -> Result<usize> {
    Ok(rg(tree, &["--files"])?.lines().count())
}

/// (path, line) of rg's hits, from `rg --json` (files rg found binary after a match are left
/// out: search_code drops a binary file whole).
fn rg_hits(tree: &Path) -> Result<BTreeSet<(String, u64)>> {
    let mut args = vec!["--json"];
    args.extend(rg_args());
    let (mut hits, mut binary) = (BTreeSet::new(), BTreeSet::new());
    for line in rg(tree, &args)?.lines() {
        let message: Value = serde_json::from_str(line)?;
        let path = message["data"]["path"]["text"]
            .as_str()
            .unwrap_or_default()
            .trim_start_matches("./")
            .to_owned();
        match message["type"].as_str() {
            Some("match") => {
                hits.insert((path, message["data"]["line_number"].as_u64().unwrap_or(0)));
            }
            Some("end") if !message["data"]["binary_offset"].is_null() => {
                binary.insert(path);
            }
            _ => {}
        }
    }
    hits.retain(|(path, _)| !binary.contains(path));
    Ok(hits)
}

/// One search_and_read call, then the calls it stands for: a content search for the pattern,
/// a read_file of each file with a hit, a search for each definition's call sites
/// (`\bNAME\s*\(`), and a read_file of each caller's file not read yet.
async fn read_case(server: &Server, tree: &Path, pattern: &str) -> Result<ReadCase> {
    let root = tree.display().to_string();
    let (answer, bytes) = call(
        server,
        "search_and_read",
        json!({"patterns": [pattern], "path": root}),
    )
    .await?;
    let entries = answer["found"]["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let callers: usize = entries
        .iter()
        .map(|e| e["callers"].as_array().map_or(0, Vec::len))
        .sum();

    let (mut calls, mut total) = (1, 0);
    let (found, searched) = call(
        server,
        "search_code",
        json!({"patterns": [pattern], "path": root, "mode": "content"}),
    )
    .await?;
    total += searched;
    let mut read = BTreeSet::new();
    let hit_files: Vec<String> = found["found"]["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["path"].as_str().map(str::to_owned))
        .collect();
    let names: BTreeSet<String> = entries
        .iter()
        .filter_map(|e| e["definition"]["name"].as_str().map(str::to_owned))
        .collect();
    let mut caller_files = Vec::new();
    for name in &names {
        let (callers, bytes) = call(
            server,
            "search_code",
            json!({"patterns": [format!(r"\b{name}\s*\(")], "path": root, "mode": "content"}),
        )
        .await?;
        calls += 1;
        total += bytes;
        caller_files.extend(
            callers["found"]["files"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["path"].as_str().map(str::to_owned)),
        );
    }
    for file in hit_files.into_iter().chain(caller_files) {
        if !read.insert(file.clone()) {
            continue;
        }
        let path = tree.join(&file).display().to_string();
        let (_, bytes) = call(server, "read_file", json!({"path": path})).await?;
        calls += 1;
        total += bytes;
    }
    Ok(ReadCase {
        pattern: pattern.to_owned(),
        definitions: entries.len(),
        callers,
        bytes,
        calls_without: calls,
        bytes_without: total,
    })
}
