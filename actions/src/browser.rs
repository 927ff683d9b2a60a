//! Browser primitives, run by the browser body: one headless Chromium per session, started on
//! its first browser call with a private profile, every request it makes (loopback included)
//! through aido's egress proxy and judged by `[net]` as `fetch_url` is. The URL a navigation
//! names is judged by the policy before the browser is asked. Elements are named by the
//! references of the last `browser_snapshot` (`e12`) or by coordinates. Script evaluation is
//! refused unless `[browser] allow_script` is true. What a page did on a server cannot be
//! rewound: every browser action that changes anything is irreversible (simulate says so);
//! what the page answered is recorded, so playback reproduces each result without a browser.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Open a URL in the session's browser (started on first use): the current tab, or a new one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Navigate {
    /// An http or https URL, judged by `[net]`.
    #[schemars(length(min = 1, max = 8192))]
    pub url: String,
    /// Open it in a new tab, which becomes the current one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_tab: bool,
}

/// No arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// A tab, by the id `browser_tabs` lists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tab {
    /// The tab's id.
    #[schemars(length(min = 1, max = 128))]
    pub tab: String,
}

/// Click an element (by a snapshot's reference) or a point of the viewport.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Click {
    /// The element's reference from the last `browser_snapshot` (`e12`).
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub reference: Option<String>,
    /// x in CSS pixels of the viewport (with `y`, instead of `ref`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<f64>,
    /// y in CSS pixels of the viewport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<f64>,
}

/// Type text into the focused element, as key presses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TypeText {
    /// The text (at most 4096 characters).
    #[schemars(length(max = 4096))]
    pub text: String,
}

/// Press a key (`Enter`, `Tab`, `Escape`, `ArrowDown`, a character).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Press {
    /// The key's name.
    #[schemars(length(min = 1, max = 64))]
    pub key: String,
}

/// Scroll the page by a number of CSS pixels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scroll {
    /// Rightwards (negative: leftwards).
    #[serde(default)]
    pub dx: f64,
    /// Downwards (negative: upwards).
    #[serde(default)]
    pub dy: f64,
}

/// Set a form field's value (an input or a text area), as a person typing it would.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fill {
    /// The field's reference from the last `browser_snapshot`.
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 64))]
    pub reference: String,
    /// The value (at most 4096 characters).
    #[schemars(length(max = 4096))]
    pub value: String,
}

/// Choose an option of a select element, by its value or its text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Select {
    /// The select's reference from the last `browser_snapshot`.
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 64))]
    pub reference: String,
    /// The option's value or text.
    #[schemars(length(max = 1024))]
    pub option: String,
}

/// Wait until the page shows a text, or until an element (by reference or CSS selector) exists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitFor {
    /// A text the page's visible text must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub text: Option<String>,
    /// A CSS selector an element must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub css: Option<String>,
    /// How long to wait (default 10 s; bounded by the browser's limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Run JavaScript in the page and answer its value as JSON. Refused unless the policy's
/// `[browser] allow_script` is true.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Evaluate {
    /// The expression.
    #[schemars(length(min = 1, max = 65536))]
    pub script: String,
}

macro_rules! touches_nothing {
    ($($ty:ty),*) => {$(
        impl Touches for $ty {
            fn touches(&self, _out: &mut Vec<Access>) {}
        }
    )*};
}
touches_nothing!(
    Navigate, NoArgs, Tab, Click, TypeText, Press, Scroll, Fill, Select, WaitFor, Evaluate
);

#[cfg(test)]
mod tests {
    use crate::Action;
    use serde_json::json;

    #[test]
    fn browser_calls_parse_and_refuse_unknown_fields() {
        let click = Action::from_tool_call("browser_click", json!({"ref": "e3"})).unwrap();
        assert_eq!(click.primitive(), "browser_click");
        assert!(
            click.irreversible(),
            "a click can make a page act on a server"
        );
        let read = Action::from_tool_call("browser_snapshot", json!({})).unwrap();
        assert!(!read.irreversible());
        let error = Action::from_tool_call("browser_navigate", json!({"url": "x", "tab": 1}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("tab"), "{error}");
    }
}
