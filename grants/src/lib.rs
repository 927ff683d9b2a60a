//! Capability grants: a session mints a grant narrower than its own (primitives, paths,
//! network hosts) with an expiry, a use count and a rate; a session started with the grant's
//! token can never exceed it, and the grants it mints only narrow further.
//!
//! The store is `AIDO_HOME/grants.sqlite` (WAL, `BEGIN IMMEDIATE` for every use), so every aido
//! process of one `AIDO_HOME` shares the counts: a grant's uses cannot be spent twice by two
//! processes. A use counts against the grant and every grant it was narrowed from, so a child
//! can never outspend its parent; revoking a grant revokes everything narrowed from it.
//!
//! Tokens are `aidog_<id>_<secret>`: 16 random bytes of id and 32 of secret, hex. The store
//! keeps only the secret's SHA-256, compared in constant time, so a token cannot be forged
//! or recovered from the store (or the journal, which records the grant without its token).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use aido_actions::verdict::DenyCode;
use aido_policy::grant::GrantScope;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes of randomness a mint needs: 16 of id, 32 of secret.
pub const RANDOM_BYTES: usize = 48;
/// Longest chain of grants narrowed from grants.
pub const DEPTH_MAX: usize = 16;
/// How every grant token begins.
pub const TOKEN_PREFIX: &str = "aidog_";

/// Why a grant could not be minted, found or used.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The scope or limits as written are not valid.
    #[error("the grant is not valid: {why}")]
    Invalid { why: String },
    /// The new grant would reach further than the grant of the session minting it.
    #[error("a grant can only narrow the session's own: {why}")]
    NotNarrower { why: String },
    /// Not a token this store issued (malformed, unknown id, or the wrong secret).
    #[error("not a valid grant token")]
    TokenInvalid,
    /// No grant with this id.
    #[error("no grant {id}")]
    Unknown { id: String },
    /// The grant, or one it was narrowed from, has expired.
    #[error("grant {id} expired")]
    Expired { id: String },
    /// The grant, or one it was narrowed from, has no uses left.
    #[error("grant {id} has no uses left (all {uses_max} used)")]
    Exhausted { id: String, uses_max: u64 },
    /// The grant, or one it was narrowed from, was revoked.
    #[error("grant {id} was revoked")]
    Revoked { id: String },
    /// The grant allows no more uses in its rate window now.
    #[error("grant {id} allows {count} uses per {per_s} s; try again in {retry_after_ms} ms")]
    RateLimited {
        id: String,
        count: u64,
        per_s: u64,
        retry_after_ms: u64,
    },
    /// The store (SQLite) failed.
    #[error("the grant store failed: {source}")]
    Store {
        #[from]
        source: rusqlite::Error,
    },
}

impl GrantError {
    /// The denial a refused use becomes in the policy chain; `None` for other errors.
    pub fn deny_code(&self) -> Option<DenyCode> {
        Some(match self {
            Self::Expired { .. } => DenyCode::GrantExpired,
            Self::Exhausted { .. } => DenyCode::GrantExhausted,
            Self::Revoked { .. } => DenyCode::GrantRevoked,
            Self::RateLimited { .. } => DenyCode::GrantRateLimited,
            _ => return None,
        })
    }
}

aido_actions::coded!(GrantError {
    Invalid => "grant_invalid",
    NotNarrower => "grant_not_narrower",
    TokenInvalid => "grant_token_invalid",
    Unknown => "grant_unknown",
    Expired => "grant_expired",
    Exhausted => "grant_exhausted",
    Revoked => "grant_revoked",
    RateLimited => "grant_rate_limited",
    Store => "grant_store_failed",
});

/// At most `count` uses in any window of `per_s` seconds (fixed windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub count: u64,
    pub per_s: u64,
}

/// What a new grant asks for. Fields left `None` are inherited from the parent grant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewGrant {
    pub scope: GrantScope,
    /// When it expires (ms since the epoch).
    pub expires_ms: Option<u64>,
    /// How many actions may be run under it.
    pub uses_max: Option<u64>,
    pub rate: Option<Rate>,
}

/// A grant as stored (never its secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub id: String,
    /// The grant it was narrowed from; `None` for one minted by an unrestricted session.
    pub parent: Option<String>,
    /// The session that minted it.
    pub session: String,
    pub created_ms: u64,
    pub scope: GrantScope,
    pub expires_ms: Option<u64>,
    pub uses_max: Option<u64>,
    pub rate: Option<Rate>,
    /// Actions run under it (and under grants narrowed from it).
    pub uses: u64,
    pub revoked_ms: Option<u64>,
}

impl Grant {
    /// Uses left, if counted.
    pub fn remaining(&self) -> Option<u64> {
        self.uses_max.map(|max| max.saturating_sub(self.uses))
    }
}

/// A grant just minted, with the one copy of its token.
#[derive(Clone, Debug)]
pub struct Minted {
    pub grant: Grant,
    pub token: String,
}

/// The grants of one `AIDO_HOME`.
pub struct GrantStore {
    connection: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS grants (
    id TEXT PRIMARY KEY,
    parent TEXT REFERENCES grants(id),
    session TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    scope TEXT NOT NULL,
    expires_ms INTEGER,
    uses_max INTEGER,
    rate_count INTEGER,
    rate_per_s INTEGER,
    uses INTEGER NOT NULL DEFAULT 0,
    window_start_ms INTEGER NOT NULL DEFAULT 0,
    window_uses INTEGER NOT NULL DEFAULT 0,
    revoked_ms INTEGER,
    secret_sha256 TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_parent ON grants(parent);
";

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A stored row, with the rate window a use needs.
struct Row {
    grant: Grant,
    window_start_ms: u64,
    window_uses: u64,
}

const COLUMNS: &str = "id, parent, session, created_ms, scope, expires_ms, uses_max, rate_count, \
                       rate_per_s, uses, revoked_ms, window_start_ms, window_uses";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let scope: String = r.get(4)?;
    let scope = serde_json::from_str(&scope).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, Box::new(e))
    })?;
    let rate = match (r.get::<_, Option<i64>>(7)?, r.get::<_, Option<i64>>(8)?) {
        (Some(count), Some(per_s)) => Some(Rate {
            count: to_u64(count),
            per_s: to_u64(per_s),
        }),
        _ => None,
    };
    Ok(Row {
        grant: Grant {
            id: r.get(0)?,
            parent: r.get(1)?,
            session: r.get(2)?,
            created_ms: to_u64(r.get(3)?),
            scope,
            expires_ms: r.get::<_, Option<i64>>(5)?.map(to_u64),
            uses_max: r.get::<_, Option<i64>>(6)?.map(to_u64),
            rate,
            uses: to_u64(r.get(9)?),
            revoked_ms: r.get::<_, Option<i64>>(10)?.map(to_u64),
        },
        window_start_ms: to_u64(r.get(11)?),
        window_uses: to_u64(r.get(12)?),
    })
}

fn load(c: &Connection, id: &str) -> Result<Row, GrantError> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM grants WHERE id = ?1"),
        params![id],
        row,
    )
    .optional()?
    .ok_or_else(|| GrantError::Unknown { id: id.to_owned() })
}

/// The grant and every grant it was narrowed from, itself first.
fn chain(c: &Connection, id: &str) -> Result<Vec<Row>, GrantError> {
    let mut out = vec![load(c, id)?];
    while let Some(parent) = out.last().and_then(|r| r.grant.parent.clone()) {
        if out.len() > DEPTH_MAX {
            return Err(GrantError::Invalid {
                why: format!("grant {id} is narrowed from more than {DEPTH_MAX} grants"),
            });
        }
        out.push(load(c, &parent)?);
    }
    Ok(out)
}

/// Whether `row` can be used at `now` (not counting this use's increment).
fn usable(row: &Row, now_ms: u64) -> Result<(), GrantError> {
    let g = &row.grant;
    let id = g.id.clone();
    if g.revoked_ms.is_some() {
        return Err(GrantError::Revoked { id });
    }
    if g.expires_ms.is_some_and(|at| now_ms >= at) {
        return Err(GrantError::Expired { id });
    }
    if let Some(uses_max) = g.uses_max
        && g.uses >= uses_max
    {
        return Err(GrantError::Exhausted { id, uses_max });
    }
    if let Some(rate) = g.rate {
        let window_ms = rate.per_s.saturating_mul(1000);
        let in_window = now_ms < row.window_start_ms.saturating_add(window_ms);
        if in_window && row.window_uses >= rate.count {
            return Err(GrantError::RateLimited {
                id,
                count: rate.count,
                per_s: rate.per_s,
                retry_after_ms: row.window_start_ms.saturating_add(window_ms) - now_ms,
            });
        }
    }
    Ok(())
}

fn sha256_hex(secret: &[u8]) -> String {
    hex::encode(Sha256::digest(secret))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl GrantStore {
    /// Open (or create) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, GrantError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        connection
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))?;
        for (pragma, value) in [("synchronous", "FULL"), ("trusted_schema", "OFF")] {
            connection.pragma_update(None, pragma, value)?;
        }
        connection.execute_batch(SCHEMA)?;
        Ok(Self {
            connection: Mutex::new(connection),
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, GrantError>,
    ) -> Result<T, GrantError> {
        let mut c = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Mint a grant for `session`: narrowed from `parent` (the minting session's own grant),
    /// or from nothing when the session is unrestricted. `random` must be unpredictable.
    pub fn mint(
        &self,
        parent: Option<&str>,
        session: &str,
        mut new: NewGrant,
        now_ms: u64,
        random: &[u8; RANDOM_BYTES],
    ) -> Result<Minted, GrantError> {
        new.scope
            .check()
            .map_err(|why| GrantError::Invalid { why })?;
        if new.rate.is_some_and(|r| r.count == 0 || r.per_s == 0) {
            return Err(GrantError::Invalid {
                why: "a rate needs a count and a window of at least 1".into(),
            });
        }
        if new.expires_ms.is_some_and(|at| at <= now_ms) {
            return Err(GrantError::Invalid {
                why: "it would expire before it is minted".into(),
            });
        }
        let id = hex::encode(&random[..16]);
        let secret = hex::encode(&random[16..]);
        self.with(|tx| {
            let mut parent_id = None;
            if let Some(parent) = parent {
                let rows = chain(tx, parent)?;
                for r in &rows {
                    usable(r, now_ms)?;
                }
                let p = &rows[0].grant;
                inherit(&mut new, p);
                narrower(&new, p)?;
                parent_id = Some(p.id.clone());
            }
            let scope = serde_json::to_string(&new.scope).map_err(|e| GrantError::Invalid {
                why: e.to_string(),
            })?;
            tx.execute(
                "INSERT INTO grants (id, parent, session, created_ms, scope, expires_ms, uses_max, \
                 rate_count, rate_per_s, secret_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    id,
                    parent_id,
                    session,
                    to_i64(now_ms),
                    scope,
                    new.expires_ms.map(to_i64),
                    new.uses_max.map(to_i64),
                    new.rate.map(|r| to_i64(r.count)),
                    new.rate.map(|r| to_i64(r.per_s)),
                    sha256_hex(secret.as_bytes()),
                ],
            )?;
            Ok(load(tx, &id)?.grant)
        })
        .map(|grant| Minted {
            token: format!("{TOKEN_PREFIX}{}_{secret}", grant.id),
            grant,
        })
    }

    /// The grant a token names, if the token is one this store issued.
    pub fn authenticate(&self, token: &str) -> Result<Grant, GrantError> {
        let rest = token
            .trim()
            .strip_prefix(TOKEN_PREFIX)
            .ok_or(GrantError::TokenInvalid)?;
        let (id, secret) = rest.split_once('_').ok_or(GrantError::TokenInvalid)?;
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(GrantError::TokenInvalid);
        }
        let c = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let stored: Option<String> = c
            .query_row(
                "SELECT secret_sha256 FROM grants WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?;
        let Some(stored) = stored else {
            return Err(GrantError::TokenInvalid);
        };
        if !constant_time_eq(stored.as_bytes(), sha256_hex(secret.as_bytes()).as_bytes()) {
            return Err(GrantError::TokenInvalid);
        }
        Ok(load(&c, id)?.grant)
    }

    /// `id` if neither it nor any grant it was narrowed from is revoked or expired at `now`
    /// (uses and rate are not checked: nothing is spent).
    pub fn live(&self, id: &str, now_ms: u64) -> Result<Grant, GrantError> {
        let c = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let rows = chain(&c, id)?;
        for r in &rows {
            let g = &r.grant;
            if g.revoked_ms.is_some() {
                return Err(GrantError::Revoked { id: g.id.clone() });
            }
            if g.expires_ms.is_some_and(|at| now_ms >= at) {
                return Err(GrantError::Expired { id: g.id.clone() });
            }
        }
        Ok(rows[0].grant.clone())
    }

    /// Spend one use of `id` at `now`: refused if it or any grant it was narrowed from is
    /// revoked, expired, used up or over its rate; otherwise counted against all of them.
    pub fn use_grant(&self, id: &str, now_ms: u64) -> Result<Grant, GrantError> {
        self.with(|tx| {
            let rows = chain(tx, id)?;
            for r in &rows {
                usable(r, now_ms)?;
            }
            for r in &rows {
                let (start, uses) = match r.grant.rate {
                    Some(rate) if now_ms < r.window_start_ms.saturating_add(rate.per_s * 1000) => {
                        (r.window_start_ms, r.window_uses + 1)
                    }
                    _ => (now_ms, 1),
                };
                tx.execute(
                    "UPDATE grants SET uses = uses + 1, window_start_ms = ?2, window_uses = ?3 \
                     WHERE id = ?1",
                    params![r.grant.id, to_i64(start), to_i64(uses)],
                )?;
            }
            Ok(load(tx, id)?.grant)
        })
    }

    /// Revoke `id` and every grant narrowed from it; returns the ids revoked now.
    pub fn revoke(&self, id: &str, now_ms: u64) -> Result<Vec<String>, GrantError> {
        self.with(|tx| {
            load(tx, id)?;
            let mut revoked = Vec::new();
            let mut frontier = vec![id.to_owned()];
            while let Some(next) = frontier.pop() {
                let changed = tx.execute(
                    "UPDATE grants SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
                    params![next, to_i64(now_ms)],
                )?;
                if changed > 0 {
                    revoked.push(next.clone());
                }
                let mut children = tx.prepare("SELECT id FROM grants WHERE parent = ?1")?;
                let ids = children
                    .query_map(params![next], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                frontier.extend(ids);
            }
            Ok(revoked)
        })
    }

    /// One grant.
    pub fn get(&self, id: &str) -> Result<Grant, GrantError> {
        let c = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(load(&c, id)?.grant)
    }

    /// Whether `id` is `ancestor` or was narrowed (at any depth) from it.
    pub fn descends_from(&self, id: &str, ancestor: &str) -> Result<bool, GrantError> {
        let c = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(chain(&c, id)?.iter().any(|r| r.grant.id == ancestor))
    }

    /// Grants, oldest first: all of them, or those minted by `session` and every grant
    /// narrowed from those.
    pub fn list(&self, session: Option<&str>) -> Result<Vec<Grant>, GrantError> {
        let c = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut all = c.prepare(&format!(
            "SELECT {COLUMNS} FROM grants ORDER BY created_ms, id"
        ))?;
        let rows = all
            .query_map([], row)?
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .map(|r| r.grant)
            .collect::<Vec<_>>();
        let Some(session) = session else {
            return Ok(rows);
        };
        let mut mine: Vec<String> = Vec::new();
        let mut out = Vec::new();
        for g in rows {
            // Parents are older than their children, so one pass in creation order suffices.
            let in_tree =
                g.session == session || g.parent.as_ref().is_some_and(|p| mine.contains(p));
            if in_tree {
                mine.push(g.id.clone());
                out.push(g);
            }
        }
        Ok(out)
    }
}

/// Fill what the new grant leaves open from its parent's.
fn inherit(new: &mut NewGrant, parent: &Grant) {
    let p = &parent.scope;
    let s = &mut new.scope;
    if s.primitives.is_none() {
        s.primitives.clone_from(&p.primitives);
    }
    if s.read.is_none() && s.write.is_none() {
        s.read.clone_from(&p.read);
        s.write.clone_from(&p.write);
    }
    if s.hosts.is_none() {
        s.hosts.clone_from(&p.hosts);
    }
    if new.expires_ms.is_none() {
        new.expires_ms = parent.expires_ms;
    }
    if new.uses_max.is_none() {
        new.uses_max = parent.remaining();
    }
    if new.rate.is_none() {
        new.rate = parent.rate;
    }
}

/// Whether `new` is within `parent` in every dimension.
fn narrower(new: &NewGrant, parent: &Grant) -> Result<(), GrantError> {
    let not = |why: String| GrantError::NotNarrower { why };
    new.scope.within(&parent.scope).map_err(not)?;
    if let Some(at) = parent.expires_ms
        && new.expires_ms.is_none_or(|mine| mine > at)
    {
        return Err(not(format!("expiry: the parent grant expires at {at} ms")));
    }
    if let Some(left) = parent.remaining()
        && new.uses_max.is_none_or(|mine| mine > left)
    {
        return Err(not(format!("uses: the parent grant has {left} uses left")));
    }
    if let Some(rate) = parent.rate {
        let ok = new.rate.is_some_and(|mine| {
            // At most the parent's uses in any window of the parent's length.
            mine.count.saturating_mul(rate.per_s.div_ceil(mine.per_s)) <= rate.count
        });
        if !ok {
            return Err(not(format!(
                "rate: the parent grant allows {} uses per {} s",
                rate.count, rate.per_s
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
