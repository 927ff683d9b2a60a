//! Anthropic's computer-use tools, the pure half: which parameters each action takes, how
//! coordinates scale between the screenshot the agent saw and the real screen, and the result
//! the agent gets, built from what the body answered (live and in playback alike).
//!
//! The body (in `aido-actors`) drives a screen and answers, per action: whether it ran, where
//! the pointer is afterwards (screenshot pixels), the images it took (PNG, base64, already at
//! the agent's size) and what its backend adds (the desktop's target window). The result is
//! [`render_legacy`] or [`render_toolset`] of that answer.
//!
//! ```
//! use aido_walk::computer::{Budget, Scale};
//! let scale = Scale::fit([2560, 1600], None, Budget::default());
//! assert_eq!(scale.shot, [1356, 847]);
//! assert_eq!(scale.to_screen([678, 423]).unwrap(), [1280, 800]);
//! ```

use aido_actions::Image;
use aido_actions::Outcome;
use aido_actions::computer::{ComputerAction, ComputerInput, ComputerToolset};
use serde_json::{Value, json};

/// A computer action the body refused or could not run. Each variant has a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    /// A parameter the action needs is missing.
    #[error("{action} needs {field}")]
    InputMissing {
        /// The action.
        action: &'static str,
        /// The parameter.
        field: &'static str,
    },
    /// A parameter the action does not take was given.
    #[error("{action} does not take {field}")]
    InputUnexpected {
        /// The action.
        action: &'static str,
        /// The parameter.
        field: &'static str,
    },
    /// A value outside its bounds (a duration, a scroll amount, a repeat count).
    #[error("{field} is {value}; {action} takes {bounds}")]
    ValueInvalid {
        /// The action.
        action: &'static str,
        /// The parameter.
        field: &'static str,
        /// What was given.
        value: String,
        /// What is accepted.
        bounds: String,
    },
    /// A coordinate outside the screenshot the agent sees (never clamped).
    #[error("({x}, {y}) is outside the {width}x{height} screenshot")]
    PointOutside {
        /// x.
        x: u32,
        /// y.
        y: u32,
        /// The screenshot's width.
        width: u32,
        /// The screenshot's height.
        height: u32,
    },
    /// A zoom region that is empty or leaves the screenshot.
    #[error(
        "region {region:?} is not a non-empty [x0, y0, x1, y1] inside the {width}x{height} screenshot"
    )]
    RegionInvalid {
        /// The region.
        region: [u32; 4],
        /// The screenshot's width.
        width: u32,
        /// The screenshot's height.
        height: u32,
    },
    /// A toolset batch with no member call.
    #[error("the batch has no member call")]
    BatchEmpty,
    /// A toolset batch with more member calls than [`BATCH_ACTIONS_MAX`].
    #[error("the batch has {count} member calls, more than the {max} allowed")]
    BatchTooLarge {
        /// How many.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A member call after one that failed: it was not run.
    #[error("{NOT_EXECUTED}")]
    NotExecuted,
    /// A screenshot could not be scaled, cut or encoded.
    #[error("cannot process the screenshot: {why}")]
    ImageFailed {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(ComputerError {
    InputMissing => "computer_input_missing",
    InputUnexpected => "computer_input_unexpected",
    ValueInvalid => "computer_value_invalid",
    PointOutside => "computer_point_outside",
    RegionInvalid => "computer_region_invalid",
    BatchEmpty => "computer_batch_empty",
    BatchTooLarge => "computer_batch_too_large",
    NotExecuted => "computer_not_executed",
    ImageFailed => "computer_image_failed",
});

/// Who a machine's computer-use answers come from (`Input::Answer { from }`); the desktop
/// body's come from `desktop`.
pub const ANSWER_FROM: &str = "computer";

/// What a member after a failed one answers (the SDK's words, so agents recognise it).
pub const NOT_EXECUTED: &str = "Not executed: an earlier computer action in this turn failed.";

/// Most member calls in one toolset batch.
pub const BATCH_ACTIONS_MAX: usize = 32;
/// Longest hold_key or wait, in seconds.
pub const DURATION_S_MAX: f64 = 60.0;
/// Most wheel steps in one scroll.
pub const SCROLL_AMOUNT_MAX: u32 = 100;
/// Most presses in one key.
pub const REPEAT_MAX: u32 = 100;

/// The largest image the agent is sent: Anthropic's limits for computer use (a long edge of
/// at most 1568 px and about 1.15 megapixels; larger images are scaled down by the API, which
/// would put the agent's coordinates off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Longest edge, in pixels.
    pub long_edge_max: u32,
    /// Most pixels.
    pub pixels_max: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            long_edge_max: 1568,
            pixels_max: 1_150_000,
        }
    }
}

impl Budget {
    /// The factor that fits `size` into the budget (may be above 1: fills it).
    fn factor(self, [w, h]: [u32; 2]) -> f64 {
        let (w, h) = (f64::from(w.max(1)), f64::from(h.max(1)));
        let by_edge = f64::from(self.long_edge_max) / w.max(h);
        let by_area = (self.pixels_max as f64 / (w * h)).sqrt();
        by_edge.min(by_area)
    }

    /// `size` scaled by `factor`, at least 1x1.
    fn scaled([w, h]: [u32; 2], factor: f64) -> [u32; 2] {
        let s = |v: u32| ((f64::from(v) * factor).floor() as u32).max(1);
        [s(w), s(h)]
    }

    /// The size a zoom of a `region` (real pixels) is sent at: the region's shape, filling the
    /// budget (`fill`, the toolset's zoom), or at the real resolution unless that exceeds it.
    pub fn zoomed(self, region: [u32; 2], fill: bool) -> [u32; 2] {
        let f = self.factor(region);
        Self::scaled(region, if fill { f } else { f.min(1.0) })
    }
}

/// The screen as the agent sees it: the real screen's size and the screenshot's. Fixed for a
/// session (both sizes are), so every coordinate means the same pixel all along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The real screen, in pixels.
    pub screen: [u32; 2],
    /// The screenshots the agent gets, in pixels.
    pub shot: [u32; 2],
}

impl Scale {
    /// The screenshot size for a screen: `target` if the config names one, else the screen
    /// itself when it fits the budget, else the largest size of its shape that does.
    pub fn fit(screen: [u32; 2], target: Option<[u32; 2]>, budget: Budget) -> Self {
        let shot = match target {
            Some([w, h]) if w > 0 && h > 0 => [w, h],
            _ => Budget::scaled(screen, budget.factor(screen).min(1.0)),
        };
        Self { screen, shot }
    }

    /// Whether screenshots are the real screen, pixel for pixel.
    pub fn is_identity(&self) -> bool {
        self.screen == self.shot
    }

    /// The real pixel at the center of the screenshot pixel `[x, y]`; outside the screenshot
    /// is an error (never clamped).
    pub fn to_screen(&self, [x, y]: [u32; 2]) -> Result<[u32; 2], ComputerError> {
        let [sw, sh] = self.shot;
        if x >= sw || y >= sh {
            return Err(ComputerError::PointOutside {
                x,
                y,
                width: sw,
                height: sh,
            });
        }
        let map = |v: u32, shot: u32, real: u32| {
            let at = (2 * u64::from(v) + 1) * u64::from(real) / (2 * u64::from(shot));
            (at as u32).min(real.saturating_sub(1))
        };
        Ok([map(x, sw, self.screen[0]), map(y, sh, self.screen[1])])
    }

    /// The screenshot pixel that holds the real pixel `[x, y]` (clamped onto the screenshot).
    pub fn to_shot(&self, [x, y]: [u32; 2]) -> [u32; 2] {
        let map = |v: u32, real: u32, shot: u32| {
            let at = u64::from(v) * u64::from(shot) / u64::from(real.max(1));
            (at as u32).min(shot.saturating_sub(1))
        };
        [
            map(x, self.screen[0], self.shot[0]),
            map(y, self.screen[1], self.shot[1]),
        ]
    }

    /// A region of the screenshot as the real pixels it covers (end exclusive).
    pub fn region_to_screen(&self, region: [u32; 4]) -> Result<[u32; 4], ComputerError> {
        let [x0, y0, x1, y1] = region;
        let [sw, sh] = self.shot;
        if x0 >= x1 || y0 >= y1 || x1 > sw || y1 > sh {
            return Err(ComputerError::RegionInvalid {
                region,
                width: sw,
                height: sh,
            });
        }
        let down = |v: u32, shot: u32, real: u32| {
            (u64::from(v) * u64::from(real) / u64::from(shot)) as u32
        };
        let up = |v: u32, shot: u32, real: u32| {
            (u64::from(v) * u64::from(real)).div_ceil(u64::from(shot)) as u32
        };
        let [rw, rh] = self.screen;
        Ok([
            down(x0, sw, rw),
            down(y0, sh, rh),
            up(x1, sw, rw).max(down(x0, sw, rw) + 1),
            up(y1, sh, rh).max(down(y0, sh, rh) + 1),
        ])
    }
}

/// The parameters each action needs, and the ones it may take besides.
fn contract(action: ComputerAction) -> (&'static [&'static str], &'static [&'static str]) {
    use ComputerAction as A;
    match action {
        A::Key => (&["text"], &["repeat"]),
        A::HoldKey => (&["text", "duration"], &[]),
        A::Type => (&["text"], &[]),
        A::CursorPosition | A::Screenshot => (&[], &[]),
        A::MouseMove => (&["coordinate"], &[]),
        // computer_20250124 let these name where they press; the toolset presses in place.
        A::LeftMouseDown | A::LeftMouseUp => (&[], &["coordinate"]),
        A::LeftClick | A::RightClick | A::MiddleClick | A::DoubleClick | A::TripleClick => {
            (&[], &["coordinate", "text"])
        }
        A::LeftClickDrag => (&["start_coordinate", "coordinate"], &["text"]),
        A::Scroll => (
            &["scroll_direction", "scroll_amount"],
            &["coordinate", "text"],
        ),
        A::Wait => (&["duration"], &[]),
        A::Zoom => (&["region"], &[]),
    }
}

/// The parameters given.
fn given(input: &ComputerInput) -> Vec<&'static str> {
    let fields = [
        ("coordinate", input.coordinate.is_some()),
        ("start_coordinate", input.start_coordinate.is_some()),
        ("text", input.text.is_some()),
        ("scroll_direction", input.scroll_direction.is_some()),
        ("scroll_amount", input.scroll_amount.is_some()),
        ("duration", input.duration.is_some()),
        ("region", input.region.is_some()),
        ("repeat", input.repeat.is_some()),
    ];
    fields
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
}

/// Check an action's parameters against its contract and bounds, before anything is sent.
pub fn check(action: ComputerAction, input: &ComputerInput) -> Result<(), ComputerError> {
    let name = action.name();
    let (needs, may) = contract(action);
    let given = given(input);
    if let Some(field) = needs.iter().find(|f| !given.contains(f)) {
        return Err(ComputerError::InputMissing {
            action: name,
            field,
        });
    }
    if let Some(field) = given
        .iter()
        .find(|f| !needs.contains(f) && !may.contains(f))
    {
        return Err(ComputerError::InputUnexpected {
            action: name,
            field,
        });
    }
    if let Some(d) = input.duration
        && !(0.0..=DURATION_S_MAX).contains(&d)
    {
        return Err(ComputerError::ValueInvalid {
            action: name,
            field: "duration",
            value: d.to_string(),
            bounds: format!("0 to {DURATION_S_MAX} seconds"),
        });
    }
    for (field, value, max) in [
        ("scroll_amount", input.scroll_amount, SCROLL_AMOUNT_MAX),
        ("repeat", input.repeat, REPEAT_MAX),
    ] {
        if let Some(v) = value
            && !(1..=max).contains(&v)
        {
            return Err(ComputerError::ValueInvalid {
                action: name,
                field,
                value: v.to_string(),
                bounds: format!("1 to {max}"),
            });
        }
    }
    Ok(())
}

/// Check a toolset batch's size.
pub fn check_batch(batch: &ComputerToolset) -> Result<(), ComputerError> {
    match batch.actions.len() {
        0 => Err(ComputerError::BatchEmpty),
        n if n > BATCH_ACTIONS_MAX => Err(ComputerError::BatchTooLarge {
            count: n,
            max: BATCH_ACTIONS_MAX,
        }),
        _ => {
            // The batch is one body call: its waits must end well within the call's deadline.
            let waits: f64 = batch
                .actions
                .iter()
                .filter_map(|a| a.input.duration)
                .map(|d| d.max(0.0))
                .sum();
            if waits > DURATION_S_MAX {
                return Err(ComputerError::ValueInvalid {
                    action: "the batch",
                    field: "duration",
                    value: format!("{waits} in all"),
                    bounds: format!("at most {DURATION_S_MAX} seconds of waits and holds in all"),
                });
            }
            Ok(())
        }
    }
}

/// The key of the images (PNG, base64) in one action's answer.
pub const IMAGES_KEY: &str = "images";

/// What the model reads after an action that ran (the SDK's acknowledgments), `cursor` the
/// pointer in screenshot pixels.
pub fn acknowledgment(action: ComputerAction, input: &ComputerInput, cursor: &Value) -> String {
    use ComputerAction as A;
    let text = input.text.as_deref().unwrap_or_default();
    let duration = input.duration.unwrap_or_default();
    match action {
        A::Key => format!("Pressed {text}."),
        A::HoldKey => format!("Held {text} for {duration}s."),
        A::Type => "Typed.".into(),
        A::CursorPosition => format!("X={},Y={}", cursor[0], cursor[1]),
        A::MouseMove => "Moved the mouse.".into(),
        A::LeftMouseDown => "Left mouse button pressed.".into(),
        A::LeftMouseUp => "Left mouse button released.".into(),
        A::LeftClick => "Clicked.".into(),
        A::LeftClickDrag => "Dragged.".into(),
        A::RightClick => "Right-clicked.".into(),
        A::MiddleClick => "Middle-clicked.".into(),
        A::DoubleClick => "Double-clicked.".into(),
        A::TripleClick => "Triple-clicked.".into(),
        A::Scroll => {
            let way = input
                .scroll_direction
                .and_then(|d| serde_json::to_value(d).ok())
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("Scrolled {way}.")
        }
        A::Wait => format!("Waited {duration}s."),
        A::Screenshot | A::Zoom => String::new(),
    }
}

/// Move one action's images out of its answer into `images`, leaving their indexes.
fn take_images(result: &mut Value, images: &mut Vec<Image>) {
    let Some(map) = result.as_object_mut() else {
        return;
    };
    let Some(Value::Array(pngs)) = map.remove(IMAGES_KEY) else {
        return;
    };
    let mut at = Vec::new();
    for png in pngs {
        if let Value::String(base64) = png {
            at.push(images.len());
            images.push(Image {
                mime: "image/png".into(),
                base64,
            });
        }
    }
    map.insert(IMAGES_KEY.into(), json!(at));
}

/// The result of one legacy `computer` call whose body answered `answer`
/// (`{backend, screen, screenshot_size, result: {cursor, images, ...}}`).
pub fn render_legacy(action: ComputerAction, input: &ComputerInput, answer: &Value) -> Outcome {
    let mut output = answer.clone();
    let mut images = Vec::new();
    let mut result = output["result"].take();
    take_images(&mut result, &mut images);
    let text = acknowledgment(action, input, &result["cursor"]);
    output["result"] = result;
    output["action"] = json!(action.name());
    Outcome {
        text: if text.is_empty() {
            format!("screenshot {}", size(&answer["screenshot_size"]))
        } else {
            text
        },
        output,
        images,
        ..Outcome::default()
    }
}

fn size(v: &Value) -> String {
    format!("{}x{}", v[0], v[1])
}

/// The result of a toolset batch whose body answered `answer`
/// (`{backend, screen, screenshot_size, results: [...]}`, one result per member call that
/// ran, the failed one last). Every member gets an entry in `results` (id, name, is_error,
/// text, the indexes of its images), the members after a failure the SDK's "Not executed";
/// the text has one line per member.
pub fn render_toolset(batch: &ComputerToolset, answer: &Value) -> Outcome {
    let mut output = answer.clone();
    let mut images = Vec::new();
    let ran = answer["results"].as_array().map_or(0, Vec::len);
    let mut results = Vec::with_capacity(batch.actions.len());
    let mut lines = Vec::with_capacity(batch.actions.len());
    let mut failed_at = Value::Null;
    for (index, call) in batch.actions.iter().enumerate() {
        let mut result = if index < ran {
            answer["results"][index].clone()
        } else {
            json!({"is_error": true, "code": ComputerError::NotExecuted.code(), "message": NOT_EXECUTED})
        };
        let is_error = result["is_error"] == Value::Bool(true);
        if is_error && failed_at.is_null() {
            failed_at = json!(index);
        }
        take_images(&mut result, &mut images);
        let text = if is_error {
            result["message"].as_str().unwrap_or_default().to_owned()
        } else {
            acknowledgment(call.name, &call.input, &result["cursor"])
        };
        lines.push(match (is_error, text.is_empty()) {
            (true, _) => format!(
                "{} {}: error [{}] {text}",
                index + 1,
                call.name.name(),
                result["code"].as_str().unwrap_or_default()
            ),
            (false, true) => format!(
                "{} {}: image {}",
                index + 1,
                call.name.name(),
                result[IMAGES_KEY]
            ),
            (false, false) => format!("{} {}: {text}", index + 1, call.name.name()),
        });
        result["id"] = json!(call.id);
        result["name"] = json!(call.name.name());
        result["is_error"] = json!(is_error);
        result["text"] = json!(text);
        results.push(result);
    }
    output["results"] = json!(results);
    output["failed_at"] = failed_at;
    Outcome {
        text: lines.join("\n"),
        output,
        images,
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aido_actions::computer::ToolUse;

    #[test]
    fn identity_scaling_maps_every_pixel_to_itself() {
        let s = Scale::fit([1280, 800], None, Budget::default());
        assert!(s.is_identity());
        for p in [[0, 0], [1279, 799], [640, 400]] {
            assert_eq!(s.to_screen(p).unwrap(), p);
            assert_eq!(s.to_shot(p), p);
        }
        assert_eq!(
            s.to_screen([1280, 0]).unwrap_err().code(),
            "computer_point_outside"
        );
    }

    /// A screenshot at half size: each of its pixels is the center of a 2x2 block, and every
    /// real pixel maps back to the screenshot pixel that shows it.
    #[test]
    fn a_scaled_point_lands_on_the_real_pixel_it_shows() {
        let s = Scale::fit([1280, 800], Some([640, 400]), Budget::default());
        assert_eq!(s.to_screen([100, 50]).unwrap(), [201, 101]);
        assert_eq!(s.to_screen([639, 399]).unwrap(), [1279, 799]);
        for x in 0..640 {
            assert_eq!(s.to_shot(s.to_screen([x, 0]).unwrap())[0], x);
        }
        // XGA on a 1920x1080 screen: independent factors on each axis.
        let xga = Scale::fit([1920, 1080], Some([1024, 768]), Budget::default());
        assert_eq!(xga.to_screen([512, 384]).unwrap(), [960, 540]);
        for x in 0..1024 {
            assert_eq!(xga.to_shot(xga.to_screen([x, 0]).unwrap())[0], x);
        }
        assert_eq!(
            s.region_to_screen([10, 10, 20, 30]).unwrap(),
            [20, 20, 40, 60]
        );
        assert_eq!(
            s.region_to_screen([10, 10, 10, 30]).unwrap_err().code(),
            "computer_region_invalid"
        );
    }

    #[test]
    fn a_large_screen_is_fitted_into_the_budget() {
        let b = Budget::default();
        let s = Scale::fit([1920, 1080], None, b);
        assert!(u64::from(s.shot[0]) * u64::from(s.shot[1]) <= b.pixels_max);
        assert!(s.shot[0] <= b.long_edge_max);
        assert_eq!(s.shot, [1429, 804]);
        // A zoom fills the budget in the toolset, keeps the real pixels in the legacy tool.
        assert_eq!(b.zoomed([200, 100], false), [200, 100]);
        let filled = b.zoomed([200, 100], true);
        assert_eq!(filled, [1516, 758]);
    }

    /// Table: each action's required and refused parameters, and the bounds.
    #[test]
    fn each_action_checks_its_contract() {
        let input = |v: Value| serde_json::from_value::<ComputerInput>(v).unwrap();
        let cases = [
            (ComputerAction::Key, json!({"text": "Return"}), None),
            (
                ComputerAction::Key,
                json!({"text": "a", "repeat": 0}),
                Some("computer_value_invalid"),
            ),
            (
                ComputerAction::Key,
                json!({}),
                Some("computer_input_missing"),
            ),
            (
                ComputerAction::Type,
                json!({"text": "x", "coordinate": [1, 1]}),
                Some("computer_input_unexpected"),
            ),
            (
                ComputerAction::LeftClickDrag,
                json!({"coordinate": [5, 5]}),
                Some("computer_input_missing"),
            ),
            (
                ComputerAction::Scroll,
                json!({"scroll_direction": "up", "scroll_amount": 101}),
                Some("computer_value_invalid"),
            ),
            (
                ComputerAction::HoldKey,
                json!({"text": "shift", "duration": 61}),
                Some("computer_value_invalid"),
            ),
            (ComputerAction::Wait, json!({"duration": 0.5}), None),
            (ComputerAction::Screenshot, json!({}), None),
            (ComputerAction::Zoom, json!({"region": [0, 0, 2, 2]}), None),
            (ComputerAction::LeftMouseDown, json!({}), None),
            (
                ComputerAction::CursorPosition,
                json!({"text": "x"}),
                Some("computer_input_unexpected"),
            ),
        ];
        for (action, given, code) in cases {
            let got = check(action, &input(given.clone())).err().map(|e| e.code());
            assert_eq!(got, code, "{action:?} {given}");
        }
    }

    #[test]
    fn a_batch_renders_every_member_and_the_unrun_ones() {
        let call = |name, input: Value| ToolUse {
            id: Some(format!("toolu_{name:?}")),
            name,
            input: serde_json::from_value(input).unwrap(),
        };
        let batch = ComputerToolset {
            version: Default::default(),
            actions: vec![
                call(ComputerAction::Screenshot, json!({})),
                call(ComputerAction::CursorPosition, json!({})),
                call(ComputerAction::LeftClick, json!({"coordinate": [1, 1]})),
                call(ComputerAction::Type, json!({"text": "x"})),
            ],
        };
        let answer = json!({"backend": "x11", "screen": [4, 4], "screenshot_size": [2, 2], "results": [
            {"is_error": false, "cursor": [1, 0], "images": ["iVBOR"]},
            {"is_error": false, "cursor": [1, 0]},
            {"is_error": true, "code": "desktop_window_denied", "message": "no"},
        ]});
        let done = render_toolset(&batch, &answer);
        assert_eq!(done.images.len(), 1);
        let results = done.output["results"].as_array().unwrap();
        assert_eq!(results.len(), 4);
        assert_eq!(results[0]["images"], json!([0]));
        assert_eq!(results[1]["text"], "X=1,Y=0");
        assert_eq!(results[2]["is_error"], true);
        assert_eq!(results[3]["code"], "computer_not_executed");
        assert_eq!(results[3]["text"], NOT_EXECUTED);
        assert_eq!(results[3]["id"], "toolu_Type");
        assert_eq!(done.output["failed_at"], 2);
        assert!(done.text.contains("4 type: error [computer_not_executed]"));
    }
}
