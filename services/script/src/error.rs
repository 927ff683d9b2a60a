//! Why a script primitive failed. Every variant has a stable code.

/// A composite function could not be defined, found or run. Nothing a failed definition
/// names was stored; a failed call's host calls that ran are journaled as its children.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The name is not `^[a-z][a-z0-9_]{0,40}$`.
    #[error(
        "{name:?} is not a valid name: a lowercase letter, then up to 40 lowercase letters, digits or _"
    )]
    NameInvalid {
        /// The name given.
        name: String,
    },
    /// The name is a built-in primitive's (or an MCP tool aido already has).
    #[error("{name} is a built-in primitive's name")]
    NameReserved {
        /// The name given.
        name: String,
    },
    /// A definition of the other kind has this name.
    #[error("{name} is already defined as a {kind}; delete it first")]
    NameTaken {
        /// The name given.
        name: String,
        /// The kind it has.
        kind: &'static str,
    },
    /// No definition of this kind has this name.
    #[error("no {kind} is named {name}")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The kind asked for.
        kind: &'static str,
    },
    /// The store already holds `max` definitions.
    #[error("AIDO_HOME holds {max} definitions already (definitions_max); delete one first")]
    TooMany {
        /// definitions_max.
        max: usize,
    },
    /// The source or description is over its bound.
    #[error("the {what} is {bytes} bytes; the limit is {max}")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The source does not compile (syntax, or nesting deeper than the expression limits).
    #[error("the script does not compile: {why}")]
    Parse {
        /// Rhai's message.
        why: String,
    },
    /// A custom primitive's argument schema is not one aido can check.
    #[error("the argument schema is not usable: {why}")]
    SchemaInvalid {
        /// What is wrong with it.
        why: String,
    },
    /// A custom primitive's arguments do not match its schema.
    #[error("the arguments do not match {name}'s schema: {why}")]
    ArgumentsInvalid {
        /// The primitive.
        name: String,
        /// What does not match.
        why: String,
    },
    /// The script ran more than `max` operations.
    #[error("the script ran more than {max} operations (script_operations_max)")]
    OperationsExceeded {
        /// The bound.
        max: u64,
    },
    /// The script nested function calls deeper than `max`.
    #[error("the script nested calls deeper than {max} levels (script_call_levels_max)")]
    CallDepthExceeded {
        /// The bound.
        max: usize,
    },
    /// A string, array or map grew past its bound.
    #[error("the script built a value over its size limit: {what}")]
    DataTooLarge {
        /// Which kind of value, as Rhai says.
        what: String,
    },
    /// The script defined more variables than its bound.
    #[error("the script defined more than {max} variables (script_variables_max)")]
    VariablesExceeded {
        /// The bound.
        max: usize,
    },
    /// The script made more host calls than its bound.
    #[error("the script made more than {max} host calls (script_host_calls_max)")]
    HostCallsExceeded {
        /// The bound.
        max: usize,
    },
    /// The call's deadline (action_timeout_ms) passed while the script ran.
    #[error("the script was stopped at its deadline ({timeout_ms} ms, action_timeout_ms)")]
    DeadlineExceeded {
        /// The deadline.
        timeout_ms: u64,
    },
    /// The agent cancelled the call.
    #[error("the script was cancelled")]
    Cancelled,
    /// A script may not call the script primitives themselves (no define, delete or nested call).
    #[error("a script cannot call {primitive} (no script primitive runs inside a script)")]
    HostCallRefused {
        /// The primitive asked for.
        primitive: String,
    },
    /// A host call was refused or failed, and the script did not catch it.
    #[error("host call {index} ({primitive}) failed with {code}: {message}")]
    HostCallFailed {
        /// Its place among the script's host calls, from 0.
        index: usize,
        /// The primitive.
        primitive: String,
        /// The child's seq, when it was journaled.
        seq: Option<u64>,
        /// The child's code (a policy denial's, or its body's).
        code: String,
        /// The child's message.
        message: String,
    },
    /// The script threw a value and did not catch it.
    #[error("the script threw {value}")]
    Thrown {
        /// What it threw, as JSON text.
        value: String,
    },
    /// Any other error while the script ran (a type mismatch, an unknown function, ...).
    #[error("the script failed: {why}")]
    Runtime {
        /// Rhai's message.
        why: String,
    },
    /// The definitions store could not be read or written.
    #[error("the definitions store failed: {why}")]
    Store {
        /// What failed.
        why: String,
    },
    /// A stored definition does not check (its hash is not its source's).
    #[error("the stored definition {name} is damaged: {why}")]
    StoreCorrupt {
        /// Its name.
        name: String,
        /// What does not check.
        why: String,
    },
}

aido_actions::coded!(ScriptError {
    @details details;
    NameInvalid => "script_name_invalid",
    NameReserved => "script_name_reserved",
    NameTaken => "script_name_taken",
    NotFound => "script_not_found",
    TooMany => "script_definitions_full",
    TooLarge => "script_too_large",
    Parse => "script_parse_error",
    SchemaInvalid => "script_schema_invalid",
    ArgumentsInvalid => "script_arguments_invalid",
    OperationsExceeded => "script_operations_exceeded",
    CallDepthExceeded => "script_call_depth_exceeded",
    DataTooLarge => "script_data_too_large",
    VariablesExceeded => "script_variables_exceeded",
    HostCallsExceeded => "script_host_calls_exceeded",
    DeadlineExceeded => "script_deadline_exceeded",
    Cancelled => "script_cancelled",
    HostCallRefused => "script_host_call_refused",
    HostCallFailed => "script_host_call_failed",
    Thrown => "script_thrown",
    Runtime => "script_runtime_error",
    Store => "script_store_failed",
    StoreCorrupt => "script_store_corrupt",
});

/// What a failed host call carries beside its message.
fn details(e: &ScriptError) -> Option<serde_json::Value> {
    match e {
        ScriptError::HostCallFailed {
            index,
            primitive,
            seq,
            code,
            ..
        } => Some(serde_json::json!({
            "host_call": index, "primitive": primitive, "seq": seq, "child_code": code,
        })),
        _ => None,
    }
}
