use serde_json::json;

/// Why `diff`, `render_template` or `read_logs` failed. Every variant has a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments break a rule the schema cannot say (exactly one of two, a bound).
    #[error("{why}")]
    InvalidArguments {
        /// Which primitive.
        primitive: &'static str,
        /// Why.
        why: String,
    },
    /// One side of a diff has more lines than a diff may compare.
    #[error("{side} has {lines} lines; diff compares at most {max} per side")]
    DiffTooLarge {
        /// The side's path or `text`.
        side: String,
        /// Its lines.
        lines: usize,
        /// The bound.
        max: usize,
    },
    /// The template (or one it loads) does not parse.
    #[error("syntax error in {name} at line {line}: {detail}")]
    TemplateSyntax {
        /// The template's name (`<inline>` or its path).
        name: String,
        /// The line, from 1.
        line: usize,
        /// What MiniJinja said.
        detail: String,
    },
    /// The template used up its fuel (it loops for too long).
    #[error("the template used up its fuel ({fuel}) before it finished")]
    FuelExhausted {
        /// The fuel it had.
        fuel: u64,
    },
    /// The output grew past its bound.
    #[error("the output grew past {max} bytes")]
    OutputTooLarge {
        /// The bound.
        max: u64,
    },
    /// Strict mode met an undefined variable.
    #[error("undefined value in {name} at line {line}: {detail}")]
    Undefined {
        /// The template's name.
        name: String,
        /// The line, from 1.
        line: usize,
        /// What MiniJinja said.
        detail: String,
    },
    /// An include, import or extends named a path the walls or deny globs refuse.
    #[error("the template may not load {name}: {reason}")]
    IncludeRefused {
        /// The name as the template gave it.
        name: String,
        /// The policy's (or the filesystem's) code.
        refused: String,
        /// Why.
        reason: String,
    },
    /// An include, import or extends named a file that does not exist.
    #[error("the template {name} does not exist")]
    TemplateNotFound {
        /// The name as the template gave it.
        name: String,
    },
    /// A render failed for another reason (a bad operation, a filter given a wrong value, too
    /// deep a recursion, too many loads).
    #[error("rendering {name} failed at line {line}: {detail}")]
    RenderFailed {
        /// The template's name.
        name: String,
        /// The line, from 1 (0 when unknown).
        line: usize,
        /// What MiniJinja said.
        detail: String,
    },
    /// `grep` is not a valid regex, or compiles to more than its bound.
    #[error("grep is not a usable regex: {why}")]
    GrepInvalid {
        /// Why.
        why: String,
    },
    /// `since` is not an RFC 3339 time.
    #[error("since is not an RFC 3339 time ({given:?}); write it like 2026-12-01T14:00:00Z")]
    SinceInvalid {
        /// What was given.
        given: String,
    },
}

aido_actions::coded!(ToolError {
    @details ToolError::details;
    InvalidArguments => "tool_arguments_invalid",
    DiffTooLarge => "diff_too_large",
    TemplateSyntax => "template_syntax_error",
    FuelExhausted => "template_fuel_exhausted",
    OutputTooLarge => "template_output_too_large",
    Undefined => "template_undefined",
    IncludeRefused => "template_include_refused",
    TemplateNotFound => "template_not_found",
    RenderFailed => "template_render_failed",
    GrepInvalid => "logs_grep_invalid",
    SinceInvalid => "logs_since_invalid",
});

impl ToolError {
    /// Arguments of `primitive` that break a rule.
    pub fn invalid(primitive: &'static str, why: impl Into<String>) -> Self {
        Self::InvalidArguments {
            primitive,
            why: why.into(),
        }
    }

    /// What a failure of this kind carries besides its message: the primitive, the template
    /// and line, the bound it passed.
    pub fn details(&self) -> Option<serde_json::Value> {
        Some(match self {
            Self::InvalidArguments { primitive, .. } => json!({"primitive": primitive}),
            Self::DiffTooLarge { side, lines, max } => {
                json!({"side": side, "lines": lines, "max": max})
            }
            Self::TemplateSyntax { name, line, .. }
            | Self::Undefined { name, line, .. }
            | Self::RenderFailed { name, line, .. } => json!({"template": name, "line": line}),
            Self::FuelExhausted { fuel } => json!({"fuel": fuel}),
            Self::OutputTooLarge { max } => json!({"max": max}),
            Self::IncludeRefused { name, refused, .. } => {
                json!({"include": name, "refused": refused})
            }
            Self::TemplateNotFound { name } => json!({"include": name}),
            Self::GrepInvalid { .. } | Self::SinceInvalid { .. } => return None,
        })
    }
}
