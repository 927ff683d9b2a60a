//! A model's reply, read: the first JSON object in it that names a `tool` (or `name`) is a
//! tool call with its `arguments` (or `input`); one with an `answer` is the final answer.
//! Text around the object, or its `thought`, is the plan the terminal shows. Models wrap
//! JSON in code fences and prose; both are looked through.

use serde_json::{Map, Value};

/// The most `{` a reply is searched from for a JSON object.
const OBJECT_STARTS_MAX: usize = 64;
/// The longest plan kept from a reply, in chars.
const PLAN_CHARS_MAX: usize = 2_000;

/// What a reply asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Run `tool` with `arguments`.
    Call {
        /// What the model says it will do.
        plan: String,
        /// The tool's name.
        tool: String,
        /// Its arguments (an object; `{}` when the model gave none).
        arguments: Value,
    },
    /// The goal is reached (or cannot be): the model's report.
    Answer {
        /// What the model says it did.
        plan: String,
        /// The report.
        text: String,
    },
    /// Neither: the model is told so and asked again.
    Unparsed,
}

/// Read `text`, a model's whole reply.
pub fn read(text: &str) -> Reply {
    for (at, _) in text.match_indices('{').take(OBJECT_STARTS_MAX) {
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        let Some(Ok(Value::Object(object))) = values.next() else {
            continue;
        };
        let end = at + values.byte_offset();
        if let Some(reply) = of_object(object, text, at, end) {
            return reply;
        }
    }
    Reply::Unparsed
}

fn of_object(
    mut object: Map<String, Value>,
    text: &str,
    start: usize,
    end: usize,
) -> Option<Reply> {
    let plan = match object.get("thought").and_then(Value::as_str) {
        Some(thought) => thought.to_owned(),
        None => outside(text, start, end),
    };
    let plan: String = plan.trim().chars().take(PLAN_CHARS_MAX).collect();
    let tool = ["tool", "name"]
        .iter()
        .find_map(|key| object.get(*key).and_then(Value::as_str))
        .map(str::to_owned);
    if let Some(tool) = tool {
        let arguments = ["arguments", "input"]
            .iter()
            .find_map(|key| object.remove(*key))
            .unwrap_or_else(|| Value::Object(Map::new()));
        return Some(Reply::Call {
            plan,
            tool,
            arguments,
        });
    }
    let text = match object.remove("answer")? {
        Value::String(text) => text,
        other => other.to_string(),
    };
    Some(Reply::Answer { plan, text })
}

/// The reply's text around the object, without code fences.
fn outside(text: &str, start: usize, end: usize) -> String {
    let around = format!("{} {}", &text[..start], &text[end..]);
    around
        .replace("```json", " ")
        .replace("```", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_are_read_as_calls_answers_or_neither() {
        let call = |plan: &str, tool: &str, arguments: Value| Reply::Call {
            plan: plan.into(),
            tool: tool.into(),
            arguments,
        };
        let table = [
            (
                r#"{"thought": "look first", "tool": "read_file", "arguments": {"path": "a.txt"}}"#,
                call("look first", "read_file", json!({"path": "a.txt"})),
            ),
            (
                "I will read it.\n```json\n{\"tool\": \"read_file\", \"arguments\": {\"path\": \"}{\"}}\n```",
                call("I will read it.", "read_file", json!({"path": "}{"})),
            ),
            (
                r#"{"name": "list_handles", "input": {}}"#,
                call("", "list_handles", json!({})),
            ),
            (
                r#"{"tool": "session_history"}"#,
                call("", "session_history", json!({})),
            ),
            (
                r#"Sure. {"oops": 1} then {"answer": "done", "thought": "all read"}"#,
                Reply::Answer {
                    plan: "all read".into(),
                    text: "done".into(),
                },
            ),
            (
                r#"{"answer": {"lines": 3}}"#,
                Reply::Answer {
                    plan: String::new(),
                    text: r#"{"lines":3}"#.into(),
                },
            ),
            ("The file has three lines.", Reply::Unparsed),
            (
                r#"{"tool": "read_file", "arguments": {"path": "#,
                Reply::Unparsed,
            ),
            ("", Reply::Unparsed),
        ];
        for (text, expected) in table {
            assert_eq!(read(text), expected, "{text}");
        }
    }
}
