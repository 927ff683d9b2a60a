use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use aido_actions::browser::{Click, WaitFor};
use aido_actions::{BrowserAction, Failure};
use aido_browser::{Browser, Locator, Options};
use aido_call::{Body, Calls, Reply, Turn};
use aido_egress::{EgressRecord, Proxy};
use aido_policy::PolicyEngine;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::BrowserBodyError;

/// A wait's time when the call names none.
pub const WAIT_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// What it is built from; kept by the supervisor to build a fresh body after a crash.
#[derive(Clone)]
pub struct BrowserBodyArgs {
    /// The policy: `[browser]` and the `[net]` allowlist the proxy judges by.
    pub policy: Arc<PolicyEngine>,
    /// Where each session's private profile is made (`AIDO_HOME/browser`).
    pub profiles: PathBuf,
}

/// One session's browser: Chromium, the proxy it goes through, its profile, and how many of
/// the proxy's records earlier calls already answered.
struct Open {
    browser: Browser,
    proxy: Proxy,
    profile: PathBuf,
    answered: usize,
}

type Seat = Arc<Mutex<Option<Open>>>;

/// The browser body: each session's browser, behind a lock of its own (a session's calls run
/// in order; sessions run side by side).
pub struct BrowserBody {
    args: BrowserBodyArgs,
    sessions: HashMap<String, Seat>,
}

/// Messages to the browser body.
pub enum BrowserMsg {
    /// Run one browser primitive.
    Run {
        /// The action.
        action: Box<BrowserAction>,
        /// The caller's session (whose browser it drives).
        session: String,
        /// What the chain admitted for the call (the files an upload hands the page).
        context: aido_policy::SessionContext,
        /// The body's answer (what the journal records and the result renders).
        reply: Reply<Value>,
    },
    /// The session ended: its browser closes and its profile goes.
    End {
        /// The session.
        session: String,
    },
    /// Each open browser: its session and its tabs (for Mission Control; looking is not
    /// journaled). A browser busy with a call is listed without its tabs.
    Status {
        /// One object per open browser.
        reply: Reply<Vec<Value>>,
    },
    /// A PNG of a session's current tab (for Mission Control; not journaled).
    Peek {
        /// The session.
        session: String,
        /// The PNG.
        reply: Reply<Vec<u8>>,
    },
}

impl Body for BrowserBody {
    const NAME: &'static str = "browser";
    type Args = BrowserBodyArgs;
    type Msg = BrowserMsg;
    // A panic in one session's call leaves the other sessions' browsers whole.
    const RESTART_AFTER_PANIC: bool = false;

    async fn build(args: BrowserBodyArgs) -> Result<Self, String> {
        Ok(Self {
            args,
            sessions: HashMap::new(),
        })
    }

    async fn handle(&mut self, msg: BrowserMsg, calls: &Calls) {
        match msg {
            BrowserMsg::Run {
                action,
                session,
                context,
                reply,
            } => {
                let seat = self.sessions.entry(session.clone()).or_default().clone();
                let args = self.args.clone();
                // What can make a page act on a server commits before it starts.
                let commits = action.class().mutates();
                calls.task(reply, Turn::Shared, commits, move |_ticket| async move {
                    let mut open = seat.lock().await;
                    run(&args, &mut open, &session, *action, &context).await
                });
            }
            BrowserMsg::Status { reply } => {
                let seats: Vec<(String, Seat)> = self
                    .sessions
                    .iter()
                    .map(|(session, seat)| (session.clone(), seat.clone()))
                    .collect();
                calls.task(reply, Turn::Shared, false, move |_ticket| async move {
                    let mut open = Vec::new();
                    for (session, seat) in seats {
                        let Ok(mut held) = seat.try_lock() else {
                            open.push(json!({"session": session, "busy": true}));
                            continue;
                        };
                        if let Some(browser) = held.as_mut().map(|open| &mut open.browser) {
                            let tabs = browser.tabs().await.unwrap_or_default();
                            open.push(json!({"session": session, "busy": false, "tabs": tabs}));
                        }
                    }
                    Ok(open)
                });
            }
            BrowserMsg::Peek { session, reply } => {
                let seat = self.sessions.get(&session).cloned();
                calls.task(reply, Turn::Shared, false, move |_ticket| async move {
                    let Some(seat) = seat else {
                        return Err(BrowserBodyError::NotOpen {
                            primitive: "a look at its screen",
                        }
                        .into());
                    };
                    let mut held = seat.lock().await;
                    let Some(open) = held.as_mut() else {
                        return Err(BrowserBodyError::NotOpen {
                            primitive: "a look at its screen",
                        }
                        .into());
                    };
                    let shot = open.browser.screenshot().await.map_err(Failure::from)?;
                    Ok(shot.png)
                });
            }
            BrowserMsg::End { session } => {
                if let Some(seat) = self.sessions.remove(&session) {
                    tokio::spawn(async move {
                        if let Some(open) = seat.lock().await.take() {
                            close(open).await;
                        }
                    });
                }
            }
        }
    }

    async fn stop(&mut self) {
        for (_, seat) in self.sessions.drain() {
            if let Some(open) = seat.lock().await.take() {
                close(open).await;
            }
        }
    }
}

/// A failure of the call: the body's own or the browser's, each with its code.
enum Refused {
    Body(BrowserBodyError),
    Browser(aido_browser::BrowserError),
}

impl From<BrowserBodyError> for Refused {
    fn from(e: BrowserBodyError) -> Self {
        Self::Body(e)
    }
}

impl From<aido_browser::BrowserError> for Refused {
    fn from(e: aido_browser::BrowserError) -> Self {
        Self::Browser(e)
    }
}

impl From<Refused> for Failure {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Body(e) => e.into(),
            Refused::Browser(e) => e.into(),
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Run one call on the session's browser (opening it for a navigation).
async fn run(
    args: &BrowserBodyArgs,
    seat: &mut Option<Open>,
    session: &str,
    action: BrowserAction,
    context: &aido_policy::SessionContext,
) -> Result<Value, Failure> {
    if let BrowserAction::BrowserClose(_) = action {
        let open = seat.take();
        let closed = open.is_some();
        let requests = match open {
            Some(open) => close(open).await,
            None => Vec::new(),
        };
        return Ok(json!({"answer": {"closed": closed}, "requests": requests}));
    }
    // The toolset has no "open" member: its first call opens the browser.
    let opens = matches!(
        action,
        BrowserAction::BrowserNavigate(_) | BrowserAction::BrowserToolset(_)
    );
    if seat.as_mut().is_some_and(|open| !open.browser.running()) {
        // Chromium is gone (crashed, killed): this call says so, the next navigation starts a
        // fresh one.
        if let Some(open) = seat.take() {
            close(open).await;
        }
        if !opens {
            return Err(BrowserBodyError::Exited.into());
        }
    }
    if seat.is_none() {
        if !opens {
            return Err(BrowserBodyError::NotOpen {
                primitive: action.primitive(),
            }
            .into());
        }
        *seat = Some(open(args, session, context).await.map_err(Failure::from)?);
    }
    let Some(open) = seat.as_mut() else {
        return Err(BrowserBodyError::Exited.into());
    };
    let mut downloads = Vec::new();
    let answered = match &action {
        BrowserAction::BrowserToolset(batch) => {
            let uploads = open.profile.join("uploads");
            let given = super::toolset::Given {
                ctx: context,
                uploads: &uploads,
            };
            super::toolset::run(&mut open.browser, batch, &given, &mut downloads)
                .await
                .map(|results| json!({"results": results}))
        }
        _ => {
            let answered = act(&mut open.browser, action).await.map_err(Failure::from);
            downloads.extend(super::downloads::settle(&mut open.browser).await);
            let dialogs = open.browser.dialogs();
            answered.map(|mut answer| {
                if !dialogs.is_empty() && answer.is_object() {
                    answer["dialogs"] = to_json(&dialogs);
                }
                answer
            })
        }
    };
    // The connections this call caused, refused ones included, whether or not it succeeded.
    let records = open.proxy.log().records();
    let requests: Vec<EgressRecord> = records.get(open.answered..).unwrap_or_default().to_vec();
    open.answered = records.len();
    match answered {
        // Downloads are staged in the profile: the executor lands them in the walls as a
        // journaled change set.
        Ok(answer) if !downloads.is_empty() => {
            Ok(json!({"answer": answer, "requests": requests, "downloads": downloads}))
        }
        Ok(answer) => Ok(json!({"answer": answer, "requests": requests})),
        // A failed call's connections are part of its failure (a navigation the proxy
        // refused says which host and why).
        Err(refused) if requests.is_empty() => Err(refused),
        Err(refused) => Err(refused.with_details(json!({"requests": requests}))),
    }
}

/// The browser operation an action names, and its typed answer as JSON.
async fn act(browser: &mut Browser, action: BrowserAction) -> Result<Value, Refused> {
    Ok(match action {
        BrowserAction::BrowserNavigate(a) if a.new_tab => to_json(&browser.open(&a.url).await?),
        BrowserAction::BrowserNavigate(a) => to_json(&browser.navigate(&a.url).await?),
        BrowserAction::BrowserBack(_) => to_json(&browser.back().await?),
        BrowserAction::BrowserForward(_) => to_json(&browser.forward().await?),
        BrowserAction::BrowserTabs(_) => json!({"tabs": browser.tabs().await?}),
        BrowserAction::BrowserSwitchTab(a) => to_json(&browser.switch(&a.tab).await?),
        BrowserAction::BrowserCloseTab(a) => {
            browser.close(&a.tab).await?;
            json!({"closed": a.tab, "tabs": browser.tabs().await?})
        }
        BrowserAction::BrowserClick(a) => click(browser, a).await?,
        BrowserAction::BrowserType(a) => json!({"chars": browser.type_text(&a.text).await?}),
        BrowserAction::BrowserPress(a) => {
            browser.press(&a.key).await?;
            json!({"pressed": a.key})
        }
        BrowserAction::BrowserScroll(a) => to_json(&browser.scroll(a.dx, a.dy).await?),
        BrowserAction::BrowserFill(a) => to_json(&browser.fill(&a.reference, &a.value).await?),
        BrowserAction::BrowserSelect(a) => to_json(&browser.select(&a.reference, &a.option).await?),
        BrowserAction::BrowserWaitFor(a) => wait_for(browser, a).await?,
        BrowserAction::BrowserSnapshot(_) => to_json(&browser.snapshot().await?),
        BrowserAction::BrowserText(_) => to_json(&browser.text().await?),
        BrowserAction::BrowserScreenshot(_) => to_json(&browser.screenshot().await?),
        BrowserAction::BrowserEvaluate(a) => to_json(&browser.evaluate(&a.script).await?),
        // Handled before a browser is needed, and by the toolset's own run.
        BrowserAction::BrowserClose(_) | BrowserAction::BrowserToolset(_) => {
            json!({"closed": false})
        }
    })
}

async fn click(browser: &mut Browser, a: Click) -> Result<Value, Refused> {
    let clicked = match (a.reference, a.x, a.y) {
        (Some(reference), None, None) => browser.click(&reference).await?,
        (None, Some(x), Some(y)) => browser.click_at(x, y).await?,
        _ => {
            return Err(aido_browser::BrowserError::OptionsInvalid {
                why: "browser_click takes a ref, or x and y".into(),
            }
            .into());
        }
    };
    Ok(to_json(&clicked))
}

async fn wait_for(browser: &mut Browser, a: WaitFor) -> Result<Value, Refused> {
    let timeout = a.timeout_ms.unwrap_or(WAIT_TIMEOUT_MS_DEFAULT);
    let found = match (a.text, a.css) {
        (Some(text), None) => browser.wait_for_text(&text, timeout).await?,
        (None, Some(css)) => browser.wait_for(&Locator::Css(css), timeout).await?,
        _ => {
            return Err(aido_browser::BrowserError::OptionsInvalid {
                why: "browser_wait_for takes a text or a css selector".into(),
            }
            .into());
        }
    };
    Ok(to_json(&found))
}

/// Start a session's browser: its proxy (judging by `[net]`, narrowed by the session's grant),
/// a fresh private profile, and Chromium through the proxy.
async fn open(
    args: &BrowserBodyArgs,
    session: &str,
    context: &aido_policy::SessionContext,
) -> Result<Open, Refused> {
    let config = args.policy.config();
    let net = &config.net;
    let proxy_failed = |why: String| BrowserBodyError::Proxy { why };
    let policy = aido_egress::Network::proxy(net.allow.clone(), net.allow_ranges.clone())
        .policy()
        .map_err(|e| proxy_failed(e.to_string()))?
        .ok_or_else(|| proxy_failed("a proxy network has a policy".into()))?;
    // A session under a grant that names hosts: the page reaches only what both name.
    let granted = context
        .capabilities
        .as_ref()
        .and_then(|grant| grant.hosts.as_ref());
    let policy = match granted {
        Some(hosts) => policy
            .narrowed_by(hosts)
            .map_err(|e| proxy_failed(e.to_string()))?,
        None => policy,
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| proxy_failed(format!("binding 127.0.0.1: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| proxy_failed(e.to_string()))?;
    let proxy =
        Proxy::start(OwnedFd::from(listener), policy).map_err(|e| proxy_failed(e.to_string()))?;
    let profile = args.profiles.join(session);
    let made = std::fs::remove_dir_all(&profile)
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        })
        .and_then(|()| std::fs::create_dir_all(&profile));
    if let Err(e) = made {
        return Err(BrowserBodyError::Profile {
            path: profile,
            why: e.to_string(),
        }
        .into());
    }
    let mut options = Options::new(address, &profile);
    options.download_dir = Some(profile.join("downloads"));
    options.executable = PathBuf::from(&config.browser.executable);
    options.allow_script = config.browser.allow_script;
    options.viewport_width = config.browser.width;
    options.viewport_height = config.browser.height;
    let browser = match Browser::launch(options).await {
        Ok(browser) => browser,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&profile);
            return Err(e.into());
        }
    };
    Ok(Open {
        browser,
        proxy,
        profile,
        answered: 0,
    })
}

/// Close a browser, stop its proxy and remove its profile; the connections it made since the
/// last call are answered.
async fn close(open: Open) -> Vec<EgressRecord> {
    let Open {
        browser,
        proxy,
        profile,
        answered,
    } = open;
    browser.shutdown().await;
    let records = tokio::task::spawn_blocking(move || {
        if let Err(e) = std::fs::remove_dir_all(&profile) {
            tracing::warn!(profile = %profile.display(), error = %e, "cannot remove a browser profile");
        }
        proxy.finish().0
    })
    .await
    .unwrap_or_default();
    records.get(answered..).unwrap_or_default().to_vec()
}
