//! Memory: aido's `recall` against server-memory's `search_nodes`, both holding the same
//! memories, in alternating rounds; and what each finds for the same queries.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::harness::{Run, Server};
use crate::record::{Record, Section};

/// Words the texts are made of.
const VOCABULARY: &[&str] = &[
    "alpha", "amber", "anchor", "apple", "arrow", "aspen", "atlas", "autumn", "badge", "bamboo",
    "banner", "barley", "basil", "beacon", "birch", "bison", "blossom", "boulder", "bramble",
    "breeze", "bridge", "bronze", "cactus", "canyon", "carbon", "castle", "cedar", "cherry",
    "cinder", "citrus", "clover", "cobalt", "comet", "copper", "coral", "cotton", "crater",
    "crystal", "cypress", "dahlia", "delta", "desert", "dune", "eagle", "ember", "falcon", "fern",
    "fjord", "flint", "forest", "fossil", "garnet", "geyser", "ginger", "glacier", "granite",
    "harbor", "hazel", "heron", "hollow", "indigo", "island", "ivory", "jasper", "juniper", "kelp",
    "lagoon", "lantern", "lava", "lemon", "lichen", "lotus", "magnet", "maple", "marble", "meadow",
    "mesa", "mint", "moss", "nectar", "nickel", "oasis", "obsidian", "olive", "onyx", "orchid",
    "otter", "pebble", "pepper", "pine", "plum", "prairie", "quartz", "raven", "reef", "ridge",
    "river", "saffron", "sage", "salt", "sequoia", "shadow", "silver", "slate", "spruce", "summit",
    "tangle", "thistle", "thunder", "timber", "topaz", "tundra", "velvet", "violet", "walnut",
    "willow", "zephyr",
];

/// Entities the peer gets per `create_entities` call.
const PEER_BATCH: usize = 500;

/// Results asked of each side per query.
const LIMIT: usize = 10;

/// The judged row, said not run when the section does not run.
pub const ROWS: [(&str, &str); 1] = [(
    "memory_recall_vs_server_memory",
    "`recall` through aido (MCP, journaled, SQLite FTS5) / `search_nodes` of `@modelcontextprotocol/server-memory`, same memories and queries, time per query",
)];

/// What each side found for one query.
struct Found {
    /// The query.
    pub query: String,
    /// Results aido returned (at most [`LIMIT`]).
    pub aido_results: usize,
    /// aido's results include the memory the query was made from.
    pub aido_found: bool,
    /// Entities the peer returned (it has no limit).
    pub peer_results: usize,
    /// The peer's include it.
    pub peer_found: bool,
}

/// The text of memory `i`.
fn text(i: usize) -> String {
    let mut seed = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5A5;
    let mut words = Vec::new();
    for _ in 0..5 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        words.push(VOCABULARY[(seed >> 33) as usize % VOCABULARY.len()]);
    }
    format!("note {i}: {}", words.join(" "))
}

/// The query made from memory `i`: its second and third words, side by side as they are in it
/// (the peer matches the query as one substring).
fn query(i: usize) -> String {
    let text = text(i);
    let words: Vec<&str> = text.split(' ').skip(2).collect();
    format!("{} {}", words[1], words[2])
}

/// Runs the section with `memories` on each side and `queries` queries, each asked of both
/// sides `repeats` times, alternating: the time per query of each, and what each found.
pub async fn run(
    aido: &Path,
    node: &str,
    peer_dir: &Path,
    temp: &Path,
    memories: usize,
    queries: usize,
    repeats: usize,
) -> Run<Vec<Record>> {
    let (entry, peer) = match crate::peer_package(peer_dir) {
        Ok(found) => found,
        Err(error) => return Run::Skipped(format!("{error:#}")),
    };
    let peer = (entry.as_path(), peer);
    measure(aido, node, peer, temp, memories, queries, repeats)
        .await
        .into()
}

/// With server-memory's entry script and its name and version.
async fn measure(
    aido: &Path,
    node: &str,
    (entry, peer): (&Path, String),
    temp: &Path,
    memories: usize,
    queries: usize,
    repeats: usize,
) -> Result<Vec<Record>> {
    if memories == 0 || queries == 0 {
        bail!("no memories or no queries asked for");
    }
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (ours, _) = Server::aido(aido, work.path(), &["recall"]).await?;
    let mut command = tokio::process::Command::new(node);
    command
        .arg(entry)
        .env("MEMORY_FILE_PATH", work.path().join("peer-memory.jsonl"))
        .current_dir(work.path());
    let theirs = Server::start(
        "server-memory",
        command,
        work.path().join("peer.stderr"),
        &["search_nodes"],
    )
    .await?;

    eprintln!("aido-bench:   filling both with {memories} memories");
    for i in 0..memories {
        ours.json("remember", json!({"text": text(i)})).await?;
    }
    let mut i = 0;
    while i < memories {
        let end = (i + PEER_BATCH).min(memories);
        let entities: Vec<Value> = (i..end)
            .map(|k| json!({"name": format!("m{k}"), "entityType": "note", "observations": [text(k)]}))
            .collect();
        theirs
            .json("create_entities", json!({"entities": entities}))
            .await?;
        i = end;
    }

    // Queries spread over the memories.
    let picked: Vec<usize> = (0..queries).map(|q| q * memories / queries).collect();
    let mut found = Vec::new();
    let (mut aido_times, mut peer_times) = (Vec::new(), Vec::new());
    for round in 0..repeats.max(1) {
        for (q, &i) in picked.iter().enumerate() {
            let asked = query(i);
            let (mut recalled, mut searched) = (Value::Null, Value::Null);
            for lane in crate::harness::alternate(round * picked.len() + q, 2) {
                if lane == 0 {
                    let arguments = json!({"query": asked, "limit": LIMIT, "terms": "all"});
                    let took;
                    (recalled, took) = ours.timed("recall", arguments).await?;
                    aido_times.push(took);
                } else {
                    let took;
                    (searched, took) = theirs
                        .timed("search_nodes", json!({"query": asked}))
                        .await?;
                    peer_times.push(took);
                }
            }
            if round == 0 {
                found.push(what_each_found(i, asked, &recalled, &searched));
            }
        }
    }
    ours.stop().await?;
    theirs.stop().await?;
    let mut s = Section::new("memory");
    let [(row, what)] = ROWS;
    s.versus(row, what, &aido_times, &peer, &peer_times);
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    let cells = found
        .iter()
        .map(|q| {
            vec![
                format!("`{}`", q.query),
                q.aido_results.to_string(),
                yes(q.aido_found),
                q.peer_results.to_string(),
                yes(q.peer_found),
            ]
        })
        .collect();
    let count = |f: fn(&Found) -> bool| found.iter().filter(|q| f(q)).count() as f64;
    s.numbers(&[
        ("memories", memories as f64),
        ("queries", found.len() as f64),
        ("calls", aido_times.len() as f64),
    ]);
    s.fact("peer", peer);
    s.numbers(&[
        ("aido_found", count(|q| q.aido_found)),
        ("peer_found", count(|q| q.peer_found)),
    ]);
    let columns = [
        "query",
        "aido results (at most 10)",
        "aido found its memory",
        "server-memory results",
        "server-memory found it",
    ];
    s.table("found", &columns, cells);
    Ok(s.finish())
}

/// The entities of a search_nodes answer (structured, or the JSON of its text).
/// What each side answered the query made from memory `i`.
fn what_each_found(i: usize, query: String, recalled: &Value, searched: &Value) -> Found {
    let mark = format!("note {i}:");
    let results = recalled["results"].as_array().cloned().unwrap_or_default();
    let entities = peer_entities(searched);
    Found {
        query,
        aido_results: results.len(),
        aido_found: results.iter().any(|r| {
            r["memory"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(&mark))
        }),
        peer_results: entities.len(),
        peer_found: entities
            .iter()
            .any(|e| e["name"].as_str() == Some(format!("m{i}").as_str())),
    }
}

fn peer_entities(answer: &Value) -> Vec<Value> {
    answer["entities"].as_array().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_is_two_adjacent_words_of_its_memory() {
        for i in [0, 1, 77, 9999] {
            let text = text(i);
            assert!(text.starts_with(&format!("note {i}: ")));
            assert!(text.contains(&query(i)), "{text} / {}", query(i));
            assert_eq!(text.split(' ').count(), 7);
        }
        assert_ne!(text(1), text(2));
    }
}
