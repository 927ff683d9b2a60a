//! The results of llm_call, ollama_chat and ollama_api as pure functions of the recorded
//! exchange (see [`crate::net`]): the provider's answer is parsed here, live and in
//! playback, into one shape: the text, why it stopped, the token counts, and tool calls.
//! A streamed Ollama answer (NDJSON, the last chunk `done: true`) and an OpenAI event stream
//! (`data:` lines, `[DONE]`) are assembled here from the recorded body.

use aido_actions::Outcome;
use serde_json::{Value, json};

/// The wire shape an exchange was made in (recorded as the answer's `provider`).
fn provider(answer: &Value) -> &str {
    answer["provider"].as_str().unwrap_or("")
}

/// The result of a model call whose exchange was `answer`.
pub fn render(answer: &Value) -> Outcome {
    let body = answer["response"]["body"].as_str().unwrap_or("");
    let output = match (provider(answer), answer["endpoint"].as_str().unwrap_or("")) {
        ("openai", _) => openai(body),
        ("anthropic", _) => anthropic(body),
        ("ollama", "chat") => ollama(body, |chunk| chunk["message"]["content"].as_str()),
        ("ollama", "generate") => ollama(body, |chunk| chunk["response"].as_str()),
        ("ollama", _) => serde_json::from_str(body).unwrap_or_else(|_| unparsed(body)),
        _ => unparsed(body),
    };
    let text = match output["text"].as_str() {
        Some(text) => text.to_owned(),
        None => output.to_string(),
    };
    Outcome {
        text,
        output,
        ..Outcome::default()
    }
}

fn unparsed(body: &str) -> Value {
    json!({"error": "the answer is not the provider's JSON", "body": body.chars().take(2000).collect::<String>()})
}

/// `choices[0].message` (or an event stream's deltas), `finish_reason`, `usage`.
fn openai(body: &str) -> Value {
    if let Ok(whole) = serde_json::from_str::<Value>(body) {
        let choice = &whole["choices"][0];
        return json!({
            "provider": "openai",
            "model": whole["model"],
            "text": choice["message"]["content"].as_str().unwrap_or(""),
            "tool_calls": choice["message"]["tool_calls"],
            "finish_reason": choice["finish_reason"],
            "usage": whole["usage"],
        });
    }
    let (mut text, mut finish, mut model, mut chunks) =
        (String::new(), Value::Null, Value::Null, 0);
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            return unparsed(body);
        };
        chunks += 1;
        model = event["model"].clone();
        let choice = &event["choices"][0];
        text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    if chunks == 0 {
        return unparsed(body);
    }
    json!({"provider": "openai", "model": model, "text": text, "finish_reason": finish, "chunks": chunks})
}

/// `content[]` (text blocks joined, tool_use blocks listed), `stop_reason`, `usage`.
fn anthropic(body: &str) -> Value {
    let Ok(whole) = serde_json::from_str::<Value>(body) else {
        return unparsed(body);
    };
    let blocks = whole["content"].as_array().cloned().unwrap_or_default();
    let text: String = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("");
    let tool_uses: Vec<Value> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| json!({"id": b["id"], "name": b["name"], "input": b["input"]}))
        .collect();
    json!({
        "provider": "anthropic",
        "model": whole["model"],
        "text": text,
        "tool_uses": tool_uses,
        "stop_reason": whole["stop_reason"],
        "usage": whole["usage"],
    })
}

/// One JSON answer, or NDJSON chunks assembled: the text of every chunk, and the last
/// (`done: true`) chunk's reason and counts.
fn ollama(body: &str, piece: impl Fn(&Value) -> Option<&str>) -> Value {
    let mut chunks: Vec<Value> = Vec::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(chunk) => chunks.push(chunk),
            Err(_) => return unparsed(body),
        }
    }
    if let Some(error) = chunks.iter().find_map(|c| c["error"].as_str()) {
        return json!({"provider": "ollama", "error": error});
    }
    let text: String = chunks.iter().filter_map(&piece).collect();
    let last = chunks.last().cloned().unwrap_or(Value::Null);
    json!({
        "provider": "ollama",
        "model": last["model"],
        "text": text,
        "done": last["done"],
        "done_reason": last["done_reason"],
        "chunks": chunks.len(),
        "prompt_eval_count": last["prompt_eval_count"],
        "eval_count": last["eval_count"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(provider: &str, endpoint: &str, body: &str) -> Value {
        json!({"provider": provider, "endpoint": endpoint, "response": {"status": 200, "body": body}})
    }

    /// A recorded Anthropic messages exchange (the shape of the API's documented answer,
    /// with a tool_use block) renders to its text, stop reason, usage and tool use.
    #[test]
    fn anthropic_contract() {
        let body = r#"{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant",
            "model":"claude-sonnet-4-5","content":[{"type":"text","text":"Let me check the weather. "},
            {"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"location":"Paris"}}],
            "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":89}}"#;
        let done = render(&exchange("anthropic", "messages", body));
        assert_eq!(done.text, "Let me check the weather. ");
        assert_eq!(done.output["stop_reason"], "tool_use");
        assert_eq!(done.output["usage"]["output_tokens"], 89);
        assert_eq!(done.output["tool_uses"][0]["name"], "get_weather");
        assert_eq!(done.output["tool_uses"][0]["input"]["location"], "Paris");
        let error =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            render(&exchange("anthropic", "messages", error)).output["text"],
            ""
        );
    }

    #[test]
    fn openai_whole_and_streamed() {
        let body = r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,
            "message":{"role":"assistant","content":"Paris."},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
        let done = render(&exchange("openai", "chat_completions", body));
        assert_eq!(
            (done.text.as_str(), &done.output["finish_reason"]),
            ("Paris.", &json!("stop"))
        );
        let stream = "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"Pa\"},\"finish_reason\":null}]}\n\n\
            data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"ris\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let done = render(&exchange("openai", "chat_completions", stream));
        assert_eq!(done.text, "Paris");
        assert_eq!(done.output["chunks"], 2);
    }

    #[test]
    fn ollama_ndjson_is_assembled() {
        let body = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\n\
            {\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"lo\"},\"done\":false}\n\
            {\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"eval_count\":2}\n";
        let done = render(&exchange("ollama", "chat", body));
        assert_eq!(done.text, "Hello");
        assert_eq!(
            (
                done.output["chunks"].as_u64(),
                done.output["eval_count"].as_u64()
            ),
            (Some(3), Some(2))
        );
        let error = render(&exchange(
            "ollama",
            "chat",
            "{\"error\":\"model 'x' not found\"}",
        ));
        assert_eq!(error.output["error"], "model 'x' not found");
        let tags = render(&exchange(
            "ollama",
            "tags",
            "{\"models\":[{\"name\":\"m\"}]}",
        ));
        assert_eq!(tags.output["models"][0]["name"], "m");
    }
}
