//! Events and processes: file-change subscriptions under the walls (delivered to the client
//! that subscribed as MCP notifications), reactions run on matching changes (each firing a
//! child action judged and journaled like any call), and the processes aido started.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// What happened to a path.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It was created (a file, a directory, or one moved in).
    Create,
    /// Its contents or metadata changed.
    Modify,
    /// It was removed (or moved away).
    Remove,
}

impl ChangeKind {
    /// Every kind, the default of a subscription.
    pub const ALL: &'static [ChangeKind] =
        &[ChangeKind::Create, ChangeKind::Modify, ChangeKind::Remove];

    /// Its name, as events show it.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Create => "create",
            ChangeKind::Modify => "modify",
            ChangeKind::Remove => "remove",
        }
    }
}

/// One changed path of a delivered batch: the kinds of change seen for it, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Change {
    /// The path, absolute as the walls resolved it.
    pub path: String,
    /// What happened to it within the batch (each kind once, first seen first).
    pub kinds: Vec<ChangeKind>,
}

/// Subscribe to file changes under the walls: every path given (a directory is watched with
/// everything below it) must be readable by the policy; an event for a path the walls or the
/// deny globs refuse (one that does not exist yet included) is never delivered. Changes are
/// coalesced over `debounce_ms` and delivered to this client as `notifications/message`
/// (logger `aido/events`), each batch journaled. A flood beyond the bounded queue drops
/// events and says how many (`lagged`). Ends with unsubscribe or with the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    /// Files or directories to watch (at most 16).
    pub paths: Vec<String>,
    /// Only paths matching one of these globs (relative to the watched path, e.g. `**/*.rs`);
    /// default every path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub globs: Vec<String>,
    /// Which kinds of change (default all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<ChangeKind>,
    /// How long changes are gathered before a batch is delivered, in ms (default 200, 20 to
    /// 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
}

/// Most paths one subscription watches.
pub const SUBSCRIBE_PATHS_MAX: usize = 16;
/// Most globs one subscription filters by.
pub const SUBSCRIBE_GLOBS_MAX: usize = 32;
/// Default gathering time of a batch.
pub const DEBOUNCE_MS_DEFAULT: u64 = 200;
/// Shortest gathering time.
pub const DEBOUNCE_MS_MIN: u64 = 20;
/// Longest gathering time.
pub const DEBOUNCE_MS_MAX: u64 = 10_000;

/// End a subscription or a reaction (its id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Unsubscribe {
    /// The id subscribe or watch_and_react returned.
    pub subscription: String,
}

/// This session's subscriptions and reactions, with what they delivered, fired and dropped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSubscriptions {}

/// The primitive a reaction runs: a tool call whose string arguments may name the event with
/// `{{path}}` (absolute), `{{relative}}` (to the watched path) and `{{kind}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reaction {
    /// The primitive's name (`run_command`, `write_file`, ...); not subscribe or
    /// watch_and_react.
    pub tool: String,
    /// Its arguments, with the placeholders in any string.
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

/// Run an action on each matching file change (as subscribe, plus a reaction): each firing is
/// its own child action of this call, judged by the policy chain and journaled like any call
/// (a denied firing is journaled as denied), at most `per_minute` firings a minute (more are
/// refused, coded `watch_rate_limited`, and journaled), at most `firings_max` in all and
/// until `expires_ms`. Changes the reaction itself made are not fed back to it. Stop it with
/// unsubscribe; it ends with the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchAndReact {
    /// Files or directories to watch (at most 16).
    pub paths: Vec<String>,
    /// Only paths matching one of these globs (relative to the watched path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub globs: Vec<String>,
    /// Which kinds of change (default all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<ChangeKind>,
    /// How long changes are gathered before firing, in ms (default 200); one firing per
    /// changed path of a batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
    /// What to run.
    pub reaction: Reaction,
    /// Most firings a minute (default 30, at most 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
    /// Most firings in all (default 100, at most 10000); then it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firings_max: Option<u32>,
    /// How long it lives, in ms (default an hour, at most a day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
}

impl WatchAndReact {
    /// Default firings a minute.
    pub const PER_MINUTE_DEFAULT: u32 = 30;
    /// Most firings a minute.
    pub const PER_MINUTE_MAX: u32 = 600;
    /// Default firings in all.
    pub const FIRINGS_DEFAULT: u32 = 100;
    /// Most firings in all.
    pub const FIRINGS_MAX: u32 = 10_000;
    /// Default lifetime.
    pub const EXPIRES_MS_DEFAULT: u64 = 3_600_000;
    /// Longest lifetime.
    pub const EXPIRES_MS_MAX: u64 = 86_400_000;
}

/// The processes aido started (background commands: pid, argv, state, start time) and, with
/// `host` and `[processes] host_visible`, the host's processes from /proc with only the
/// fields `[processes] host_fields` names (environments are never shown).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListProcesses {
    /// Also list the host's processes (refused unless the policy allows it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host: bool,
    /// Most host processes listed (default and most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

impl ListProcesses {
    /// Default and most host processes listed.
    pub const LIMIT_MAX: usize = 500;
}

impl Touches for Subscribe {
    fn touches(&self, out: &mut Vec<Access>) {
        out.extend(self.paths.iter().map(|p| Access::read(p)));
    }
}

impl Touches for WatchAndReact {
    fn touches(&self, out: &mut Vec<Access>) {
        // The reaction is judged at each firing, with the event's path in it.
        out.extend(self.paths.iter().map(|p| Access::read(p)));
    }
}

macro_rules! touches_nothing {
    ($($ty:ty),*) => {$(
        impl Touches for $ty {
            fn touches(&self, _out: &mut Vec<Access>) {}
        }
    )*};
}
touches_nothing!(Unsubscribe, ListSubscriptions, ListProcesses);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_parses_with_its_reaction() {
        let w: WatchAndReact = serde_json::from_value(serde_json::json!({
            "paths": ["src"],
            "kinds": ["create", "modify"],
            "reaction": {"tool": "run_command", "arguments": {"argv": ["wc", "-c", "{{path}}"]}},
            "per_minute": 5,
        }))
        .unwrap();
        assert_eq!(w.reaction.tool, "run_command");
        assert_eq!(w.kinds, [ChangeKind::Create, ChangeKind::Modify]);
        let mut out = Vec::new();
        w.touches(&mut out);
        assert_eq!(out, [Access::read("src")]);
    }
}
