//! The composite functions' results, as pure functions of the script body's recorded answer.
//!
//! A defined function runs live once: its host calls are child actions with records of their
//! own (each proposal names the script's proposal as its `parent`), which playback plays back
//! on their own like any action. The script's result, the list of children it ran (seq and
//! primitive) and what it printed are recorded as `Input::Answer { from: "script" }`; the
//! result the agent sees is [`render`] of that answer, so playback rebuilds it without
//! running the script, and checks that every child it lists is in the journal.

use aido_actions::{Outcome, ScriptAction};
use serde_json::{Value, json};

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "script";

/// The result of a script primitive whose body answered `answer`.
pub fn render(action: &ScriptAction, answer: &Value) -> Outcome {
    let name = answer["name"].as_str().unwrap_or_default();
    let text = match action {
        ScriptAction::DefineFunction(_) | ScriptAction::DefinePrimitive(_) => format!(
            "defined {} {name} (blake3 {}){}",
            answer["kind"].as_str().unwrap_or_default(),
            short(&answer["hash"]),
            if answer["replaced"] == Value::Bool(true) {
                ", replacing the previous definition"
            } else {
                ""
            }
        ),
        ScriptAction::CallFunction(_) | ScriptAction::CallPrimitive(_) => {
            let calls = answer["calls"].as_array().map_or(0, Vec::len);
            let result = serde_json::to_string(&answer["result"]).unwrap_or_default();
            format!("{name} returned {result} after {calls} host call(s)")
        }
        ScriptAction::ListFunctions(_) | ScriptAction::ListCustomPrimitives(_) => {
            let listed = answer["definitions"].as_array().map_or(0, Vec::len);
            format!("{listed} definition(s)")
        }
        ScriptAction::DeleteFunction(_) | ScriptAction::DeletePrimitive(_) => {
            format!("deleted {name}")
        }
    };
    Outcome {
        text,
        output: answer.clone(),
        ..Outcome::default()
    }
}

/// The children a call's answer lists: (seq, primitive) of each host call, in order.
pub fn children(answer: &Value) -> Vec<(u64, String)> {
    answer["calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    (
                        c["seq"].as_u64().unwrap_or(0),
                        c["primitive"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn short(hash: &Value) -> String {
    hash.as_str()
        .map_or_else(String::new, |h| h.chars().take(12).collect())
}

/// One host call as a call's answer lists it.
pub fn child(seq: Option<u64>, primitive: &str, code: Option<&str>) -> Value {
    let mut v = json!({"seq": seq, "primitive": primitive});
    if let Some(code) = code {
        v["code"] = json!(code);
    }
    v
}
