//! What happens inside the current tab's page: input, reading it, waiting on it.
//!
//! The scripts here are aido's own (reading `innerText`, setting a field's value); the
//! agent's scripts go through [`Browser::evaluate`] alone, which `allow_script` guards.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::answer::{
    Clicked, Evaluated, Filled, Found, Locator, PageText, Screenshot, Scrolled, Snapshot,
};
use crate::browser::Browser;
use crate::cdp::millis;
use crate::error::BrowserError;
use crate::keys::{self, Key};
use crate::snapshot;

/// Sets a field's value as typing would leave it, and says what the element was.
const FILL_FUNCTION: &str = r"function(value) {
  const tag = this.localName;
  const notText = ['checkbox', 'radio', 'file', 'submit', 'button', 'image', 'reset', 'hidden'];
  if (tag === 'input' && notText.includes(this.type)) return null;
  if (tag === 'input' || tag === 'textarea') {
    const proto = tag === 'input' ? HTMLInputElement.prototype : HTMLTextAreaElement.prototype;
    this.focus();
    Object.getOwnPropertyDescriptor(proto, 'value').set.call(this, value);
  } else if (this.isContentEditable) {
    this.focus();
    this.textContent = value;
  } else {
    return null;
  }
  this.dispatchEvent(new Event('input', { bubbles: true }));
  this.dispatchEvent(new Event('change', { bubbles: true }));
  return tag === 'input' || tag === 'textarea' ? this.value : this.textContent;
}";

/// Chooses a select's option by value, then by label; `false` if it is not a select,
/// `null` if no option matches.
const SELECT_FUNCTION: &str = r"function(option) {
  if (this.localName !== 'select') return false;
  const options = [...this.options];
  const found = options.find(o => o.value === option)
    || options.find(o => o.label.trim() === option || o.text.trim() === option);
  if (!found) return null;
  found.selected = true;
  this.dispatchEvent(new Event('input', { bubbles: true }));
  this.dispatchEvent(new Event('change', { bubbles: true }));
  return found.value;
}";

impl Browser {
    /// Click the element a snapshot named (scrolled into view first), at its center.
    pub async fn click(&mut self, reference: &str) -> Result<Clicked, BrowserError> {
        let (x, y) = self.center_of(reference).await?;
        self.click_at(x, y).await
    }

    /// Click the left button at (`x`, `y`) in CSS pixels of the viewport.
    pub async fn click_at(&mut self, x: f64, y: f64) -> Result<Clicked, BrowserError> {
        let session = self.tab()?.session.clone();
        for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
            let mut event = json!({ "type": kind, "x": x, "y": y, "buttons": buttons });
            if kind != "mouseMoved" {
                event["button"] = json!("left");
                event["clickCount"] = json!(1);
            }
            self.cdp
                .call("Input.dispatchMouseEvent", event, Some(&session))
                .await?;
        }
        Ok(Clicked { x, y })
    }

    /// Type `text` into the focused element, key by key (a newline presses Enter, a tab
    /// Tab).
    pub async fn type_text(&mut self, text: &str) -> Result<usize, BrowserError> {
        let count = text.chars().count();
        self.check_chars(count)?;
        for c in text.chars() {
            let key = match c {
                '\n' | '\r' => keys::key("Enter"),
                '\t' => keys::key("Tab"),
                c => Some(keys::character(c)),
            };
            if let Some(key) = key {
                self.send_key(&key).await?;
            }
        }
        Ok(count)
    }

    /// Press and release one key (`Enter`, `Tab`, `Escape`, `ArrowDown`, `a`, ...).
    pub async fn press(&mut self, name: &str) -> Result<(), BrowserError> {
        let key = keys::key(name).ok_or_else(|| BrowserError::KeyUnknown {
            name: name.to_owned(),
        })?;
        self.send_key(&key).await
    }

    /// Scroll by (`dx`, `dy`) CSS pixels with the wheel at the viewport's center.
    pub async fn scroll(&mut self, dx: f64, dy: f64) -> Result<Scrolled, BrowserError> {
        let session = self.tab()?.session.clone();
        let x = f64::from(self.options.viewport_width) / 2.0;
        let y = f64::from(self.options.viewport_height) / 2.0;
        let wheel = json!({ "type": "mouseWheel", "x": x, "y": y, "deltaX": dx, "deltaY": dy });
        self.cdp
            .call("Input.dispatchMouseEvent", wheel, Some(&session))
            .await?;
        let position = self
            .internal_eval("[window.scrollX, window.scrollY]")
            .await?;
        Ok(Scrolled {
            x: position
                .pointer("/0")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
            y: position
                .pointer("/1")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        })
    }

    /// Set a text field's (input, textarea, editable element) value, firing `input` and
    /// `change` as typing would.
    pub async fn fill(&mut self, reference: &str, value: &str) -> Result<Filled, BrowserError> {
        self.check_chars(value.chars().count())?;
        let answer = self.call_on(reference, FILL_FUNCTION, value).await?;
        match answer {
            Value::String(value) => Ok(Filled {
                reference: reference.to_owned(),
                value,
            }),
            _ => Err(BrowserError::NotAField {
                reference: reference.to_owned(),
                expected: "an input, a textarea or an editable element",
            }),
        }
    }

    /// Choose a select's option by its value or its label.
    pub async fn select(&mut self, reference: &str, option: &str) -> Result<Filled, BrowserError> {
        match self.call_on(reference, SELECT_FUNCTION, option).await? {
            Value::String(value) => Ok(Filled {
                reference: reference.to_owned(),
                value,
            }),
            Value::Null => Err(BrowserError::OptionMissing {
                reference: reference.to_owned(),
                option: option.to_owned(),
            }),
            _ => Err(BrowserError::NotAField {
                reference: reference.to_owned(),
                expected: "a select",
            }),
        }
    }

    /// Wait until the page's visible text contains `text`.
    pub async fn wait_for_text(
        &mut self,
        text: &str,
        timeout_ms: u64,
    ) -> Result<Found, BrowserError> {
        let needle =
            serde_json::to_string(text).map_err(|e| BrowserError::protocol("wait_for_text", e))?;
        let probe = format!("!!document.body && document.body.innerText.includes({needle})");
        self.poll_true("the text", &probe, timeout_ms).await
    }

    /// Wait until an element is on the page: a snapshot's reference still attached, or a
    /// CSS selector matching.
    pub async fn wait_for(
        &mut self,
        locator: &Locator,
        timeout_ms: u64,
    ) -> Result<Found, BrowserError> {
        match locator {
            Locator::Css(selector) => {
                let selector = serde_json::to_string(selector)
                    .map_err(|e| BrowserError::protocol("wait_for", e))?;
                let probe = format!("!!document.querySelector({selector})");
                // A selector that does not parse throws at once: say so, do not wait.
                self.internal_eval(&probe).await?;
                self.poll_true("the element", &probe, timeout_ms).await
            }
            Locator::Ref(reference) => {
                backend_id(reference)?;
                self.poll("the element", timeout_ms, |browser| {
                    let reference = reference.clone();
                    async move {
                        let connected = "function() { return this.isConnected; }";
                        match browser.call_on(&reference, connected, "").await {
                            Ok(value) => Ok(value == json!(true)),
                            Err(BrowserError::RefUnknown { .. }) => Ok(false),
                            Err(e) => Err(e),
                        }
                    }
                })
                .await
            }
        }
    }

    /// The page as an accessibility tree with element references.
    pub async fn snapshot(&mut self) -> Result<Snapshot, BrowserError> {
        let tab = self.tab()?.clone();
        let tree = self
            .cdp
            .call("Accessibility.getFullAXTree", json!({}), Some(&tab.session))
            .await?;
        let nodes = tree
            .get("nodes")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let (nodes, truncated) = snapshot::flatten(nodes, self.options.limits.snapshot_nodes_max);
        let place = self
            .internal_eval("[location.href, document.title]")
            .await?;
        Ok(Snapshot {
            url: string_at(&place, "/0"),
            title: string_at(&place, "/1"),
            nodes,
            truncated,
        })
    }

    /// The elements of the page a description names (`search bar`), best first, at most
    /// `max` (see [`snapshot::find`]).
    pub async fn find(&mut self, query: &str, max: usize) -> Result<Snapshot, BrowserError> {
        let mut page = self.snapshot().await?;
        page.nodes = snapshot::find(&page.nodes, query, max);
        Ok(page)
    }

    /// The page's visible text (cut at `text_bytes_max`).
    pub async fn text(&mut self) -> Result<PageText, BrowserError> {
        let page = self
            .internal_eval("[location.href, document.body ? document.body.innerText : '']")
            .await?;
        let mut text = string_at(&page, "/1");
        let max = self.options.limits.text_bytes_max;
        let truncated = text.len() > max;
        if truncated {
            let cut = (0..=max)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            text.truncate(cut);
        }
        Ok(PageText {
            url: string_at(&page, "/0"),
            text,
            truncated,
        })
    }

    /// A PNG of the current tab's viewport.
    pub async fn screenshot(&mut self) -> Result<Screenshot, BrowserError> {
        self.capture(json!({ "format": "png" })).await
    }

    /// `Page.captureScreenshot` with these parameters, as a PNG and its size.
    pub(crate) async fn capture(&mut self, params: Value) -> Result<Screenshot, BrowserError> {
        let session = self.tab()?.session.clone();
        let reply = self
            .cdp
            .call("Page.captureScreenshot", params, Some(&session))
            .await?;
        let data = reply
            .get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| BrowserError::protocol("Page.captureScreenshot", "no data"))?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| BrowserError::protocol("Page.captureScreenshot", e))?;
        let (width, height) = png_size(&png)
            .ok_or_else(|| BrowserError::protocol("Page.captureScreenshot", "not a PNG"))?;
        Ok(Screenshot { png, width, height })
    }

    /// Run the agent's JavaScript in the page and return its JSON value (promises awaited).
    /// Refused with `browser_script_refused` unless the options allow scripts.
    pub async fn evaluate(&mut self, script: &str) -> Result<Evaluated, BrowserError> {
        if !self.options.allow_script {
            return Err(BrowserError::ScriptRefused);
        }
        let max = self.options.limits.script_bytes_max;
        if script.len() > max {
            return Err(BrowserError::TooLarge {
                what: "the script in bytes",
                size: script.len(),
                max,
            });
        }
        Ok(Evaluated {
            value: self.eval(script, true).await?,
        })
    }

    /// aido's own expression in the page (never the agent's).
    pub(crate) async fn internal_eval(&self, expression: &str) -> Result<Value, BrowserError> {
        self.eval(expression, false).await
    }

    pub(crate) async fn eval(
        &self,
        expression: &str,
        await_promise: bool,
    ) -> Result<Value, BrowserError> {
        let session = self.tab()?.session.clone();
        let params = json!({
            "expression": expression,
            "returnByValue": true,
            "awaitPromise": await_promise,
        });
        let reply = self
            .cdp
            .call("Runtime.evaluate", params, Some(&session))
            .await?;
        result_value(reply)
    }

    /// Call `function` with `argument` on the element `reference` names.
    pub(crate) async fn call_on(
        &self,
        reference: &str,
        function: &str,
        argument: &str,
    ) -> Result<Value, BrowserError> {
        let backend = backend_id(reference)?;
        let session = self.tab()?.session.clone();
        let resolved = self
            .cdp
            .call(
                "DOM.resolveNode",
                json!({ "backendNodeId": backend }),
                Some(&session),
            )
            .await
            .map_err(|e| node_error(e, reference))?;
        let object = resolved
            .pointer("/object/objectId")
            .and_then(Value::as_str)
            .ok_or_else(|| BrowserError::RefUnknown {
                reference: reference.to_owned(),
            })?;
        let params = json!({
            "functionDeclaration": function,
            "objectId": object,
            "arguments": [{ "value": argument }],
            "returnByValue": true,
        });
        let reply = self
            .cdp
            .call("Runtime.callFunctionOn", params, Some(&session))
            .await?;
        // Release the handle: a long session would otherwise pin every element it touched.
        let _ = self
            .cdp
            .call(
                "Runtime.releaseObject",
                json!({ "objectId": object }),
                Some(&session),
            )
            .await;
        result_value(reply)
    }

    async fn send_key(&self, key: &Key) -> Result<(), BrowserError> {
        let session = self.tab()?.session.clone();
        let mut down = json!({
            "type": if key.text.is_some() { "keyDown" } else { "rawKeyDown" },
            "key": key.key,
            "code": key.code,
            "windowsVirtualKeyCode": key.virtual_code,
        });
        if let Some(text) = &key.text {
            down["text"] = json!(text);
            down["unmodifiedText"] = json!(text);
        }
        let up = json!({
            "type": "keyUp",
            "key": key.key,
            "code": key.code,
            "windowsVirtualKeyCode": key.virtual_code,
        });
        for event in [down, up] {
            self.cdp
                .call("Input.dispatchKeyEvent", event, Some(&session))
                .await?;
        }
        Ok(())
    }

    pub(crate) fn check_chars(&self, count: usize) -> Result<(), BrowserError> {
        let max = self.options.limits.type_chars_max;
        if count > max {
            return Err(BrowserError::TooLarge {
                what: "the text in characters",
                size: count,
                max,
            });
        }
        Ok(())
    }

    /// Ask `probe` every `wait_poll_ms` until it says yes or the deadline passes. A page in
    /// the middle of a navigation has no context to ask: that counts as "not yet".
    /// [`Self::poll`] until the page-side expression `probe` is true.
    async fn poll_true(
        &self,
        what: &'static str,
        probe: &str,
        timeout_ms: u64,
    ) -> Result<Found, BrowserError> {
        self.poll(what, timeout_ms, |browser| async move {
            browser.internal_eval(probe).await.map(|v| v == json!(true))
        })
        .await
    }

    async fn poll<'a, F, Fut>(
        &'a self,
        what: &'static str,
        timeout_ms: u64,
        probe: F,
    ) -> Result<Found, BrowserError>
    where
        F: Fn(&'a Self) -> Fut,
        Fut: Future<Output = Result<bool, BrowserError>>,
    {
        let timeout = self.wait_timeout(timeout_ms)?;
        let started = tokio::time::Instant::now();
        let every = Duration::from_millis(self.options.limits.wait_poll_ms.max(1));
        loop {
            match probe(self).await {
                Ok(true) => {
                    return Ok(Found {
                        elapsed_ms: millis(started.elapsed()),
                    });
                }
                Ok(false)
                | Err(BrowserError::Protocol { .. } | BrowserError::ScriptFailed { .. }) => {}
                Err(e) => return Err(e),
            }
            if started.elapsed() >= timeout {
                return Err(BrowserError::Timeout { what, timeout_ms });
            }
            tokio::time::sleep(every).await;
        }
    }
}

impl Browser {
    /// The current tab's console messages and uncaught exceptions since the last read (or
    /// since aido attached to the tab).
    pub fn read_console(
        &mut self,
    ) -> Result<crate::logs::Read<crate::logs::ConsoleEntry>, BrowserError> {
        let session = self.tab()?.session.clone();
        Ok(self.logs.console(&session))
    }

    /// The JavaScript dialogs pages opened since the last look, each answered already (an
    /// alert or a leave-page question accepted, a confirm or a prompt dismissed).
    pub fn dialogs(&mut self) -> Vec<crate::logs::Dialog> {
        self.logs.dialogs()
    }

    /// The current tab's requests since the last read (or since aido attached to the tab).
    pub fn read_network(
        &mut self,
    ) -> Result<crate::logs::Read<crate::logs::NetworkEntry>, BrowserError> {
        let session = self.tab()?.session.clone();
        Ok(self.logs.network(&session))
    }
}

pub(crate) fn backend_id(reference: &str) -> Result<i64, BrowserError> {
    snapshot::backend_id(reference).ok_or_else(|| BrowserError::RefUnknown {
        reference: reference.to_owned(),
    })
}

/// A DevTools refusal about a node means the reference names nothing (any more).
pub(crate) fn node_error(error: BrowserError, reference: &str) -> BrowserError {
    match error {
        BrowserError::Protocol { .. } => BrowserError::RefUnknown {
            reference: reference.to_owned(),
        },
        other => other,
    }
}

/// `Runtime.evaluate` / `callFunctionOn`'s value, or the exception it threw.
fn result_value(mut reply: Value) -> Result<Value, BrowserError> {
    if let Some(exception) = reply.get("exceptionDetails") {
        let why = exception
            .pointer("/exception/description")
            .or_else(|| exception.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("an exception")
            .to_owned();
        return Err(BrowserError::ScriptFailed { why });
    }
    Ok(reply
        .pointer_mut("/result/value")
        .map(Value::take)
        .unwrap_or(Value::Null))
}

fn string_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A PNG's width and height from its IHDR chunk.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || !png.starts_with(b"\x89PNG\r\n\x1a\n") || &png[12..16] != b"IHDR" {
        return None;
    }
    let word = |at: usize| Some(u32::from_be_bytes(png.get(at..at + 4)?.try_into().ok()?));
    Some((word(16)?, word(20)?))
}
