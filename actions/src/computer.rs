//! Anthropic's computer-use tools, as one vocabulary for every screen aido drives (a machine's,
//! the host desktop's): the single `computer` tool of `computer_20250124` and
//! `computer_20251124` (one action per call, a screenshot after it), and the members of the
//! `computer_toolset_20260801` toolset (each member is its own `tool_use` block with
//! `toolset_name: "computer"`; a client sends the turn's blocks in one call, as a batch that
//! runs in order and stops at the first failure).
//!
//! The two share their actions and parameters: a toolset member's `input` is the legacy tool's
//! arguments without `action` (plus `repeat` for `key`). Coordinates are pixels of the
//! screenshots the agent sees, which may be smaller than the real screen; aido scales them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// One computer action: a legacy `action` value, or a toolset member's `name`. The toolset
/// has exactly these 17 members (anthropic-sdk-python `BetaComputerToolsetConfigsParam`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ComputerAction {
    /// Press a key or chord given in `text` (xdotool names: `Return`, `ctrl+s`), `repeat` times.
    Key,
    /// Type `text`.
    Type,
    /// Move the pointer to `coordinate`.
    MouseMove,
    /// Click at `coordinate` (or where the pointer is), holding the keys in `text`.
    LeftClick,
    /// Drag from `start_coordinate` to `coordinate`, holding the keys in `text`.
    LeftClickDrag,
    /// Right click.
    RightClick,
    /// Middle click.
    MiddleClick,
    /// Double click.
    DoubleClick,
    /// Triple click.
    TripleClick,
    /// Take a screenshot.
    Screenshot,
    /// Where the pointer is, in screenshot pixels.
    CursorPosition,
    /// Press the left button (at `coordinate` if given, else where the pointer is).
    LeftMouseDown,
    /// Release the left button.
    LeftMouseUp,
    /// Scroll `scroll_amount` steps in `scroll_direction` at `coordinate`, holding `text` keys.
    Scroll,
    /// Hold the keys in `text` for `duration` seconds.
    HoldKey,
    /// Wait `duration` seconds.
    Wait,
    /// A screenshot of `region` (screenshot pixels) only, at the real screen's resolution.
    Zoom,
}

impl ComputerAction {
    /// Every action, in the toolset's member order.
    pub const ALL: [ComputerAction; 17] = [
        Self::Key,
        Self::HoldKey,
        Self::Type,
        Self::CursorPosition,
        Self::MouseMove,
        Self::LeftMouseDown,
        Self::LeftMouseUp,
        Self::LeftClick,
        Self::LeftClickDrag,
        Self::RightClick,
        Self::MiddleClick,
        Self::DoubleClick,
        Self::TripleClick,
        Self::Scroll,
        Self::Wait,
        Self::Screenshot,
        Self::Zoom,
    ];

    /// Its wire name (`left_click`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Type => "type",
            Self::MouseMove => "mouse_move",
            Self::LeftClick => "left_click",
            Self::LeftClickDrag => "left_click_drag",
            Self::RightClick => "right_click",
            Self::MiddleClick => "middle_click",
            Self::DoubleClick => "double_click",
            Self::TripleClick => "triple_click",
            Self::Screenshot => "screenshot",
            Self::CursorPosition => "cursor_position",
            Self::LeftMouseDown => "left_mouse_down",
            Self::LeftMouseUp => "left_mouse_up",
            Self::Scroll => "scroll",
            Self::HoldKey => "hold_key",
            Self::Wait => "wait",
            Self::Zoom => "zoom",
        }
    }
}

/// A scroll direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScrollDirection {
    /// Up.
    Up,
    /// Down.
    Down,
    /// Left.
    Left,
    /// Right.
    Right,
}

/// An action's parameters: the legacy tool's arguments after `action`, and a toolset member's
/// `input`. Which ones an action takes is its contract; one it does not take is refused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComputerInput {
    /// [x, y] in screenshot pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinate: Option<[u32; 2]>,
    /// [x, y] where a drag starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_coordinate: Option<[u32; 2]>,
    /// Text to type, the key chord, or keys to hold during a click, drag or scroll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// For scroll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scroll_direction: Option<ScrollDirection>,
    /// For scroll: wheel steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scroll_amount: Option<u32>,
    /// For hold_key and wait: seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// For zoom: [x0, y0, x1, y1] in screenshot pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<[u32; 4]>,
    /// For key: how many times to press it (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
}

/// Anthropic's `computer` tool (computer_20250124 and computer_20251124), exactly its actions
/// and parameters: one action per call, and a screenshot after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Computer {
    /// What to do.
    pub action: ComputerAction,
    /// Its parameters.
    #[serde(flatten)]
    pub input: ComputerInput,
}

/// The toolset versions aido speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ToolsetVersion {
    /// GA since August 2026: 17 members, zoom on by default.
    #[default]
    #[serde(rename = "computer_toolset_20260801")]
    V20260801,
}

/// One member `tool_use` block of the toolset, as the model sent it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolUse {
    /// The block's id (`toolu_...`), echoed in its result so a client can answer it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The member (`left_click`).
    pub name: ComputerAction,
    /// The member's input.
    #[serde(default)]
    pub input: ComputerInput,
}

/// The `computer_toolset_20260801` members of one assistant turn, run in order; the first that
/// fails stops the batch, and every later one answers "Not executed".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputerToolset {
    /// `computer_toolset_20260801` (the default).
    #[serde(default)]
    pub version: ToolsetVersion,
    /// The turn's member calls (1 to 32), in the order the model sent them.
    pub actions: Vec<ToolUse>,
}

// A screen is outside the walls: the body's own gates judge these.
impl Touches for Computer {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

impl Touches for ComputerToolset {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_has_its_wire_name() {
        for a in ComputerAction::ALL {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json, a.name());
        }
        let set: std::collections::HashSet<_> = ComputerAction::ALL.iter().collect();
        assert_eq!(set.len(), 17);
    }

    #[test]
    fn a_legacy_call_and_a_toolset_call_parse() {
        let legacy: Computer = serde_json::from_value(
            serde_json::json!({"action": "left_click", "coordinate": [3, 4], "text": "shift"}),
        )
        .unwrap();
        assert_eq!(legacy.action, ComputerAction::LeftClick);
        assert_eq!(legacy.input.coordinate, Some([3, 4]));
        let batch: ComputerToolset = serde_json::from_value(serde_json::json!({
            "version": "computer_toolset_20260801",
            "actions": [{"id": "toolu_1", "name": "key", "input": {"text": "Return", "repeat": 2}},
                        {"name": "screenshot", "input": {}}, {"name": "left_mouse_up"}]
        }))
        .unwrap();
        assert_eq!(batch.actions.len(), 3);
        assert_eq!(batch.actions[0].input.repeat, Some(2));
        let bad = serde_json::from_value::<ComputerToolset>(
            serde_json::json!({"version": "computer_toolset_20990101", "actions": []}),
        );
        assert!(bad.is_err());
    }
}
