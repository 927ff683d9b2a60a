//! The memory primitives' results, as pure functions of the store's answer.
//!
//! The memory body asks aido-memory's store (a SQLite file other sessions and processes share,
//! so its answer depends on what they wrote) and records that answer as
//! `Input::Answer { from: "memory" }`, after the clock it passed to the store
//! (`Input::Clock`). The result the agent sees is [`render`] of that answer, here, so
//! `aido replay playback` rebuilds it from the record without opening the database.

use aido_actions::{MemoryAction, Outcome};
use serde_json::Value;

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "memory";

/// The result of a memory primitive whose store answered `answer`: the answer is the
/// structured output, and the text is what an agent reads first.
pub fn render(action: &MemoryAction, answer: &Value) -> Outcome {
    let text = match action {
        MemoryAction::Remember(_) => format!(
            "remembered memory {} ({} scope)",
            answer["id"],
            scope_name(&answer["scope"])
        ),
        MemoryAction::Recall(_) => page(
            answer["results"].as_array().map(Vec::as_slice),
            |r| &r["memory"],
            answer,
            "recalled",
        ),
        MemoryAction::ListMemory(_) => page(
            answer["memories"].as_array().map(Vec::as_slice),
            |m| m,
            answer,
            "listed",
        ),
        MemoryAction::Forget(_) => match answer["count"].as_u64() {
            Some(1) => "forgot 1 memory".to_owned(),
            Some(n) => format!("forgot {n} memories"),
            None => "forgot nothing".to_owned(),
        },
    };
    Outcome {
        text,
        output: answer.clone(),
        ..Outcome::default()
    }
}

/// `global`, `project` or `session`.
fn scope_name(scope: &Value) -> &str {
    scope["kind"].as_str().unwrap_or("unknown")
}

/// One line per memory (id, scope, tags, whether it came from untrusted input, its text),
/// then whether the page was cut short.
fn page(
    items: Option<&[Value]>,
    memory: impl Fn(&Value) -> &Value,
    answer: &Value,
    verb: &str,
) -> String {
    let items = items.unwrap_or_default();
    let mut lines = vec![match items.len() {
        1 => format!("{verb} 1 memory"),
        n => format!("{verb} {n} memories"),
    }];
    for item in items {
        let m = memory(item);
        let tags: Vec<&str> = m["tags"]
            .as_array()
            .map(|t| t.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", tags.join(", "))
        };
        let untrusted = if m["provenance"]["untrusted"] == Value::Bool(true) {
            " UNTRUSTED (derived from fetched pages or command output; may carry instructions)"
        } else {
            ""
        };
        lines.push(format!(
            "- #{} ({}{tags}{untrusted}) {}",
            m["id"],
            scope_name(&m["scope"]),
            m["text"].as_str().unwrap_or_default()
        ));
    }
    if answer["truncated"] == Value::Bool(true) {
        lines.push("(the character budget cut the page short)".to_owned());
    }
    if let Some(cursor) = answer["next_cursor"].as_str() {
        lines.push(format!("(more: pass cursor {cursor:?})"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aido_actions::memory::{Forget, ListMemory};
    use serde_json::json;

    #[test]
    fn a_page_lists_each_memory_and_warns_of_untrusted_ones() {
        let answer = json!({
            "memories": [
                {"id": 2, "text": "b", "scope": {"kind": "global"}, "tags": ["x"],
                 "provenance": {"session": "s", "seq": 3, "untrusted": true}},
                {"id": 1, "text": "a", "scope": {"kind": "project", "key": "k"}, "tags": [],
                 "provenance": {"session": "s", "seq": 2, "untrusted": false}},
            ],
            "chars": 2, "truncated": false, "next_cursor": "l1.1.00"
        });
        let done = render(&MemoryAction::ListMemory(ListMemory::default()), &answer);
        assert_eq!(done.output, answer);
        let lines: Vec<&str> = done.text.lines().collect();
        assert_eq!(lines[0], "listed 2 memories");
        assert!(lines[1].starts_with("- #2 (global [x] UNTRUSTED"));
        assert_eq!(lines[2], "- #1 (project) a");
        assert_eq!(lines[3], "(more: pass cursor \"l1.1.00\")");
    }

    #[test]
    fn forget_counts() {
        let forget = MemoryAction::Forget(Forget::default());
        assert_eq!(
            render(&forget, &json!({"count": 1})).text,
            "forgot 1 memory"
        );
        assert_eq!(
            render(&forget, &json!({"count": 3})).text,
            "forgot 3 memories"
        );
    }
}
