use std::sync::Arc;

use aido_actions::primitives;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};

/// One MCP tool per primitive this build holds (see `aido_actors::families`), with hints
/// derived from its class.
///
/// Made once per process: a session's list shares their schemas (`Arc`) instead of building
/// 150 KB of them again for each of `aido serve`'s sessions.
pub fn tools() -> &'static [Tool] {
    static ALL: std::sync::OnceLock<Vec<Tool>> = std::sync::OnceLock::new();
    ALL.get_or_init(build)
}

fn build() -> Vec<Tool> {
    primitives()
        .into_iter()
        .filter(|spec| aido_actors::families::primitive_built(spec.name))
        .map(|spec| {
            let schema: JsonObject = match spec.input_schema {
                serde_json::Value::Object(map) => map,
                _ => JsonObject::new(),
            };
            let annotations = ToolAnnotations::new()
                .read_only(spec.class.read_only_hint())
                .destructive(spec.class.destructive_hint())
                .idempotent(spec.class.idempotent_hint())
                .open_world(spec.class.open_world_hint());
            let description = format!("{} (aido class: {})", spec.description, spec.class);
            Tool::new(spec.name, description, Arc::new(schema)).with_annotations(annotations)
        })
        .collect()
}

/// One MCP tool per defined function and custom primitive (see `aido_actors::script`): a
/// call of it is call_function or call_primitive with its arguments.
pub fn defined(runtime: &aido_actors::Runtime) -> Vec<Tool> {
    let class = aido_actions::SideEffectClass::Composite;
    runtime
        .defined_tools()
        .into_iter()
        .map(|tool| {
            let annotations = ToolAnnotations::new()
                .read_only(class.read_only_hint())
                .destructive(class.destructive_hint())
                .idempotent(class.idempotent_hint())
                .open_world(class.open_world_hint());
            let description = format!(
                "{} (aido defined {}: a Rhai script whose every host call is judged and journaled; class: {class})",
                tool.description,
                tool.kind.name()
            );
            Tool::new(tool.name, description, Arc::new(tool.input_schema))
                .with_annotations(annotations)
        })
        .collect()
}

/// Whether a successful call of `primitive` changes the tool list.
pub fn changes_tools(primitive: &str) -> bool {
    matches!(
        primitive,
        "define_function" | "delete_function" | "define_primitive" | "delete_primitive"
    )
}
