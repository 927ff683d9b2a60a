//! The fixtures of the MCP conformance suite (`@modelcontextprotocol/conformance`), compiled
//! only with the `conformance` feature, which only tests/conformance/run builds. The suite
//! calls tools, resources and prompts by fixed names (`test_simple_text`,
//! `test://static-text`, `test_simple_prompt`, ...); these answer them beside aido's own tools
//! on the same server, so the transport, sessions, notifications, elicitation and sampling it
//! checks are aido's own. Fixture calls are not actions: they touch nothing and are not
//! journaled.
// Logging and resources/subscribe are part of protocol 2025-11-25, which the suite checks.
#![allow(deprecated)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    AudioContent, CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
    CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock,
    CreateMessageRequestParams, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    ErrorData as McpError, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ImageContent, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, Prompt, PromptArgument,
    PromptMessage, ReadResourceRequestParams, ReadResourceResult, Reference, RequestStateCodec,
    Resource, ResourceContents, ResourceTemplate, Role, SamplingMessage, ServerCapabilities,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

/// A 1x1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==";
/// An empty WAV file.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=";

/// What the server advertises when the fixtures are in.
pub(crate) fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_logging()
        .enable_prompts()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_completions()
        .build()
}

/// The fixture tools: (name, description, input schema).
fn tool_table() -> Vec<(&'static str, &'static str, Value)> {
    let none = || json!({"type": "object", "properties": {}});
    vec![
        ("test_simple_text", "fixture: one text block", none()),
        ("test_image_content", "fixture: one image", none()),
        ("test_audio_content", "fixture: one audio clip", none()),
        (
            "test_embedded_resource",
            "fixture: an embedded resource",
            none(),
        ),
        (
            "test_multiple_content_types",
            "fixture: text, image and resource",
            none(),
        ),
        (
            "test_tool_with_logging",
            "fixture: three log messages",
            none(),
        ),
        (
            "test_tool_with_progress",
            "fixture: three progress reports",
            none(),
        ),
        (
            "test_error_handling",
            "fixture: always an isError result",
            none(),
        ),
        ("test_reconnection", "fixture: answers after 100 ms", none()),
        (
            "test_sampling",
            "fixture: asks the client's LLM",
            json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
        ),
        (
            "test_elicitation",
            "fixture: asks the user",
            json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
        ),
        (
            "test_elicitation_sep1034_defaults",
            "fixture: a form with defaults",
            none(),
        ),
        (
            "test_elicitation_sep1330_enums",
            "fixture: a form of enums",
            none(),
        ),
        (
            "test_input_required_result_elicitation",
            "fixture: asks a name (input_required)",
            none(),
        ),
        (
            "test_input_required_result_sampling",
            "fixture: asks the client's model (input_required)",
            none(),
        ),
        (
            "test_input_required_result_list_roots",
            "fixture: asks the client's roots (input_required)",
            none(),
        ),
        (
            "test_input_required_result_request_state",
            "fixture: a confirmation and a sealed state",
            none(),
        ),
        (
            "test_input_required_result_multiple_inputs",
            "fixture: three inputs at once",
            none(),
        ),
        (
            "test_input_required_result_multi_round",
            "fixture: two rounds",
            none(),
        ),
        (
            "test_input_required_result_tampered_state",
            "fixture: a sealed state, refused when altered",
            none(),
        ),
        (
            "test_input_required_result_capabilities",
            "fixture: asks only what the client declared",
            none(),
        ),
        (
            "test_streaming_elicitation",
            "fixture: asks through input_required, never a request",
            none(),
        ),
        (
            "test_missing_capability",
            "fixture: needs the sampling capability",
            none(),
        ),
        (
            "test_trigger_tool_change",
            "fixture: tells listen streams the tool list changed",
            none(),
        ),
        (
            "test_trigger_prompt_change",
            "fixture: tells listen streams the prompt list changed",
            none(),
        ),
        (
            "test_logging_tool",
            "fixture: logs only at the request's logLevel",
            none(),
        ),
        (
            "json_schema_2020_12_tool",
            "fixture: a JSON Schema 2020-12 input schema",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"type": "object", "properties": {
                    "street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                "additionalProperties": false
            }),
        ),
    ]
}

/// The fixture tools, as MCP tools.
pub(crate) fn tools() -> Vec<Tool> {
    tool_table()
        .into_iter()
        .map(|(name, description, schema)| {
            let schema = match schema {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            Tool::new(name, description, Arc::new(schema))
        })
        .collect()
}

/// Whether `name` is a fixture tool (aido's primitives never start with `test_` or `json_`).
pub(crate) fn is_fixture_tool(name: &str) -> bool {
    tool_table().iter().any(|(n, _, _)| *n == name)
}

/// The fixtures' state: which resources a client subscribed to.
#[derive(Clone, Default)]
pub(crate) struct Fixture {
    subscribed: Arc<Mutex<HashSet<String>>>,
}

fn text(t: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t)])
}

fn resource_text(uri: &str, mime: &str, body: &str) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.into(),
        mime_type: Some(mime.into()),
        text: body.into(),
        meta: None,
    }
}

fn form(schema: Value) -> Result<ElicitationSchema, McpError> {
    serde_json::from_value(schema).map_err(|e| McpError::internal_error(e.to_string(), None))
}

impl Fixture {
    pub(crate) async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        listeners: &crate::listen::Listeners,
    ) -> Result<CallToolResponse, McpError> {
        if let Some(response) = modern_call(&request, &context, listeners)? {
            return Ok(response);
        }
        self.call_legacy(request, context).await.map(Into::into)
    }

    async fn call_legacy(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let args = request.arguments.unwrap_or_default();
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let peer = &context.peer;
        Ok(match request.name.as_ref() {
            "test_simple_text" => text("This is a simple text response for testing."),
            "test_image_content" => {
                CallToolResult::success(vec![ContentBlock::image(PNG, "image/png")])
            }
            "test_audio_content" => CallToolResult::success(vec![ContentBlock::Audio(
                AudioContent::new(WAV, "audio/wav"),
            )]),
            "test_embedded_resource" => {
                CallToolResult::success(vec![ContentBlock::resource(resource_text(
                    "test://embedded-resource",
                    "text/plain",
                    "This is an embedded resource content.",
                ))])
            }
            "test_multiple_content_types" => CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(PNG, "image/png"),
                ContentBlock::resource(resource_text(
                    "test://mixed-content-resource",
                    "application/json",
                    r#"{"test":"data","value":123}"#,
                )),
            ]),
            "test_tool_with_logging" => {
                for step in ["started", "processing", "completed"] {
                    let param = LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        json!(format!("tool execution {step}")),
                    )
                    .with_logger("aido-conformance");
                    let _ = peer.notify_logging_message(param).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                text("Logging test completed")
            }
            "test_tool_with_progress" => {
                if let Some(token) = context.meta.get_progress_token() {
                    for (done, message) in [(0.0, "start"), (50.0, "half"), (100.0, "done")] {
                        let mut param = ProgressNotificationParam::new(token.clone(), done);
                        param.total = Some(100.0);
                        param.message = Some(message.into());
                        let _ = peer.notify_progress(param).await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                text("Progress test completed")
            }
            "test_error_handling" => CallToolResult::error(vec![ContentBlock::text(
                "This tool intentionally returns an error for testing",
            )]),
            "test_reconnection" => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                text("Reconnection test completed")
            }
            "json_schema_2020_12_tool" => text(format!("Hello, {}!", arg("name"))),
            "test_sampling" => {
                let params = CreateMessageRequestParams::new(
                    vec![SamplingMessage::user_text(arg("prompt"))],
                    100,
                );
                match peer.create_message(params).await {
                    Ok(result) => {
                        let answer = result
                            .message
                            .content
                            .first()
                            .and_then(|c| c.as_text())
                            .map(|t| t.text.clone())
                            .unwrap_or_default();
                        text(format!("LLM response: {answer}"))
                    }
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                        "sampling failed: {e}"
                    ))]),
                }
            }
            "test_elicitation"
            | "test_elicitation_sep1034_defaults"
            | "test_elicitation_sep1330_enums" => {
                let (message, schema) = match request.name.as_ref() {
                    "test_elicitation" => (
                        arg("message"),
                        json!({"type": "object", "properties": {
                            "username": {"type": "string", "description": "User's response"},
                            "email": {"type": "string", "description": "User's email address"}},
                            "required": ["username", "email"]}),
                    ),
                    "test_elicitation_sep1034_defaults" => (
                        "Values, all with defaults".to_owned(),
                        json!({"type": "object", "properties": {
                            "name": {"type": "string", "default": "John Doe"},
                            "age": {"type": "integer", "default": 30},
                            "score": {"type": "number", "default": 95.5},
                            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                            "verified": {"type": "boolean", "default": true}}}),
                    ),
                    _ => (
                        "Enums".to_owned(),
                        json!({"type": "object", "properties": {
                            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                            "titledSingle": {"type": "string", "oneOf": [
                                {"const": "value1", "title": "First Option"},
                                {"const": "value2", "title": "Second Option"},
                                {"const": "value3", "title": "Third Option"}]},
                            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                "enumNames": ["Option One", "Option Two", "Option Three"]},
                            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                            "titledMulti": {"type": "array", "items": {"anyOf": [
                                {"const": "value1", "title": "First Choice"},
                                {"const": "value2", "title": "Second Choice"},
                                {"const": "value3", "title": "Third Choice"}]}}}}),
                    ),
                };
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message,
                    requested_schema: form(schema)?,
                };
                match peer.create_elicitation(params).await {
                    Ok(result) => {
                        let action = match result.action {
                            ElicitationAction::Accept => "accept",
                            ElicitationAction::Decline => "decline",
                            ElicitationAction::Cancel => "cancel",
                            _ => "unknown",
                        };
                        let content = result.content.unwrap_or(Value::Null);
                        text(format!(
                            "Elicitation completed: action={action}, content={content}"
                        ))
                    }
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                        "elicitation failed: {e}"
                    ))]),
                }
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("no fixture tool {other}"),
                    None,
                ));
            }
        })
    }

    pub(crate) fn list_resources(&self) -> ListResourcesResult {
        ListResourcesResult::with_all_items(vec![
            Resource::new("test://static-text", "static text").with_mime_type("text/plain"),
            Resource::new("test://static-binary", "static binary").with_mime_type("image/png"),
            Resource::new("test://watched-resource", "watched").with_mime_type("text/plain"),
        ])
    }

    pub(crate) fn list_resource_templates(&self) -> ListResourceTemplatesResult {
        ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("test://template/{id}/data", "templated")
                .with_mime_type("application/json"),
        ])
    }

    pub(crate) fn read_resource(
        &self,
        request: ReadResourceRequestParams,
    ) -> Result<ReadResourceResult, McpError> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => resource_text(
                uri,
                "text/plain",
                "This is the content of the static text resource.",
            ),
            "test://watched-resource" => resource_text(uri, "text/plain", "watched"),
            "test://static-binary" => ResourceContents::BlobResourceContents {
                uri: uri.into(),
                mime_type: Some("image/png".into()),
                blob: PNG.into(),
                meta: None,
            },
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
            {
                Some(id) => resource_text(
                    uri,
                    "application/json",
                    &json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                        .to_string(),
                ),
                None => {
                    return Err(McpError::resource_not_found(
                        format!("no fixture resource {uri}"),
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]))
    }

    pub(crate) fn subscribe(&self, request: SubscribeRequestParams) {
        if let Ok(mut s) = self.subscribed.lock() {
            s.insert(request.uri.to_string());
        }
    }

    pub(crate) fn unsubscribe(&self, request: UnsubscribeRequestParams) {
        if let Ok(mut s) = self.subscribed.lock() {
            s.remove(request.uri.as_str());
        }
    }

    pub(crate) fn list_prompts(&self) -> ListPromptsResult {
        let with_args = vec![
            PromptArgument::new("arg1").with_required(true),
            PromptArgument::new("arg2").with_required(false),
        ];
        ListPromptsResult::with_all_items(vec![
            Prompt::new("test_simple_prompt", Some("fixture: no arguments"), None),
            Prompt::new(
                "test_prompt_with_arguments",
                Some("fixture: two arguments"),
                Some(with_args),
            ),
            Prompt::new(
                "test_prompt_with_embedded_resource",
                Some("fixture: a resource"),
                None,
            ),
            Prompt::new("test_prompt_with_image", Some("fixture: an image"), None),
            Prompt::new(
                "test_input_required_result_prompt",
                Some("fixture: asks for context first (2026-07-28)"),
                None,
            ),
        ])
    }

    pub(crate) fn get_prompt(
        &self,
        request: GetPromptRequestParams,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name == "test_input_required_result_prompt" {
            let context = answered(request.input_responses.as_ref(), "user_context")
                .and_then(|content| content["context"].as_str().map(str::to_owned));
            return Ok(match context {
                Some(context) => GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    format!("Prompt with context: {context}"),
                )])
                .into(),
                None => InputRequiredResult::from_input_requests(requests(&[(
                    "user_context",
                    elicit("What context should the prompt use?", "context", "string"),
                )]))
                .into(),
            });
        }
        let args = request.arguments.unwrap_or_default();
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let messages = match request.name.as_str() {
            "test_simple_prompt" => vec![PromptMessage::new_text(
                Role::User,
                "This is a simple test prompt.",
            )],
            "test_prompt_with_arguments" => vec![PromptMessage::new_text(
                Role::User,
                format!(
                    "Prompt with arguments: arg1='{}', arg2='{}'",
                    arg("arg1"),
                    arg("arg2")
                ),
            )],
            "test_prompt_with_embedded_resource" => vec![
                PromptMessage::new_text(Role::User, "Here is a resource:"),
                PromptMessage::new_resource(
                    Role::User,
                    "test://static-text".into(),
                    Some("text/plain".into()),
                    Some("Resource content for prompt".into()),
                    None,
                    None,
                    None,
                ),
            ],
            "test_prompt_with_image" => vec![
                PromptMessage::new_text(Role::User, "Here is an image:"),
                PromptMessage::new(
                    Role::User,
                    ContentBlock::Image(ImageContent::new(PNG, "image/png")),
                ),
            ],
            other => {
                return Err(McpError::invalid_params(
                    format!("no fixture prompt {other}"),
                    None,
                ));
            }
        };
        Ok(GetPromptResult::new(messages).into())
    }

    pub(crate) fn complete(
        &self,
        request: CompleteRequestParams,
    ) -> Result<CompleteResult, McpError> {
        let values = match &request.r#ref {
            Reference::Prompt(_) => vec!["test".to_owned(), "testing".to_owned()],
            Reference::Resource(_) => vec!["1".to_owned(), "2".to_owned()],
            _ => Vec::new(),
        };
        let info = CompletionInfo::new(values).map_err(|e| McpError::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}

/// The key the fixtures seal their states under: drawn once per process from the OS, never a
/// fixed secret (the fixtures are in no release).
fn codec() -> &'static RequestStateCodec {
    static CODEC: std::sync::OnceLock<RequestStateCodec> = std::sync::OnceLock::new();
    CODEC.get_or_init(|| {
        let mut key = [0u8; 32];
        aido_actors::Clock::random(&aido_actors::SystemClock::default(), &mut key);
        RequestStateCodec::new_unchecked(key.to_vec())
    })
}

/// An `elicitation/create` input request for one required field.
fn elicit(message: &str, field: &str, kind: &str) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]},
    }})
}

/// A `sampling/createMessage` input request.
fn sample(text: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": max_tokens,
    }})
}

/// A `roots/list` input request.
fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

fn requests(entries: &[(&str, Value)]) -> InputRequests {
    entries
        .iter()
        .filter_map(|(key, request)| {
            serde_json::from_value::<InputRequest>(request.clone())
                .ok()
                .map(|request| ((*key).to_owned(), request))
        })
        .collect()
}

/// The content of an accepted elicitation answer under `key`.
fn answered(responses: Option<&InputResponses>, key: &str) -> Option<Value> {
    let response = responses?.get(key)?;
    (response.get("action")?.as_str()? == "accept")
        .then(|| response.get("content").cloned().unwrap_or(Value::Null))
}

/// Whether `responses` answers `key` at all (any result object).
fn has(responses: Option<&InputResponses>, key: &str) -> bool {
    responses
        .and_then(|r| r.get(key))
        .is_some_and(Value::is_object)
}

fn sealed(marker: &str) -> String {
    codec().seal(marker.as_bytes())
}

fn opened(state: Option<&String>) -> Result<String, McpError> {
    let state = state.ok_or_else(|| McpError::invalid_params("requestState is missing", None))?;
    codec()
        .open(state)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|e| McpError::invalid_params(format!("requestState rejected: {e}"), None))
}

fn asked(entries: &[(&str, Value)], state: Option<String>) -> CallToolResponse {
    InputRequiredResult::new(Some(requests(entries)), state).into()
}

fn done(t: impl Into<String>) -> CallToolResponse {
    text(t).into()
}

/// The 2026-07-28 fixtures (`input_required`, capabilities per request, listen streams);
/// `None` for the others.
fn modern_call(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    listeners: &crate::listen::Listeners,
) -> Result<Option<CallToolResponse>, McpError> {
    let responses = request.input_responses.as_ref();
    let state = request.request_state.as_ref();
    let name_request = || elicit("What is your name?", "name", "string");
    let confirm = || elicit("Please confirm", "ok", "boolean");
    Ok(Some(match request.name.as_ref() {
        "test_input_required_result_elicitation" | "test_streaming_elicitation" => {
            match answered(responses, "user_name") {
                Some(content) => done(format!(
                    "Hello, {}!",
                    content["name"].as_str().unwrap_or("stranger")
                )),
                None => asked(&[("user_name", name_request())], None),
            }
        }
        "test_input_required_result_sampling" => {
            match responses.and_then(|r| r.get("capital_question")) {
                Some(answer) => done(format!(
                    "LLM response: {}",
                    answer["content"]["text"].as_str().unwrap_or("")
                )),
                None => asked(
                    &[(
                        "capital_question",
                        sample("What is the capital of France?", 100),
                    )],
                    None,
                ),
            }
        }
        "test_input_required_result_list_roots" => {
            match responses.and_then(|r| r.get("client_roots")) {
                Some(answer) => done(format!("Roots: {}", answer["roots"])),
                None => asked(&[("client_roots", roots())], None),
            }
        }
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => {
            if has(responses, "confirm") {
                done(format!("state-ok: {}", opened(state)?))
            } else {
                asked(&[("confirm", confirm())], Some(sealed("confirm-round")))
            }
        }
        "test_input_required_result_multiple_inputs" => {
            let keys = ["user_name", "greeting", "client_roots"];
            if keys.iter().all(|key| has(responses, key)) {
                opened(state)?;
                done("Every input answered; the call is complete.")
            } else {
                asked(
                    &[
                        ("user_name", name_request()),
                        ("greeting", sample("Generate a greeting", 50)),
                        ("client_roots", roots()),
                    ],
                    Some(sealed("multiple")),
                )
            }
        }
        "test_input_required_result_multi_round" => {
            let round = state.map(|_| opened(state)).transpose()?;
            match (
                round.as_deref(),
                answered(responses, "step1"),
                answered(responses, "step2"),
            ) {
                (Some("round-2"), _, Some(content)) => done(format!(
                    "Both rounds answered: favorite color {}",
                    content["color"].as_str().unwrap_or("")
                )),
                (Some("round-1"), Some(_), _) | (Some("round-2"), _, None) => asked(
                    &[(
                        "step2",
                        elicit("Step 2: What is your favorite color?", "color", "string"),
                    )],
                    Some(sealed("round-2")),
                ),
                _ => asked(
                    &[(
                        "step1",
                        elicit("Step 1: What is your name?", "name", "string"),
                    )],
                    Some(sealed("round-1")),
                ),
            }
        }
        "test_input_required_result_capabilities" => {
            let caps = context.client_capabilities().unwrap_or_default();
            if responses.is_some_and(|r| !r.is_empty()) {
                return Ok(Some(done("Declared-capability input answered.")));
            }
            let mut entries = Vec::new();
            if caps.sampling.is_some() {
                entries.push((
                    "capital_question",
                    sample("What is the capital of France?", 100),
                ));
            }
            if caps.elicitation.is_some() {
                entries.push(("user_name", name_request()));
            }
            if caps.roots.is_some() {
                entries.push(("client_roots", roots()));
            }
            if entries.is_empty() {
                done("The client declared nothing to ask through.")
            } else {
                asked(&entries, None)
            }
        }
        "test_missing_capability" => {
            let caps = context.client_capabilities().unwrap_or_default();
            if caps.sampling.is_none() {
                return Err(McpError::missing_required_client_capability(
                    ClientCapabilities::builder().enable_sampling().build(),
                ));
            }
            done("This tool ran with the sampling capability the round needs.")
        }
        "test_trigger_tool_change" => {
            listeners.tools_changed();
            done("Listen streams were told the tool list changed.")
        }
        "test_trigger_prompt_change" => {
            listeners.prompts_changed();
            done("Listen streams were told the prompt list changed.")
        }
        "test_logging_tool" => {
            if let Some(level) = context.meta.log_level() {
                let peer = context.peer.clone();
                let param = LoggingMessageNotificationParam::new(
                    level,
                    json!("logged at the request's level"),
                )
                .with_logger("conformance");
                tokio::spawn(async move {
                    let _ = peer.notify_logging_message(param).await;
                });
            }
            done("Logged only if the request asked.")
        }
        _ => return Ok(None),
    }))
}
