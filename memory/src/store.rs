//! The store: one SQLite connection, and remember, recall, forget and list_memory over it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, Row, Transaction, TransactionBehavior};

use crate::cursor::{self, Kind};
use crate::error::{
    ForgetError, InputError, ListError, OpenError, RecallError, RememberError, StoreError,
    classify, is_busy,
};
use crate::filter::{self, Filter, to_sql};
use crate::limits::Limits;
use crate::model::{
    Expiry, ForgetRequest, Forgotten, ListPage, ListRequest, Memory, MemoryId, Provenance, Recall,
    RecallRequest, Recalled, RememberRequest, Remembered, Scope, Terms,
};
use crate::query;
use crate::schema;

/// The columns every read selects, in the order [`read_memory`] takes them.
const COLUMNS: &str = "m.id, m.text, m.scope_kind, m.scope_key, m.created_ms, m.expires_ms, \
     m.session, m.seq, m.untrusted, \
     (SELECT group_concat(tag, char(31)) FROM memory_tags t WHERE t.memory_id = m.id)";

/// How many memories one scope holds (no row: none).
const SCOPE_COUNT: &str = "SELECT coalesce((SELECT n FROM memory_counts \
     WHERE scope_kind = ?1 AND scope_key = ?2), 0)";

/// One memory; the triggers index it and count it.
const INSERT_MEMORY: &str = "INSERT INTO memories \
     (text, scope_kind, scope_key, created_ms, expires_ms, session, seq, untrusted) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// A memory store on one SQLite file, which any number of processes may open at once.
///
/// Every method takes `now_ms`, the caller's clock: the store never reads one, so a replay
/// that feeds back the recorded times sees the same expiries.
pub struct MemoryStore {
    connection: Connection,
    limits: Limits,
    path: PathBuf,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// Opens the store at `path`, creating it (not its directory) if it does not exist, and
    /// upgrading its schema if it is older than this code's.
    pub fn open(path: impl AsRef<Path>, limits: Limits) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection =
            Connection::open_with_flags(&path, flags).map_err(|source| match classify(source) {
                StoreError::Failed { source } => OpenError::Unopenable {
                    path: path.clone(),
                    source,
                },
                other => OpenError::Store(other),
            })?;
        let mut store = Self {
            connection,
            limits,
            path,
        };
        store
            .connection
            .busy_timeout(Duration::from_millis(store.limits.busy_timeout_ms))
            .map_err(classify)?;
        store.configure()?;
        let limits = store.limits.clone();
        with_retry(
            &mut store.connection,
            &limits,
            TransactionBehavior::Immediate,
            schema::upgrade,
        )??;
        Ok(store)
    }

    /// WAL (readers never block the writer, and several processes share one file), full
    /// fsync on commit (an acknowledged memory survives power loss), and no trust in
    /// functions the file's schema might name.
    fn configure(&mut self) -> Result<(), OpenError> {
        let mut attempts = 0;
        let mode = loop {
            attempts += 1;
            let set = self
                .connection
                .pragma_update_and_check(None, "journal_mode", "WAL", |row| {
                    row.get::<_, String>(0)
                });
            match set {
                Ok(mode) => break mode,
                Err(source) if is_busy(&source) && attempts < self.limits.busy_attempts_max => {
                    std::thread::sleep(backoff(attempts));
                }
                Err(source) if is_busy(&source) => return Err(StoreError::Busy { attempts }.into()),
                Err(source) => return Err(classify(source).into()),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(OpenError::WalUnavailable {
                path: self.path.clone(),
                mode,
            });
        }
        for (pragma, value) in [
            ("synchronous", "FULL"),
            ("trusted_schema", "OFF"),
            ("cell_size_check", "ON"),
        ] {
            self.connection
                .pragma_update(None, pragma, value)
                .map_err(classify)?;
        }
        Ok(())
    }

    /// The bounds this store was opened with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The file this store was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs SQLite's `quick_check` over the whole file (slow on a large store: every page is
    /// read) and says `memory_store_corrupt` if any page is damaged.
    pub fn check(&mut self) -> Result<(), StoreError> {
        let limits = self.limits.clone();
        with_retry(
            &mut self.connection,
            &limits,
            TransactionBehavior::Deferred,
            |tx| {
                let mut statement = tx.prepare("PRAGMA quick_check")?;
                let verdicts: Vec<String> = statement
                    .query_map([], |row| row.get(0))?
                    .collect::<Result<_, _>>()?;
                if verdicts == ["ok"] {
                    Ok(Ok(()))
                } else {
                    Ok(Err(StoreError::Corrupt {
                        detail: verdicts.join("; "),
                    }))
                }
            },
        )?
    }

    /// `remember`: stores one memory and returns its id. Expired memories are purged first
    /// (at most `purge_batch_max`), in the same transaction.
    pub fn remember(
        &mut self,
        request: &RememberRequest,
        now_ms: u64,
    ) -> Result<Remembered, RememberError> {
        let limits = &self.limits;
        if request.text.trim().is_empty() {
            return Err(RememberError::TextEmpty);
        }
        if request.text.len() > limits.text_bytes_max {
            return Err(RememberError::TextTooLarge {
                bytes: request.text.len(),
                max: limits.text_bytes_max,
            });
        }
        filter::check_scope(&request.scope, limits)?;
        let tags = filter::check_tags(&request.tags, limits)?;
        let provenance = &request.provenance;
        if !filter::is_valid_label(&provenance.session, limits.scope_key_bytes_max) {
            return Err(RememberError::ProvenanceInvalid {
                session: provenance.session.chars().take(64).collect(),
                max: limits.scope_key_bytes_max,
            });
        }
        let now = to_sql(now_ms)?;
        let seq = to_sql(provenance.seq)?;
        let expires_ms = match request.expiry {
            None => None,
            Some(Expiry::AtMs(at)) => Some(at),
            Some(Expiry::AfterMs(after)) => Some(
                now_ms
                    .checked_add(after)
                    .ok_or(InputError::OutOfRange { value: after })?,
            ),
        };
        let expires = expires_ms.map(to_sql).transpose()?;
        if let Some(expires_ms) = expires_ms.filter(|at| *at <= now_ms) {
            return Err(RememberError::ExpiryPast { expires_ms, now_ms });
        }
        let limits = limits.clone();
        let remembered = with_retry(
            &mut self.connection,
            &limits,
            TransactionBehavior::Immediate,
            |tx| {
                purge(tx, now, limits.purge_batch_max)?;
                let total: i64 =
                    tx.query_row("SELECT n FROM memory_total", [], |row| row.get(0))?;
                if total_at_least(total, limits.memories_max) {
                    return Ok(Err(RememberError::StoreFull {
                        max: limits.memories_max,
                    }));
                }
                let scope = [request.scope.kind(), request.scope.key()];
                let in_scope: i64 = tx.query_row(SCOPE_COUNT, scope, |row| row.get(0))?;
                if total_at_least(in_scope, limits.scope_memories_max) {
                    return Ok(Err(RememberError::ScopeFull {
                        max: limits.scope_memories_max,
                    }));
                }
                tx.prepare_cached(INSERT_MEMORY)?
                    .execute(rusqlite::params![
                        request.text,
                        request.scope.kind(),
                        request.scope.key(),
                        now,
                        expires,
                        provenance.session,
                        seq,
                        provenance.untrusted,
                    ])?;
                let id = tx.last_insert_rowid();
                let mut insert_tag =
                    tx.prepare_cached("INSERT INTO memory_tags (memory_id, tag) VALUES (?1, ?2)")?;
                for tag in &tags {
                    insert_tag.execute(rusqlite::params![id, tag])?;
                }
                let total_after: i64 =
                    tx.query_row("SELECT n FROM memory_total", [], |row| row.get(0))?;
                assert_eq!(
                    total_after,
                    total + 1,
                    "the count triggers must follow every insert"
                );
                Ok(Ok(id))
            },
        )??;
        let id = u64::try_from(remembered).map_err(|_| StoreError::Corrupt {
            detail: format!("SQLite gave the negative id {remembered}"),
        })?;
        Ok(Remembered {
            id: MemoryId(id),
            created_ms: now_ms,
            expires_ms,
        })
    }

    /// `recall`: the live memories best matching the query (bm25 over the text), best first,
    /// until `limit` results or the character budget.
    pub fn recall(&mut self, request: &RecallRequest, now_ms: u64) -> Result<Recall, RecallError> {
        let limits = self.limits.clone();
        if request.query.len() > limits.query_bytes_max {
            return Err(RecallError::QueryTooLarge {
                bytes: request.query.len(),
                max: limits.query_bytes_max,
            });
        }
        let words = query::words(&request.query);
        if words.is_empty() {
            return Err(RecallError::QueryEmpty);
        }
        if words.len() > limits.query_terms_max {
            return Err(RecallError::QueryTermsTooMany {
                count: words.len(),
                max: limits.query_terms_max,
            });
        }
        let limit = request.limit.unwrap_or(limits.recall_results_default);
        if limit > limits.recall_results_max {
            return Err(InputError::ResultsTooMany {
                asked: limit,
                max: limits.recall_results_max,
            }
            .into());
        }
        let budget = request.budget_chars.unwrap_or(limits.recall_chars_default);
        if budget > limits.recall_chars_max {
            return Err(InputError::BudgetTooLarge {
                asked: budget,
                max: limits.recall_chars_max,
            }
            .into());
        }
        let filter = Filter::new(&request.scopes, &request.tags, &limits)?;
        let mut parts = filter.parts();
        parts.push(match request.terms {
            Terms::Any => "terms:any".to_string(),
            Terms::All => "terms:all".to_string(),
        });
        parts.extend(words.iter().map(|word| format!("word:{word}")));
        let print = cursor::fingerprint(parts.iter().map(String::as_str));
        let offset = match &request.cursor {
            None => 0,
            Some(given) => cursor::decode(Kind::Recall, given, print)?,
        };
        let now = to_sql(now_ms)?;
        let mut values = vec![
            Value::Text(query::expression(&words, request.terms)),
            Value::Integer(now),
        ];
        let conditions = filter.sql(&mut values);
        values.push(Value::Integer(i64::from(limit) + 1));
        values.push(Value::Integer(to_sql(offset)?));
        let sql = format!(
            "SELECT {COLUMNS}, bm25(memories_fts) AS rank
             FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
             WHERE memories_fts MATCH ? AND (m.expires_ms IS NULL OR m.expires_ms > ?){conditions}
             ORDER BY rank, m.id LIMIT ? OFFSET ?"
        );
        let rows = with_retry(
            &mut self.connection,
            &limits,
            TransactionBehavior::Deferred,
            |tx| {
                let mut statement = tx.prepare_cached(&sql)?;
                let rows = statement
                    .query_map(rusqlite::params_from_iter(&values), |row| {
                        Ok((read_memory(row)?, row.get::<_, f64>(10)?))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Ok::<_, StoreError>(rows))
            },
        )??;
        let mut recall = Recall {
            results: Vec::new(),
            chars: 0,
            truncated: false,
            next_cursor: None,
        };
        for (index, (memory, rank)) in rows.into_iter().enumerate() {
            let position = offset + index as u64;
            if index as u64 == u64::from(limit) {
                recall.next_cursor = Some(cursor::encode(Kind::Recall, position, print));
                break;
            }
            let chars = u32::try_from(memory.text.chars().count()).unwrap_or(u32::MAX);
            if recall.chars.saturating_add(chars) > budget {
                recall.truncated = true;
                recall.next_cursor = Some(cursor::encode(Kind::Recall, position, print));
                break;
            }
            recall.chars += chars;
            recall.results.push(Recalled {
                memory,
                score: -rank,
            });
        }
        Ok(recall)
    }

    /// `forget`: deletes one memory by id or every live memory a filter matches, and says
    /// how many. Expired memories are purged first, so they are neither found nor counted.
    pub fn forget(
        &mut self,
        request: &ForgetRequest,
        now_ms: u64,
    ) -> Result<Forgotten, ForgetError> {
        let limits = self.limits.clone();
        let now = to_sql(now_ms)?;
        let (sql, values, id) = match request {
            ForgetRequest::Id(id) => (
                "DELETE FROM memories WHERE id = ?".to_string(),
                vec![Value::Integer(to_sql(id.0)?)],
                Some(id.0),
            ),
            ForgetRequest::Filter(given) => {
                let mut filter = Filter::new(&given.scopes, &given.tags, &limits)?;
                if let Some(session) = &given.session {
                    if !filter::is_valid_label(session, limits.scope_key_bytes_max) {
                        return Err(InputError::ScopeInvalid {
                            key: session.chars().take(64).collect(),
                            max: limits.scope_key_bytes_max,
                        }
                        .into());
                    }
                    filter.session = Some(session.clone());
                }
                filter.seq_min = given.seq_min.map(to_sql).transpose()?;
                if filter.is_empty() {
                    return Err(ForgetError::FilterEmpty);
                }
                let mut values = Vec::new();
                let conditions = filter.sql(&mut values);
                let sql = format!(
                    "DELETE FROM memories WHERE id IN (SELECT m.id FROM memories m WHERE 1 = 1{conditions})"
                );
                (sql, values, None)
            }
        };
        let count = with_retry(
            &mut self.connection,
            &limits,
            TransactionBehavior::Immediate,
            |tx| {
                purge_all(tx, now, limits.purge_batch_max, limits.memories_max)?;
                let count = tx.execute(&sql, rusqlite::params_from_iter(&values))?;
                Ok(Ok::<_, StoreError>(count))
            },
        )??;
        if let (Some(id), 0) = (id, count) {
            return Err(ForgetError::NotFound { id });
        }
        Ok(Forgotten {
            count: count as u64,
        })
    }

    /// `list_memory`: live memories newest first, a page at a time, with a cursor that stays
    /// valid however the store changes in between.
    pub fn list_memory(
        &mut self,
        request: &ListRequest,
        now_ms: u64,
    ) -> Result<ListPage, ListError> {
        let limits = self.limits.clone();
        let limit = request.limit.unwrap_or(limits.list_results_default);
        if limit > limits.list_results_max {
            return Err(InputError::ResultsTooMany {
                asked: limit,
                max: limits.list_results_max,
            }
            .into());
        }
        let budget = request.budget_chars.unwrap_or(limits.list_chars_default);
        if budget > limits.list_chars_max {
            return Err(InputError::BudgetTooLarge {
                asked: budget,
                max: limits.list_chars_max,
            }
            .into());
        }
        let filter = Filter::new(&request.scopes, &request.tags, &limits)?;
        let parts = filter.parts();
        let print = cursor::fingerprint(parts.iter().map(String::as_str));
        let below = match &request.cursor {
            None => i64::MAX,
            Some(given) => to_sql(cursor::decode(Kind::List, given, print)?)?,
        };
        let mut values = vec![Value::Integer(below), Value::Integer(to_sql(now_ms)?)];
        let conditions = filter.sql(&mut values);
        values.push(Value::Integer(i64::from(limit) + 1));
        let sql = format!(
            "SELECT {COLUMNS} FROM memories m
             WHERE m.id < ? AND (m.expires_ms IS NULL OR m.expires_ms > ?){conditions}
             ORDER BY m.id DESC LIMIT ?"
        );
        let rows = with_retry(
            &mut self.connection,
            &limits,
            TransactionBehavior::Deferred,
            |tx| {
                let mut statement = tx.prepare_cached(&sql)?;
                let rows = statement
                    .query_map(rusqlite::params_from_iter(&values), read_memory)?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Ok::<_, StoreError>(rows))
            },
        )??;
        let mut page = ListPage {
            memories: Vec::new(),
            chars: 0,
            truncated: false,
            next_cursor: None,
        };
        // The keyset position to continue from: below the last memory shown, or where this
        // page began when not even the first one fit.
        let mut position = below;
        for (index, memory) in rows.into_iter().enumerate() {
            if index == limit as usize {
                page.next_cursor = Some(cursor::encode(Kind::List, position.unsigned_abs(), print));
                break;
            }
            let chars = u32::try_from(memory.text.chars().count()).unwrap_or(u32::MAX);
            if page.chars.saturating_add(chars) > budget {
                page.truncated = true;
                page.next_cursor = Some(cursor::encode(Kind::List, position.unsigned_abs(), print));
                break;
            }
            page.chars += chars;
            position = to_sql(memory.id.0)?;
            page.memories.push(memory);
        }
        Ok(page)
    }
}

/// Whether a stored count has reached a limit.
fn total_at_least(count: i64, max: u64) -> bool {
    u64::try_from(count).map_or(true, |count| count >= max)
}

/// Deletes up to `batch` expired memories; the rest go on later writes.
fn purge(tx: &Transaction<'_>, now: i64, batch: u32) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "DELETE FROM memories WHERE id IN
         (SELECT id FROM memories WHERE expires_ms <= ?1 ORDER BY expires_ms, id LIMIT ?2)",
    )?
    .execute(rusqlite::params![now, batch])
}

/// Deletes every expired memory, a batch at a time (a forget by filter must not count them).
/// The store holds at most `memories_max`, so `memories_max / batch + 1` batches empty it.
fn purge_all(
    tx: &Transaction<'_>,
    now: i64,
    batch: u32,
    memories_max: u64,
) -> rusqlite::Result<()> {
    let batch = batch.max(1);
    for _ in 0..=memories_max / u64::from(batch) {
        if purge(tx, now, batch)? == 0 {
            break;
        }
    }
    Ok(())
}

/// A row of [`COLUMNS`] as a memory. A value the schema's CHECKs forbid is corruption.
fn read_memory(row: &Row<'_>) -> rusqlite::Result<Memory> {
    let unsigned = |index: usize| -> rusqlite::Result<u64> {
        let value: i64 = row.get(index)?;
        u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(index, value))
    };
    let kind: String = row.get(2)?;
    let scope = Scope::from_columns(&kind, row.get(3)?).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            2,
            rusqlite::types::Type::Text,
            format!("unknown scope kind {kind:?}").into(),
        )
    })?;
    let expires_ms = match row.get::<_, Option<i64>>(5)? {
        None => None,
        Some(value) => Some(
            u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(5, value))?,
        ),
    };
    let tags: Option<String> = row.get(9)?;
    let mut tags: Vec<String> = tags
        .map(|joined| joined.split('\u{1f}').map(str::to_string).collect())
        .unwrap_or_default();
    tags.sort_unstable();
    Ok(Memory {
        id: MemoryId(unsigned(0)?),
        text: row.get(1)?,
        scope,
        tags,
        created_ms: unsigned(4)?,
        expires_ms,
        provenance: Provenance {
            session: row.get(6)?,
            seq: unsigned(7)?,
            untrusted: row.get(8)?,
        },
    })
}

/// How long to wait before attempt `attempts + 1`: SQLite's own busy handler has already
/// waited `busy_timeout_ms`, so this only spreads out processes that collided at once.
fn backoff(attempts: u32) -> Duration {
    Duration::from_millis(10 * u64::from(attempts.min(10)))
}

/// Runs `body` in a transaction of `behavior` and commits it if the body's verdict is `Ok`,
/// trying again (at most `busy_attempts_max` times in all) when SQLite says another process
/// holds the lock. A verdict of `Err` rolls the transaction back.
///
/// Writes use IMMEDIATE transactions: the write lock is taken at BEGIN, where waiting is
/// safe, instead of at the first write, where a WAL reader holding an old snapshot could
/// only fail with `SQLITE_BUSY_SNAPSHOT`.
fn with_retry<T, E>(
    connection: &mut Connection,
    limits: &Limits,
    behavior: TransactionBehavior,
    mut body: impl FnMut(&Transaction<'_>) -> rusqlite::Result<Result<T, E>>,
) -> Result<Result<T, E>, StoreError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match attempt(connection, behavior, &mut body) {
            Ok(verdict) => return Ok(verdict),
            Err(source) if is_busy(&source) && attempts < limits.busy_attempts_max.max(1) => {
                std::thread::sleep(backoff(attempts));
            }
            Err(source) if is_busy(&source) => return Err(StoreError::Busy { attempts }),
            Err(source) => return Err(classify(source)),
        }
    }
}

/// One try of [`with_retry`]. Dropping an uncommitted transaction rolls it back.
fn attempt<T, E>(
    connection: &mut Connection,
    behavior: TransactionBehavior,
    body: &mut impl FnMut(&Transaction<'_>) -> rusqlite::Result<Result<T, E>>,
) -> rusqlite::Result<Result<T, E>> {
    let tx = connection.transaction_with_behavior(behavior)?;
    let verdict = body(&tx)?;
    if verdict.is_ok() {
        tx.commit()?;
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ForgetFilter;

    const T0: u64 = 1_000_000;

    fn remembered(
        store: &mut MemoryStore,
        text: &str,
        scope: Scope,
        expiry: Option<Expiry>,
    ) -> MemoryId {
        let request = RememberRequest {
            text: text.into(),
            scope,
            tags: vec!["a".into(), "b".into()],
            expiry,
            provenance: Provenance {
                session: "s".into(),
                seq: 1,
                untrusted: false,
            },
        };
        store.remember(&request, T0).unwrap().id
    }

    fn count(store: &MemoryStore, sql: &str) -> i64 {
        store
            .connection
            .query_row(sql, [], |row| row.get(0))
            .unwrap()
    }

    /// An actor will own the store on its own thread.
    #[test]
    fn the_store_can_move_between_threads() {
        fn is_send<T: Send>() {}
        is_send::<MemoryStore>();
    }

    /// The triggers keep the index, the tags and the counts equal to the rows through
    /// inserts, forgets and purges.
    #[test]
    fn derived_tables_follow_every_insert_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = MemoryStore::open(dir.path().join("m.sqlite"), Limits::default()).unwrap();
        let project = || Scope::Project { key: "p".into() };
        let first = remembered(&mut store, "one", Scope::Global, None);
        remembered(&mut store, "two", project(), None);
        remembered(&mut store, "three", project(), Some(Expiry::AfterMs(10)));
        remembered(&mut store, "four", Scope::Session { id: "x".into() }, None);
        store.forget(&ForgetRequest::Id(first), T0).unwrap();
        let session = ForgetFilter {
            scopes: vec![Scope::Session { id: "x".into() }],
            ..ForgetFilter::default()
        };
        assert_eq!(
            store
                .forget(&ForgetRequest::Filter(session), T0)
                .unwrap()
                .count,
            1
        );
        // A write after the expiry purges "three".
        let request = RememberRequest {
            text: "five".into(),
            scope: project(),
            tags: Vec::new(),
            expiry: None,
            provenance: Provenance {
                session: "s".into(),
                seq: 2,
                untrusted: false,
            },
        };
        store.remember(&request, T0 + 10).unwrap();

        assert_eq!(count(&store, "SELECT count(*) FROM memories"), 2);
        assert_eq!(count(&store, "SELECT n FROM memory_total"), 2);
        assert_eq!(
            count(&store, "SELECT count(*) FROM memory_counts"),
            1,
            "emptied scopes leave no row"
        );
        assert_eq!(
            count(
                &store,
                "SELECT n FROM memory_counts WHERE scope_kind = 'project' AND scope_key = 'p'"
            ),
            2
        );
        assert_eq!(
            count(&store, "SELECT count(*) FROM memory_tags"),
            2,
            "tags of deleted memories go with them"
        );
        store
            .connection
            .execute_batch("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")
            .unwrap();
        store.check().unwrap();
    }

    #[test]
    fn stored_counts_compare_safely() {
        assert!(total_at_least(5, 5));
        assert!(!total_at_least(4, 5));
        assert!(
            total_at_least(-1, 5),
            "a negative count is not room to write"
        );
        assert!(backoff(1_000) <= Duration::from_millis(100));
    }
}
