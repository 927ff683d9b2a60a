//! The reference in docs/ is generated from the code where it can be, and checked where it is
//! written by hand: docs/TOOLS.md is `aido tools --markdown` exactly (`AIDO_BLESS=1` rewrites
//! it), and the config reference in docs/REFERENCE.md holds every key of the defaults with the
//! default's value, and no key the config does not have. (The error codes are checked in
//! codes.rs.)

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::common;

fn docs(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs")).join(name)
}

#[test]
fn docs_tools_md_is_what_aido_tools_generates() {
    let home = common::home();
    let out = home.cmd(&["tools", "--markdown"]);
    assert!(out.status.success(), "aido tools --markdown: {out:?}");
    let generated = String::from_utf8(out.stdout).unwrap();
    assert!(generated.contains("### `run_command`"), "{generated}");
    let path = docs("TOOLS.md");
    if std::env::var_os("AIDO_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "docs/TOOLS.md drifted from `aido tools --markdown`; run `AIDO_BLESS=1 cargo nextest run -p aido docs` and commit it"
    );
}

/// Every leaf of a JSON value by its dotted key (arrays are leaves).
fn leaves(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, value) in map {
                let key = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(&key, value, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

/// Whether the reference's value stands for the default's: equal, or a list abbreviated with
/// a `"..."` item whose other items are the default's first ones.
fn stands_for(written: &Value, default: &Value) -> bool {
    match (written, default) {
        (Value::Array(written), Value::Array(default))
            if written.last() == Some(&Value::from("...")) =>
        {
            let shown = &written[..written.len() - 1];
            shown.len() <= default.len() && shown == &default[..shown.len()]
        }
        _ => written == default,
    }
}

#[test]
fn the_config_reference_holds_the_defaults() {
    let home = common::home();
    let out = home.cmd(&["config", "show", "--json"]);
    assert!(out.status.success(), "aido config show --json: {out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut defaults = BTreeMap::new();
    leaves("", &shown["config"], &mut defaults);

    let reference = std::fs::read_to_string(docs("REFERENCE.md")).unwrap();
    let block = reference
        .split("### Config reference")
        .nth(1)
        .and_then(|section| section.split("```toml\n").nth(1))
        .and_then(|block| block.split("\n```").next())
        .expect("docs/REFERENCE.md has a Config reference with a toml block");
    let parsed: toml::Value = toml::from_str(block).expect("the config reference is TOML");
    let mut written = BTreeMap::new();
    leaves("", &serde_json::to_value(parsed).unwrap(), &mut written);

    // A key unset by default (null) has no TOML spelling: the reference may leave it out.
    let missing: Vec<_> = defaults
        .iter()
        .filter(|(key, value)| !value.is_null() && !written.contains_key(*key))
        .map(|(key, _)| key)
        .collect();
    let unknown: Vec<_> = written
        .keys()
        .filter(|key| !defaults.contains_key(*key))
        .collect();
    let wrong: Vec<_> = written
        .iter()
        .filter_map(|(key, value)| {
            let default = defaults.get(key)?;
            (!stands_for(value, default)).then(|| format!("{key} = {value} (default {default})"))
        })
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty() && wrong.is_empty(),
        "docs/REFERENCE.md's config reference drifted from the defaults:\n missing {missing:?}\n not a key {unknown:?}\n not the default {wrong:#?}"
    );
}

/// The figures the README states for the tool list: the tools and the tokens of `all` and of
/// the `coding` profile, each within 5% of what `aido tools` measures.
#[test]
fn the_readme_states_what_the_tool_list_costs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let home = common::home();
    for (said, args) in [
        ("all", vec!["tools"]),
        (
            "the `coding` profile,",
            vec!["tools", "--toolsets", "coding"],
        ),
    ] {
        let out = home.cmd(&args);
        assert!(out.status.success(), "aido {args:?}: {out:?}");
        let last = String::from_utf8(out.stdout).unwrap();
        let last = last.lines().last().unwrap().to_owned();
        // "24 tools, 27,312 bytes of tools/list, about 6,828 tokens (bytes / 4)"
        let number = |text: &str| -> usize { text.replace(',', "").parse().unwrap() };
        let words: Vec<&str> = last.split_whitespace().collect();
        let (tools, tokens) = (number(words[0]), number(words[7]));
        let sentence = readme
            .split(&format!("{said} {tools} tools, about "))
            .nth(1)
            .unwrap_or_else(|| {
                panic!("the README says \"{said} {tools} tools, about N tokens\" ({last})")
            });
        let stated = number(sentence.split_whitespace().next().unwrap());
        let off = stated.abs_diff(tokens) as f64 / tokens as f64;
        assert!(
            off <= 0.05,
            "the README says {said} {tools} tools cost about {stated} tokens; aido tools measures {tokens}"
        );
    }
}
