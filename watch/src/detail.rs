//! One step in full, as lines to show: the action and its arguments, its verdict and
//! outcome, and a unified diff of each file it wrote or removed (from the contents before
//! and after that `/mc/api/sessions/ID/records/SEQ` gives, when the journal kept them).

use serde_json::Value;

/// Most lines a step's detail holds.
pub const DETAIL_LINES_MAX: usize = 4000;
/// Longest argument value shown on its line, in characters.
pub const ARGUMENT_CHARS_MAX: usize = 200;

/// What a line is, for its style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Heading,
    Added,
    Removed,
    Hunk,
    Dim,
    Bad,
}

/// One line of a detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub tone: Tone,
    pub text: String,
}

/// A step's detail.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Detail {
    /// The record it is of.
    pub seq: u64,
    pub lines: Vec<Line>,
}

impl Detail {
    fn say(&mut self, tone: Tone, text: impl Into<String>) {
        if self.lines.len() < DETAIL_LINES_MAX {
            self.lines.push(Line {
                tone,
                text: text.into(),
            });
        }
    }
}

fn one_line(value: &Value) -> String {
    let text = match value {
        Value::String(s) => match s.lines().count() {
            0 | 1 => s.clone(),
            n => format!("{} … ({n} lines)", s.lines().next().unwrap_or_default()),
        },
        other => other.to_string(),
    };
    if text.chars().count() > ARGUMENT_CHARS_MAX {
        let cut: String = text.chars().take(ARGUMENT_CHARS_MAX).collect();
        format!("{cut}…")
    } else {
        text
    }
}

/// The detail of `/mc/api/sessions/ID/records/SEQ`'s answer.
pub fn of_step(step: &Value) -> Detail {
    let record = &step["record"];
    let mut d = Detail {
        seq: record["seq"].as_u64().unwrap_or(0),
        lines: Vec::new(),
    };
    let kind = record["event"].as_str().unwrap_or("?");
    match kind {
        "action_proposed" => {
            action(&mut d, record, &step["confirmation"], &step["outcome"]);
        }
        _ => {
            d.say(Tone::Heading, format!("#{} {kind}", d.seq));
            if let Value::Object(fields) = record {
                for (key, value) in fields {
                    if !matches!(
                        key.as_str(),
                        "v" | "session" | "seq" | "prev" | "hash" | "event"
                    ) {
                        d.say(Tone::Plain, format!("  {key}: {}", one_line(value)));
                    }
                }
            }
        }
    }
    if let Some(files) = step["files"].as_array() {
        for file in files {
            diff(&mut d, file);
        }
    }
    d
}

/// Who answered, as the journal names them (`{"surface", "person"}`): `watch (alice)`.
fn answerer(by: &Value) -> Option<String> {
    let surface = by["surface"].as_str()?;
    Some(match by["person"].as_str() {
        Some(person) => format!("{surface} ({person})"),
        None => surface.to_owned(),
    })
}

fn action(d: &mut Detail, record: &Value, confirmation: &Value, outcome: &Value) {
    let action = &record["action"];
    let primitive = action["type"].as_str().unwrap_or("?");
    let verdict = &record["verdict"];
    let word = verdict["verdict"].as_str().unwrap_or("?");
    d.say(Tone::Heading, format!("#{} {primitive} ({word})", d.seq));
    if let Some(gate) = verdict["gate"].as_str() {
        let code = verdict["code"].as_str().unwrap_or("");
        let reason = verdict["reason"].as_str().unwrap_or("");
        d.say(Tone::Bad, format!("  {code} by {gate}: {reason}"));
    }
    if let Value::Object(fields) = action {
        for (key, value) in fields.iter().filter(|(k, _)| k.as_str() != "type") {
            d.say(Tone::Plain, format!("  {key}: {}", one_line(value)));
        }
    }
    if confirmation["event"] == "confirm_answered" {
        let answer = confirmation["answer"].as_str().unwrap_or("?");
        let tone = if confirmation["approved"] == Value::Bool(true) {
            Tone::Heading
        } else {
            Tone::Bad
        };
        let who = answerer(&confirmation["by"]).unwrap_or_else(|| "nobody".into());
        d.say(tone, format!("confirmation: {answer}, answered by {who}"));
    }
    // A question the action asked (ask_human, confirm, ...) names who answered it.
    if let Some(inputs) = outcome["outcome"]["inputs"].as_array() {
        for input in inputs.iter().filter(|i| i["input"] == "answer") {
            if let Some(who) = answerer(&input["value"]["by"]) {
                d.say(Tone::Plain, format!("  answered by {who}"));
            }
        }
    }
    match outcome["event"].as_str() {
        Some("action_completed") => {
            d.say(
                Tone::Heading,
                format!(
                    "completed in {} ms (#{})",
                    outcome["duration_ms"].as_u64().unwrap_or(0),
                    outcome["seq"].as_u64().unwrap_or(0)
                ),
            );
            let text = outcome["outcome"]["text"].as_str().unwrap_or_default();
            for line in text.lines().take(8) {
                d.say(Tone::Dim, format!("  {line}"));
            }
        }
        Some("action_failed") => {
            let failure = &outcome["failure"];
            d.say(
                Tone::Bad,
                format!(
                    "failed in {} ms: [{}] {}",
                    outcome["duration_ms"].as_u64().unwrap_or(0),
                    failure["code"].as_str().unwrap_or("?"),
                    failure["message"].as_str().unwrap_or_default()
                ),
            );
        }
        _ if word == "deny" => {}
        _ => d.say(Tone::Dim, "no outcome yet (running, or never answered)"),
    }
}

/// The text of one side of a change, or why there is none.
fn side(value: &Value) -> Result<&str, String> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(other["omitted"]
            .as_str()
            .unwrap_or("not kept")
            .replace('_', " ")),
    }
}

fn diff(d: &mut Detail, file: &Value) {
    let path = file["path"].as_str().unwrap_or("?");
    let effect = file["effect"]
        .as_str()
        .unwrap_or("changed")
        .replace('_', " ");
    let created = if file["created"] == Value::Bool(true) {
        " (created)"
    } else {
        ""
    };
    d.say(Tone::Heading, format!("{path}: {effect}{created}"));
    match (side(&file["before"]), side(&file["after"])) {
        (Ok(before), Ok(after)) => {
            let patch = diffy::create_patch(before, after);
            for hunk in patch.hunks() {
                d.say(Tone::Hunk, hunk_header(hunk));
                for line in hunk.lines() {
                    let (tone, mark, text) = match line {
                        diffy::Line::Insert(t) => (Tone::Added, '+', t),
                        diffy::Line::Delete(t) => (Tone::Removed, '-', t),
                        diffy::Line::Context(t) => (Tone::Plain, ' ', t),
                    };
                    d.say(tone, format!("{mark}{}", t_trim(text)));
                }
            }
        }
        (before, after) => {
            let why = before.err().or(after.err()).unwrap_or_default();
            d.say(Tone::Dim, format!("  (no diff: the contents are {why})"));
        }
    }
}

fn hunk_header(hunk: &diffy::Hunk<'_, str>) -> String {
    let (old, new) = (hunk.old_range(), hunk.new_range());
    format!(
        "@@ -{},{} +{},{} @@",
        old.start(),
        old.len(),
        new.start(),
        new.len()
    )
}

fn t_trim(text: &str) -> &str {
    text.strip_suffix('\n').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_write_shows_its_arguments_outcome_and_a_diff() {
        let step = json!({
            "record": {"seq": 4, "event": "action_proposed",
                "action": {"type": "write_file", "path": "notes.txt", "content": "hello\nthere\n"},
                "verdict": {"verdict": "allow"}},
            "outcome": {"seq": 5, "event": "action_completed", "duration_ms": 7,
                "outcome": {"text": "wrote 12 bytes"}},
            "files": [{"path": "/h/notes.txt", "effect": "file_written", "created": false,
                "before": "hello\nworld\n", "after": "hello\nthere\n"}],
        });
        let d = of_step(&step);
        let texts: Vec<&str> = d.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(d.seq, 4);
        assert_eq!(texts[0], "#4 write_file (allow)");
        assert!(texts.contains(&"  path: notes.txt"), "{texts:?}");
        assert!(texts.contains(&"completed in 7 ms (#5)"), "{texts:?}");
        assert!(texts.contains(&"/h/notes.txt: file written"), "{texts:?}");
        let removed = d.lines.iter().find(|l| l.tone == Tone::Removed).unwrap();
        let added = d.lines.iter().find(|l| l.tone == Tone::Added).unwrap();
        assert_eq!(
            (removed.text.as_str(), added.text.as_str()),
            ("-world", "+there")
        );
    }

    #[test]
    fn a_refusal_names_its_code_and_gate_and_contents_not_kept_say_so() {
        let step = json!({
            "record": {"seq": 2, "event": "action_proposed",
                "action": {"type": "read_file", "path": "/etc/shadow"},
                "verdict": {"verdict": "deny", "gate": "walls", "code": "path_outside_walls", "reason": "outside"}},
            "outcome": null,
            "files": [{"path": "/h/big.bin", "effect": "file_written", "before": {"omitted": "binary"}, "after": "x"}],
        });
        let d = of_step(&step);
        assert!(
            d.lines
                .iter()
                .any(|l| l.tone == Tone::Bad && l.text.contains("path_outside_walls by walls"))
        );
        assert!(
            d.lines
                .iter()
                .any(|l| l.text.contains("no diff: the contents are binary"))
        );
    }

    #[test]
    fn a_confirmed_step_names_who_answered() {
        let step = json!({
            "record": {"seq": 3, "event": "action_proposed",
                "action": {"type": "write_file", "path": "a.txt", "content": "x"},
                "verdict": {"verdict": "confirm", "gate": "mode", "reason": "mode is confirm"}},
            "confirmation": {"seq": 4, "event": "confirm_answered", "proposal": 3,
                "approved": true, "answer": "accepted",
                "by": {"surface": "watch", "person": "alice"}},
            "outcome": {"seq": 5, "event": "action_completed", "duration_ms": 1,
                "outcome": {"text": "wrote 1 byte"}},
        });
        let d = of_step(&step);
        assert!(
            d.lines
                .iter()
                .any(|l| l.text == "confirmation: accepted, answered by watch (alice)"),
            "{:?}",
            d.lines
        );
        // A question the action asked names who answered it.
        let step = json!({
            "record": {"seq": 1, "event": "action_proposed",
                "action": {"type": "ask_human", "question": "Which?"},
                "verdict": {"verdict": "allow"}},
            "outcome": {"seq": 2, "event": "action_completed", "duration_ms": 1,
                "outcome": {"text": "main", "inputs": [{"input": "answer", "from": "human",
                    "value": {"via": "aido answer", "action": "accept", "by": {"surface": "cli"}}}]}},
        });
        let d = of_step(&step);
        assert!(d.lines.iter().any(|l| l.text == "  answered by cli"));
    }
}
