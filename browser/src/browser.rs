//! The browser: its process, its DevTools connection, its tabs and the navigation between
//! pages. What happens inside a page (input, reading, waits) is in `page.rs`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::answer::{Download, Navigated, TabInfo};
use crate::cdp::{Cdp, Event, millis};
use crate::error::BrowserError;
use crate::launch::{Options, Process};

/// Download events kept until a caller waits for them.
const DOWNLOAD_EVENTS_QUEUED_MAX: usize = 256;
/// Downloads begun and not yet finished that are remembered (their URL and name).
const DOWNLOADS_BEGUN_MAX: usize = 64;

/// A tab this browser is attached to.
#[derive(Clone, Debug)]
pub(crate) struct Tab {
    /// The DevTools target id (the tab's id in answers).
    pub id: String,
    /// The flat session its commands go to.
    pub session: String,
}

/// A headless Chromium behind the egress proxy, with a private profile. Dropping it kills
/// Chromium and every process it started.
pub struct Browser {
    pub(crate) cdp: Cdp,
    pub(crate) options: Options,
    pub(crate) tabs: Vec<Tab>,
    pub(crate) current: Option<usize>,
    downloads: mpsc::Receiver<Event>,
    /// Downloads begun and not finished: guid, URL, suggested name.
    begun: Vec<(String, String, String)>,
    pub(crate) logs: crate::logs::Logs,
    product: String,
    process: Process,
}

impl Browser {
    /// Start Chromium (headless, through `options.proxy`, in `options.profile_dir`) and
    /// attach to its first tab.
    ///
    /// Refused with `browser_proxy_missing` when no proxy is given, and `browser_unavailable`
    /// when the executable is not there: the browser never runs unproxied.
    pub async fn launch(options: Options) -> Result<Self, BrowserError> {
        if options.viewport_width == 0 || options.viewport_height == 0 {
            return Err(BrowserError::OptionsInvalid {
                why: "the viewport has no area".to_owned(),
            });
        }
        let (mut process, cdp) = Process::spawn(&options)?;
        let product = first_answer(&cdp, &mut process, options.limits.launch_timeout_ms).await?;
        let downloads = forward_downloads(&cdp);
        let logs = crate::logs::Logs::listen(&cdp);
        let mut browser = Self {
            cdp,
            options,
            tabs: Vec::new(),
            current: None,
            downloads,
            begun: Vec::new(),
            logs,
            product,
            process,
        };
        browser.allow_downloads().await?;
        let targets = browser.targets().await?;
        let first = targets.iter().find_map(|t| t.get("targetId")?.as_str());
        let index = match first {
            Some(id) => browser.attach(id.to_owned()).await?,
            None => browser.create_tab().await?,
        };
        browser.current = Some(index);
        Ok(browser)
    }

    /// Close the browser cleanly (the profile written out), waiting up to the launch
    /// timeout; whatever is left is killed as on drop.
    pub async fn shutdown(mut self) {
        let closing = self.cdp.call("Browser.close", json!({}), None).await;
        if closing.is_ok() {
            let timeout = Duration::from_millis(self.options.limits.launch_timeout_ms);
            if !self.process.exited(timeout).await {
                tracing::warn!("Chromium did not exit after Browser.close; killing it");
            }
        }
    }

    /// Chromium's product and version (`Chrome/156.0.8078.114`), for the record.
    pub fn product(&self) -> &str {
        &self.product
    }

    /// Chromium's (first) process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Whether Chromium is still running.
    pub fn running(&mut self) -> bool {
        self.process.running()
    }

    /// Open `url` in a new tab, which becomes the current one.
    pub async fn open(&mut self, url: &str) -> Result<Navigated, BrowserError> {
        check_url(url)?;
        self.room_for_a_tab()?;
        let index = self.create_tab().await?;
        self.current = Some(index);
        let tab = &self.tabs[index];
        self.cdp
            .call("Target.activateTarget", json!({ "targetId": tab.id }), None)
            .await?;
        self.navigate(url).await
    }

    /// Load `url` (http or https only) in the current tab and wait for its load event.
    pub async fn navigate(&mut self, url: &str) -> Result<Navigated, BrowserError> {
        check_url(url)?;
        let tab = self.tab()?.clone();
        let events = self.cdp.subscribe();
        let reply = self
            .cdp
            .call("Page.navigate", json!({ "url": url }), Some(&tab.session))
            .await?;
        if let Some(why) = reply.get("errorText").and_then(Value::as_str)
            && !why.is_empty()
        {
            return Err(BrowserError::NavigationFailed {
                url: url.to_owned(),
                why: why.to_owned(),
            });
        }
        // A same-document navigation (a fragment) has no loader and fires no load event.
        if reply.get("loaderId").is_some() {
            self.loaded(events, &tab).await?;
        }
        self.navigated(&tab, true).await
    }

    /// Load the current tab's page again.
    pub async fn reload(&mut self) -> Result<Navigated, BrowserError> {
        let tab = self.tab()?.clone();
        let events = self.cdp.subscribe();
        self.cdp
            .call("Page.reload", json!({}), Some(&tab.session))
            .await?;
        self.loaded(events, &tab).await?;
        self.navigated(&tab, true).await
    }

    /// Open an empty tab (`about:blank`), which becomes the current one.
    pub async fn new_tab(&mut self) -> Result<TabInfo, BrowserError> {
        self.room_for_a_tab()?;
        let index = self.create_tab().await?;
        self.make_current(index).await
    }

    /// Make tab `index` the current one; what it shows.
    async fn make_current(&mut self, index: usize) -> Result<TabInfo, BrowserError> {
        self.current = Some(index);
        let tab = self.tabs[index].clone();
        let page = self.navigated(&tab, false).await?;
        Ok(TabInfo {
            id: tab.id,
            url: page.url,
            title: page.title,
            current: true,
        })
    }

    /// Refused `browser_too_large` when `tabs_max` tabs are open.
    fn room_for_a_tab(&self) -> Result<(), BrowserError> {
        if self.tabs.len() >= self.options.limits.tabs_max {
            return Err(BrowserError::TooLarge {
                what: "the number of tabs",
                size: self.tabs.len() + 1,
                max: self.options.limits.tabs_max,
            });
        }
        Ok(())
    }

    /// The current tab's id.
    pub fn current_tab(&self) -> Option<String> {
        self.current.map(|i| self.tabs[i].id.clone())
    }

    /// Where tab `id` is among the attached tabs; a tab the page opened itself (a popup) is
    /// attached on the way.
    async fn tab_index(&mut self, id: &str) -> Result<usize, BrowserError> {
        if let Some(index) = self.tabs.iter().position(|t| t.id == id) {
            return Ok(index);
        }
        let known = self.targets().await?;
        if !known.iter().any(|t| t.get("targetId") == Some(&json!(id))) {
            return Err(BrowserError::TabMissing { id: id.to_owned() });
        }
        self.attach(id.to_owned()).await
    }

    /// Make tab `id` the one operations act on, without bringing it to the front (a tab
    /// the page opened itself is attached on the way); answers which was, for
    /// [`Self::act_on_again`].
    pub async fn act_on(&mut self, id: &str) -> Result<Option<String>, BrowserError> {
        let previous = self.current_tab();
        let index = self.tab_index(id).await?;
        self.current = Some(index);
        Ok(previous)
    }

    /// Act on the tab [`Self::act_on`] answered again (if it is still open).
    pub fn act_on_again(&mut self, previous: Option<String>) {
        if let Some(index) = previous.and_then(|id| self.tabs.iter().position(|t| t.id == id)) {
            self.current = Some(index);
        }
    }

    /// Go one entry back in the current tab's history (`moved: false` if there is none).
    pub async fn back(&mut self) -> Result<Navigated, BrowserError> {
        self.history(-1).await
    }

    /// Go one entry forward in the current tab's history (`moved: false` if there is none).
    pub async fn forward(&mut self) -> Result<Navigated, BrowserError> {
        self.history(1).await
    }

    async fn history(&mut self, step: i64) -> Result<Navigated, BrowserError> {
        let tab = self.tab()?.clone();
        let history = self
            .cdp
            .call("Page.getNavigationHistory", json!({}), Some(&tab.session))
            .await?;
        let index = history.get("currentIndex").and_then(Value::as_i64);
        let entries = history.get("entries").and_then(Value::as_array);
        let (Some(index), Some(entries)) = (index, entries) else {
            return Err(BrowserError::protocol(
                "Page.getNavigationHistory",
                "no currentIndex or entries",
            ));
        };
        let entry = usize::try_from(index + step)
            .ok()
            .and_then(|i| entries.get(i))
            .and_then(|e| e.get("id"))
            .and_then(Value::as_i64);
        let Some(entry) = entry else {
            return self.navigated(&tab, false).await;
        };
        let events = self.cdp.subscribe();
        self.cdp
            .call(
                "Page.navigateToHistoryEntry",
                json!({ "entryId": entry }),
                Some(&tab.session),
            )
            .await?;
        self.loaded(events, &tab).await?;
        self.navigated(&tab, true).await
    }

    /// Every open tab.
    pub async fn tabs(&mut self) -> Result<Vec<TabInfo>, BrowserError> {
        let current = self.current.map(|i| self.tabs[i].id.clone());
        Ok(self
            .targets()
            .await?
            .iter()
            .map(|t| {
                let field = |name: &str| {
                    t.get(name)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let id = field("targetId");
                TabInfo {
                    current: current.as_deref() == Some(id.as_str()),
                    url: field("url"),
                    title: field("title"),
                    id,
                }
            })
            .collect())
    }

    /// Make tab `id` the current one (and the front one). A tab the page opened itself (a
    /// popup) is attached on the way.
    pub async fn switch(&mut self, id: &str) -> Result<TabInfo, BrowserError> {
        let index = self.tab_index(id).await?;
        self.cdp
            .call("Target.activateTarget", json!({ "targetId": id }), None)
            .await?;
        self.make_current(index).await
    }

    /// Close tab `id`. If it was the current one, the first remaining tab becomes current
    /// (none if it was the last).
    pub async fn close(&mut self, id: &str) -> Result<(), BrowserError> {
        let known = self.targets().await?;
        if !known.iter().any(|t| t.get("targetId") == Some(&json!(id))) {
            return Err(BrowserError::TabMissing { id: id.to_owned() });
        }
        self.cdp
            .call("Target.closeTarget", json!({ "targetId": id }), None)
            .await?;
        self.gone(id).await?;
        let current = self.current.map(|i| self.tabs[i].id.clone());
        self.tabs.retain(|t| t.id != id);
        self.current = match current {
            Some(current) if current != id => self.tabs.iter().position(|t| t.id == current),
            _ => (!self.tabs.is_empty()).then_some(0),
        };
        Ok(())
    }

    /// Wait up to `timeout_ms` for a download to finish in the download directory.
    ///
    /// # Cancel safety
    /// A download that finishes while no one waits is reported to the next wait.
    pub async fn wait_for_download(&mut self, timeout_ms: u64) -> Result<Download, BrowserError> {
        let Some(dir) = self.options.download_dir.clone() else {
            return Err(BrowserError::OptionsInvalid {
                why: "no download directory was given".to_owned(),
            });
        };
        let timeout = self.wait_timeout(timeout_ms)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let event = tokio::time::timeout_at(deadline, self.downloads.recv())
                .await
                .map_err(|_| BrowserError::Timeout {
                    what: "a download",
                    timeout_ms: millis(timeout),
                })?
                .ok_or(BrowserError::Closed)?;
            if let Some(done) = self.download_event(&dir, &event) {
                return done;
            }
        }
    }

    /// The downloads that finished (or failed) since the last look, without waiting for any
    /// that has not begun; one that has begun is waited for up to `timeout_ms` in all.
    pub async fn settle_downloads(
        &mut self,
        timeout_ms: u64,
    ) -> Vec<Result<Download, BrowserError>> {
        let Some(dir) = self.options.download_dir.clone() else {
            return Vec::new();
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut done = Vec::new();
        loop {
            let event = match self.downloads.try_recv() {
                Ok(event) => event,
                Err(_) if self.begun.is_empty() => break,
                Err(_) => match tokio::time::timeout_at(deadline, self.downloads.recv()).await {
                    Ok(Some(event)) => event,
                    Ok(None) => break,
                    Err(_) => {
                        done.extend(self.begun.drain(..).map(|(guid, ..)| {
                            Err(BrowserError::DownloadFailed {
                                guid,
                                why: format!("not finished within {timeout_ms} ms"),
                            })
                        }));
                        break;
                    }
                },
            };
            if let Some(finished) = self.download_event(&dir, &event) {
                done.push(finished);
            }
        }
        done
    }

    /// Take one download event: a begun one is remembered, a finished or canceled one
    /// answered.
    fn download_event(
        &mut self,
        dir: &std::path::Path,
        event: &Event,
    ) -> Option<Result<Download, BrowserError>> {
        let field = |name: &str| {
            event
                .params
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let guid = field("guid");
        if event.method == "Browser.downloadWillBegin" {
            if self.begun.len() == DOWNLOADS_BEGUN_MAX {
                self.begun.remove(0);
            }
            self.begun
                .push((guid, field("url"), field("suggestedFilename")));
            return None;
        }
        let state = field("state");
        if state != "completed" && state != "canceled" {
            return None;
        }
        let index = self.begun.iter().position(|(g, ..)| *g == guid);
        let begun = index.map(|i| self.begun.remove(i));
        if state == "canceled" {
            return Some(Err(BrowserError::DownloadFailed {
                guid,
                why: "canceled".to_owned(),
            }));
        }
        Some(finished(dir, guid, begun))
    }

    /// Wait until tab `id` is no longer listed (`Target.closeTarget` answers before the tab
    /// is gone).
    async fn gone(&self, id: &str) -> Result<(), BrowserError> {
        let limits = &self.options.limits;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(limits.call_timeout_ms);
        loop {
            let targets = self.targets().await?;
            if !targets
                .iter()
                .any(|t| t.get("targetId") == Some(&json!(id)))
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(BrowserError::Timeout {
                    what: "closing a tab",
                    timeout_ms: limits.call_timeout_ms,
                });
            }
            tokio::time::sleep(Duration::from_millis(limits.wait_poll_ms.max(1))).await;
        }
    }

    /// The current tab.
    pub(crate) fn tab(&self) -> Result<&Tab, BrowserError> {
        self.current
            .and_then(|i| self.tabs.get(i))
            .ok_or(BrowserError::NoTab)
    }

    /// A caller's wait, checked against the bound.
    pub(crate) fn wait_timeout(&self, timeout_ms: u64) -> Result<Duration, BrowserError> {
        let max = self.options.limits.wait_timeout_max_ms;
        if timeout_ms > max {
            return Err(BrowserError::TooLarge {
                what: "the wait in ms",
                size: usize::try_from(timeout_ms).unwrap_or(usize::MAX),
                max: usize::try_from(max).unwrap_or(usize::MAX),
            });
        }
        Ok(Duration::from_millis(timeout_ms))
    }

    /// The page targets (tabs), in Chromium's order.
    async fn targets(&self) -> Result<Vec<Value>, BrowserError> {
        let reply = self.cdp.call("Target.getTargets", json!({}), None).await?;
        Ok(reply
            .get("targetInfos")
            .and_then(Value::as_array)
            .map(|all| {
                all.iter()
                    .filter(|t| t.get("type").and_then(Value::as_str) == Some("page"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn create_tab(&mut self) -> Result<usize, BrowserError> {
        let reply = self
            .cdp
            .call("Target.createTarget", json!({ "url": "about:blank" }), None)
            .await?;
        let id = reply
            .get("targetId")
            .and_then(Value::as_str)
            .ok_or_else(|| BrowserError::protocol("Target.createTarget", "no targetId"))?;
        self.attach(id.to_owned()).await
    }

    /// Attach to a target with a flat session, enable its page events and give it the
    /// viewport.
    async fn attach(&mut self, id: String) -> Result<usize, BrowserError> {
        let reply = self
            .cdp
            .call(
                "Target.attachToTarget",
                json!({ "targetId": id, "flatten": true }),
                None,
            )
            .await?;
        let session = reply
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| BrowserError::protocol("Target.attachToTarget", "no sessionId"))?
            .to_owned();
        // Page for loads, Runtime, Log and Network for what read_console and read_network
        // answer.
        for domain in [
            "Page.enable",
            "Runtime.enable",
            "Log.enable",
            "Network.enable",
        ] {
            self.cdp.call(domain, json!({}), Some(&session)).await?;
        }
        let viewport = json!({
            "width": self.options.viewport_width,
            "height": self.options.viewport_height,
            "deviceScaleFactor": 1,
            "mobile": false,
        });
        self.cdp
            .call(
                "Emulation.setDeviceMetricsOverride",
                viewport,
                Some(&session),
            )
            .await?;
        self.tabs.push(Tab { id, session });
        Ok(self.tabs.len() - 1)
    }

    /// Downloads land in the caller's directory under Chromium's id (never the server's
    /// name); without a directory they are refused.
    async fn allow_downloads(&self) -> Result<(), BrowserError> {
        let params = match &self.options.download_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| BrowserError::OptionsInvalid {
                    why: format!("cannot create the download directory {dir:?}: {e}"),
                })?;
                let dir = std::path::absolute(dir).map_err(|e| BrowserError::OptionsInvalid {
                    why: format!("the download directory {dir:?}: {e}"),
                })?;
                json!({ "behavior": "allowAndName", "downloadPath": dir, "eventsEnabled": true })
            }
            None => json!({ "behavior": "deny" }),
        };
        self.cdp
            .call("Browser.setDownloadBehavior", params, None)
            .await
            .map(drop)
    }

    /// Wait for the tab's load event (subscribed to before the navigation was sent).
    async fn loaded(
        &self,
        mut events: broadcast::Receiver<Event>,
        tab: &Tab,
    ) -> Result<(), BrowserError> {
        let timeout = Duration::from_millis(self.options.limits.navigation_timeout_ms);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let event = tokio::time::timeout_at(deadline, events.recv())
                .await
                .map_err(|_| BrowserError::Timeout {
                    what: "the page's load",
                    timeout_ms: millis(timeout),
                })?;
            match event {
                Ok(event)
                    if event.method == "Page.loadEventFired"
                        && event.session.as_deref() == Some(tab.session.as_str()) =>
                {
                    return Ok(());
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return Err(BrowserError::Closed),
            }
        }
    }

    /// The tab's URL and title now.
    async fn navigated(&self, tab: &Tab, moved: bool) -> Result<Navigated, BrowserError> {
        let reply = self
            .cdp
            .call("Target.getTargetInfo", json!({ "targetId": tab.id }), None)
            .await?;
        let field = |name: &str| {
            reply
                .pointer(&format!("/targetInfo/{name}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Ok(Navigated {
            tab: tab.id.clone(),
            url: field("url"),
            title: field("title"),
            moved,
        })
    }
}

/// Only web pages are opened: any other scheme reaches past the proxy (`file:`, `chrome:`)
/// or runs script (`javascript:`, `data:`).
fn check_url(url: &str) -> Result<(), BrowserError> {
    let scheme = url
        .split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https") => Ok(()),
        _ => Err(BrowserError::UrlRefused {
            url: url.to_owned(),
        }),
    }
}

/// Chromium's first answer (its version) within the launch deadline; a browser that exits
/// or stays silent instead failed to start, and its standard error says why.
async fn first_answer(
    cdp: &Cdp,
    process: &mut Process,
    timeout_ms: u64,
) -> Result<String, BrowserError> {
    let asked = cdp.call("Browser.getVersion", json!({}), None);
    match tokio::time::timeout(Duration::from_millis(timeout_ms), asked).await {
        Ok(Ok(version)) => Ok(version
            .get("product")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()),
        Ok(Err(BrowserError::Closed)) => Err(BrowserError::LaunchFailed {
            why: format!("Chromium exited: {}", process.stderr_tail().await),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BrowserError::Timeout {
            what: "Chromium's first DevTools answer",
            timeout_ms,
        }),
    }
}

/// Browser-level download events, moved off the broadcast into a queue of their own so
/// that a burst of page events cannot push them out before someone waits.
fn forward_downloads(cdp: &Cdp) -> mpsc::Receiver<Event> {
    let (sender, receiver) = mpsc::channel(DOWNLOAD_EVENTS_QUEUED_MAX);
    let mut events = cdp.subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) if event.method.starts_with("Browser.download") => {
                    if sender.try_send(event).is_err() && sender.is_closed() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "browser events were missed");
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    receiver
}

/// A completed download's answer: its file is `dir/guid` (the `allowAndName` behavior).
fn finished(
    dir: &std::path::Path,
    guid: String,
    begun: Option<(String, String, String)>,
) -> Result<Download, BrowserError> {
    let path: PathBuf = dir.join(&guid);
    let bytes = std::fs::metadata(&path)
        .map_err(|e| BrowserError::DownloadFailed {
            guid: guid.clone(),
            why: format!("cannot read {path:?}: {e}"),
        })?
        .len();
    let (url, suggested_filename) = begun.map(|(_, url, name)| (url, name)).unwrap_or_default();
    Ok(Download {
        guid,
        url,
        suggested_filename,
        path,
        bytes,
    })
}
