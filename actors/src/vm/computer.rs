//! Anthropic's computer-use tool on a machine. After every action except `screenshot`,
//! `zoom`, `cursor_position` and `wait`, the result carries a fresh screenshot, as the
//! reference implementation does, so agents see what their action did.

use std::time::Duration;

use aido_actions::vm::{Computer, ComputerAction, ScrollDirection};
use aido_actions::{Failure, Image, Outcome};
use aido_vm::{Machine, VmError};
use base64::Engine;
use serde_json::json;

use super::VmBodyError;
use crate::fs::Executed;

/// Longest hold_key or wait.
const DURATION_S_MAX: f64 = 60.0;
/// Most wheel steps one scroll sends.
const SCROLL_AMOUNT_MAX: u32 = 100;
/// Pause before the screenshot that follows an action, so the screen has redrawn.
const SETTLE_MS: u64 = 100;

fn failure(e: VmError) -> Failure {
    Failure::new(e.code(), e.to_string())
}

fn missing(what: &str, action: ComputerAction) -> Failure {
    Failure::from(VmBodyError::InvalidArguments {
        why: format!("{action:?} needs {what}"),
    })
}

fn image(png: &[u8]) -> Image {
    Image {
        mime: "image/png".into(),
        base64: base64::engine::general_purpose::STANDARD.encode(png),
    }
}

fn seconds(c: &Computer) -> Result<Duration, Failure> {
    let s = c.duration.ok_or_else(|| missing("duration", c.action))?;
    if !(0.0..=DURATION_S_MAX).contains(&s) {
        return Err(Failure::from(VmBodyError::InvalidArguments {
            why: format!("duration is 0 to {DURATION_S_MAX} seconds"),
        }));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Run one computer-use action.
pub(crate) async fn run(m: &Machine, c: &Computer) -> Result<Executed, Failure> {
    let here = |c: &Computer| {
        c.coordinate
            .map(|[x, y]| (x, y))
            .unwrap_or_else(|| m.cursor())
    };
    let mut screenshot_after = true;
    let mut text = String::from("done");
    let mut images = Vec::new();
    match c.action {
        ComputerAction::Key => {
            let keys = c
                .text
                .as_deref()
                .ok_or_else(|| missing("text (the keys)", c.action))?;
            m.key(keys).await.map_err(failure)?;
        }
        ComputerAction::Type => {
            let t = c.text.as_deref().ok_or_else(|| missing("text", c.action))?;
            m.type_text(t).await.map_err(failure)?;
        }
        ComputerAction::MouseMove => {
            let [x, y] = c
                .coordinate
                .ok_or_else(|| missing("coordinate", c.action))?;
            m.move_to(x, y).await.map_err(failure)?;
        }
        ComputerAction::LeftClick
        | ComputerAction::RightClick
        | ComputerAction::MiddleClick
        | ComputerAction::DoubleClick
        | ComputerAction::TripleClick => {
            let (button, count) = match c.action {
                ComputerAction::RightClick => ("right", 1),
                ComputerAction::MiddleClick => ("middle", 1),
                ComputerAction::DoubleClick => ("left", 2),
                ComputerAction::TripleClick => ("left", 3),
                _ => ("left", 1),
            };
            let (x, y) = here(c);
            if let Some(held) = c.text.as_deref() {
                m.hold(held, true).await.map_err(failure)?;
            }
            let clicked = m.click_n(x, y, button, count).await;
            if let Some(held) = c.text.as_deref() {
                m.hold(held, false).await.map_err(failure)?;
            }
            clicked.map_err(failure)?;
        }
        ComputerAction::LeftClickDrag => {
            let [fx, fy] = c
                .start_coordinate
                .ok_or_else(|| missing("start_coordinate", c.action))?;
            let [tx, ty] = c
                .coordinate
                .ok_or_else(|| missing("coordinate", c.action))?;
            m.drag((fx, fy), (tx, ty)).await.map_err(failure)?;
        }
        ComputerAction::LeftMouseDown | ComputerAction::LeftMouseUp => {
            if let Some([x, y]) = c.coordinate {
                m.move_to(x, y).await.map_err(failure)?;
            }
            m.button("left", c.action == ComputerAction::LeftMouseDown)
                .await
                .map_err(failure)?;
        }
        ComputerAction::Scroll => {
            let direction = c
                .scroll_direction
                .ok_or_else(|| missing("scroll_direction", c.action))?;
            let amount = c
                .scroll_amount
                .ok_or_else(|| missing("scroll_amount", c.action))?;
            if amount > SCROLL_AMOUNT_MAX {
                return Err(Failure::from(VmBodyError::InvalidArguments {
                    why: format!("scroll_amount is at most {SCROLL_AMOUNT_MAX}"),
                }));
            }
            let (x, y) = here(c);
            m.move_to(x, y).await.map_err(failure)?;
            let wheel = match direction {
                ScrollDirection::Up => "wheel-up",
                ScrollDirection::Down => "wheel-down",
                ScrollDirection::Left => "wheel-left",
                ScrollDirection::Right => "wheel-right",
            };
            if let Some(held) = c.text.as_deref() {
                m.hold(held, true).await.map_err(failure)?;
            }
            for _ in 0..amount {
                m.button(wheel, true).await.map_err(failure)?;
                m.button(wheel, false).await.map_err(failure)?;
            }
            if let Some(held) = c.text.as_deref() {
                m.hold(held, false).await.map_err(failure)?;
            }
        }
        ComputerAction::HoldKey => {
            let keys = c
                .text
                .as_deref()
                .ok_or_else(|| missing("text (the keys)", c.action))?;
            let wait = seconds(c)?;
            m.hold(keys, true).await.map_err(failure)?;
            tokio::time::sleep(wait).await;
            m.hold(keys, false).await.map_err(failure)?;
        }
        ComputerAction::Wait => {
            tokio::time::sleep(seconds(c)?).await;
        }
        ComputerAction::CursorPosition => {
            let (x, y) = m.cursor();
            text = format!("X={x},Y={y}");
            screenshot_after = false;
        }
        ComputerAction::Screenshot => {}
        ComputerAction::Zoom => {
            let region = c.region.ok_or_else(|| missing("region", c.action))?;
            let png = m.screenshot_png().await.map_err(failure)?;
            let part = aido_vm::image::crop_png(&png, region)
                .map_err(|e| Failure::from(VmBodyError::InvalidArguments { why: e.to_string() }))?;
            images.push(image(&part));
            screenshot_after = false;
        }
    }
    if screenshot_after {
        if c.action != ComputerAction::Screenshot {
            tokio::time::sleep(Duration::from_millis(SETTLE_MS)).await;
        }
        images.push(image(&m.screenshot_png().await.map_err(failure)?));
    }
    let (x, y) = m.cursor();
    let output = json!({"vm": c.vm, "action": c.action, "cursor": [x, y], "images": images.len()});
    Ok(Executed::new(Outcome {
        text,
        output,
        images,
        ..Outcome::default()
    }))
}
