//! The artifact primitives' results, as pure functions of the artifact body's answer.
//!
//! The body reads the store (shared by every process of an AIDO_HOME), draws ids from the
//! OS's randomness, reads the clock and writes files through the filesystem body; everything
//! it saw and did is its answer, recorded as `Input::Answer { from: "artifact" }`. The result
//! is [`render`] of that answer, live and in playback, so playback reproduces ids, URLs and
//! hashes without a store or a listener.

use aido_actions::{ArtifactAction, Effect, Outcome};
use serde_json::Value;

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "artifact";

/// The result of an artifact primitive whose body answered `answer`. A save's effects (the
/// files it wrote, with their before-images) are the action's, so a rewind undoes them.
pub fn render(action: &ArtifactAction, answer: &Value) -> Outcome {
    let mut output = answer.clone();
    let mut effects = Vec::new();
    let text = match action {
        ArtifactAction::ArtifactCreate(_) => {
            let m = &answer["manifest"];
            format!(
                "made artifact {} ({} files, {} bytes, entry {}); artifact_serve shows it",
                m["id"].as_str().unwrap_or_default(),
                m["files"].as_array().map_or(0, Vec::len),
                m["bytes"],
                m["entry"].as_str().unwrap_or_default(),
            )
        }
        ArtifactAction::ArtifactList(_) => {
            let all = answer["artifacts"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut lines = vec![format!("{} artifacts", all.len())];
            lines.extend(all.iter().map(|a| {
                let serving = match a["url"].as_str() {
                    Some(url) => format!(" served at {url} until {}", a["served_until_ms"]),
                    None => String::new(),
                };
                format!(
                    "{} {:?} ({} files, {} bytes){serving}",
                    a["id"].as_str().unwrap_or_default(),
                    a["title"].as_str().unwrap_or_default(),
                    a["files"].as_array().map_or(0, Vec::len),
                    a["bytes"],
                )
            }));
            lines.join("\n")
        }
        ArtifactAction::ArtifactServe(_) => format!(
            "serving artifact {} at {} until {} (connect: {})",
            answer["id"].as_str().unwrap_or_default(),
            answer["url"].as_str().unwrap_or_default(),
            answer["until_ms"],
            match answer["connect"].as_array() {
                Some(c) if !c.is_empty() => c
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => "none".to_owned(),
            }
        ),
        ArtifactAction::ArtifactSave(_) => {
            if let Some(map) = output.as_object_mut()
                && let Some(recorded) = map.remove("effects")
            {
                effects = serde_json::from_value::<Vec<Effect>>(recorded).unwrap_or_default();
            }
            format!(
                "saved artifact {} to {} ({} files)",
                answer["id"].as_str().unwrap_or_default(),
                answer["to"].as_str().unwrap_or_default(),
                answer["files"].as_array().map_or(0, Vec::len),
            )
        }
        ArtifactAction::ArtifactStop(_) => {
            let id = answer["id"].as_str().unwrap_or_default();
            if answer["was_served"].as_bool() == Some(true) {
                format!("stopped serving artifact {id}")
            } else {
                format!("artifact {id} was not being served")
            }
        }
        ArtifactAction::ArtifactDestroy(_) => format!(
            "destroyed artifact {} ({} files, {} bytes)",
            answer["id"].as_str().unwrap_or_default(),
            answer["files"],
            answer["bytes"],
        ),
    };
    Outcome {
        text,
        output,
        effects,
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use aido_actions::artifact::{ArtifactSave, ArtifactTarget};
    use aido_actions::{Before, Effect};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_save_s_recorded_effects_become_the_action_s() {
        let effect = Effect::FileWritten {
            path: "/w/out/index.html".into(),
            blob: "b".into(),
            before: Before::Absent,
            mtime_ns: None,
            before_mtime_ns: None,
        };
        let answer = json!({"id": "i", "to": "out", "files": [{"name": "index.html"}],
                            "effects": [effect]});
        let action = ArtifactAction::ArtifactSave(ArtifactSave {
            id: "i".into(),
            to: "out".into(),
        });
        let done = render(&action, &answer);
        assert_eq!(done.effects, vec![effect]);
        assert!(done.output.get("effects").is_none());
        assert_eq!(done.text, "saved artifact i to out (1 files)");
        let stop = ArtifactAction::ArtifactStop(ArtifactTarget { id: "i".into() });
        let done = render(&stop, &json!({"id": "i", "was_served": false}));
        assert_eq!(done.text, "artifact i was not being served");
        assert!(done.effects.is_empty());
    }
}
