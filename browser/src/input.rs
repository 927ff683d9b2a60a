//! Input as a person gives it: pointer gestures with any button and held modifiers, drags, key
//! chords and held keys, form fields of every kind, files for a file input; and a zoomed look
//! at part of the viewport. What Anthropic's browser toolset asks of a browser beyond the
//! primitives in `page.rs`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::answer::{Clicked, Filled, Screenshot};
use crate::browser::Browser;
use crate::error::BrowserError;
use crate::keys::{self, Chord, Key};

/// Steps a drag moves through between its ends, so pages that track `mousemove` see a path.
const DRAG_STEPS: u32 = 8;
/// Longest wait for a wheel's scroll to show in the page's position.
const SCROLL_SETTLE_MS: u64 = 500;
/// How much a zoom may enlarge its region.
const ZOOM_SCALE_MAX: f64 = 4.0;

/// A pointer button.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Button {
    /// The left button.
    Left,
    /// The middle button.
    Middle,
    /// The right button.
    Right,
}

impl Button {
    fn name(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::Middle => "middle",
            Self::Right => "right",
        }
    }

    /// Its bit in DevTools' `buttons` (what is held).
    fn bit(self) -> u32 {
        match self {
            Self::Left => 1,
            Self::Right => 2,
            Self::Middle => 4,
        }
    }
}

/// What the pointer does at a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gesture {
    /// Only move there (a hover).
    Move,
    /// Press and release `count` times (1 to 3).
    Click {
        /// Which button.
        button: Button,
        /// How many clicks (a double click is 2).
        count: u32,
    },
    /// Press the left button and keep it pressed.
    Down,
    /// Release the left button.
    Up,
    /// Turn the wheel by (`dx`, `dy`) CSS pixels.
    Wheel {
        /// Rightwards.
        dx: f64,
        /// Downwards.
        dy: f64,
    },
}

/// Sets a form element's value as a person would leave it: a checkbox or radio checked or not
/// (a click, so the page's handlers run), a select's option chosen by value or label, a text
/// field typed; `{value}`, `{missing: true}` for an option the select lacks, or `{expected}`
/// when the element is not a field that takes such a value.
const FORM_FUNCTION: &str = r"function(json) {
  const value = JSON.parse(json);
  const tag = this.localName;
  const fire = () => {
    this.dispatchEvent(new Event('input', { bubbles: true }));
    this.dispatchEvent(new Event('change', { bubbles: true }));
  };
  if (tag === 'input' && (this.type === 'checkbox' || this.type === 'radio')) {
    if (typeof value !== 'boolean') return { expected: 'true or false (a checkbox or a radio button)' };
    if (this.checked !== value) this.click();
    return { value: String(this.checked) };
  }
  if (tag === 'select') {
    const want = String(value);
    const options = [...this.options];
    const found = options.find(o => o.value === want)
      || options.find(o => o.label.trim() === want || o.text.trim() === want);
    if (!found) return { missing: true };
    found.selected = true;
    fire();
    return { value: found.value };
  }
  if (typeof value === 'boolean') return { expected: 'a checkbox or a radio button (for true or false)' };
  const text = String(value);
  const notText = ['checkbox', 'radio', 'file', 'submit', 'button', 'image', 'reset', 'hidden'];
  if (tag === 'input' && notText.includes(this.type)) return { expected: 'an input, a textarea, a select or an editable element' };
  if (tag === 'input' || tag === 'textarea') {
    const proto = tag === 'input' ? HTMLInputElement.prototype : HTMLTextAreaElement.prototype;
    this.focus();
    Object.getOwnPropertyDescriptor(proto, 'value').set.call(this, text);
  } else if (this.isContentEditable) {
    this.focus();
    this.textContent = text;
  } else {
    return { expected: 'an input, a textarea, a select or an editable element' };
  }
  fire();
  return { value: tag === 'input' || tag === 'textarea' ? this.value : this.textContent };
}";

impl Browser {
    /// The viewport's size in CSS pixels.
    pub fn viewport(&self) -> (u32, u32) {
        (self.options.viewport_width, self.options.viewport_height)
    }

    /// The center of the element `reference` names, scrolled into view first, in CSS pixels
    /// of the viewport.
    pub async fn center_of(&mut self, reference: &str) -> Result<(f64, f64), BrowserError> {
        let backend = crate::page::backend_id(reference)?;
        let session = self.tab()?.session.clone();
        let node = json!({ "backendNodeId": backend });
        // Not every node can scroll (text nodes); its quads still say where it is.
        let _ = self
            .cdp
            .call("DOM.scrollIntoViewIfNeeded", node.clone(), Some(&session))
            .await;
        let quads = self
            .cdp
            .call("DOM.getContentQuads", node, Some(&session))
            .await
            .map_err(|e| crate::page::node_error(e, reference))?;
        let quad = quads
            .pointer("/quads/0")
            .and_then(Value::as_array)
            .filter(|q| q.len() == 8)
            .ok_or_else(|| BrowserError::ElementMissing {
                target: reference.to_owned(),
            })?;
        let coordinate = |offset: usize| {
            (0..4)
                .filter_map(|i| quad[i * 2 + offset].as_f64())
                .sum::<f64>()
                / 4.0
        };
        Ok((coordinate(0), coordinate(1)))
    }

    /// Scroll the element `reference` names into view; answers where its center is now.
    pub async fn scroll_into_view(&mut self, reference: &str) -> Result<Clicked, BrowserError> {
        let (x, y) = self.center_of(reference).await?;
        Ok(Clicked { x, y })
    }

    /// A pointer gesture at (`x`, `y`) in CSS pixels of the viewport, with the chord
    /// `modifiers` (`shift`, `ctrl+shift`) held around it.
    pub async fn pointer(
        &mut self,
        x: f64,
        y: f64,
        gesture: Gesture,
        modifiers: Option<&str>,
    ) -> Result<Clicked, BrowserError> {
        let held = match modifiers {
            Some(written) => modifiers_of(written)?,
            None => Chord {
                held: Vec::new(),
                bits: 0,
                key: None,
            },
        };
        for key in &held.held {
            self.key_event("rawKeyDown", key, held.bits).await?;
        }
        let moved = json!({ "type": "mouseMoved", "x": x, "y": y, "modifiers": held.bits });
        let events: Vec<Value> = match gesture {
            Gesture::Move => vec![moved],
            Gesture::Click { button, count } => {
                let mut events = vec![moved];
                for click in 1..=count.clamp(1, 3) {
                    for (kind, buttons) in [("mousePressed", button.bit()), ("mouseReleased", 0)] {
                        events.push(json!({
                            "type": kind, "x": x, "y": y, "button": button.name(),
                            "buttons": buttons, "clickCount": click, "modifiers": held.bits,
                        }));
                    }
                }
                events
            }
            Gesture::Down | Gesture::Up => {
                let kind = if gesture == Gesture::Down {
                    "mousePressed"
                } else {
                    "mouseReleased"
                };
                let buttons = if gesture == Gesture::Down { 1 } else { 0 };
                vec![
                    json!({ "type": "mouseMoved", "x": x, "y": y, "buttons": 1 - buttons, "modifiers": held.bits }),
                    json!({
                        "type": kind, "x": x, "y": y, "button": "left", "buttons": buttons,
                        "clickCount": 1, "modifiers": held.bits,
                    }),
                ]
            }
            Gesture::Wheel { dx, dy } => vec![
                moved,
                json!({ "type": "mouseWheel", "x": x, "y": y, "deltaX": dx, "deltaY": dy, "modifiers": held.bits }),
            ],
        };
        let session = self.tab()?.session.clone();
        let before = match gesture {
            Gesture::Wheel { .. } => Some(self.scroll_position().await),
            _ => None,
        };
        for event in events {
            self.cdp
                .call("Input.dispatchMouseEvent", event, Some(&session))
                .await?;
        }
        for key in held.held.iter().rev() {
            self.key_event("keyUp", key, 0).await?;
        }
        if let Some(before) = before {
            self.scrolled_from(before).await;
        }
        Ok(Clicked { x, y })
    }

    async fn scroll_position(&self) -> Value {
        self.internal_eval("[window.scrollX, window.scrollY]")
            .await
            .unwrap_or(Value::Null)
    }

    /// A wheel scrolls after its event is answered: wait until the page's position moves (a
    /// short while at most: the wheel may have scrolled an inner element, or nothing), then a
    /// frame, so the page's `scroll` handlers have run when the next call reads it.
    async fn scrolled_from(&self, before: Value) {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(SCROLL_SETTLE_MS);
        while tokio::time::Instant::now() < deadline {
            if self.scroll_position().await != before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let frame = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))";
        let _ = self.eval(frame, true).await;
    }

    /// Press the left button at `from`, move to `to` through a few steps, release.
    pub async fn drag(
        &mut self,
        from: (f64, f64),
        to: (f64, f64),
    ) -> Result<Clicked, BrowserError> {
        self.pointer(from.0, from.1, Gesture::Down, None).await?;
        let session = self.tab()?.session.clone();
        for step in 1..=DRAG_STEPS {
            let t = f64::from(step) / f64::from(DRAG_STEPS);
            let event = json!({
                "type": "mouseMoved",
                "x": from.0 + (to.0 - from.0) * t,
                "y": from.1 + (to.1 - from.1) * t,
                "button": "left",
                "buttons": 1,
            });
            self.cdp
                .call("Input.dispatchMouseEvent", event, Some(&session))
                .await?;
        }
        self.pointer(to.0, to.1, Gesture::Up, None).await
    }

    /// Press keys: chords (`ctrl+a`) separated by spaces (`Backspace Backspace Delete`), the
    /// whole sequence `repeat` times; answers how many chords were pressed. Every name is
    /// checked before the first key goes.
    pub async fn keys(&mut self, sequence: &str, repeat: u32) -> Result<usize, BrowserError> {
        let chords = sequence
            .split_whitespace()
            .map(|written| {
                keys::chord(written).ok_or_else(|| BrowserError::KeyUnknown {
                    name: written.to_owned(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if chords.is_empty() {
            return Err(BrowserError::KeyUnknown {
                name: sequence.to_owned(),
            });
        }
        let presses = chords.len() * repeat as usize;
        self.check_chars(presses)?;
        for _ in 0..repeat {
            for chord in &chords {
                self.press_chord(chord, None).await?;
            }
        }
        Ok(presses)
    }

    /// Hold a chord down for `hold`, then release it.
    pub async fn hold_keys(&mut self, written: &str, hold: Duration) -> Result<(), BrowserError> {
        let chord = keys::chord(written).ok_or_else(|| BrowserError::KeyUnknown {
            name: written.to_owned(),
        })?;
        self.press_chord(&chord, Some(hold)).await
    }

    async fn press_chord(&self, chord: &Chord, hold: Option<Duration>) -> Result<(), BrowserError> {
        let mut bits = 0;
        for key in &chord.held {
            bits |= keys::modifier(&key.key).map_or(0, |(_, bit)| bit);
            self.key_event("rawKeyDown", key, bits).await?;
        }
        if let Some(key) = &chord.key {
            let kind = if key.text.is_some() {
                "keyDown"
            } else {
                "rawKeyDown"
            };
            self.key_event(kind, key, chord.bits).await?;
            if let Some(hold) = hold {
                tokio::time::sleep(hold).await;
            }
            self.key_event("keyUp", key, chord.bits).await?;
        } else if let Some(hold) = hold {
            tokio::time::sleep(hold).await;
        }
        for key in chord.held.iter().rev() {
            bits &= !keys::modifier(&key.key).map_or(0, |(_, bit)| bit);
            self.key_event("keyUp", key, bits).await?;
        }
        Ok(())
    }

    async fn key_event(&self, kind: &str, key: &Key, modifiers: u32) -> Result<(), BrowserError> {
        let session = self.tab()?.session.clone();
        let mut event = json!({
            "type": kind,
            "key": key.key,
            "code": key.code,
            "windowsVirtualKeyCode": key.virtual_code,
            "modifiers": modifiers,
        });
        if kind == "keyDown"
            && let Some(text) = &key.text
        {
            event["text"] = json!(text);
            event["unmodifiedText"] = json!(text);
        }
        self.cdp
            .call("Input.dispatchKeyEvent", event, Some(&session))
            .await?;
        Ok(())
    }

    /// A PNG of the viewport's region `[x0, y0, x1, y1]` (CSS pixels), enlarged to fill the
    /// viewport's size as far as it can (at most four times).
    pub async fn zoom(&mut self, region: [f64; 4]) -> Result<Screenshot, BrowserError> {
        let [x0, y0, x1, y1] = region;
        let (width, height) = (x1 - x0, y1 - y0);
        if !(width > 0.0 && height > 0.0 && x0 >= 0.0 && y0 >= 0.0) {
            return Err(BrowserError::OptionsInvalid {
                why: format!("the region {region:?} has no area (x0 < x1 and y0 < y1, from 0)"),
            });
        }
        let (vw, vh) = self.viewport();
        let scale = (f64::from(vw) / width)
            .min(f64::from(vh) / height)
            .clamp(1.0, ZOOM_SCALE_MAX);
        let clip = json!({ "x": x0, "y": y0, "width": width, "height": height, "scale": scale });
        self.capture(json!({ "format": "png", "clip": clip })).await
    }

    /// Set a form element's value: `true`/`false` for a checkbox or radio, an option's value
    /// or label for a select, text (or a number) for a text field.
    pub async fn form_input(
        &mut self,
        reference: &str,
        value: &Value,
    ) -> Result<Filled, BrowserError> {
        if let Value::String(text) = value {
            self.check_chars(text.chars().count())?;
        }
        let argument = value.to_string();
        let answer = self.call_on(reference, FORM_FUNCTION, &argument).await?;
        if let Some(value) = answer.get("value").and_then(Value::as_str) {
            return Ok(Filled {
                reference: reference.to_owned(),
                value: value.to_owned(),
            });
        }
        if answer.get("missing") == Some(&Value::Bool(true)) {
            return Err(BrowserError::OptionMissing {
                reference: reference.to_owned(),
                option: value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned),
            });
        }
        let expected = match answer.get("expected").and_then(Value::as_str) {
            Some(e) if e.starts_with("true") => "true or false (a checkbox or a radio button)",
            Some(e) if e.starts_with("a checkbox") => {
                "a checkbox or a radio button (for true or false)"
            }
            _ => "an input, a textarea, a select or an editable element",
        };
        Err(BrowserError::NotAField {
            reference: reference.to_owned(),
            expected,
        })
    }

    /// Give a file input these files (paths on this machine, which the caller has judged);
    /// answers how many it holds.
    pub async fn set_files(
        &mut self,
        reference: &str,
        paths: &[String],
    ) -> Result<usize, BrowserError> {
        let is_file_input =
            "function() { return this.localName === 'input' && this.type === 'file'; }";
        if self.call_on(reference, is_file_input, "").await? != json!(true) {
            return Err(BrowserError::NotAField {
                reference: reference.to_owned(),
                expected: "a file input",
            });
        }
        let backend = crate::page::backend_id(reference)?;
        let session = self.tab()?.session.clone();
        self.cdp
            .call(
                "DOM.setFileInputFiles",
                json!({ "files": paths, "backendNodeId": backend }),
                Some(&session),
            )
            .await
            .map_err(|e| crate::page::node_error(e, reference))?;
        Ok(paths.len())
    }
}

/// A chord of modifiers only (`shift`, `ctrl+shift`), as held around a pointer gesture.
fn modifiers_of(written: &str) -> Result<Chord, BrowserError> {
    let mut held = Vec::new();
    let mut bits = 0;
    for part in written.split('+').filter(|p| !p.trim().is_empty()) {
        let (key, bit) = keys::modifier(part.trim()).ok_or_else(|| BrowserError::KeyUnknown {
            name: format!("{part} (a modifier: shift, ctrl, alt or cmd)"),
        })?;
        held.push(key);
        bits |= bit;
    }
    Ok(Chord {
        held,
        bits,
        key: None,
    })
}
