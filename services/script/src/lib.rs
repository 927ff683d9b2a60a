//! The script body: composite functions and custom primitives (Rhai), run by the executor.
//!
//! Definitions are files in `AIDO_HOME/scripts` ([`store`]), so they survive restarts and
//! every aido process of that home shares them; each define is journaled with its source (in
//! the proposal) and its hash (in the answer). A call runs its script on a blocking thread
//! ([`engine`], every Rhai limit set, the deadline and the agent's cancel checked as it runs);
//! each host call comes back here and runs through the session exactly as a call from the
//! agent does (`Session::run_under`: judged by the policy chain, proposed and journaled with
//! this call's seq as its `parent`, run, its outcome journaled), so a script can never do what
//! its caller could not. The call's answer (its value, its children's seqs and primitives,
//! what it printed) is recorded as `Input::Answer { from: "script" }`; the result is
//! `aido_walk::script::render` of it, live and in playback.

/// The Rhai engine and its limits.
pub mod engine;
/// Why a script primitive failed.
pub mod error;
/// The definitions store in AIDO_HOME.
pub mod store;

use std::time::{Duration, Instant};

use aido_actions::script::{CallDefinition, DefinitionKind, Object};
use aido_actions::{Action, Failure, Input, ScriptAction};
use aido_walk::Executed;
use serde_json::{Value, json};

pub use engine::Limits;
pub use error::ScriptError;
pub use store::{Definition, Store};

use aido_context::call::Call;
use aido_context::hooks::Hooks;

/// Whether `name` may name a definition: `^[a-z][a-z0-9_]{0,40}$`.
pub fn name_ok(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && name.len() <= aido_actions::script::NAME_BYTES_MAX
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Check a name for a new definition: valid and not a built-in primitive's.
fn check_name(name: &str) -> Result<(), ScriptError> {
    if !name_ok(name) {
        return Err(ScriptError::NameInvalid {
            name: name.to_owned(),
        });
    }
    if aido_actions::action::PRIMITIVE_NAMES.contains(&name) {
        return Err(ScriptError::NameReserved {
            name: name.to_owned(),
        });
    }
    Ok(())
}

fn check_size(what: &'static str, text: &str, max: usize) -> Result<(), ScriptError> {
    if text.len() > max {
        return Err(ScriptError::TooLarge {
            what,
            bytes: text.len(),
            max,
        });
    }
    Ok(())
}

/// The JSON types a custom primitive's argument may have.
const TYPES: &[&str] = &["string", "integer", "number", "boolean", "array", "object"];

/// Check a custom primitive's argument schema: an object schema with flat, typed properties
/// and a `required` list of them.
pub fn check_schema(schema: &Object) -> Result<(), ScriptError> {
    let invalid = |why: String| ScriptError::SchemaInvalid { why };
    if schema.get("type") != Some(&json!("object")) {
        return Err(invalid("its type must be \"object\"".into()));
    }
    let empty = Object::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(invalid("properties must be an object".into())),
    };
    if properties.len() > 64 {
        return Err(invalid("at most 64 properties".into()));
    }
    for (name, property) in properties {
        if !name_ok(name) {
            return Err(invalid(format!("property {name:?} is not a valid name")));
        }
        let kind = property.get("type").and_then(Value::as_str);
        if !kind.is_some_and(|k| TYPES.contains(&k)) {
            return Err(invalid(format!(
                "property {name} needs a type, one of {}",
                TYPES.join(", ")
            )));
        }
    }
    if let Some(required) = schema.get("required") {
        let names = required
            .as_array()
            .ok_or_else(|| invalid("required must be a list of names".into()))?;
        for n in names {
            let n = n
                .as_str()
                .ok_or_else(|| invalid("required must be a list of names".into()))?;
            if !properties.contains_key(n) {
                return Err(invalid(format!(
                    "required names {n}, which is not a property"
                )));
            }
        }
    }
    Ok(())
}

/// Check a custom primitive's arguments against its (checked) schema.
pub fn check_args(name: &str, schema: &Object, args: &Object) -> Result<(), ScriptError> {
    let invalid = |why: String| ScriptError::ArgumentsInvalid {
        name: name.to_owned(),
        why,
    };
    let empty = Object::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(required) {
            return Err(invalid(format!("{required} is required")));
        }
    }
    for (key, value) in args {
        let Some(kind) = properties
            .get(key)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
        else {
            return Err(invalid(format!("{key} is not one of its arguments")));
        };
        let fits = match kind {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            _ => value.is_object(),
        };
        if !fits {
            return Err(invalid(format!("{key} must be of type {kind}")));
        }
    }
    Ok(())
}

/// Run a script primitive. The answer is recorded; the result is rendered from it.
pub async fn run(call: &Call<'_>, action: ScriptAction) -> Result<Executed, Failure> {
    let store = Store::new(&call.shared.scripts);
    let answer = match &action {
        ScriptAction::DefineFunction(d) => {
            define(
                call,
                &store,
                DefinitionKind::Function,
                &d.name,
                &d.description,
                None,
                &d.source,
            )
            .await?
        }
        ScriptAction::DefinePrimitive(d) => {
            check_schema(&d.input_schema)?;
            define(
                call,
                &store,
                DefinitionKind::Primitive,
                &d.name,
                &d.description,
                Some(d.input_schema.clone()),
                &d.source,
            )
            .await?
        }
        ScriptAction::CallFunction(c) => {
            call_definition(call, &store, DefinitionKind::Function, c).await?
        }
        ScriptAction::CallPrimitive(c) => {
            call_definition(call, &store, DefinitionKind::Primitive, c).await?
        }
        ScriptAction::ListFunctions(l) => list(&store, DefinitionKind::Function, l.source)?,
        ScriptAction::ListCustomPrimitives(l) => list(&store, DefinitionKind::Primitive, l.source)?,
        ScriptAction::DeleteFunction(d) => {
            deleted(store.delete(&d.name, DefinitionKind::Function)?)
        }
        ScriptAction::DeletePrimitive(d) => {
            deleted(store.delete(&d.name, DefinitionKind::Primitive)?)
        }
    };
    let mut done = Executed::new(aido_walk::script::render(&action, &answer));
    done.outcome.inputs.push(Input::Answer {
        from: aido_walk::script::ANSWER_FROM.into(),
        value: answer,
    });
    Ok(done)
}

async fn define(
    call: &Call<'_>,
    store: &Store,
    kind: DefinitionKind,
    name: &str,
    description: &str,
    input_schema: Option<Object>,
    source: &str,
) -> Result<Value, ScriptError> {
    check_name(name)?;
    check_size(
        "description",
        description,
        aido_actions::script::DESCRIPTION_BYTES_MAX,
    )?;
    check_size("source", source, aido_actions::script::SOURCE_BYTES_MAX)?;
    let compiled = source.to_owned();
    tokio::task::spawn_blocking(move || engine::compile(&compiled, &Limits::default()))
        .await
        .map_err(|e| ScriptError::Runtime { why: e.to_string() })??;
    let def = Definition {
        v: 1,
        name: name.to_owned(),
        kind,
        description: description.to_owned(),
        input_schema,
        source: source.to_owned(),
        hash: Definition::hash_of(source),
        session: call.session.to_string(),
        proposal: call.proposal,
    };
    let replaced = store.put(&def)?;
    Ok(json!({
        "name": def.name, "kind": kind.name(), "hash": def.hash, "replaced": replaced,
        "engine": "rhai 1.27",
    }))
}

/// Run a definition: the script on a blocking thread, each host call a child action run
/// here through the session.
async fn call_definition(
    at: &Call<'_>,
    store: &Store,
    kind: DefinitionKind,
    call: &CallDefinition,
) -> Result<Value, Failure> {
    let not_found = || ScriptError::NotFound {
        name: call.name.clone(),
        kind: kind.name(),
    };
    if !name_ok(&call.name) {
        return Err(not_found().into());
    }
    let def = store
        .get(&call.name)?
        .filter(|d| d.kind == kind)
        .ok_or_else(not_found)?;
    if let Some(schema) = &def.input_schema {
        check_args(&def.name, schema, &call.args)?;
    }
    let Some(runner) = at.children else {
        return Err(ScriptError::Runtime {
            why: "this call has no session to run host calls in".into(),
        }
        .into());
    };
    let timeout_ms = at.shared.config_limits().action_timeout_ms;
    let stop = engine::Stop {
        deadline: Instant::now() + Duration::from_millis(timeout_ms),
        timeout_ms,
        cancel: at.hooks.cancel.clone(),
    };
    let (host, mut calls) = tokio::sync::mpsc::unbounded_channel::<engine::HostCall>();
    let (source, args) = (def.source.clone(), call.args.clone());
    let mut job = tokio::task::spawn_blocking(move || {
        engine::run(&source, &args, &Limits::default(), &stop, host)
    });
    // A child gets the agent's ways to ask a human and its cancel, not the progress token
    // (the progress is the script's).
    let hooks = Hooks {
        progress: None,
        ..at.hooks.clone()
    };
    let mut children = Vec::new();
    let ran = loop {
        tokio::select! {
            Some(asked) = calls.recv() => {
                let primitive = asked.action.primitive();
                let answer = match runner
                    .run_child(asked.action, hooks.clone(), at.proposal)
                    .await
                {
                    Ok(ran) => {
                        children.push(aido_walk::script::child(Some(ran.seq), primitive, None));
                        Ok((ran.seq, ran.outcome.output))
                    }
                    Err(e) => {
                        children.push(aido_walk::script::child(e.seq, primitive, Some(&e.failure.code)));
                        Err(engine::ChildFailed {
                            seq: e.seq,
                            code: e.failure.code,
                            message: e.failure.message,
                        })
                    }
                };
                // The script may have stopped waiting (its deadline): nothing to tell it.
                let _ = asked.reply.send(answer);
            }
            joined = &mut job => break joined,
        }
    };
    let ran = ran.map_err(|e| ScriptError::Runtime { why: e.to_string() })?;
    match ran {
        Ok(ran) => Ok(json!({
            "name": def.name, "kind": kind.name(), "hash": def.hash,
            "result": ran.result, "calls": children, "log": ran.log,
        })),
        Err(e) => {
            let failure = Failure::from(e);
            let mut details = failure.details.clone().unwrap_or_else(|| json!({}));
            details["calls"] = json!(children);
            details["hash"] = json!(def.hash);
            Err(failure.with_details(details))
        }
    }
}

fn list(store: &Store, kind: DefinitionKind, source: bool) -> Result<Value, ScriptError> {
    let definitions: Vec<Value> = store
        .all()?
        .iter()
        .filter(|d| d.kind == kind)
        .map(|d| d.listed(source))
        .collect();
    Ok(json!({"kind": kind.name(), "definitions": definitions}))
}

fn deleted(def: Definition) -> Value {
    json!({"name": def.name, "kind": def.kind.name(), "hash": def.hash})
}

/// The definitions an MCP tool list shows.
pub fn tools(dir: &std::path::Path) -> Vec<aido_context::shared::DefinedTool> {
    let defs = match Store::new(dir).all() {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(code = e.code(), error = %e, "cannot list the defined functions");
            return Vec::new();
        }
    };
    defs.into_iter()
        .map(|d| aido_context::shared::DefinedTool {
            input_schema: d.input_schema.clone().unwrap_or_else(|| {
                let mut o = Object::new();
                o.insert("type".into(), json!("object"));
                o.insert("additionalProperties".into(), json!(true));
                o
            }),
            name: d.name,
            kind: d.kind,
            description: d.description,
        })
        .collect()
}

/// The action a call of a defined tool named `name` is (`None` when no definition has it).
pub fn tool_call(dir: &std::path::Path, name: &str, args: Object) -> Option<Action> {
    if !name_ok(name) {
        return None;
    }
    let def = Store::new(dir).get(name).ok().flatten()?;
    let call = CallDefinition {
        name: def.name,
        args,
    };
    Some(match def.kind {
        DefinitionKind::Function => Action::CallFunction(call),
        DefinitionKind::Primitive => Action::CallPrimitive(call),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_for_every_major_client() {
        for good in ["a", "sum_two", "x1", &"a".repeat(41)] {
            assert!(name_ok(good), "{good}");
        }
        for bad in [
            "",
            "A",
            "1a",
            "_a",
            "a-b",
            "a.b",
            "a b",
            &"a".repeat(42),
            "é",
        ] {
            assert!(!name_ok(bad), "{bad}");
        }
        assert_eq!(
            check_name("read_file").unwrap_err().code(),
            "script_name_reserved"
        );
    }

    #[test]
    fn schemas_and_arguments_are_checked() {
        let schema: Object = serde_json::from_value(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
            "required": ["n"],
        }))
        .unwrap();
        check_schema(&schema).unwrap();
        let args = |v: Value| -> Object { serde_json::from_value(v).unwrap() };
        check_args("p", &schema, &args(json!({"n": 1, "s": "x"}))).unwrap();
        for bad in [json!({}), json!({"n": "1"}), json!({"n": 1, "z": 2})] {
            let err = check_args("p", &schema, &args(bad)).unwrap_err();
            assert_eq!(err.code(), "script_arguments_invalid");
        }
        let bad_schema: Object =
            serde_json::from_value(json!({"type": "object", "properties": {"n": {}}})).unwrap();
        assert_eq!(
            check_schema(&bad_schema).unwrap_err().code(),
            "script_schema_invalid"
        );
    }
}
