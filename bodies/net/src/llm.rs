//! llm_call, ollama_chat and ollama_api as HTTP requests through the net body's client, so a
//! model endpoint is judged like any URL (its base URL must pass `[net] allow`; a server on
//! this machine is reached only because the policy names it). The key comes from `[llm]
//! api_key` or the environment variable `[llm] api_key_env` names, never from the agent;
//! it travels in a secret header, so the journal holds a marker in its place (and the value
//! is scrubbed from anything the server echoes).

use std::time::Duration;

use aido_actions::net::{ChatMessage, LlmCall, OllamaApi, OllamaChat, Role};
use aido_policy::{Llm, LlmProvider};
use serde_json::{Value, json};
use url::Url;

use super::NetBodyError;
use super::http::Request;

/// A model call's time when the call names none.
pub const LLM_TIMEOUT_MS_DEFAULT: u64 = 120_000;

/// The endpoint under a base URL (`http://h/v1` + `chat/completions`).
fn endpoint(base: &str, path: &str) -> Result<Url, NetBodyError> {
    let mut base = base.trim().to_owned();
    if !base.ends_with('/') {
        base.push('/');
    }
    let (url, _) = aido_net::Target::from_url(&base)?;
    url.join(path).map_err(|e| {
        NetBodyError::Refused(aido_net::NetError::UrlInvalid {
            url: aido_net::redact::url(&url),
            why: e.to_string(),
        })
    })
}

/// The key, from the config or aido's environment.
fn key(llm: &Llm) -> Option<String> {
    if !llm.api_key.is_empty() {
        return Some(llm.api_key.clone());
    }
    if llm.api_key_env.is_empty() {
        return None;
    }
    std::env::var(&llm.api_key_env)
        .ok()
        .filter(|k| !k.is_empty())
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn messages(list: &[ChatMessage]) -> Vec<Value> {
    list.iter()
        .map(|m| json!({"role": role(m.role), "content": m.content}))
        .collect()
}

fn post(url: Url, headers: Vec<(String, String)>, body: &Value, timeout: Duration) -> Request {
    let mut headers = headers;
    headers.push(("content-type".into(), "application/json".into()));
    Request {
        method: reqwest::Method::POST,
        url,
        headers,
        body: Some(body.to_string()),
        timeout,
        max_bytes: 0,
        follow_redirects: false,
        max_redirects: 0,
    }
}

/// llm_call's request in the configured provider's shape, and the provider's name.
pub(crate) fn llm_request(
    llm: &Llm,
    call: &LlmCall,
    timeout: Duration,
) -> Result<(Request, &'static str), NetBodyError> {
    let model = call
        .model
        .clone()
        .filter(|m| !m.is_empty())
        .or_else(|| (!llm.model.is_empty()).then(|| llm.model.clone()))
        .ok_or(NetBodyError::LlmModelMissing)?;
    let max_tokens = call.max_tokens.unwrap_or(llm.max_tokens_default);
    match llm.provider {
        LlmProvider::Openai => {
            let mut list = Vec::new();
            if let Some(system) = &call.system {
                list.push(json!({"role": "system", "content": system}));
            }
            list.extend(messages(&call.messages));
            let mut body = json!({"model": model, "messages": list, "max_tokens": max_tokens, "stream": false});
            if let Some(t) = call.temperature {
                body["temperature"] = json!(t);
            }
            let headers = key(llm)
                .map(|k| vec![("authorization".to_owned(), format!("Bearer {k}"))])
                .unwrap_or_default();
            let url = endpoint(&llm.base_url, "chat/completions")?;
            Ok((post(url, headers, &body, timeout), "openai"))
        }
        LlmProvider::Anthropic => {
            let key = key(llm).ok_or_else(|| NetBodyError::LlmKeyMissing {
                env: llm.api_key_env.clone(),
            })?;
            // Anthropic takes the system prompt at the top level, not as a message.
            let mut system: Vec<&str> = call.system.iter().map(String::as_str).collect();
            system.extend(
                call.messages
                    .iter()
                    .filter(|m| m.role == Role::System)
                    .map(|m| m.content.as_str()),
            );
            let turns: Vec<ChatMessage> = call
                .messages
                .iter()
                .filter(|m| m.role != Role::System)
                .cloned()
                .collect();
            let mut body =
                json!({"model": model, "max_tokens": max_tokens, "messages": messages(&turns)});
            if !system.is_empty() {
                body["system"] = json!(system.join("\n\n"));
            }
            if let Some(t) = call.temperature {
                body["temperature"] = json!(t);
            }
            let headers = vec![
                ("x-api-key".to_owned(), key),
                (
                    "anthropic-version".to_owned(),
                    llm.anthropic_version.clone(),
                ),
            ];
            let url = endpoint(&llm.base_url, "messages")?;
            Ok((post(url, headers, &body, timeout), "anthropic"))
        }
    }
}

/// ollama_chat's request: `/api/chat`, streamed unless the call says otherwise.
pub(crate) fn ollama_chat_request(
    base: &str,
    call: &OllamaChat,
    timeout: Duration,
) -> Result<Request, NetBodyError> {
    let mut body = json!({
        "model": call.model,
        "messages": messages(&call.messages),
        "stream": call.stream.unwrap_or(true),
    });
    if let Some(options) = &call.options {
        body["options"] = serde_json::to_value(options).unwrap_or(Value::Null);
    }
    Ok(post(
        endpoint(base, "api/chat")?,
        Vec::new(),
        &body,
        timeout,
    ))
}

/// ollama_api's request: the endpoint's method and path, the body as given.
pub(crate) fn ollama_api_request(
    base: &str,
    call: &OllamaApi,
    timeout: Duration,
) -> Result<Request, NetBodyError> {
    let (method, path) = call.endpoint.route();
    let url = endpoint(base, path)?;
    if method == "GET" {
        return Ok(Request {
            method: reqwest::Method::GET,
            url,
            headers: Vec::new(),
            body: None,
            timeout,
            max_bytes: 0,
            follow_redirects: false,
            max_redirects: 0,
        });
    }
    let body = Value::Object(call.body.clone().unwrap_or_default());
    Ok(post(url, Vec::new(), &body, timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llm(provider: LlmProvider) -> Llm {
        Llm {
            provider,
            base_url: "https://api.anthropic.com/v1".into(),
            model: "claude-sonnet-4-5".into(),
            api_key_env: String::new(),
            api_key: "sk-ant-test-key".into(),
            max_tokens_default: 1024,
            anthropic_version: "2023-06-01".into(),
        }
    }

    fn call() -> LlmCall {
        serde_json::from_value(json!({
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "What is 2+2?"}],
        }))
        .unwrap()
    }

    /// The Anthropic request contract: /v1/messages, x-api-key, anthropic-version,
    /// max_tokens always present, the system prompt at the top level.
    #[test]
    fn anthropic_request_contract() {
        let (request, provider) = llm_request(
            &llm(LlmProvider::Anthropic),
            &call(),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(provider, "anthropic");
        assert_eq!(
            request.url.as_str(),
            "https://api.anthropic.com/v1/messages"
        );
        let header = |n: &str| {
            request
                .headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("x-api-key"), Some("sk-ant-test-key"));
        assert_eq!(header("anthropic-version"), Some("2023-06-01"));
        let body: Value = serde_json::from_str(request.body.as_deref().unwrap()).unwrap();
        assert_eq!(body["max_tokens"], 1024);
        assert_eq!(body["system"], "Be brief.");
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": "What is 2+2?"}])
        );
        let mut keyless = llm(LlmProvider::Anthropic);
        keyless.api_key.clear();
        keyless.api_key_env = "AIDO_TEST_NO_SUCH_KEY_VAR".into();
        let err = llm_request(&keyless, &call(), Duration::from_secs(1))
            .err()
            .unwrap();
        assert_eq!(err.code(), "llm_key_missing");
    }

    #[test]
    fn openai_request_contract() {
        let mut config = llm(LlmProvider::Openai);
        config.base_url = "http://127.0.0.1:8080/v1/".into();
        let (request, _) = llm_request(&config, &call(), Duration::from_secs(1)).unwrap();
        assert_eq!(
            request.url.as_str(),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
        assert_eq!(
            request.headers[0],
            ("authorization".into(), "Bearer sk-ant-test-key".into())
        );
        let body: Value = serde_json::from_str(request.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        config.model.clear();
        assert_eq!(
            llm_request(&config, &call(), Duration::from_secs(1))
                .err()
                .unwrap()
                .code(),
            "llm_model_missing"
        );
    }
}
