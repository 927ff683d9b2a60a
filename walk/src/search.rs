//! The results of `search_code` and `search_and_read` as pure functions of what the search
//! body found.
//!
//! The search body walks the tree (judging every entry by the walls and deny globs before it
//! opens it), and records what it found as one `Input::Answer { from: "search", value }`: the
//! root as given and as resolved, and aido-search's result (hits with their texts, or
//! definitions and callers with theirs). The result the agent sees is [`render`] of that
//! value, here, so `aido replay playback` rebuilds it without reading the tree again (files
//! change; the recorded answer is what the agent saw).

use std::fmt::Write;

use aido_actions::{Outcome, SearchAction};
use serde_json::Value;

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "search";

/// The result of a search primitive whose search found `answer`: the answer is the structured
/// output, and the text is what an agent reads first (rg-like lines).
pub fn render(action: &SearchAction, answer: &Value) -> Outcome {
    let found = &answer["found"];
    let text = match action {
        SearchAction::SearchCode(_) => code_text(found),
        SearchAction::SearchAndRead(_) => read_text(found),
    };
    Outcome {
        text,
        output: answer.clone(),
        ..Outcome::default()
    }
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// `path` (files), `path:count` (count) or `path:line:text` with `path-line-text` context
/// lines (content), then one line saying what was left out.
fn code_text(found: &Value) -> String {
    let mut text = String::new();
    let files = array(&found["files"]);
    match found["mode"].as_str() {
        Some("content") => {
            for file in files {
                let path = str_of(&file["path"]);
                for hit in array(&file["hits"]) {
                    for line in array(&hit["before"]) {
                        let _ = writeln!(text, "{path}-{}-{}", line["line"], str_of(&line["text"]));
                    }
                    let _ = writeln!(text, "{path}:{}:{}", hit["line"], str_of(&hit["text"]));
                    for line in array(&hit["after"]) {
                        let _ = writeln!(text, "{path}-{}-{}", line["line"], str_of(&line["text"]));
                    }
                }
            }
        }
        Some("count") => {
            for file in files {
                let _ = writeln!(text, "{}:{}", str_of(&file["path"]), file["count"]);
            }
        }
        _ => {
            for file in files {
                let _ = writeln!(text, "{}", str_of(file));
            }
        }
    }
    if files.is_empty() {
        text.push_str("no matches\n");
    }
    trailer(&mut text, found);
    text
}

/// Each definition (where, how found, its text), its hits and its callers.
fn read_text(found: &Value) -> String {
    let mut text = String::new();
    let entries = array(&found["entries"]);
    for entry in entries {
        let path = str_of(&entry["path"]);
        match &entry["definition"] {
            Value::Null => {
                let _ = writeln!(text, "== {path} (no enclosing definition)");
            }
            definition => definition_text(&mut text, definition),
        }
        for hit in array(&entry["hits"]) {
            let _ = writeln!(text, "hit {path}:{}: {}", hit["line"], str_of(&hit["text"]));
        }
        for caller in array(&entry["callers"]) {
            let line = &caller["line"];
            let _ = writeln!(
                text,
                "caller {}:{}: {}",
                str_of(&caller["path"]),
                line["line"],
                str_of(&line["text"])
            );
            if !caller["definition"].is_null() {
                definition_text(&mut text, &caller["definition"]);
            }
        }
        if entry["callers_truncated"] == true {
            text.push_str("(more callers than shown)\n");
        }
    }
    if entries.is_empty() {
        text.push_str("no matches\n");
    }
    if found["hits_truncated"] == true {
        text.push_str("(more hits than were looked at)\n");
    }
    if found["budget_exhausted"] == true {
        let _ = writeln!(
            text,
            "(the budget of {} characters ran out; some texts are cut)",
            found["budget_chars"]
        );
    }
    text
}

fn definition_text(text: &mut String, definition: &Value) {
    let _ = writeln!(
        text,
        "== {}:{}-{} {} {} ({}, found by {})",
        str_of(&definition["path"]),
        definition["start_line"],
        definition["end_line"],
        str_of(&definition["kind"]),
        str_of(&definition["name"]),
        str_of(&definition["language"]),
        str_of(&definition["found_by"]),
    );
    match definition["text_cut"].as_str() {
        Some("repeated") => text.push_str("(shown above)\n"),
        cut => {
            let body = str_of(&definition["text"]);
            text.push_str(body);
            if !body.is_empty() && !body.ends_with('\n') {
                text.push('\n');
            }
            if cut == Some("budget") {
                text.push_str("(cut by the budget)\n");
            }
        }
    }
}

/// Why a `search_code` result is short, if it is.
fn trailer(text: &mut String, found: &Value) {
    if found["truncated"] != true {
        return;
    }
    let why = match found["truncation"].as_str() {
        Some("limit") => "more matches than the limit",
        Some("files_max") => "more files than the search may walk",
        Some("timeout") => "the search ran out of time",
        Some("budget") => "the result reached its byte budget",
        _ => "cut short",
    };
    let _ = writeln!(text, "(truncated: {why})");
}

#[cfg(test)]
mod tests {
    use super::*;
    use aido_actions::search::{SearchAndRead, SearchCode};
    use serde_json::json;

    fn code() -> SearchAction {
        SearchAction::SearchCode(
            serde_json::from_value::<SearchCode>(json!({"patterns": ["x"]})).unwrap(),
        )
    }

    #[test]
    fn content_renders_like_rg_and_says_why_it_is_short() {
        let answer = json!({"found": {
            "mode": "content",
            "files": [{"path": "a.rs", "hits": [{"line": 2, "text": "x()", "patterns": [0],
                "before": [{"line": 1, "text": "fn f() {"}], "after": []}]}],
            "truncated": true, "truncation": "budget"}});
        let done = render(&code(), &answer);
        assert_eq!(
            done.text,
            "a.rs-1-fn f() {\na.rs:2:x()\n(truncated: the result reached its byte budget)\n"
        );
        assert_eq!(done.output, answer);
        let none = render(&code(), &json!({"found": {"mode": "count", "files": []}}));
        assert_eq!(none.text, "no matches\n");
    }

    #[test]
    fn definitions_say_how_they_were_found() {
        let read = SearchAction::SearchAndRead(
            serde_json::from_value::<SearchAndRead>(json!({"patterns": ["x"]})).unwrap(),
        );
        let definition = json!({"path": "a.py", "start_line": 1, "end_line": 2, "kind": "function",
            "name": "f", "language": "python", "found_by": "heuristic", "text": "def f():\n    x()",
            "text_cut": null});
        let answer = json!({"found": {"entries": [{"path": "a.py", "definition": definition,
            "hits": [{"line": 2, "text": "    x()"}], "callers": [], "callers_truncated": false}],
            "hits_truncated": false, "budget_exhausted": false}});
        let done = render(&read, &answer);
        assert_eq!(
            done.text,
            "== a.py:1-2 function f (python, found by heuristic)\ndef f():\n    x()\nhit a.py:2:     x()\n"
        );
    }
}
