use std::sync::Arc;

use aido_actions::primitives;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};

/// One MCP tool per primitive this build holds (see `aido_actors::families`), with hints
/// derived from its class.
pub fn tools() -> Vec<Tool> {
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
