use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aido_actions::search::{SearchAndRead, SearchCase, SearchCode, SearchMode, SearchScope};
use aido_actions::{AccessKind, Failure, SearchAction};
use aido_call::{Body, Calls, Reply, Turn};
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use aido_search::{Case, Limits, OutputMode, ReadRequest, Scope, SearchRequest};
use serde_json::{Value, json};

use super::SearchBodyError;
use super::judge::Walls;

/// The search body. It takes each call, then searches on the blocking pool.
pub struct SearchBody {
    args: SearchBodyArgs,
}

/// What it is built from.
#[derive(Clone)]
pub struct SearchBodyArgs {
    /// The policy: its walls and deny globs judge every entry.
    pub policy: Arc<PolicyEngine>,
    /// `AIDO_HOME`, resolved: never searched.
    pub aido_home: PathBuf,
}

/// Messages to the search body.
pub enum SearchMsg {
    /// Run one search primitive.
    Run {
        /// The action.
        action: Box<SearchAction>,
        /// The session's context (its working directory).
        session: SessionContext,
        /// What the search found, as JSON (what the journal records and the result renders).
        reply: Reply<Value>,
    },
}

impl Body for SearchBody {
    const NAME: &'static str = "search";
    type Args = SearchBodyArgs;
    type Msg = SearchMsg;

    async fn build(args: SearchBodyArgs) -> Result<Self, String> {
        Ok(Self { args })
    }

    async fn handle(&mut self, msg: SearchMsg, calls: &Calls) {
        match msg {
            SearchMsg::Run {
                action,
                session,
                reply,
            } => {
                // A search changes nothing, so it never commits: a caller that gives up
                // discards its answer.
                let (policy, aido_home) = (self.args.policy.clone(), self.args.aido_home.clone());
                calls.blocking(reply, Turn::Shared, false, move |ticket| {
                    let deadline = search_deadline(ticket.deadline(), Instant::now());
                    run(&policy, &aido_home, &action, &session, deadline)
                });
            }
        }
    }
}

/// The search's own deadline: a little before the call's, so a long search answers with what
/// it found (`truncation: timeout`) instead of being given up on.
fn search_deadline(call: Instant, now: Instant) -> Instant {
    let left = call.saturating_duration_since(now);
    let margin = (left / 10).min(Duration::from_secs(2));
    call.checked_sub(margin).unwrap_or(call)
}

/// The operator's bounds for one search: aido-search's defaults, the time left before
/// `deadline`, and a result that fits a quarter of a journal record (it is recorded twice,
/// as the input and in the result).
pub fn limits_of(policy: &PolicyEngine, deadline: Instant, now: Instant) -> Limits {
    let record = policy.config().limits.record_bytes_max;
    let defaults = Limits::default();
    let left_ms = deadline.saturating_duration_since(now).as_millis() as u64;
    Limits {
        timeout_ms: defaults.timeout_ms.min(left_ms.max(1)),
        result_bytes_max: defaults.result_bytes_max.min(record / 4),
        read_chars_max: defaults.read_chars_max.min((record / 8) as usize),
        ..defaults
    }
}

/// The root judged again (the walls may have changed since the proposal was judged), and the
/// search run with every entry judged before it is opened.
fn run(
    policy: &PolicyEngine,
    aido_home: &Path,
    action: &SearchAction,
    session: &SessionContext,
    deadline: Instant,
) -> Result<Value, Failure> {
    let (given, scope) = match action {
        SearchAction::SearchCode(search) => (search.path_given(), search.scope()),
        SearchAction::SearchAndRead(read) => (read.path_given(), read.scope()),
    };
    let root = policy
        .check_path(given, AccessKind::Read, session, &FsResolver)
        .map_err(|refusal| Failure::new(refusal.code().code(), refusal.to_string()))?
        .resolved;
    let walls = Walls {
        policy,
        session,
        root: &root,
        aido_home,
    };
    let limits = limits_of(policy, deadline, Instant::now());
    let found = match action {
        SearchAction::SearchCode(search) => {
            let request = code_request(search, scope_of(&root, &scope));
            let found = aido_search::search_code_until(&request, &limits, &walls, deadline)
                .map_err(Failure::from)?;
            to_json(&found)?
        }
        SearchAction::SearchAndRead(read) => {
            let request = read_request(read, scope_of(&root, &scope));
            let found =
                aido_search::search_and_read(&request, &limits, &walls).map_err(Failure::from)?;
            to_json(&found)?
        }
    };
    Ok(json!({
        "path": given,
        "root": root.to_string_lossy(),
        "found": found,
    }))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|error| {
        SearchBodyError::Unencodable {
            why: error.to_string(),
        }
        .into_failure()
    })
}

fn scope_of(root: &Path, scope: &SearchScope) -> Scope {
    Scope {
        root: root.to_owned(),
        globs: scope.globs.clone(),
        globs_exclude: scope.globs_exclude.clone(),
        types: scope.types.clone(),
        types_exclude: scope.types_exclude.clone(),
        hidden: scope.hidden,
        ignore_files: !scope.no_ignore,
    }
}

fn case_of(case: SearchCase) -> Case {
    match case {
        SearchCase::Sensitive => Case::Sensitive,
        SearchCase::Insensitive => Case::Insensitive,
        SearchCase::Smart => Case::Smart,
    }
}

fn code_request(search: &SearchCode, scope: Scope) -> SearchRequest {
    SearchRequest {
        patterns: search.patterns.clone(),
        scope,
        fixed_strings: search.fixed_strings,
        case: case_of(search.case),
        multiline: search.multiline,
        context_before: search.context_before.unwrap_or(0),
        context_after: search.context_after.unwrap_or(0),
        mode: match search.mode {
            SearchMode::FilesWithMatches => OutputMode::FilesWithMatches,
            SearchMode::Content => OutputMode::Content,
            SearchMode::Count => OutputMode::Count,
        },
        limit: search.limit,
        bytes_max: Some(search.bytes_max.unwrap_or(SearchCode::BYTES_MAX_DEFAULT)),
    }
}

fn read_request(read: &SearchAndRead, scope: Scope) -> ReadRequest {
    ReadRequest {
        patterns: read.patterns.clone(),
        scope,
        fixed_strings: read.fixed_strings,
        case: case_of(read.case),
        limit: read.limit,
        callers_max: read.callers_max.unwrap_or(SearchAndRead::CALLERS_DEFAULT),
        budget_chars: read
            .budget_chars
            .unwrap_or(SearchAndRead::BUDGET_CHARS_DEFAULT),
    }
}

impl SearchBodyError {
    pub(crate) fn into_failure(self) -> Failure {
        Failure::new(self.code(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_answers_before_the_call_is_given_up() {
        let now = Instant::now();
        let call = now + Duration::from_secs(60);
        assert_eq!(search_deadline(call, now), call - Duration::from_secs(2));
        let call = now + Duration::from_secs(5);
        assert_eq!(
            search_deadline(call, now),
            call - Duration::from_millis(500)
        );
        assert_eq!(search_deadline(now, now), now);
    }
}
