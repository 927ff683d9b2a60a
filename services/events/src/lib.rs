//! Subscriptions: file changes under the walls, delivered to the client that subscribed, and
//! reactions (`watch_and_react`) that run a primitive for each change.
//!
//! Each subscription owns one `notify` watcher (inotify on Linux): a directory is watched with
//! everything below it, a file through its parent directory (an atomic replace is a rename
//! over it, which a watch of the file's own inode would lose). notify's thread never waits:
//! it `try_send`s each change into a queue bounded at [`QUEUE_EVENTS_MAX`] and counts what
//! does not fit (and inotify's own overflows) as `lagged`, so a flood costs aido a fixed
//! amount of memory and never stalls it. The subscription's task gathers changes for
//! `debounce_ms`, coalesces them by path (each kind once, in order), and drops every path
//! the walls or the deny globs refuse (judged by `PolicyEngine::check_path` at delivery, so
//! a denied path that does not exist yet, or no longer, is dropped too), aido's own
//! temporary files, and paths that came and went within the batch. What is left is
//! journaled (`events_delivered`, an input of the subscription's proposal) before the
//! client is told, so replay shows exactly what the agent was told.
//!
//! A reaction runs, for each changed path, the reaction's primitive with the path put into
//! its arguments, as a child action of the watch_and_react call (`Children::run_child`):
//! judged by the whole policy chain, journaled with `parent`, run, its outcome journaled. A
//! token bucket bounds the firings a minute: a change over the rate is journaled with
//! `refused: watch_rate_limited` and not run. Loops are cut three ways: the paths a firing
//! changed (its effects) are not fed back to it for [`OWN_CHANGES_SETTLE_MS`] after it
//! ends, the rate bounds what gets through anyway, and `firings_max` / `expires_ms` end it.
//!
//! Subscriptions live in the runtime's memory only: they end with their session (or
//! unsubscribe) and are gone after a restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aido_actions::events::{
    Change, ChangeKind, DEBOUNCE_MS_DEFAULT, DEBOUNCE_MS_MAX, DEBOUNCE_MS_MIN, Reaction,
    SUBSCRIBE_GLOBS_MAX, SUBSCRIBE_PATHS_MAX, Subscribe, WatchAndReact,
};
use aido_actions::{AccessKind, Action, Effect, Failure};
use aido_journal::{Event, SessionId};
use aido_policy::{FsResolver, SessionContext};
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use aido_context::call::{Call, Children};
use aido_context::hooks::{Hooks, Notifier};
use aido_context::shared::Shared;
use subscriptions::{
    BATCH_CHANGES_MAX, Entry, OWN_CHANGES_SETTLE_MS, QUEUE_EVENTS_MAX, SUBSCRIPTIONS_MAX, Stats,
};

/// The table of file-change subscriptions the shared state holds.
pub use aido_context::events::subscriptions;

pub use error::EventsError;

/// Why a subscription call failed.
pub use aido_context::events::error;

/// What a subscription watches, checked and resolved.
struct Watched {
    /// Each root as the walls resolved it, and whether it is a directory.
    roots: Vec<(PathBuf, bool)>,
    globs: Option<GlobSet>,
    kinds: Vec<ChangeKind>,
    debounce_ms: u64,
}

impl Watched {
    fn of(
        shared: &Shared,
        ctx: &SessionContext,
        paths: &[String],
        globs: &[String],
        kinds: &[ChangeKind],
        debounce_ms: Option<u64>,
    ) -> Result<Self, Failure> {
        let invalid = |why: String| Failure::from(EventsError::Invalid { why });
        if paths.is_empty() || paths.len() > SUBSCRIBE_PATHS_MAX {
            return Err(invalid(format!("give 1 to {SUBSCRIBE_PATHS_MAX} paths")));
        }
        if globs.len() > SUBSCRIBE_GLOBS_MAX {
            return Err(invalid(format!("at most {SUBSCRIBE_GLOBS_MAX} globs")));
        }
        let debounce_ms = debounce_ms.unwrap_or(DEBOUNCE_MS_DEFAULT);
        if !(DEBOUNCE_MS_MIN..=DEBOUNCE_MS_MAX).contains(&debounce_ms) {
            return Err(invalid(format!(
                "debounce_ms must be {DEBOUNCE_MS_MIN} to {DEBOUNCE_MS_MAX}"
            )));
        }
        let mut roots = Vec::new();
        for given in paths {
            // The policy judged them; the body checks again what it will watch.
            let checked = shared
                .policy
                .check_path(given, AccessKind::Read, ctx, &FsResolver)
                .map_err(|refusal| Failure::new(refusal.code().code(), refusal.to_string()))?;
            let meta = std::fs::metadata(&checked.resolved).map_err(|e| {
                invalid(format!("{given}: {e} (only existing paths can be watched)"))
            })?;
            roots.push((checked.resolved, meta.is_dir()));
        }
        let globs = if globs.is_empty() {
            None
        } else {
            let mut set = GlobSetBuilder::new();
            for g in globs {
                set.add(Glob::new(g).map_err(|e| invalid(format!("glob {g:?}: {e}")))?);
            }
            Some(set.build().map_err(|e| invalid(e.to_string()))?)
        };
        let mut kinds = kinds.to_vec();
        kinds.sort();
        kinds.dedup();
        if kinds.is_empty() {
            kinds = ChangeKind::ALL.to_vec();
        }
        Ok(Watched {
            roots,
            globs,
            kinds,
            debounce_ms,
        })
    }

    fn info(&self) -> Value {
        json!({
            "paths": self.roots.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>(),
            "kinds": self.kinds,
            "debounce_ms": self.debounce_ms,
        })
    }

    /// Whether a change of `path` is one this subscription asked for (root, glob, kind).
    fn wants(&self, path: &Path) -> bool {
        self.roots.iter().any(|(root, dir)| {
            let relative = if *dir {
                match path.strip_prefix(root) {
                    Ok(r) if !r.as_os_str().is_empty() => r,
                    _ => return false,
                }
            } else if path == root {
                Path::new(root.file_name().unwrap_or_default())
            } else {
                return false;
            };
            self.globs.as_ref().is_none_or(|g| g.is_match(relative))
        })
    }

    /// The root `path` is under, for `{{relative}}`.
    fn relative(&self, path: &Path) -> String {
        for (root, dir) in &self.roots {
            if *dir && let Ok(r) = path.strip_prefix(root) {
                return r.display().to_string();
            }
            if !*dir && path == root {
                return root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
            }
        }
        path.display().to_string()
    }

    /// Start notify's watcher feeding `queue`.
    fn watch(
        &self,
        queue: mpsc::Sender<(PathBuf, ChangeKind)>,
        lagged: Arc<AtomicU64>,
    ) -> Result<notify::RecommendedWatcher, Failure> {
        use notify::Watcher;
        let failed =
            |e: notify::Error| Failure::from(EventsError::WatchFailed { why: e.to_string() });
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let event = match event {
                    Ok(event) => event,
                    // inotify's own queue overflowed, or a watch broke: events were lost.
                    Err(_) => {
                        lagged.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
                if event.need_rescan() {
                    lagged.fetch_add(1, Ordering::Relaxed);
                }
                for (path, kind) in changes_of(&event) {
                    if queue.try_send((path, kind)).is_err() {
                        lagged.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .map_err(failed)?;
        for (root, dir) in &self.roots {
            let (target, mode) = if *dir {
                (root.as_path(), notify::RecursiveMode::Recursive)
            } else {
                (
                    root.parent().unwrap_or(root.as_path()),
                    notify::RecursiveMode::NonRecursive,
                )
            };
            watcher.watch(target, mode).map_err(failed)?;
        }
        Ok(watcher)
    }
}

/// The changes one notify event says happened.
fn changes_of(event: &notify::Event) -> Vec<(PathBuf, ChangeKind)> {
    use notify::EventKind;
    use notify::event::{ModifyKind, RenameMode};
    let all = |kind: ChangeKind| event.paths.iter().map(|p| (p.clone(), kind)).collect();
    match event.kind {
        EventKind::Create(_) => all(ChangeKind::Create),
        EventKind::Remove(_) => all(ChangeKind::Remove),
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => all(ChangeKind::Remove),
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => all(ChangeKind::Create),
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
            let mut out = Vec::new();
            if let Some(from) = event.paths.first() {
                out.push((from.clone(), ChangeKind::Remove));
            }
            if let Some(to) = event.paths.get(1) {
                out.push((to.clone(), ChangeKind::Create));
            }
            out
        }
        EventKind::Modify(_) => all(ChangeKind::Modify),
        // Opens, reads and closes change nothing; `Any` and `Other` say nothing usable.
        EventKind::Access(_) | EventKind::Any | EventKind::Other => Vec::new(),
    }
}

/// aido's own temporary files (`.NAME.aido-PID-N.tmp`, renamed over their target by every
/// atomic write) are never delivered: the rename is.
fn is_aido_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.contains(".aido-") && n.ends_with(".tmp"))
}

/// Coalesce raw changes by path, in the order first seen, each kind once.
fn coalesce(raw: Vec<(PathBuf, ChangeKind)>) -> Vec<(PathBuf, Vec<ChangeKind>)> {
    let mut order: Vec<(PathBuf, Vec<ChangeKind>)> = Vec::new();
    let mut index: HashMap<PathBuf, usize> = HashMap::new();
    for (path, kind) in raw {
        match index.get(&path) {
            Some(&i) => {
                if !order[i].1.contains(&kind) {
                    order[i].1.push(kind);
                }
            }
            None => {
                index.insert(path.clone(), order.len());
                order.push((path, vec![kind]));
            }
        }
    }
    order
}

/// A batch as it is delivered: each path the subscription wants and the walls admit.
fn admitted(
    shared: &Shared,
    ctx: &SessionContext,
    watched: &Watched,
    raw: Vec<(PathBuf, ChangeKind)>,
) -> Vec<Change> {
    coalesce(raw)
        .into_iter()
        .filter(|(path, _)| !is_aido_temp(path) && watched.wants(path))
        .filter_map(|(path, kinds)| {
            let kinds: Vec<ChangeKind> = kinds
                .into_iter()
                .filter(|k| watched.kinds.contains(k))
                .collect();
            if kinds.is_empty() {
                return None;
            }
            // Came and went within the batch: nothing to see now.
            let transient = kinds.first() == Some(&ChangeKind::Create)
                && kinds.last() == Some(&ChangeKind::Remove)
                && std::fs::symlink_metadata(&path).is_err();
            if transient {
                return None;
            }
            // The walls and the deny globs, on the path as it is now (absent ones resolved
            // through their parent): a refused path is never delivered.
            let text = path.to_str()?;
            shared
                .policy
                .check_path(text, AccessKind::Read, ctx, &FsResolver)
                .ok()?;
            Some(Change {
                path: text.to_owned(),
                kinds,
            })
        })
        .collect()
}

/// Gather one batch: wait for a first change, then take what comes for `debounce_ms`. `None`
/// when the watcher is gone or the subscription stopped.
async fn gather(
    queue: &mut mpsc::Receiver<(PathBuf, ChangeKind)>,
    debounce_ms: u64,
    stop: &CancellationToken,
    lagged: &AtomicU64,
) -> Option<Vec<(PathBuf, ChangeKind)>> {
    let first = tokio::select! {
        first = queue.recv() => first?,
        () = stop.cancelled() => return None,
    };
    let mut raw = vec![first];
    let until = tokio::time::Instant::now() + Duration::from_millis(debounce_ms);
    loop {
        tokio::select! {
            next = queue.recv() => match next {
                Some(change) if raw.len() < QUEUE_EVENTS_MAX => raw.push(change),
                // More than a queue's worth in one window: counted, not kept.
                Some(_) => {
                    lagged.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            },
            () = tokio::time::sleep_until(until) => break,
            () = stop.cancelled() => return None,
        }
    }
    Some(raw)
}

/// Journal a batch in the subscription's session; its seq.
async fn journal(
    shared: &Shared,
    session: SessionId,
    event: Event,
) -> Result<u64, aido_journal::AppendError> {
    shared
        .journal
        .append(session, shared.clock.now_ms(), event)
        .await
        .map(|a| a.seq)
}

fn notifier(call: &Call<'_>) -> Result<Arc<dyn Notifier>, Failure> {
    call.hooks
        .notifier
        .clone()
        .ok_or_else(|| EventsError::Undeliverable.into())
}

fn admit_one(call: &Call<'_>) -> Result<String, Failure> {
    let subs = &call.shared.events;
    let held = subs.locked(|t| t.values().filter(|e| e.session == call.session).count());
    if held >= SUBSCRIPTIONS_MAX {
        return Err(EventsError::TooMany {
            max: SUBSCRIPTIONS_MAX,
        }
        .into());
    }
    Ok(format!(
        "s{}",
        subs.next.fetch_add(1, Ordering::Relaxed) + 1
    ))
}

fn register(
    call: &Call<'_>,
    id: &str,
    info: Value,
    stats: Arc<Stats>,
    watcher: notify::RecommendedWatcher,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
) {
    let entry = Entry {
        session: call.session,
        info,
        stats,
        _watcher: watcher,
        stop,
        task: Some(task),
    };
    call.shared
        .events
        .locked(|t| t.insert(id.to_owned(), entry));
}

/// subscribe: start watching; the answer names the subscription.
pub fn subscribe(call: &Call<'_>, s: &Subscribe) -> Result<Value, Failure> {
    let notifier = notifier(call)?;
    let watched = Watched::of(
        &call.shared,
        call.ctx,
        &s.paths,
        &s.globs,
        &s.kinds,
        s.debounce_ms,
    )?;
    let id = admit_one(call)?;
    let stats = Arc::new(Stats::default());
    let lagged = Arc::new(AtomicU64::new(0));
    let (tx, mut rx) = mpsc::channel(QUEUE_EVENTS_MAX);
    let watcher = watched.watch(tx, lagged.clone())?;
    let mut info = watched.info();
    info["subscription"] = json!(id);
    info["primitive"] = json!("subscribe");
    info["proposal"] = json!(call.proposal);
    let stop = CancellationToken::new();
    let (shared, ctx, session, proposal) = (
        call.shared.clone(),
        call.ctx.clone(),
        call.session,
        call.proposal,
    );
    let (task_id, task_stats, task_stop) = (id.clone(), stats.clone(), stop.clone());
    let task = tokio::spawn(async move {
        while let Some(raw) = gather(&mut rx, watched.debounce_ms, &task_stop, &lagged).await {
            let mut changes = admitted(&shared, &ctx, &watched, raw);
            let mut dropped = lagged.swap(0, Ordering::Relaxed);
            if changes.len() > BATCH_CHANGES_MAX {
                dropped += (changes.len() - BATCH_CHANGES_MAX) as u64;
                changes.truncate(BATCH_CHANGES_MAX);
            }
            if changes.is_empty() && dropped == 0 {
                continue;
            }
            task_stats.lagged.fetch_add(dropped, Ordering::Relaxed);
            task_stats.batches.fetch_add(1, Ordering::Relaxed);
            task_stats
                .delivered
                .fetch_add(changes.len() as u64, Ordering::Relaxed);
            let event = Event::EventsDelivered {
                subscription: task_id.clone(),
                proposal,
                changes: changes.clone(),
                lagged: dropped,
                refused: None,
            };
            // Journaled first: the agent is told only what the journal holds.
            let seq = match journal(&shared, session, event).await {
                Ok(seq) => seq,
                Err(e) => {
                    tracing::warn!(
                        code = e.code(),
                        "cannot journal a subscription's events; it ends"
                    );
                    task_stats.end("its events could not be journaled");
                    break;
                }
            };
            notifier.notify(json!({
                "subscription": task_id, "proposal": proposal, "seq": seq,
                "changes": changes, "lagged": dropped,
            }));
        }
    });
    register(call, &id, info.clone(), stats, watcher, stop, task);
    Ok(info)
}

/// watch_and_react: start watching; each change fires the reaction as a child action.
pub fn watch(call: &Call<'_>, w: &WatchAndReact) -> Result<Value, Failure> {
    let invalid = |why: String| Failure::from(EventsError::Invalid { why });
    let notifier = notifier(call)?;
    let runner = call
        .children
        .map(Children::owned)
        .ok_or_else(|| invalid("this call has no session to run reactions in".into()))?;
    let (per_minute, firings_max, expires_ms) = bounds(w)?;
    // The reaction must be a primitive that parses with a path in it, and not one that
    // watches (a reaction that subscribes would multiply itself).
    check_reaction(&w.reaction)?;
    let watched = Watched::of(
        &call.shared,
        call.ctx,
        &w.paths,
        &w.globs,
        &w.kinds,
        w.debounce_ms,
    )?;
    let id = admit_one(call)?;
    let stats = Arc::new(Stats::default());
    let lagged = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel(QUEUE_EVENTS_MAX);
    let watcher = watched.watch(tx, lagged.clone())?;
    let now_ms = call.shared.clock.now_ms();
    let mut info = watched.info();
    info["subscription"] = json!(id);
    info["primitive"] = json!("watch_and_react");
    info["proposal"] = json!(call.proposal);
    info["reaction"] = json!(w.reaction);
    info["per_minute"] = json!(per_minute);
    info["firings_max"] = json!(firings_max);
    info["expires_unix_ms"] = json!(now_ms.saturating_add(expires_ms));
    let stop = CancellationToken::new();
    let reactor = Reactor {
        shared: call.shared.clone(),
        ctx: call.ctx.clone(),
        session: call.session,
        proposal: call.proposal,
        runner,
        notifier,
        // A firing may ask a human (confirm mode) the way the call could; it has no progress
        // and its own cancel: the subscription's.
        hooks: Hooks {
            progress: None,
            cancel: stop.child_token(),
            trace_parent: None,
            ..call.hooks.clone()
        },
        reaction: w.reaction.clone(),
        watched,
        id: id.clone(),
        stats: stats.clone(),
        stop: stop.clone(),
        lagged,
        per_minute,
        firings_max,
        expires_at: now_ms.saturating_add(expires_ms),
    };
    let task = tokio::spawn(reactor.run(rx));
    register(call, &id, info.clone(), stats, watcher, stop, task);
    Ok(info)
}

/// A watch's bounds, each checked: firings a minute, firings in all, and its lifetime in ms.
fn bounds(w: &WatchAndReact) -> Result<(u32, u32, u64), Failure> {
    let invalid = |why: String| Failure::from(EventsError::Invalid { why });
    let per_minute = w.per_minute.unwrap_or(WatchAndReact::PER_MINUTE_DEFAULT);
    let firings_max = w.firings_max.unwrap_or(WatchAndReact::FIRINGS_DEFAULT);
    let expires_ms = w.expires_ms.unwrap_or(WatchAndReact::EXPIRES_MS_DEFAULT);
    if per_minute == 0 || per_minute > WatchAndReact::PER_MINUTE_MAX {
        return Err(invalid(format!(
            "per_minute must be 1 to {}",
            WatchAndReact::PER_MINUTE_MAX
        )));
    }
    if firings_max == 0 || firings_max > WatchAndReact::FIRINGS_MAX {
        return Err(invalid(format!(
            "firings_max must be 1 to {}",
            WatchAndReact::FIRINGS_MAX
        )));
    }
    if expires_ms == 0 || expires_ms > WatchAndReact::EXPIRES_MS_MAX {
        return Err(invalid(format!(
            "expires_ms must be 1 to {}",
            WatchAndReact::EXPIRES_MS_MAX
        )));
    }
    Ok((per_minute, firings_max, expires_ms))
}

/// A watch_and_react's task: it gathers the watcher's changes into batches, journals each
/// change, and fires the reaction for it within the rate and the bounds.
struct Reactor {
    shared: Arc<Shared>,
    ctx: SessionContext,
    session: SessionId,
    proposal: u64,
    runner: Arc<dyn Children>,
    notifier: Arc<dyn Notifier>,
    hooks: Hooks,
    reaction: Reaction,
    watched: Watched,
    id: String,
    stats: Arc<Stats>,
    stop: CancellationToken,
    lagged: Arc<AtomicU64>,
    per_minute: u32,
    firings_max: u32,
    expires_at: u64,
}

/// What a reactor keeps between changes.
struct Firings {
    bucket: Bucket,
    /// Paths the reaction itself changed, not fed back to it until then.
    own: HashMap<String, Instant>,
    fired: u32,
}

impl Reactor {
    async fn run(self, mut rx: mpsc::Receiver<(PathBuf, ChangeKind)>) {
        let mut firings = Firings {
            bucket: Bucket::new(self.per_minute, self.shared.clock.now_ms()),
            own: HashMap::new(),
            fired: 0,
        };
        while let Some(raw) =
            gather(&mut rx, self.watched.debounce_ms, &self.stop, &self.lagged).await
        {
            let now = Instant::now();
            firings.own.retain(|_, until| *until > now);
            let mut changes = admitted(&self.shared, &self.ctx, &self.watched, raw);
            let before = changes.len();
            changes.retain(|c| !firings.own.contains_key(&c.path));
            self.stats
                .suppressed
                .fetch_add((before - changes.len()) as u64, Ordering::Relaxed);
            let mut dropped = self.lagged.swap(0, Ordering::Relaxed);
            if changes.len() > BATCH_CHANGES_MAX {
                dropped += (changes.len() - BATCH_CHANGES_MAX) as u64;
                changes.truncate(BATCH_CHANGES_MAX);
            }
            self.stats.lagged.fetch_add(dropped, Ordering::Relaxed);
            for change in changes {
                let dropped = std::mem::take(&mut dropped);
                if !self.react(change, dropped, &mut firings).await {
                    return;
                }
            }
        }
    }

    /// Journal one change and fire the reaction for it (or refuse it over the rate); `false`
    /// when the watch is over.
    async fn react(&self, change: Change, dropped: u64, firings: &mut Firings) -> bool {
        if self.shared.clock.now_ms() >= self.expires_at {
            self.stats.end("expired");
            return false;
        }
        if firings.fired >= self.firings_max {
            self.stats.end("firings_max reached");
            return false;
        }
        // The session may have ended while the last firing ran.
        if self.stop.is_cancelled() {
            return false;
        }
        let per_minute = self.per_minute;
        let refused = (!firings.bucket.take(self.shared.clock.now_ms()))
            .then(|| EventsError::RateLimited { per_minute }.code().to_owned());
        let event = Event::EventsDelivered {
            subscription: self.id.clone(),
            proposal: self.proposal,
            changes: vec![change.clone()],
            lagged: dropped,
            refused: refused.clone(),
        };
        let seq = match journal(&self.shared, self.session, event).await {
            Ok(seq) => seq,
            Err(e) => {
                tracing::warn!(
                    code = e.code(),
                    "cannot journal a reaction's event; it ends"
                );
                self.stats.end("its events could not be journaled");
                return false;
            }
        };
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
        let (id, proposal) = (&self.id, self.proposal);
        if let Some(code) = refused {
            self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            self.notifier.notify(json!({
                "subscription": id, "proposal": proposal, "seq": seq,
                "changes": [change], "refused": code,
                "message": format!("over {per_minute} firings a minute: not run"),
            }));
            return true;
        }
        firings.fired += 1;
        let relative = self.watched.relative(Path::new(&change.path));
        let fired_as = fire(
            self.runner.as_ref(),
            &self.shared,
            &self.reaction,
            &change,
            &relative,
            &self.hooks,
            proposal,
        )
        .await;
        match &fired_as {
            Fired::Ran { effects, .. } => {
                self.stats.fired.fetch_add(1, Ordering::Relaxed);
                let until = Instant::now() + Duration::from_millis(OWN_CHANGES_SETTLE_MS);
                for path in effects {
                    firings.own.insert(path.clone(), until);
                }
            }
            Fired::Refused { denied: true, .. } => {
                self.stats.denied.fetch_add(1, Ordering::Relaxed);
            }
            Fired::Refused { .. } => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.notifier.notify(json!({
            "subscription": id, "proposal": proposal, "seq": seq,
            "changes": [change], "fired": fired_as.json(),
        }));
        true
    }
}

/// A token bucket of `per_minute` firings, refilled continuously. Credit is kept in
/// firing-ms (one firing is 60,000; a ms adds `per_minute`), so the arithmetic is exact.
struct Bucket {
    per_minute: u64,
    credit: u64,
    at_ms: u64,
}

/// One firing, in firing-ms.
const FIRING: u64 = 60_000;

impl Bucket {
    fn new(per_minute: u32, now_ms: u64) -> Self {
        let per_minute = u64::from(per_minute);
        Bucket {
            per_minute,
            credit: per_minute * FIRING,
            at_ms: now_ms,
        }
    }

    fn take(&mut self, now_ms: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.at_ms);
        self.credit = self
            .credit
            .saturating_add(elapsed.saturating_mul(self.per_minute))
            .min(self.per_minute * FIRING);
        self.at_ms = self.at_ms.max(now_ms);
        if self.credit >= FIRING {
            self.credit -= FIRING;
            true
        } else {
            false
        }
    }
}

/// Primitives a reaction may not be: they watch.
const NOT_REACTIONS: &[&str] = &["subscribe", "watch_and_react", "unsubscribe"];

fn check_reaction(reaction: &Reaction) -> Result<(), Failure> {
    let invalid = |why: String| Failure::from(EventsError::ReactionInvalid { why });
    if NOT_REACTIONS.contains(&reaction.tool.as_str()) {
        return Err(invalid(format!("{} cannot be a reaction", reaction.tool)));
    }
    let sample = Change {
        path: "/sample".into(),
        kinds: vec![ChangeKind::Create],
    };
    let args = substitute(
        &Value::Object(reaction.arguments.clone()),
        &sample,
        "sample",
    );
    Action::from_tool_call(&reaction.tool, args)
        .map_err(|e| invalid(format!("{}: {e}", reaction.tool)))?;
    Ok(())
}

/// The reaction's arguments with `{{path}}`, `{{relative}}` and `{{kind}}` put in every string.
fn substitute(value: &Value, change: &Change, relative: &str) -> Value {
    match value {
        Value::String(s) => {
            let kind = change.kinds.last().map_or("modify", |k| k.name());
            Value::String(
                s.replace("{{path}}", &change.path)
                    .replace("{{relative}}", relative)
                    .replace("{{kind}}", kind),
            )
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute(v, change, relative))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, change, relative)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// How one firing went.
enum Fired {
    Ran {
        seq: u64,
        primitive: &'static str,
        /// The paths it changed (not fed back to the reaction).
        effects: Vec<String>,
    },
    Refused {
        seq: Option<u64>,
        primitive: String,
        code: String,
        denied: bool,
    },
}

impl Fired {
    fn json(&self) -> Value {
        match self {
            Fired::Ran { seq, primitive, .. } => {
                json!({"seq": seq, "primitive": primitive, "status": "completed"})
            }
            Fired::Refused {
                seq,
                primitive,
                code,
                denied,
            } => json!({
                "seq": seq, "primitive": primitive, "code": code,
                "status": if *denied { "denied" } else { "failed" },
            }),
        }
    }
}

/// Most paths of one firing's change set ignored afterwards.
const FIRED_PATHS_MAX: usize = 10_000;

/// Run the reaction for one change, as a child action of the watch_and_react call.
async fn fire(
    runner: &dyn Children,
    shared: &Shared,
    reaction: &Reaction,
    change: &Change,
    relative: &str,
    hooks: &Hooks,
    proposal: u64,
) -> Fired {
    let args = substitute(&Value::Object(reaction.arguments.clone()), change, relative);
    let action = match Action::from_tool_call(&reaction.tool, args) {
        Ok(action) => action,
        Err(e) => {
            // Journaled like any call that never became an action.
            let seq = runner
                .reject(&reaction.tool, e.code(), &e.to_string())
                .await;
            return Fired::Refused {
                seq,
                primitive: reaction.tool.clone(),
                code: e.code().to_owned(),
                denied: false,
            };
        }
    };
    let primitive = action.primitive();
    match runner.run_child(action, hooks.clone(), proposal).await {
        Ok(ran) => Fired::Ran {
            seq: ran.seq,
            primitive,
            effects: ran
                .outcome
                .effects
                .iter()
                .flat_map(|e| match e {
                    Effect::FileWritten { path, .. }
                    | Effect::FileRemoved { path, .. }
                    | Effect::DirCreated { path }
                    | Effect::DirRemoved { path, .. }
                    | Effect::ModeChanged { path, .. }
                    | Effect::LinkRemoved { path, .. }
                    | Effect::LinkCreated { path, .. } => vec![path.clone()],
                    Effect::Moved { from, to } => vec![from.clone(), to.clone()],
                    Effect::SnapshotRestored { .. } | Effect::RewoundTo { .. } => Vec::new(),
                    // A change set's paths are in its parts (at most a bounded number of them
                    // are ignored for the firing: a reaction never loops on its own writes).
                    Effect::Changes { parts, .. } => {
                        let mut paths = Vec::new();
                        let store = shared.journal.blob_store();
                        let _ = store.visit_change_set(parts, |entry| {
                            paths.push(entry.path.clone());
                            paths.len() < FIRED_PATHS_MAX
                        });
                        paths
                    }
                })
                .collect(),
        },
        Err(e) => Fired::Refused {
            seq: e.seq,
            primitive: primitive.to_owned(),
            code: e.failure.code,
            denied: e.gate.is_some(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_coalesce_by_path_in_order() {
        let (a, b) = (PathBuf::from("/w/a"), PathBuf::from("/w/b"));
        let got = coalesce(vec![
            (a.clone(), ChangeKind::Create),
            (b.clone(), ChangeKind::Modify),
            (a.clone(), ChangeKind::Modify),
            (a.clone(), ChangeKind::Modify),
            (b.clone(), ChangeKind::Modify),
        ]);
        assert_eq!(
            got,
            vec![
                (a, vec![ChangeKind::Create, ChangeKind::Modify]),
                (b, vec![ChangeKind::Modify]),
            ]
        );
    }

    #[test]
    fn aido_temp_files_are_never_delivered() {
        assert!(is_aido_temp(Path::new("/w/.notes.txt.aido-12-3.tmp")));
        assert!(!is_aido_temp(Path::new("/w/notes.txt")));
        assert!(!is_aido_temp(Path::new("/w/.aido-config")));
    }

    #[test]
    fn the_bucket_allows_per_minute_then_refills() {
        let mut bucket = Bucket::new(2, 0);
        assert!(bucket.take(0));
        assert!(bucket.take(0));
        assert!(!bucket.take(10));
        // One firing's worth comes back after 30 s at 2 a minute.
        assert!(!bucket.take(29_000));
        assert!(bucket.take(30_010));
        assert!(!bucket.take(30_020));
    }

    #[test]
    fn placeholders_are_put_into_every_string() {
        let change = Change {
            path: "/w/src/a.rs".into(),
            kinds: vec![ChangeKind::Create, ChangeKind::Modify],
        };
        let args = json!({"argv": ["wc", "{{path}}"], "cwd": ".", "env": {"K": "{{kind}} {{relative}}"}, "n": 1});
        assert_eq!(
            substitute(&args, &change, "src/a.rs"),
            json!({"argv": ["wc", "/w/src/a.rs"], "cwd": ".", "env": {"K": "modify src/a.rs"}, "n": 1})
        );
    }

    #[test]
    fn a_reaction_that_watches_or_does_not_parse_is_refused() {
        let reaction = |tool: &str, args: Value| Reaction {
            tool: tool.into(),
            arguments: serde_json::from_value(args).unwrap(),
        };
        let code = |r: &Reaction| check_reaction(r).unwrap_err().code;
        assert_eq!(
            code(&reaction("subscribe", json!({"paths": ["."]}))),
            "reaction_invalid"
        );
        assert_eq!(
            code(&reaction("write_file", json!({"nope": 1}))),
            "reaction_invalid"
        );
        assert_eq!(
            code(&reaction("no_such_tool", json!({}))),
            "reaction_invalid"
        );
        check_reaction(&reaction(
            "write_file",
            json!({"path": "{{path}}.bak", "content": "x"}),
        ))
        .unwrap();
    }

    #[test]
    fn rename_events_become_a_removal_and_a_creation() {
        use notify::event::{EventKind, ModifyKind, RenameMode};
        let event = notify::Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::Both)))
            .add_path("/w/.a.aido-1-1.tmp".into())
            .add_path("/w/a".into());
        assert_eq!(
            changes_of(&event),
            vec![
                (PathBuf::from("/w/.a.aido-1-1.tmp"), ChangeKind::Remove),
                (PathBuf::from("/w/a"), ChangeKind::Create),
            ]
        );
        let access = notify::Event::new(EventKind::Access(notify::event::AccessKind::Any));
        assert!(changes_of(&access).is_empty());
    }
}
