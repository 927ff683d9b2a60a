//! `render_template` as a pure function of the arguments, the template's source and what its
//! loader answered. MiniJinja here has no file loader of its own, no clock, no random and no
//! environment: every template beyond the first comes from the caller's [`Loader`], which the
//! filesystem body backs with the walls (judging and recording each file) and playback with
//! the recorded answers. Fuel bounds the work (a template that loops forever runs out), a
//! bounded writer the output, and the recursion limit the nesting.

use std::io::Write;
use std::sync::{Arc, Mutex};

#[cfg(test)]
use aido_actions::Failure;
use aido_actions::Outcome;
use aido_actions::tools::RenderTemplate;
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde_json::json;

use super::error::ToolError;

/// The name an inline template renders under.
pub const INLINE_NAME: &str = "<inline>";

/// Who answers, in the recorded input, what the loader found (`Input::Answer { from }`).
pub const LOADS_FROM: &str = "templates";

/// How deep includes, macros and blocks may nest.
const RECURSION_LIMIT: usize = 100;

/// A loader's answer for one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Load {
    /// The template's resolved path and source.
    Found {
        /// Where it was read.
        path: String,
        /// Its text.
        source: String,
    },
    /// Nothing is at the path.
    Missing,
    /// The walls, the deny globs or the filesystem refused it.
    Refused {
        /// The policy's or the filesystem's code.
        code: String,
        /// Why.
        reason: String,
    },
}

/// Answers the names a template includes, imports or extends (each at most once per render:
/// MiniJinja keeps what it loaded).
pub type Loader = Arc<dyn Fn(&str) -> Load + Send + Sync>;

/// A loader answering from what a live render's loader found (playback): each name with the
/// path and source it had, or `None` when nothing was there. A name the record does not hold
/// is refused, so a render that asks for something else cannot pass as reproduced.
pub fn recorded_loader(loads: Vec<(String, Option<(String, String)>)>) -> Loader {
    Arc::new(
        move |wanted: &str| match loads.iter().find(|(name, _)| name == wanted) {
            Some((_, Some((path, source)))) => Load::Found {
                path: path.clone(),
                source: source.clone(),
            },
            Some((_, None)) => Load::Missing,
            None => Load::Refused {
                code: "not_recorded".into(),
                reason: format!("the record holds no load of {wanted}"),
            },
        },
    )
}

/// The arguments' own rules (checked before anything is read).
pub fn check(a: &RenderTemplate) -> Result<(), ToolError> {
    let invalid = |why: String| Err(ToolError::invalid("render_template", why));
    match (&a.template, &a.path) {
        (Some(_), Some(_)) | (None, None) => {
            return invalid("give exactly one of template and path".into());
        }
        (Some(t), None) if t.len() > RenderTemplate::SOURCE_BYTES_MAX => {
            return invalid(format!(
                "template is {} bytes; at most {}",
                t.len(),
                RenderTemplate::SOURCE_BYTES_MAX
            ));
        }
        _ => {}
    }
    if let Some(f) = a.fuel
        && !(1..=RenderTemplate::FUEL_MAX).contains(&f)
    {
        return invalid(format!("fuel is 1 to {}", RenderTemplate::FUEL_MAX));
    }
    if let Some(n) = a.output_bytes_max
        && !(1..=RenderTemplate::OUTPUT_BYTES_MAX).contains(&n)
    {
        return invalid(format!(
            "output_bytes_max is 1 to {}",
            RenderTemplate::OUTPUT_BYTES_MAX
        ));
    }
    let context = serde_json::to_vec(&a.context).map_or(usize::MAX, |v| v.len());
    if context > RenderTemplate::CONTEXT_BYTES_MAX {
        return invalid(format!(
            "context is {context} bytes of JSON; at most {}",
            RenderTemplate::CONTEXT_BYTES_MAX
        ));
    }
    Ok(())
}

/// A writer that refuses to grow past its bound.
struct Bounded {
    bytes: Vec<u8>,
    max: u64,
    over: bool,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.bytes.len() + buf.len()) as u64 > self.max {
            self.over = true;
            return Err(std::io::Error::other("output bound reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the loader saw during one render, for the error it caused and the result's list.
#[derive(Default)]
struct Loads {
    /// Names loaded, with the path each came from, in order.
    found: Vec<(String, String)>,
    /// The first refusal, which is the render's error.
    refused: Option<ToolError>,
    /// Names asked for.
    asked: usize,
}

/// Render `source` (named `name`: the template file's resolved path, or [`INLINE_NAME`]).
pub fn render(
    a: &RenderTemplate,
    name: &str,
    source: &str,
    loader: Loader,
) -> Result<Outcome, ToolError> {
    check(a)?;
    if source.len() > RenderTemplate::SOURCE_BYTES_MAX {
        return Err(ToolError::invalid(
            "render_template",
            format!(
                "{name} is {} bytes; a template is at most {}",
                source.len(),
                RenderTemplate::SOURCE_BYTES_MAX
            ),
        ));
    }
    let fuel = a.fuel.unwrap_or(RenderTemplate::FUEL_DEFAULT);
    let max = a
        .output_bytes_max
        .unwrap_or(RenderTemplate::OUTPUT_BYTES_DEFAULT);
    let loads = Arc::new(Mutex::new(Loads::default()));
    let mut env = Environment::new();
    env.set_fuel(Some(fuel));
    env.set_recursion_limit(RECURSION_LIMIT);
    env.set_undefined_behavior(if a.strict {
        UndefinedBehavior::Strict
    } else {
        UndefinedBehavior::Lenient
    });
    let seen = loads.clone();
    env.set_loader(move |wanted| {
        let mut seen = seen.lock().map_err(|_| poisoned())?;
        seen.asked += 1;
        if seen.asked > RenderTemplate::LOADS_MAX {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "a render loads at most {} templates",
                    RenderTemplate::LOADS_MAX
                ),
            ));
        }
        match loader(wanted) {
            Load::Found { path, source } => {
                seen.found.push((wanted.to_owned(), path));
                Ok(Some(source))
            }
            Load::Missing => Ok(None),
            Load::Refused { code, reason } => {
                seen.refused.get_or_insert(ToolError::IncludeRefused {
                    name: wanted.to_owned(),
                    refused: code,
                    reason: reason.clone(),
                });
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, reason))
            }
        }
    });
    env.add_template_owned(name.to_owned(), source.to_owned())
        .map_err(|e| coded(&e, fuel, None, None))?;
    let template = env
        .get_template(name)
        .map_err(|e| coded(&e, fuel, None, None))?;
    let mut out = Bounded {
        bytes: Vec::new(),
        max,
        over: false,
    };
    let context = minijinja::Value::from(minijinja::value::Serde(&a.context));
    let rendered = template.render_captured_to(context, &mut out);
    let mut loads = loads.lock().map_err(|_| ToolError::RenderFailed {
        name: name.to_owned(),
        line: 0,
        detail: "the loader's lock is poisoned".into(),
    })?;
    let captured =
        rendered.map_err(|e| coded(&e, fuel, out.over.then_some(max), loads.refused.take()))?;
    let fuel_used = captured.state().fuel_levels().map_or(0, |(used, _)| used);
    let text = String::from_utf8(out.bytes).map_err(|_| ToolError::RenderFailed {
        name: name.to_owned(),
        line: 0,
        detail: "the output is not UTF-8".into(),
    })?;
    let loaded: Vec<_> = loads
        .found
        .iter()
        .map(|(name, path)| json!({"name": name, "path": path}))
        .collect();
    let output = json!({
        "template": name,
        "bytes": text.len(),
        "fuel_used": fuel_used,
        "fuel": fuel,
        "loaded": loaded,
        "rendered": text,
    });
    let mut outcome = Outcome::from_output(output);
    outcome.text = text;
    Ok(outcome)
}

fn poisoned() -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, "the loader's lock is poisoned")
}

/// The most telling kind in an error and the errors it wraps (an include's failure is wrapped
/// in the including template's).
fn kinds(e: &minijinja::Error) -> Vec<&minijinja::Error> {
    let mut chain = vec![e];
    let mut next = std::error::Error::source(e);
    while let Some(inner) = next {
        match inner.downcast_ref::<minijinja::Error>() {
            Some(m) => {
                chain.push(m);
                next = std::error::Error::source(m);
            }
            None => break,
        }
    }
    chain
}

/// A MiniJinja error as one of ours.
fn coded(
    e: &minijinja::Error,
    fuel: u64,
    over: Option<u64>,
    refused: Option<ToolError>,
) -> ToolError {
    if let Some(refused) = refused {
        return refused;
    }
    if let Some(max) = over {
        return ToolError::OutputTooLarge { max };
    }
    let chain = kinds(e);
    let find = |kind: ErrorKind| chain.iter().find(|c| c.kind() == kind).copied();
    let at = |c: &minijinja::Error| {
        (
            c.name().unwrap_or(INLINE_NAME).to_owned(),
            c.line().unwrap_or(0),
            c.detail().unwrap_or_default().to_owned(),
        )
    };
    if find(ErrorKind::OutOfFuel).is_some() {
        return ToolError::FuelExhausted { fuel };
    }
    if let Some(c) = find(ErrorKind::SyntaxError) {
        let (name, line, detail) = at(c);
        return ToolError::TemplateSyntax { name, line, detail };
    }
    if let Some(c) = find(ErrorKind::UndefinedError) {
        let (name, line, detail) = at(c);
        return ToolError::Undefined { name, line, detail };
    }
    if let Some(c) = find(ErrorKind::TemplateNotFound) {
        let (_, _, detail) = at(c);
        return ToolError::TemplateNotFound {
            name: detail.trim_start_matches("template ").to_owned(),
        };
    }
    let (name, line, _) = at(e);
    ToolError::RenderFailed {
        name,
        line,
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn args(v: serde_json::Value) -> RenderTemplate {
        serde_json::from_value(v).unwrap()
    }

    fn none() -> Loader {
        Arc::new(|_| Load::Missing)
    }

    fn inline(a: &RenderTemplate, loader: Loader) -> Result<Outcome, ToolError> {
        render(a, INLINE_NAME, a.template.as_deref().unwrap(), loader)
    }

    #[test]
    fn renders_with_context_and_reports_fuel() {
        let a = args(
            json!({"template": "Hello {{ name }}! {% for i in range(3) %}{{ i }}{% endfor %}",
            "context": {"name": "aido"}}),
        );
        let done = inline(&a, none()).unwrap();
        assert_eq!(done.text, "Hello aido! 012");
        assert!(done.output["fuel_used"].as_u64().unwrap() > 0);
    }

    #[test]
    fn a_template_that_loops_forever_runs_out_of_fuel() {
        let a = args(json!({"template":
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"}));
        let started = std::time::Instant::now();
        let e = inline(&a, none()).unwrap_err();
        assert_eq!(e.code(), "template_fuel_exhausted");
        eprintln!(
            "fuel {} ran out after {:?}",
            RenderTemplate::FUEL_DEFAULT,
            started.elapsed()
        );
        // The most fuel an agent may give ends too.
        let most = args(json!({"template":
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            "fuel": RenderTemplate::FUEL_MAX}));
        let started = std::time::Instant::now();
        assert_eq!(
            inline(&most, none()).unwrap_err().code(),
            "template_fuel_exhausted"
        );
        eprintln!(
            "fuel {} ran out after {:?}",
            RenderTemplate::FUEL_MAX,
            started.elapsed()
        );
        // A huge value that is never printed is bounded too (fuel charges allocations).
        let huge = args(json!({"template": "{% set s = 'x' * 2000000000 %}{{ s | length }}"}));
        let e = inline(&huge, none()).unwrap_err();
        eprintln!("huge string: {e}");
        // Recursion without end is bounded too.
        let a = args(json!({"template": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"}));
        let e = inline(&a, none()).unwrap_err();
        assert!(
            ["template_fuel_exhausted", "template_render_failed"].contains(&e.code()),
            "{e}"
        );
    }

    #[test]
    fn output_past_its_bound_is_refused() {
        let a = args(
            json!({"template": "{% for i in range(1000) %}xxxxxxxxxx{% endfor %}",
            "output_bytes_max": 100}),
        );
        let e = inline(&a, none()).unwrap_err();
        assert_eq!(e.code(), "template_output_too_large");
        assert_eq!(Failure::from(e).details.unwrap()["max"], 100);
    }

    #[test]
    fn syntax_errors_say_their_line_and_strict_mode_refuses_undefined() {
        let a = args(json!({"template": "line one\n{% if %}\n"}));
        let e = inline(&a, none()).unwrap_err();
        assert_eq!(e.code(), "template_syntax_error");
        assert!(
            matches!(e, ToolError::TemplateSyntax { line: 2, .. }),
            "{e:?}"
        );
        let lenient = args(json!({"template": "[{{ missing }}]"}));
        assert_eq!(inline(&lenient, none()).unwrap().text, "[]");
        let strict = args(json!({"template": "[{{ missing }}]", "strict": true}));
        assert_eq!(
            inline(&strict, none()).unwrap_err().code(),
            "template_undefined"
        );
    }

    #[test]
    fn includes_come_only_from_the_loader_and_a_refusal_is_coded() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let loader: Loader = Arc::new(move |name| {
            log.lock().unwrap().push(name.to_owned());
            match name {
                "header.j2" => Load::Found {
                    path: "/w/header.j2".into(),
                    source: "H({{ title }})".into(),
                },
                "../secret" => Load::Refused {
                    code: "path_outside_walls".into(),
                    reason: "outside the walls".into(),
                },
                _ => Load::Missing,
            }
        });
        let a =
            args(json!({"template": "{% include 'header.j2' %} body", "context": {"title": "t"}}));
        let done = inline(&a, loader.clone()).unwrap();
        assert_eq!(done.text, "H(t) body");
        assert_eq!(done.output["loaded"][0]["path"], "/w/header.j2");
        let refused = args(json!({"template": "{% include '../secret' %}"}));
        let e = inline(&refused, loader.clone()).unwrap_err();
        assert_eq!(e.code(), "template_include_refused");
        assert_eq!(
            Failure::from(e).details.unwrap()["refused"],
            "path_outside_walls"
        );
        let missing = args(json!({"template": "{% include 'nope.j2' %}"}));
        assert_eq!(
            inline(&missing, loader).unwrap_err().code(),
            "template_not_found"
        );
        assert_eq!(
            *asked.lock().unwrap(),
            ["header.j2", "../secret", "nope.j2"]
        );
    }

    #[test]
    fn bad_arguments_are_coded() {
        for v in [
            json!({}),
            json!({"template": "x", "path": "y"}),
            json!({"template": "x", "fuel": 0}),
            json!({"template": "x", "output_bytes_max": 2_000_000}),
        ] {
            assert_eq!(
                check(&args(v)).unwrap_err().code(),
                "tool_arguments_invalid"
            );
        }
    }
}
