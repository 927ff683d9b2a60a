//! A machine as a screen for Anthropic's computer-use tools (`aido_computer`): its
//! usb-tablet and keyboard take the input, QEMU's screendump is the screen. The adapter
//! itself (scaling, the after-action screenshot, the toolset batch) is shared with the
//! desktop body.

use std::time::Duration;

use aido_actions::Failure;
use aido_actions::computer::ScrollDirection;
use aido_vm::{Machine, VmError};
use serde_json::Value;

use aido_computer::{Button, Gesture, Screen};

fn failure(e: VmError) -> Failure {
    Failure::from(e)
}

/// A machine the computer-use tools drive.
pub(crate) struct MachineScreen<'a>(pub(crate) &'a Machine);

impl MachineScreen<'_> {
    /// Run `input` with the chord `held` pressed around it; the chord is released also when
    /// the input failed.
    async fn holding<F: std::future::Future<Output = Result<(), VmError>>>(
        &self,
        held: Option<&str>,
        input: F,
    ) -> Result<(), Failure> {
        if let Some(keys) = held {
            self.0.hold(keys, true).await.map_err(failure)?;
        }
        let done = input.await;
        if let Some(keys) = held {
            self.0.hold(keys, false).await.map_err(failure)?;
        }
        done.map_err(failure)
    }
}

impl Screen for MachineScreen<'_> {
    fn backend(&self) -> &'static str {
        "qemu"
    }

    async fn size(&mut self) -> Result<[u32; 2], Failure> {
        // A screendump tells the machine its screen's size (text or framebuffer mode).
        self.0.screenshot_png().await.map_err(failure)?;
        let (w, h) = self.0.screen_size();
        Ok([w, h])
    }

    async fn capture(&mut self) -> Result<Vec<u8>, Failure> {
        self.0.screenshot_png().await.map_err(failure)
    }

    async fn cursor(&mut self) -> Result<[u32; 2], Failure> {
        let (x, y) = self.0.cursor();
        Ok([x, y])
    }

    async fn pointer(
        &mut self,
        at: Option<[u32; 2]>,
        gesture: Gesture,
        held: Option<&str>,
    ) -> Result<Value, Failure> {
        let m = self.0;
        let [x, y] = match at {
            Some(p) => p,
            None => {
                let (x, y) = m.cursor();
                [x, y]
            }
        };
        match gesture {
            Gesture::Move => m.move_to(x, y).await.map_err(failure)?,
            Gesture::Click { button, count } => {
                let button = match button {
                    Button::Left => "left",
                    Button::Middle => "middle",
                    Button::Right => "right",
                };
                self.holding(held, m.click_n(x, y, button, count)).await?;
            }
            Gesture::Press | Gesture::Release => {
                m.move_to(x, y).await.map_err(failure)?;
                m.button("left", gesture == Gesture::Press)
                    .await
                    .map_err(failure)?;
            }
            Gesture::Scroll { direction, clicks } => {
                let wheel = match direction {
                    ScrollDirection::Up => "wheel-up",
                    ScrollDirection::Down => "wheel-down",
                    ScrollDirection::Left => "wheel-left",
                    ScrollDirection::Right => "wheel-right",
                };
                m.move_to(x, y).await.map_err(failure)?;
                self.holding(held, async {
                    for _ in 0..clicks {
                        m.button(wheel, true).await?;
                        m.button(wheel, false).await?;
                    }
                    Ok(())
                })
                .await?;
            }
            Gesture::Drag { to: [tx, ty] } => {
                self.holding(held, m.drag((x, y), (tx, ty))).await?;
            }
        }
        Ok(Value::Null)
    }

    async fn key(&mut self, keys: &str, repeat: u32) -> Result<Value, Failure> {
        for _ in 0..repeat {
            self.0.key(keys).await.map_err(failure)?;
        }
        Ok(Value::Null)
    }

    async fn hold_key(&mut self, keys: &str, hold: Duration) -> Result<Value, Failure> {
        self.holding(Some(keys), async {
            tokio::time::sleep(hold).await;
            Ok(())
        })
        .await?;
        Ok(Value::Null)
    }

    async fn type_text(&mut self, text: &str) -> Result<Value, Failure> {
        self.0.type_text(text).await.map_err(failure)?;
        Ok(Value::Null)
    }

    async fn sleep(&mut self, wait: Duration) {
        tokio::time::sleep(wait).await;
    }
}
