//! Composite functions: Rhai scripts an agent defines at run time, built from existing
//! primitives.
//!
//! A *function* takes any object of arguments; a *custom primitive* declares an argument
//! schema (a flat JSON object schema) that its arguments are checked against before the
//! script runs. Both live in one namespace of names (`^[a-z][a-z0-9_]{0,40}$`, never a
//! built-in primitive's name), persist in AIDO_HOME, and appear as MCP tools of their own.
//! Every primitive a script calls (`call("read_file", #{path: "a"})`) is a child action: it is
//! judged by the policy and journaled on its own, so a script can never do what its caller
//! could not.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// A JSON object (a call's arguments, an argument schema).
pub type Object = serde_json::Map<String, serde_json::Value>;

/// The longest a definition's name may be, in bytes (with `mcp__aido__` it stays under the
/// 64 characters the major clients accept for a tool name).
pub const NAME_BYTES_MAX: usize = 41;
/// The largest script source, in bytes.
pub const SOURCE_BYTES_MAX: usize = 65_536;
/// The longest description, in bytes.
pub const DESCRIPTION_BYTES_MAX: usize = 2_000;

/// Define (or replace) a function: a Rhai script that may call primitives with
/// `call(name, args)` and reads its arguments from `args`. Its value is the call's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefineFunction {
    /// Its name: a lowercase letter, then up to 40 lowercase letters, digits or `_`; not a
    /// built-in primitive's name. It becomes an MCP tool of that name.
    #[schemars(length(min = 1, max = 41))]
    pub name: String,
    /// What it does, for the agent (at most 2000 bytes).
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub description: String,
    /// The Rhai source (at most 64 KiB). `args` holds the call's arguments (a map);
    /// `call(primitive, #{...})` runs a primitive as a child action and returns its output.
    #[schemars(length(min = 1, max = 65536))]
    pub source: String,
}

/// Define (or replace) a custom primitive: a named, typed tool with an argument schema, built
/// from existing primitives by a Rhai script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefinePrimitive {
    /// Its name (as for define_function).
    #[schemars(length(min = 1, max = 41))]
    pub name: String,
    /// What it does, for the agent (at most 2000 bytes).
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub description: String,
    /// Its arguments: a JSON object schema (`{"type": "object", "properties": {"n": {"type":
    /// "integer"}}, "required": ["n"]}`) with flat properties of type string, integer, number,
    /// boolean, array or object. Arguments it does not name are refused.
    pub input_schema: Object,
    /// The Rhai source (at most 64 KiB), as for define_function.
    #[schemars(length(min = 1, max = 65536))]
    pub source: String,
}

/// Run a defined function or custom primitive by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallDefinition {
    /// The definition's name.
    #[schemars(length(min = 1, max = 41))]
    pub name: String,
    /// Its arguments (an object; `args` in the script).
    #[serde(default)]
    pub args: Object,
}

/// Name a definition (to delete it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefinitionName {
    /// The definition's name.
    #[schemars(length(min = 1, max = 41))]
    pub name: String,
}

/// List definitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDefinitions {
    /// Include each one's source (off by default).
    #[serde(default)]
    pub source: bool,
}

/// Which of the two kinds of definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DefinitionKind {
    /// define_function: any object of arguments.
    Function,
    /// define_primitive: arguments checked against its schema.
    Primitive,
}

impl DefinitionKind {
    /// Its name in results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Function => "function",
            Self::Primitive => "primitive",
        }
    }
}

impl Touches for DefineFunction {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for DefinePrimitive {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for CallDefinition {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for DefinitionName {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for ListDefinitions {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
