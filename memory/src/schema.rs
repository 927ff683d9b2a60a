//! The tables, their version (SQLite's `user_version`) and the upgrades between versions.

use rusqlite::Transaction;

use crate::error::OpenError;

/// The schema this code writes. A store of a newer version is refused
/// (`memory_schema_too_new`); an older one is upgraded in one transaction.
pub const SCHEMA_VERSION: i64 = 1;

/// `PRAGMA application_id` of an aido memory store ("aidm"), so another program's SQLite
/// file is refused instead of written into.
pub const APPLICATION_ID: i32 = 0x6169_646d;

/// `UPGRADES[v]` takes a store from version `v` to `v + 1`.
const UPGRADES: [&str; 1] = [V1];

/// Version 1. Memories never change once stored (a trigger refuses updates), so the
/// full-text index, the tags and the counts only follow inserts and deletes, in triggers,
/// inside the same transaction as the row: they cannot drift from it.
const V1: &str = "
CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    scope_kind TEXT NOT NULL CHECK (scope_kind IN ('global', 'project', 'session')),
    scope_key TEXT NOT NULL CHECK ((scope_kind = 'global') = (scope_key = '')),
    created_ms INTEGER NOT NULL CHECK (created_ms >= 0),
    expires_ms INTEGER CHECK (expires_ms > created_ms),
    session TEXT NOT NULL,
    seq INTEGER NOT NULL CHECK (seq >= 0),
    untrusted INTEGER NOT NULL CHECK (untrusted IN (0, 1))
);
CREATE INDEX memories_scope ON memories (scope_kind, scope_key, id);
CREATE INDEX memories_expiry ON memories (expires_ms) WHERE expires_ms IS NOT NULL;
CREATE INDEX memories_provenance ON memories (session, seq);

CREATE TABLE memory_tags (
    memory_id INTEGER NOT NULL,
    tag TEXT NOT NULL,
    PRIMARY KEY (memory_id, tag)
) WITHOUT ROWID;
CREATE INDEX memory_tags_tag ON memory_tags (tag, memory_id);

CREATE TABLE memory_counts (
    scope_kind TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    n INTEGER NOT NULL CHECK (n > 0),
    PRIMARY KEY (scope_kind, scope_key)
) WITHOUT ROWID;
CREATE TABLE memory_total (n INTEGER NOT NULL CHECK (n >= 0));
INSERT INTO memory_total (n) VALUES (0);

CREATE VIRTUAL TABLE memories_fts USING fts5 (
    text,
    content = 'memories',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER memories_inserted AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
    INSERT INTO memory_counts (scope_kind, scope_key, n) VALUES (new.scope_kind, new.scope_key, 1)
        ON CONFLICT (scope_kind, scope_key) DO UPDATE SET n = n + 1;
    UPDATE memory_total SET n = n + 1;
END;

CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
    DELETE FROM memory_tags WHERE memory_id = old.id;
    DELETE FROM memory_counts
        WHERE scope_kind = old.scope_kind AND scope_key = old.scope_key AND n = 1;
    UPDATE memory_counts SET n = n - 1
        WHERE scope_kind = old.scope_kind AND scope_key = old.scope_key;
    UPDATE memory_total SET n = n - 1;
END;

CREATE TRIGGER memories_immutable BEFORE UPDATE ON memories BEGIN
    SELECT RAISE(ABORT, 'memories are immutable');
END;
";

/// Every table, index and trigger a version-1 store must hold.
const OBJECTS: [&str; 12] = [
    "memories",
    "memories_scope",
    "memories_expiry",
    "memories_provenance",
    "memory_tags",
    "memory_tags_tag",
    "memory_counts",
    "memory_total",
    "memories_fts",
    "memories_inserted",
    "memories_deleted",
    "memories_immutable",
];

/// Brings the store in `tx` to [`SCHEMA_VERSION`], or says why it cannot. The outer error
/// is SQLite's (retried when busy); the inner one is the store's verdict.
pub(crate) fn upgrade(tx: &Transaction<'_>) -> rusqlite::Result<Result<(), OpenError>> {
    let application_id: i32 = tx.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let objects: i64 = tx.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    let fresh = application_id == 0 && version == 0 && objects == 0;
    if !fresh && application_id != APPLICATION_ID {
        return Ok(Err(OpenError::Foreign {
            path: tx.path().unwrap_or_default().into(),
            application_id,
        }));
    }
    if version > SCHEMA_VERSION {
        return Ok(Err(OpenError::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        }));
    }
    let mut at = version.max(0);
    while at < SCHEMA_VERSION {
        let Some(upgrade) = usize::try_from(at)
            .ok()
            .and_then(|index| UPGRADES.get(index))
        else {
            break;
        };
        tx.execute_batch(upgrade)?;
        at += 1;
    }
    if version != SCHEMA_VERSION {
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    for object in OBJECTS {
        let present: i64 = tx.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = ?1",
            [object],
            |row| row.get(0),
        )?;
        if present != 1 {
            return Ok(Err(OpenError::SchemaDamaged {
                missing: object.to_string(),
            }));
        }
    }
    let version_after: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    assert_eq!(
        version_after, SCHEMA_VERSION,
        "the upgrade must end at the current version"
    );
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_upgrade_per_version() {
        assert_eq!(UPGRADES.len() as i64, SCHEMA_VERSION);
    }

    #[test]
    fn a_fresh_database_is_upgraded_once_and_then_left_alone() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        for _ in 0..2 {
            let tx = conn.transaction().unwrap();
            upgrade(&tx).unwrap().unwrap();
            tx.commit().unwrap();
        }
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.execute_batch(
            "INSERT INTO memories (text, scope_kind, scope_key, created_ms, session, seq, untrusted)
             VALUES ('kept', 'global', '', 1, 's', 1, 0)",
        )
        .unwrap();
        assert!(
            conn.execute("UPDATE memories SET text = 'changed'", [])
                .is_err()
        );
        let total: i64 = conn
            .query_row("SELECT n FROM memory_total", [], |r| r.get(0))
            .unwrap();
        assert_eq!(total, 1);
    }
}
