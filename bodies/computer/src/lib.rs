//! Anthropic's computer-use tools on any screen aido drives: the legacy `computer` tool
//! (computer_20250124 / computer_20251124) and the `computer_toolset_20260801` batch, once,
//! over a [`Screen`]: a screen that takes input. The VM body's machine and the desktop body's
//! desktop each implement it; every input goes through their own paths (the desktop's gates:
//! app rules, focus checks, refused chords, the rate limit, blacked-out windows).
//!
//! Coordinates are the agent's, in pixels of the screenshots it gets
//! ([`aido_walk::computer::Scale`]): each is checked against that screenshot (never clamped)
//! and scaled to the real pixel before the screen sees it; screenshots are scaled to the
//! agent's size, a zoom is cut from the real screen, and cursor_position is answered in
//! screenshot pixels. What this returns is the body's answer (recorded as the action's
//! input); the result is `aido_walk::computer::render_*` of it.

/// Scaling, cutting and encoding screenshots.
mod screenshots;

use std::time::Duration;

use aido_actions::Failure;
use aido_actions::computer::{ComputerAction, ComputerInput, ComputerToolset, ScrollDirection};
use aido_walk::computer::{self as pure, Budget, Scale};
use base64::Engine as _;
use serde_json::{Value, json};

/// Pause before the screenshot that follows a legacy action, so the screen has redrawn.
const SETTLE_MS: u64 = 100;
/// Pause after a toolset member that sent input, before the next one.
const MEMBER_SETTLE_MS: u64 = 50;

/// A pointer button.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Button {
    /// Left.
    Left,
    /// Middle.
    Middle,
    /// Right.
    Right,
}

/// Pointer input at one point (real pixels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gesture {
    /// Only move there.
    Move,
    /// Click `count` times.
    Click {
        /// Which button.
        button: Button,
        /// 1 to 3.
        count: u32,
    },
    /// Press the left button and keep it pressed.
    Press,
    /// Release the left button.
    Release,
    /// Wheel clicks.
    Scroll {
        /// Which way.
        direction: ScrollDirection,
        /// How many.
        clicks: u32,
    },
    /// Press the left button, move to `to`, release.
    Drag {
        /// Where it ends (real pixels).
        to: [u32; 2],
    },
}

/// A screen that takes input. Each input method returns what the backend adds to the
/// journal about it (the desktop: the window it went to), or a coded failure; none returns
/// `Ok` for input that was not delivered.
#[expect(
    async_fn_in_trait,
    reason = "implemented and called by aido's own bodies, whose futures are Send"
)]
pub trait Screen {
    /// The backend (`x11`, `qemu`).
    fn backend(&self) -> &'static str;
    /// The real screen's size, in pixels.
    async fn size(&mut self) -> Result<[u32; 2], Failure>;
    /// The whole screen at its real size, as PNG, as the agent may see it.
    async fn capture(&mut self) -> Result<Vec<u8>, Failure>;
    /// Where the pointer is, in real pixels.
    async fn cursor(&mut self) -> Result<[u32; 2], Failure>;
    /// Pointer input at `at` (real pixels; None: where the pointer is), with the chord
    /// `held` held around it.
    async fn pointer(
        &mut self,
        at: Option<[u32; 2]>,
        gesture: Gesture,
        held: Option<&str>,
    ) -> Result<Value, Failure>;
    /// Press a chord `repeat` times.
    async fn key(&mut self, keys: &str, repeat: u32) -> Result<Value, Failure>;
    /// Hold a chord for a while, then release it.
    async fn hold_key(&mut self, keys: &str, hold: Duration) -> Result<Value, Failure>;
    /// Type text.
    async fn type_text(&mut self, text: &str) -> Result<Value, Failure>;
    /// Wait.
    async fn sleep(&mut self, wait: Duration);
}

/// How screenshots are sized, from `[computer]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// The configured screenshot size, if any.
    pub target: Option<[u32; 2]>,
    /// The image limits.
    pub budget: Budget,
}

impl Sizing {
    /// From the config.
    pub fn of(config: &aido_policy::config::Computer) -> Self {
        Self {
            target: Some([config.width, config.height]).filter(|[w, h]| *w > 0 && *h > 0),
            budget: Budget {
                long_edge_max: config.long_edge_max.max(1),
                pixels_max: config.pixels_max.max(1),
            },
        }
    }
}

/// Which tool is running: the legacy one sends a screenshot after each action, the toolset
/// only what screenshot and zoom return (a zoom filling the image budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Legacy,
    Toolset,
}

fn base64(png: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(png)
}

async fn scale_of<S: Screen>(screen: &mut S, sizing: Sizing) -> Result<Scale, Failure> {
    Ok(Scale::fit(
        screen.size().await?,
        sizing.target,
        sizing.budget,
    ))
}

fn header(screen: &impl Screen, scale: &Scale, version: &str) -> Value {
    json!({
        "backend": screen.backend(),
        "version": version,
        "screen": scale.screen,
        "screenshot_size": scale.shot,
    })
}

/// Run one legacy `computer` call; a failure fails the call.
pub async fn legacy<S: Screen>(
    screen: &mut S,
    action: ComputerAction,
    input: &ComputerInput,
    sizing: Sizing,
) -> Result<Value, Failure> {
    pure::check(action, input)?;
    let scale = scale_of(screen, sizing).await?;
    let result = one(screen, &scale, sizing.budget, action, input, Mode::Legacy).await?;
    let mut answer = header(screen, &scale, "computer_20251124");
    answer["result"] = result;
    Ok(answer)
}

/// Run a toolset batch in order, stopping at the first member that fails (its failure is
/// recorded; the rest are not run). Only a batch that is malformed as a whole fails the call.
pub async fn toolset<S: Screen>(
    screen: &mut S,
    batch: &ComputerToolset,
    sizing: Sizing,
) -> Result<Value, Failure> {
    pure::check_batch(batch)?;
    let scale = scale_of(screen, sizing).await?;
    let mut results = Vec::with_capacity(batch.actions.len());
    for call in &batch.actions {
        let ran = match pure::check(call.name, &call.input) {
            Ok(()) => {
                one(
                    screen,
                    &scale,
                    sizing.budget,
                    call.name,
                    &call.input,
                    Mode::Toolset,
                )
                .await
            }
            Err(e) => Err(e.into()),
        };
        match ran {
            Ok(mut result) => {
                result["is_error"] = json!(false);
                results.push(result);
            }
            Err(failure) => {
                results.push(
                    json!({"is_error": true, "code": failure.code, "message": failure.message}),
                );
                break;
            }
        }
    }
    let mut answer = header(screen, &scale, "computer_toolset_20260801");
    answer["results"] = json!(results);
    Ok(answer)
}

fn missing(action: ComputerAction, field: &'static str) -> Failure {
    pure::ComputerError::InputMissing {
        action: action.name(),
        field,
    }
    .into()
}

fn needed<T>(value: Option<T>, action: ComputerAction, field: &'static str) -> Result<T, Failure> {
    value.ok_or_else(|| missing(action, field))
}

/// The screenshot at the agent's size.
async fn shot<S: Screen>(screen: &mut S, scale: &Scale) -> Result<String, Failure> {
    let png = screen.capture().await?;
    Ok(base64(&screenshots::fit(&png, scale.shot)?))
}

/// Run one action (already checked against its contract).
async fn one<S: Screen>(
    screen: &mut S,
    scale: &Scale,
    budget: Budget,
    action: ComputerAction,
    input: &ComputerInput,
    mode: Mode,
) -> Result<Value, Failure> {
    use ComputerAction as A;
    let real = |p: [u32; 2]| scale.to_screen(p).map_err(Failure::from);
    let at = input.coordinate.map(real).transpose()?;
    let held = input.text.as_deref().filter(|t| !t.is_empty());
    let text = || needed(input.text.as_deref(), action, "text");
    let seconds =
        || needed(input.duration, action, "duration").map(|d| Duration::from_secs_f64(d.max(0.0)));
    let click = |button, count| Gesture::Click { button, count };
    let mut images = Vec::new();
    let target = match action {
        A::Key => screen.key(text()?, input.repeat.unwrap_or(1)).await?,
        A::Type => screen.type_text(text()?).await?,
        A::HoldKey => screen.hold_key(text()?, seconds()?).await?,
        A::MouseMove => screen.pointer(at, Gesture::Move, None).await?,
        A::LeftClick => screen.pointer(at, click(Button::Left, 1), held).await?,
        A::RightClick => screen.pointer(at, click(Button::Right, 1), held).await?,
        A::MiddleClick => screen.pointer(at, click(Button::Middle, 1), held).await?,
        A::DoubleClick => screen.pointer(at, click(Button::Left, 2), held).await?,
        A::TripleClick => screen.pointer(at, click(Button::Left, 3), held).await?,
        A::LeftClickDrag => {
            let from = real(needed(input.start_coordinate, action, "start_coordinate")?)?;
            let to = at.ok_or_else(|| missing(action, "coordinate"))?;
            screen
                .pointer(Some(from), Gesture::Drag { to }, held)
                .await?
        }
        A::LeftMouseDown => screen.pointer(at, Gesture::Press, None).await?,
        A::LeftMouseUp => screen.pointer(at, Gesture::Release, None).await?,
        A::Scroll => {
            let gesture = Gesture::Scroll {
                direction: needed(input.scroll_direction, action, "scroll_direction")?,
                clicks: needed(input.scroll_amount, action, "scroll_amount")?,
            };
            screen.pointer(at, gesture, held).await?
        }
        A::Wait => {
            screen.sleep(seconds()?).await;
            Value::Null
        }
        A::CursorPosition => Value::Null,
        A::Screenshot => {
            images.push(shot(screen, scale).await?);
            Value::Null
        }
        A::Zoom => {
            let region = scale.region_to_screen(needed(input.region, action, "region")?)?;
            let [x0, y0, x1, y1] = region;
            let size = budget.zoomed([x1 - x0, y1 - y0], mode == Mode::Toolset);
            let png = screen.capture().await?;
            images.push(base64(&screenshots::zoom(&png, region, size)?));
            Value::Null
        }
    };
    let sent_input = !matches!(
        action,
        A::Screenshot | A::Zoom | A::CursorPosition | A::Wait
    );
    match mode {
        Mode::Legacy if !matches!(action, A::Screenshot | A::Zoom | A::CursorPosition) => {
            screen.sleep(Duration::from_millis(SETTLE_MS)).await;
            images.push(shot(screen, scale).await?);
        }
        // The next member is judged against the focus this one left (a click's window
        // manager moves it a moment later), so the screen gets that moment.
        Mode::Toolset if sent_input => {
            screen.sleep(Duration::from_millis(MEMBER_SETTLE_MS)).await;
        }
        Mode::Legacy | Mode::Toolset => {}
    }
    let cursor = scale.to_shot(screen.cursor().await?);
    let mut result = json!({"cursor": cursor, pure::IMAGES_KEY: images});
    if !target.is_null() {
        result["target"] = target;
    }
    Ok(result)
}
