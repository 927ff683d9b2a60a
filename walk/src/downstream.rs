//! A downstream tool's result, as a pure function of what the downstream answered.
//!
//! The gateway body records the server's whole `CallToolResult` as `Input::Answer { from:
//! "downstream" }`; the result the agent sees is [`render`] of it, here, so `aido replay
//! playback` rebuilds it without the server: its text content as the text, its images as
//! images, its structured content (or, without one, the whole result) as the output.

use aido_actions::{GatewayAction, Image, Outcome};
use serde_json::Value;

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "downstream";

/// The result of a downstream call whose server answered `result` (a `CallToolResult`).
pub fn render(action: &GatewayAction, result: &Value) -> Outcome {
    let GatewayAction::DownstreamCall(call) = action;
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for content in result["content"].as_array().into_iter().flatten() {
        match content["type"].as_str() {
            Some("text") => texts.push(content["text"].as_str().unwrap_or("").to_owned()),
            Some("image") => images.push(Image {
                mime: content["mimeType"]
                    .as_str()
                    .unwrap_or("image/png")
                    .to_owned(),
                base64: content["data"].as_str().unwrap_or("").to_owned(),
            }),
            _ => texts.push(content.to_string()),
        }
    }
    let text = if texts.is_empty() {
        format!("{} answered with no text", call.tool)
    } else {
        texts.join("\n")
    };
    let output = match result.get("structuredContent") {
        Some(structured) if structured.is_object() => structured.clone(),
        _ => result.clone(),
    };
    Outcome {
        text,
        output,
        images,
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aido_actions::downstream::DownstreamCall;
    use serde_json::json;

    #[test]
    fn text_images_and_structured_content_are_rendered() {
        let call = GatewayAction::DownstreamCall(DownstreamCall {
            tool: "everything__echo".into(),
            arguments: Default::default(),
        });
        let result = json!({"content": [
            {"type": "text", "text": "Echo: hi"},
            {"type": "image", "data": "iVBOR", "mimeType": "image/png"},
        ], "structuredContent": {"echo": "hi"}});
        let done = render(&call, &result);
        assert_eq!(done.text, "Echo: hi");
        assert_eq!(done.images.len(), 1);
        assert_eq!(done.output, json!({"echo": "hi"}));
        let bare = render(&call, &json!({"content": []}));
        assert_eq!(bare.text, "everything__echo answered with no text");
        assert_eq!(bare.output, json!({"content": []}));
    }
}
