//! Every crate's modules are layered: no two modules (files) of one crate import each other,
//! directly or round a circle, so each can be read with only what is under it. Read from the
//! source: a file's `crate::a::b` and `super::x` paths (outside comments and its `#[cfg(test)]`
//! tail) point at the deepest module file they name.
//!
//! The circles older crates still hold are listed in [`KNOWN`], a ratchet: a new circle fails
//! the test, and so does a listed one that is gone (take it off the list).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles not broken yet, by crate directory and their files (as module paths).
const KNOWN: &[(&str, &[&str])] = &[];

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The workspace's member directories, from its Cargo.toml.
fn members() -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let manifest: toml::Value = toml::from_str(&text).unwrap();
    manifest["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path in its crate (`process::events`; the crate root is empty), or `None`
/// for a binary's own files.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let relative = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    Some(parts)
}

/// The paths a file names: each `crate::` or `super::` followed by `::`-joined identifiers.
fn paths_named(code: &str) -> Vec<(bool, Vec<String>)> {
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (i, _) in line.match_indices("::") {
            let before = &line[..i];
            let word_start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            let head = &before[word_start..];
            let from_root = match head {
                "crate" => true,
                "super" if !before[..word_start].ends_with("::") => false,
                _ => continue,
            };
            let mut segments = Vec::new();
            for piece in line[i + 2..].split("::") {
                let ident: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if ident.is_empty() {
                    break;
                }
                let whole = ident.len() == piece.len();
                segments.push(ident);
                if !whole {
                    break;
                }
            }
            if !segments.is_empty() {
                found.push((from_root, segments));
            }
        }
    }
    found
}

/// Each module's edges to the other modules of its crate.
fn edges_of(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join(dir).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .into_iter()
        .filter_map(|f| module_of(&src, &f).map(|m| (m, f)))
        .collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut to = BTreeSet::new();
        for (from_root, segments) in paths_named(code) {
            // `super` of `a::b` (a/b.rs or a/b/mod.rs) is `a`.
            let mut full: Vec<String> = if from_root {
                Vec::new()
            } else {
                let mut parent = module.clone();
                parent.pop();
                parent
            };
            full.extend(segments);
            // The deepest module file the path names.
            for n in (1..=full.len()).rev() {
                if modules.contains_key(&full[..n]) {
                    if full[..n] != module[..] {
                        to.insert(full[..n].join("::"));
                    }
                    break;
                }
            }
        }
        edges.insert(module.join("::"), to);
    }
    edges
}

/// The circles of a graph: its strongly connected components of more than one module.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(node.to_owned()) {
            return;
        }
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, seen, order);
        }
        order.push(node.to_owned());
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for node in edges.keys() {
        visit(node, edges, &mut seen, &mut order);
    }
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reversed.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut found = Vec::new();
    for node in order.iter().rev() {
        let mut component = Vec::new();
        visit(node, &reversed, &mut assigned, &mut component);
        if component.len() > 1 {
            found.push(component.into_iter().collect());
        }
    }
    found
}

#[test]
fn the_scanner_reads_paths_and_the_circles_are_found() {
    let named =
        paths_named("use crate::a::b::{C, D};\n// crate::not::this\nlet x = super::y::z();");
    assert_eq!(
        named,
        vec![
            (true, vec!["a".into(), "b".into()]),
            (false, vec!["y".into(), "z".into()])
        ]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    let found = circles(&graph);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0],
        ["a", "b", "c"].into_iter().map(str::to_owned).collect()
    );
}

#[test]
fn no_crate_holds_an_import_circle_beyond_the_known_ones() {
    let known: BTreeSet<(String, BTreeSet<String>)> = KNOWN
        .iter()
        .map(|(dir, mods)| {
            (
                (*dir).to_owned(),
                mods.iter().map(|m| (*m).to_owned()).collect(),
            )
        })
        .collect();
    let mut found = BTreeSet::new();
    for dir in members() {
        for circle in circles(&edges_of(&dir)) {
            found.insert((dir.clone(), circle));
        }
    }
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty(),
        "modules that import each other round a circle (break it: move what both need under both): {new:?}"
    );
    assert!(
        gone.is_empty(),
        "these circles are broken now: take them off KNOWN in cli/tests/layers.rs: {gone:?}"
    );
    // actors, the runtime, is layered whole.
    assert!(!found.iter().any(|(dir, _)| dir == "actors"), "{found:?}");
}

/// Functions over clippy's `too-many-lines-threshold` (clippy.toml) that were there before the
/// ratchet, each allowed by name. The count only goes down: split one, drop its allow, lower
/// this number (a count above it is a new long function; below it, a stale number).
const LONG_FUNCTIONS_ALLOWED: usize = 62;

#[test]
fn long_functions_only_get_fewer() {
    let mut files = Vec::new();
    for dir in members() {
        for sub in ["src", "tests", "benches"] {
            rust_files(&workspace().join(&dir).join(sub), &mut files);
        }
    }
    let allowed: usize = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.trim() == "#[allow(clippy::too_many_lines)]")
                .count()
        })
        .sum();
    assert_eq!(
        allowed, LONG_FUNCTIONS_ALLOWED,
        "functions allowed over clippy's too-many-lines-threshold: {allowed}; set LONG_FUNCTIONS_ALLOWED in cli/tests/layers.rs (it may only go down)"
    );
}
