//! The results of the network primitives as pure functions of what the net body recorded.
//!
//! The net body judges the target, resolves names, judges every address and every redirect
//! hop, connects to a judged address and records one `Input::Answer { from: "net", value }`:
//! the request as sent (secret headers and URL userinfo replaced by markers), each hop
//! (URL, address, status) and the response (status, headers, body as text or base64, bytes,
//! truncated). The result the agent sees is [`render`] of that value, here: a fetched page is
//! converted to markdown or text and windowed here too, so `aido replay playback` rebuilds
//! the same result with no network.

use std::fmt::Write;

use aido_actions::net::PageFormat;
use aido_actions::{NetAction, Outcome};
use aido_net::Format;
use serde_json::{Value, json};

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "net";

/// Characters fetch_url returns when the call gives no length.
pub const FETCH_LENGTH_DEFAULT: u32 = 5000;

/// The result of a network primitive whose exchange was `answer`.
pub fn render(action: &NetAction, answer: &Value) -> Outcome {
    match action {
        NetAction::HttpRequest(_) => http(answer),
        NetAction::FetchUrl(fetch) => page(
            answer,
            format_of(fetch.format),
            usize::try_from(fetch.offset).unwrap_or(usize::MAX),
            fetch.length.unwrap_or(FETCH_LENGTH_DEFAULT) as usize,
        ),
        NetAction::PortCheck(_) => port(answer),
        NetAction::DnsLookup(_) => dns(answer),
        NetAction::LlmCall(_) | NetAction::OllamaChat(_) | NetAction::OllamaApi(_) => {
            crate::llm::render(answer)
        }
    }
}

fn format_of(format: PageFormat) -> Format {
    match format {
        PageFormat::Markdown => Format::Markdown,
        PageFormat::Text => Format::Text,
        PageFormat::Raw => Format::Raw,
    }
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

fn redirects(answer: &Value) -> Vec<Value> {
    answer["hops"]
        .as_array()
        .map(|hops| hops.iter().map(|h| h["url"].clone()).collect())
        .unwrap_or_default()
}

/// Status, headers and body; the body is the text (the structured output carries it once).
fn http(answer: &Value) -> Outcome {
    let response = &answer["response"];
    let mut text = format!(
        "HTTP {} from {} ({} bytes{})\n",
        response["status"],
        str_of(&response["url"]),
        response["bytes"],
        if response["truncated"] == true {
            ", truncated"
        } else {
            ""
        }
    );
    for header in response["headers"].as_array().into_iter().flatten() {
        let _ = writeln!(text, "{}: {}", str_of(&header[0]), str_of(&header[1]));
    }
    text.push('\n');
    match (response["body"].as_str(), response["body_base64"].as_str()) {
        (Some(body), _) => text.push_str(body),
        (None, Some(b64)) => {
            let _ = write!(text, "[binary body, base64]\n{b64}");
        }
        _ => {}
    }
    Outcome {
        text,
        output: json!({
            "status": response["status"],
            "url": response["url"],
            "address": response["address"],
            "headers": response["headers"],
            "body": response["body"],
            "body_base64": response["body_base64"],
            "bytes": response["bytes"],
            "truncated": response["truncated"],
            "redirects": redirects(answer),
        }),
        ..Outcome::default()
    }
}

/// The page converted and windowed; the content is the text only, so it reaches the agent
/// once.
fn page(answer: &Value, format: Format, offset: usize, length: usize) -> Outcome {
    let response = &answer["response"];
    let content_type = str_of(&response["content_type"]);
    let body = match response["body"].as_str() {
        Some(body) => body.to_owned(),
        None => String::new(),
    };
    let converted = aido_net::page::convert(&body, content_type, format);
    let window = aido_net::page::window(&converted, offset, length);
    let mut text = window.content.clone();
    if response["body"].is_null() && response["body_base64"].is_string() {
        text = format!(
            "[{} bytes of binary content ({content_type}); fetch_url reads text pages]",
            response["bytes"]
        );
    }
    if let Some(next) = window.next_offset {
        let _ = write!(
            text,
            "\n\n[{} of {} characters shown; call fetch_url again with offset {next} for more]",
            next - window.offset,
            window.total_chars
        );
    }
    Outcome {
        text,
        output: json!({
            "url": response["url"],
            "status": response["status"],
            "content_type": content_type,
            "offset": window.offset,
            "total_chars": window.total_chars,
            "next_offset": window.next_offset,
            "truncated": response["truncated"],
            "redirects": redirects(answer),
        }),
        ..Outcome::default()
    }
}

fn port(answer: &Value) -> Outcome {
    let text = format!(
        "{}:{} is {}{}",
        str_of(&answer["host"]),
        answer["port"],
        if answer["open"] == true {
            "open"
        } else {
            "closed"
        },
        match answer["address"].as_str() {
            Some(a) => format!(" (at {a})"),
            None => String::new(),
        }
    );
    Outcome {
        text,
        output: answer.clone(),
        ..Outcome::default()
    }
}

fn dns(answer: &Value) -> Outcome {
    let mut text = format!("{}:\n", str_of(&answer["host"]));
    for address in answer["addresses"].as_array().into_iter().flatten() {
        let _ = write!(text, "  {}", str_of(&address["address"]));
        if let Some(range) = address["range"].as_str() {
            let _ = write!(text, " (refused: {range} {})", str_of(&address["block"]));
        }
        text.push('\n');
    }
    Outcome {
        text,
        output: answer.clone(),
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aido_actions::net::FetchUrl;

    fn fetch(offset: u64, length: Option<u32>) -> NetAction {
        NetAction::FetchUrl(FetchUrl {
            url: "http://x/".into(),
            format: PageFormat::Markdown,
            offset,
            length,
            timeout_ms: None,
        })
    }

    #[test]
    fn a_page_is_converted_and_windowed_from_the_recorded_body() {
        let answer = json!({
            "hops": [],
            "response": {
                "status": 200, "url": "http://x/", "content_type": "text/html",
                "body": "<h1>Title</h1><p>one two three</p>", "bytes": 35, "truncated": false,
            },
        });
        let whole = render(&fetch(0, None), &answer);
        assert_eq!(whole.text, "# Title\n\none two three");
        assert_eq!(whole.output["next_offset"], Value::Null);
        let first = render(&fetch(0, Some(7)), &answer);
        assert!(
            first.text.starts_with("# Title\n\n[7 of 22"),
            "{}",
            first.text
        );
        assert_eq!(first.output["next_offset"], 7);
        let rest = render(&fetch(9, Some(100)), &answer);
        assert_eq!(rest.text, "one two three");
    }
}
