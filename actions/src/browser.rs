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

/// One member of Anthropic's `browser_toolset_20260801`, by its `name` (the 31 members of
/// anthropic-sdk-python's `BetaBrowserMemberName`, in its order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrowserMember {
    /// Load `url` (no scheme: https), or `back`, `forward`, `reload`.
    Navigate,
    /// The tabs (a `browser_state`).
    ListTabs,
    /// Open an empty tab, which becomes the active one.
    NewTab,
    /// Make `tab_id` the active tab.
    SwitchTab,
    /// Close `tab_id`.
    CloseTab,
    /// The accessibility tree with `[ref_N]` references (`depth` default 15, `filter`,
    /// `ref` for a subtree), at most 50,000 characters.
    ReadPage,
    /// The page's visible text.
    GetPageText,
    /// Console messages since the last read.
    ReadConsole,
    /// Requests since the last read (method, URL, status, type, time).
    ReadNetwork,
    /// Up to 20 elements a description (`query`) names, as `read_page` lines.
    Find,
    /// Set a form element (`target` ref) to `value` (text, number, or true/false).
    FormInput,
    /// Give a file input (`target` ref) the files at `paths` (judged by the walls as reads).
    FileUpload,
    /// Scroll an element (`target` ref) into view.
    ScrollTo,
    /// The viewport, as an image.
    Screenshot,
    /// The viewport's `region` [x0, y0, x1, y1], enlarged.
    Zoom,
    /// Left click at `target` (coordinate or ref), holding `modifiers`.
    LeftClick,
    /// Right click.
    RightClick,
    /// Middle click.
    MiddleClick,
    /// Double click.
    DoubleClick,
    /// Triple click.
    TripleClick,
    /// Move the pointer to `target` without clicking.
    Hover,
    /// Press at `from`, drag to `target`, release (coordinates).
    LeftClickDrag,
    /// Press the left button at `target` (a coordinate).
    LeftMouseDown,
    /// Release the left button at `target` (a coordinate).
    LeftMouseUp,
    /// Move the pointer to `target` (a coordinate).
    MouseMove,
    /// Scroll `scroll_amount` notches (1-10, default 3) `scroll_direction` at `target`.
    Scroll,
    /// Type `text` at the focus.
    Type,
    /// Press `text`: a key, a chord (`ctrl+a`), or a space-separated sequence, `repeat` times.
    Key,
    /// Hold `text` (a key or chord) for `duration` seconds (at most 30).
    HoldKey,
    /// Wait `duration` seconds (at most 30).
    Wait,
    /// Run `text` (JavaScript) in the page; refused unless `[browser] allow_script`.
    JavascriptExec,
}

impl BrowserMember {
    /// Every member, in the SDK's order.
    pub const ALL: [BrowserMember; 31] = [
        Self::Navigate,
        Self::ListTabs,
        Self::NewTab,
        Self::SwitchTab,
        Self::CloseTab,
        Self::ReadPage,
        Self::GetPageText,
        Self::ReadConsole,
        Self::ReadNetwork,
        Self::Find,
        Self::FormInput,
        Self::FileUpload,
        Self::ScrollTo,
        Self::Screenshot,
        Self::Zoom,
        Self::LeftClick,
        Self::RightClick,
        Self::MiddleClick,
        Self::DoubleClick,
        Self::TripleClick,
        Self::Hover,
        Self::LeftClickDrag,
        Self::LeftMouseDown,
        Self::LeftMouseUp,
        Self::MouseMove,
        Self::Scroll,
        Self::Type,
        Self::Key,
        Self::HoldKey,
        Self::Wait,
        Self::JavascriptExec,
    ];

    /// Its wire name (`left_click`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Navigate => "navigate",
            Self::ListTabs => "list_tabs",
            Self::NewTab => "new_tab",
            Self::SwitchTab => "switch_tab",
            Self::CloseTab => "close_tab",
            Self::ReadPage => "read_page",
            Self::GetPageText => "get_page_text",
            Self::ReadConsole => "read_console",
            Self::ReadNetwork => "read_network",
            Self::Find => "find",
            Self::FormInput => "form_input",
            Self::FileUpload => "file_upload",
            Self::ScrollTo => "scroll_to",
            Self::Screenshot => "screenshot",
            Self::Zoom => "zoom",
            Self::LeftClick => "left_click",
            Self::RightClick => "right_click",
            Self::MiddleClick => "middle_click",
            Self::DoubleClick => "double_click",
            Self::TripleClick => "triple_click",
            Self::Hover => "hover",
            Self::LeftClickDrag => "left_click_drag",
            Self::LeftMouseDown => "left_mouse_down",
            Self::LeftMouseUp => "left_mouse_up",
            Self::MouseMove => "mouse_move",
            Self::Scroll => "scroll",
            Self::Type => "type",
            Self::Key => "key",
            Self::HoldKey => "hold_key",
            Self::Wait => "wait",
            Self::JavascriptExec => "javascript_exec",
        }
    }

    /// A tab-management member, whose result is exactly a `browser_state`.
    pub fn manages_tabs(self) -> bool {
        matches!(
            self,
            Self::ListTabs | Self::NewTab | Self::SwitchTab | Self::CloseTab
        )
    }
}

/// A plain list of the 31 names: what each member does is the toolset's, and a description per
/// name would cost every client's context some 3 KB more.
impl JsonSchema for BrowserMember {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "BrowserMember".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Self::ALL.iter().map(|m| m.name()).collect();
        schemars::json_schema!({
            "type": "string",
            "enum": names,
            "description": "A member of browser_toolset_20260801, with the SDK's input for it",
        })
    }
}

/// Where a member acts: a point of the viewport or an element of a `read_page`/`find`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// A point, in viewport pixels (the frame of a full screenshot).
    Coordinate {
        /// Pixels from the left edge.
        x: i64,
        /// Pixels from the top edge.
        y: i64,
    },
    /// An element reference (`ref_7`) from `read_page` or `find`.
    Ref {
        /// The reference.
        #[serde(rename = "ref")]
        reference: String,
    },
}

/// Which elements `read_page` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadFilter {
    /// Interactive elements only (links, buttons, fields, ...).
    Interactive,
    /// Every element, off-viewport ones included.
    All,
}

/// A member's `input`: the fields of every member, each taking the ones its contract names
/// (a field it does not take is refused). The shapes are the SDK's `BetaBrowser*Input`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserInput {
    /// The tab to act on (default: the active one); required by switch_tab and close_tab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub tab_id: Option<String>,
    /// navigate: a URL, or `back`, `forward`, `reload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8192))]
    pub url: Option<String>,
    /// Where to act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// left_click_drag: where the drag starts (a coordinate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Target>,
    /// Clicks: a modifier chord held meanwhile (`shift`, `ctrl+shift`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub modifiers: Option<String>,
    /// zoom: [x0, y0, x1, y1] in viewport pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<[i64; 4]>,
    /// scroll: which way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scroll_direction: Option<crate::computer::ScrollDirection>,
    /// scroll: wheel notches, 1 to 10 (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scroll_amount: Option<u32>,
    /// type: the text; key and hold_key: the key or chord; javascript_exec: the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// key: how many times, 1 to 100 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// hold_key and wait: seconds, 0 to 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// read_page: the tree's depth (default 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// read_page: interactive elements only, or all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<ReadFilter>,
    /// read_page: the element whose subtree to read.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub reference: Option<String>,
    /// find: what to look for (`search bar`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub query: Option<String>,
    /// form_input: the value (text, number, or true/false for a checkbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// file_upload: files on this machine, judged by the walls as reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// file_upload: files a harness staged (aido has no such store: refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_ids: Option<Vec<String>>,
}

/// One member `tool_use` block of the toolset, as the model sent it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserToolUse {
    /// The block's id (`toolu_...`), echoed in its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The member.
    pub name: BrowserMember,
    /// Its input.
    #[serde(default)]
    pub input: BrowserInput,
}

/// The browser toolset versions aido speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BrowserToolsetVersion {
    /// 31 members.
    #[default]
    #[serde(rename = "browser_toolset_20260801")]
    V20260801,
}

/// The `browser_toolset_20260801` members of one assistant turn, run in order on the
/// session's browser; the first that fails stops the batch, and every later one answers
/// "Not executed: an earlier action in this turn failed."
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserToolset {
    /// `browser_toolset_20260801` (the default).
    #[serde(default)]
    pub version: BrowserToolsetVersion,
    /// The turn's member calls (1 to 32), in the order the model sent them.
    pub actions: Vec<BrowserToolUse>,
}

// The files an upload hands the page are reads the walls judge.
impl Touches for BrowserToolset {
    fn touches(&self, out: &mut Vec<Access>) {
        for call in &self.actions {
            for path in call.input.paths.iter().flatten() {
                out.push(Access::read(path));
            }
        }
    }
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
