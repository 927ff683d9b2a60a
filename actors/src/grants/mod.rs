//! Capability grants in the runtime: the store of `AIDO_HOME/grants.sqlite`, a use spent
//! before each action of a session started under a grant, and grant_mint / grant_revoke /
//! grant_list. A mint's token reaches the agent once: the journal (its answer and its
//! outcome) holds the grant without it.

use std::sync::Arc;

use aido_actions::meta::{GrantList, GrantMint, GrantRevoke};
use aido_actions::{AccessKind, Action, Failure, Input, Outcome, RuntimeAction};
use aido_grants::{GrantError, NewGrant, Rate};
use aido_policy::SessionContext;
use aido_policy::grant::GrantScope;
use aido_walk::{Executed, render};
use serde_json::{Value, json};

use crate::call::Call;
use crate::shared::Shared;
pub(crate) use store::Grants;

/// The store the shared state holds.
pub(crate) use aido_context::grants::store;

/// The grants file under `AIDO_HOME`.
pub const GRANTS_FILE: &str = "grants.sqlite";

/// What the journal holds instead of a minted token.
pub const TOKEN_WITHHELD: &str = "[shown once to the agent that minted it; never journaled]";

/// Run blocking store work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GrantError> + Send + 'static,
) -> Result<T, GrantError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(GrantError::Invalid {
            why: format!("the grant store's task failed: {e}"),
        }),
    }
}

/// The context a session under `token`'s grant runs with, and the grant's id.
pub(crate) async fn authenticate(
    shared: &Shared,
    token: String,
    ctx: &mut SessionContext,
) -> Result<String, GrantError> {
    let store = shared.grants.open()?;
    let grant = blocking(move || store.authenticate(&token)).await?;
    ctx.capabilities = Some(Arc::new(grant.scope.clone()));
    ctx.grant_id = Some(grant.id.clone());
    Ok(grant.id)
}

/// The id of the grant `token` names if it is one of this store's and is live (neither it
/// nor an ancestor revoked or expired): what a bearer token is checked with.
pub(crate) async fn live(shared: &Shared, token: String) -> Result<String, GrantError> {
    let store = shared.grants.open()?;
    let now = shared.clock.now_ms();
    let grant = blocking(move || {
        let grant = store.authenticate(&token)?;
        store.live(&grant.id, now)
    })
    .await?;
    Ok(grant.id)
}

/// Spend one use of the session's grant before its action is judged: a refusal (expired,
/// used up, revoked, over its rate) becomes the chain's denial; a store that cannot answer
/// refuses too (fail closed), as a revoked grant would.
pub(crate) async fn spend(shared: &Shared, ctx: &SessionContext) -> Option<SessionContext> {
    let id = ctx.grant_id.clone()?;
    let now = shared.clock.now_ms();
    let store = match shared.grants.store() {
        Ok(store) => store,
        Err(f) => {
            return Some(refused(
                ctx,
                aido_actions::verdict::DenyCode::GrantRevoked,
                f.message,
            ));
        }
    };
    let used = blocking(move || store.use_grant(&id, now)).await;
    match used {
        Ok(_) => None,
        Err(e) => {
            let code = e
                .deny_code()
                .unwrap_or(aido_actions::verdict::DenyCode::GrantRevoked);
            Some(refused(ctx, code, format!("{} ({})", e, e.code())))
        }
    }
}

fn refused(
    ctx: &SessionContext,
    code: aido_actions::verdict::DenyCode,
    why: String,
) -> SessionContext {
    let mut ctx = ctx.clone();
    ctx.grant_refused = Some((code, why));
    ctx
}

/// The outcome as the journal holds it: a mint's token withheld.
pub(crate) fn journaled(action: &Action, outcome: &Outcome) -> Option<Outcome> {
    if !matches!(action, Action::GrantMint(_)) {
        return None;
    }
    let mut journaled = outcome.clone();
    if let Some(token) = journaled.output.get_mut("token") {
        *token = Value::String(TOKEN_WITHHELD.into());
    }
    journaled.text = journaled.output.to_string();
    Some(journaled)
}

fn invalid(why: impl Into<String>) -> Failure {
    Failure::from(GrantError::Invalid { why: why.into() })
}

fn grant_json(g: &aido_grants::Grant) -> Value {
    serde_json::to_value(g).unwrap_or_default()
}

/// The grant primitives.
pub(crate) async fn run(call: &Call<'_>, action: &RuntimeAction) -> Result<Executed, Failure> {
    let (shared, ctx, session) = (&call.shared, call.ctx, call.session.to_string());
    let store = shared.grants.store()?;
    let own = ctx.grant_id.clone();
    let now = shared.clock.now_ms();
    let (answer, shown) = match action {
        RuntimeAction::GrantMint(m) => {
            let new = new_grant(m, ctx, now)?;
            let mut random = [0u8; aido_grants::RANDOM_BYTES];
            shared.clock.random(&mut random);
            let minted = blocking(move || store.mint(own.as_deref(), &session, new, now, &random))
                .await
                .map_err(Failure::from)?;
            let shown = json!({
                "grant": grant_json(&minted.grant),
                "token": minted.token,
                "how": "start a session under it with AIDO_GRANT=<token> aido mcp, or send it as the bearer token of aido serve",
            });
            let mut answer = shown.clone();
            answer["token"] = Value::String(TOKEN_WITHHELD.into());
            (answer, shown)
        }
        RuntimeAction::GrantRevoke(GrantRevoke { id }) => {
            let id = id.clone();
            let revoked = blocking(move || {
                if let Some(own) = &own
                    && !store.descends_from(&id, own)?
                {
                    // Under a grant, only grants narrowed from the session's own.
                    return Err(GrantError::Unknown { id });
                }
                if own.is_none() {
                    store.get(&id)?;
                }
                store.revoke(&id, now)
            })
            .await
            .map_err(Failure::from)?;
            let answer = json!({"revoked": revoked});
            (answer.clone(), answer)
        }
        RuntimeAction::GrantList(GrantList { all }) => {
            let every = *all;
            let listed = blocking(move || {
                let all = store.list(if own.is_some() || every {
                    None
                } else {
                    Some(&session)
                })?;
                match &own {
                    None => Ok(all),
                    Some(own) => {
                        let mut mine = Vec::new();
                        for g in all {
                            if store.descends_from(&g.id, own)? {
                                mine.push(g);
                            }
                        }
                        Ok(mine)
                    }
                }
            })
            .await
            .map_err(Failure::from)?;
            let answer = json!({"grants": listed.iter().map(grant_json).collect::<Vec<_>>()});
            (answer.clone(), answer)
        }
        _ => return Err(invalid("not a grant primitive")),
    };
    let mut done = Executed::new(render::answered(shown));
    done.outcome.inputs.push(Input::Answer {
        from: "grants".into(),
        value: answer,
    });
    Ok(done)
}

/// The new grant a mint asks for, its roots as the chain resolved them.
fn new_grant(m: &GrantMint, ctx: &SessionContext, now: u64) -> Result<NewGrant, Failure> {
    for (what, list) in [
        ("primitives", &m.primitives),
        ("read", &m.read),
        ("write", &m.write),
        ("hosts", &m.hosts),
    ] {
        if list
            .as_ref()
            .is_some_and(|l| l.len() > GrantMint::ENTRIES_MAX)
        {
            return Err(invalid(format!(
                "{what} has more than {} entries",
                GrantMint::ENTRIES_MAX
            )));
        }
    }
    let roots = |given: &Option<Vec<String>>, kind: AccessKind| -> Result<_, Failure> {
        given
            .as_ref()
            .map(|paths| {
                paths
                    .iter()
                    .map(|p| {
                        ctx.admitted(p, kind)
                            .map(|check| check.resolved.clone())
                            .ok_or_else(|| invalid(format!("the root {p} was not judged")))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
    };
    let expires_ms = match m.expires_in_s {
        Some(0) => return Err(invalid("expires_in_s is at least 1")),
        Some(s) => Some(now.saturating_add(s.saturating_mul(1000))),
        None => None,
    };
    Ok(NewGrant {
        scope: GrantScope {
            primitives: m.primitives.as_ref().map(|p| p.iter().cloned().collect()),
            read: roots(&m.read, AccessKind::Read)?,
            write: roots(&m.write, AccessKind::Write)?,
            hosts: m.hosts.clone(),
        },
        expires_ms,
        uses_max: m.uses_max,
        rate: m.rate.map(|r| Rate {
            count: r.count,
            per_s: r.per_s,
        }),
    })
}
