//! The question store: questions no client could ask, waiting for `aido answer`.
//!
//! One SQLite file in AIDO_HOME (`questions.sqlite`), because the asker and the answerer are
//! different processes: the `aido mcp` serving the agent stores the question and polls for its
//! answer, and `aido answer` (any other process on the same AIDO_HOME) writes it. The journal
//! cannot carry it (each aido process holds its own sled shard, locked for itself); memory's
//! SQLite showed the way: WAL mode lets readers and one writer from several processes work at
//! once, `busy_timeout` waits out a writer, and a commit is fsynced (`synchronous = FULL`).
//! Answering is one `UPDATE ... WHERE state = 'pending'`, so of two people answering at once
//! exactly one wins and the other is told `question_already_answered`. The asking call takes an
//! elicitation's answer the same way, and closes the question the same way when it stops
//! waiting (`closed`: a later answer is told `question_closed`), so whichever surface answers
//! first is the only answer the call ever sees. Each answer keeps who gave it (`answered_by`).

use std::path::Path;
use std::time::Duration;

use aido_actions::human::Answerer;
use aido_walk::human::{HumanError, Question};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Most questions `pending` lists.
pub const PENDING_MAX: u32 = 200;
/// How long an answered (or declined) question is kept for `check_answer`, counted from when
/// it was asked (the asking runtime's clock, the one every prune uses): 7 days.
pub const ANSWERED_KEEP_MS: u64 = 7 * 24 * 3600 * 1000;
/// How long a question nobody answered is kept: 30 days.
pub const PENDING_KEEP_MS: u64 = 30 * 24 * 3600 * 1000;

/// A stored question and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stored {
    /// `q-` and 16 hex digits.
    pub id: String,
    /// The session that asked.
    pub session: String,
    /// The seq of the action that asked.
    pub seq: u64,
    /// The question.
    pub question: Question,
    /// When it was stored (the asking runtime's clock).
    pub asked_ms: u64,
    /// `pending`, `accept` (answered), `decline`, or `closed` (the asking call stopped waiting,
    /// or its person dismissed the client's form).
    pub state: String,
    /// The checked answer (`{"text"}`, `{"approved"}` or `{"choices"}`), once accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
    /// When it was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_ms: Option<u64>,
    /// Who answered it (the surface and the person), once answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<Answerer>,
}

impl Stored {
    /// The answer as the asking action records it (`Input::Answer { from: "human" }`).
    pub fn recorded(&self) -> Value {
        let mut v = serde_json::json!({
            "via": "aido answer",
            "id": self.id,
            "action": self.state,
            "question": self.question,
        });
        if let Some(a) = &self.answer {
            v["answer"] = a.clone();
        }
        if let Some(by) = &self.by {
            v["by"] = serde_json::json!(by);
        }
        v
    }
}

/// The question store on one SQLite file, which several processes open at once.
pub struct Questions {
    connection: Connection,
}

fn failed(e: impl std::fmt::Display) -> HumanError {
    HumanError::StoreFailed { why: e.to_string() }
}

impl Questions {
    /// Open (creating the file, not its directory) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, HumanError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(path, flags)
            .map_err(|e| failed(format!("{}: {e}", path.display())))?;
        connection
            .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(failed)?;
        let mode: String = connection
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(failed)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(failed(format!("journal mode {mode}, not WAL")));
        }
        connection
            .execute_batch(
                "PRAGMA synchronous = FULL;
                 PRAGMA trusted_schema = OFF;",
            )
            .map_err(failed)?;
        migrate(&connection)?;
        Ok(Self { connection })
    }

    /// Store a question (a question stored again under the same id is kept as it was).
    pub fn ask(
        &self,
        id: &str,
        session: &str,
        seq: u64,
        question: &Question,
        now_ms: u64,
    ) -> Result<(), HumanError> {
        let text = serde_json::to_string(question).map_err(failed)?;
        // The store stays bounded while it is used: each new question drops the old ones.
        self.prune(now_ms)?;
        self.connection
            .execute(
                "INSERT OR IGNORE INTO questions (id, session, seq, question, asked_ms, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending')",
                params![id, session, seq as i64, text, now_ms as i64],
            )
            .map_err(failed)?;
        Ok(())
    }

    /// Drop answered questions asked more than [`ANSWERED_KEEP_MS`] ago and unanswered ones
    /// asked more than [`PENDING_KEEP_MS`] ago (by the asker's clock only: the answerer's
    /// may differ) (`check_answer` then says `question_not_found`; the
    /// journal still holds every answer an action recorded). Returns how many went.
    pub fn prune(&self, now_ms: u64) -> Result<usize, HumanError> {
        let answered = now_ms.saturating_sub(ANSWERED_KEEP_MS) as i64;
        let asked = now_ms.saturating_sub(PENDING_KEEP_MS) as i64;
        self.connection
            .execute(
                "DELETE FROM questions
                 WHERE (state != 'pending' AND asked_ms < ?1)
                    OR (state = 'pending' AND asked_ms < ?2)",
                params![answered, asked],
            )
            .map_err(failed)
    }

    /// The question stored under `id`.
    pub fn get(&self, id: &str) -> Result<Option<Stored>, HumanError> {
        self.connection
            .query_row(
                "SELECT id, session, seq, question, asked_ms, state, answer, answered_ms,
                        answered_by
                 FROM questions WHERE id = ?1",
                params![id],
                row,
            )
            .optional()
            .map_err(failed)?
            .transpose()
    }

    /// Questions nobody has answered yet, oldest first.
    pub fn pending(&self) -> Result<Vec<Stored>, HumanError> {
        let mut statement = self
            .connection
            .prepare(
                "SELECT id, session, seq, question, asked_ms, state, answer, answered_ms,
                        answered_by
                 FROM questions WHERE state = 'pending' ORDER BY asked_ms, id LIMIT ?1",
            )
            .map_err(failed)?;
        let rows = statement
            .query_map(params![PENDING_MAX], row)
            .map_err(failed)?;
        rows.map(|r| r.map_err(failed).and_then(|s| s))
            .collect::<Result<Vec<_>, _>>()
    }

    /// Answer a pending question for `by`: `Some(checked answer)` accepts it, `None` declines
    /// it. One conditional `UPDATE`: a question answered (or closed) already is refused
    /// `question_already_answered` (`question_closed`), whoever answered first.
    pub fn answer(
        &self,
        id: &str,
        answer: Option<&Value>,
        now_ms: u64,
        by: &Answerer,
    ) -> Result<Stored, HumanError> {
        let (state, text) = match answer {
            Some(a) => ("accept", Some(serde_json::to_string(a).map_err(failed)?)),
            None => ("decline", None),
        };
        self.settle(id, state, text, now_ms, Some(by))
    }

    /// Close a pending question nobody may answer any more (the asking call stopped waiting;
    /// `by`: the person dismissed the client's form). `Ok(None)`: closed now; `Ok(Some(it))`:
    /// it was answered (or closed) first, and this is what became of it.
    pub fn close(
        &self,
        id: &str,
        now_ms: u64,
        by: Option<&Answerer>,
    ) -> Result<Option<Stored>, HumanError> {
        match self.settle(id, "closed", None, now_ms, by) {
            Ok(_) => Ok(None),
            Err(HumanError::AlreadyAnswered { .. } | HumanError::QuestionClosed { .. }) => self
                .get(id)?
                .map(Some)
                .ok_or_else(|| HumanError::QuestionNotFound { id: id.to_owned() }),
            Err(e) => Err(e),
        }
    }

    /// Move a pending question to `state`: the one conditional `UPDATE` every answer, and
    /// every close, goes through.
    fn settle(
        &self,
        id: &str,
        state: &str,
        text: Option<String>,
        now_ms: u64,
        by: Option<&Answerer>,
    ) -> Result<Stored, HumanError> {
        let by = by.map(serde_json::to_string).transpose().map_err(failed)?;
        let changed = self
            .connection
            .execute(
                "UPDATE questions SET state = ?2, answer = ?3, answered_ms = ?4, answered_by = ?5
                 WHERE id = ?1 AND state = 'pending'",
                params![id, state, text, now_ms as i64, by],
            )
            .map_err(failed)?;
        let stored = self
            .get(id)?
            .ok_or_else(|| HumanError::QuestionNotFound { id: id.to_owned() })?;
        if changed == 0 {
            let id = id.to_owned();
            return Err(if stored.state == "closed" {
                HumanError::QuestionClosed { id }
            } else {
                HumanError::AlreadyAnswered { id }
            });
        }
        Ok(stored)
    }
}

/// The id of a question asked by `session` at `seq`: a hash, no randomness, so the same
/// question asked by the same action has the same id (a pipeline asking it twice gets one
/// answer for both).
pub fn question_id(session: &str, seq: u64, question: &Question) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(session.as_bytes());
    hasher.update(&seq.to_le_bytes());
    hasher.update(
        serde_json::to_string(question)
            .unwrap_or_default()
            .as_bytes(),
    );
    format!("q-{}", &hasher.finalize().to_hex()[..16])
}

/// The store's schema version (`PRAGMA user_version`): 1 added `answered_by` and the `closed`
/// state.
const SCHEMA_VERSION: i64 = 1;

/// The table as [`SCHEMA_VERSION`] has it.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS questions (
        id TEXT PRIMARY KEY,
        session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        question TEXT NOT NULL,
        asked_ms INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'accept', 'decline', 'closed')),
        answer TEXT,
        answered_ms INTEGER,
        answered_by TEXT
    ) STRICT;
    CREATE INDEX IF NOT EXISTS questions_pending ON questions (state, asked_ms);";

/// Bring the file to [`SCHEMA_VERSION`], in one `BEGIN IMMEDIATE` transaction so two processes
/// opening an old file at once migrate it once: a new file gets the table; a version-0 file
/// (no `answered_by`, a `CHECK` without `closed`, which SQLite cannot alter) has its rows
/// copied into the new table, the questions still waiting kept waiting.
fn migrate(connection: &Connection) -> Result<(), HumanError> {
    let version = |c: &Connection| -> Result<i64, HumanError> {
        c.pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(failed)
    };
    if version(connection)? >= SCHEMA_VERSION {
        return Ok(());
    }
    connection
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(failed)?;
    let migrated = (|| -> Result<(), HumanError> {
        // Another process may have migrated it while this one waited for the lock.
        if version(connection)? >= SCHEMA_VERSION {
            return Ok(());
        }
        let old: bool = connection
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'questions'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map_err(failed)?
            > 0;
        if old {
            connection
                .execute_batch(
                    "ALTER TABLE questions RENAME TO questions_v0;
                     DROP INDEX IF EXISTS questions_pending;",
                )
                .map_err(failed)?;
        }
        connection.execute_batch(TABLE).map_err(failed)?;
        if old {
            connection
                .execute_batch(
                    "INSERT INTO questions
                         (id, session, seq, question, asked_ms, state, answer, answered_ms)
                     SELECT id, session, seq, question, asked_ms, state, answer, answered_ms
                     FROM questions_v0;
                     DROP TABLE questions_v0;",
                )
                .map_err(failed)?;
        }
        connection
            .pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(failed)
    })();
    let end = if migrated.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    let ended = connection.execute_batch(end).map_err(failed);
    migrated.and(ended)
}

type Row = Result<Stored, HumanError>;

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let question: String = r.get(3)?;
    let answer: Option<String> = r.get(6)?;
    let by: Option<String> = r.get(8)?;
    let build = || -> Row {
        Ok(Stored {
            id: r.get(0).map_err(failed)?,
            session: r.get(1).map_err(failed)?,
            seq: r.get::<_, i64>(2).map_err(failed)? as u64,
            question: serde_json::from_str(&question).map_err(failed)?,
            asked_ms: r.get::<_, i64>(4).map_err(failed)? as u64,
            state: r.get(5).map_err(failed)?,
            answer: answer
                .map(|a| serde_json::from_str::<Value>(&a))
                .transpose()
                .map_err(failed)?,
            answered_ms: r
                .get::<_, Option<i64>>(7)
                .map_err(failed)?
                .map(|m| m as u64),
            by: by
                .map(|b| serde_json::from_str::<Answerer>(&b))
                .transpose()
                .map_err(failed)?,
        })
    };
    Ok(build())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use aido_actions::human::Surface;
    use aido_walk::human::Kind;

    #[test]
    fn a_question_is_answered_once_from_another_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("questions.sqlite");
        let asker = Questions::open(&path).unwrap();
        let q = Question {
            kind: Kind::Text,
            question: "Which branch?".into(),
        };
        let id = question_id("s1", 3, &q);
        assert_eq!(id.len(), 18);
        asker.ask(&id, "s1", 3, &q, 10).unwrap();
        asker.ask(&id, "s1", 3, &q, 11).unwrap(); // idempotent
        assert_eq!(asker.pending().unwrap().len(), 1);
        // Another process (here: another connection) answers it.
        let answerer = Questions::open(&path).unwrap();
        let a = serde_json::json!({"text": "main"});
        let cli = Answerer::new(Surface::Cli, Some("alice"));
        let stored = answerer.answer(&id, Some(&a), 20, &cli).unwrap();
        assert_eq!(stored.state, "accept");
        assert_eq!(stored.by.as_ref(), Some(&cli));
        let watch = Answerer::new(Surface::Watch, None);
        assert_eq!(
            answerer.answer(&id, None, 21, &watch).unwrap_err().code(),
            "question_already_answered"
        );
        assert_eq!(
            answerer
                .answer("q-nope", None, 21, &watch)
                .unwrap_err()
                .code(),
            "question_not_found"
        );
        // Closing it now changes nothing: the answer given first is what it is.
        let first = answerer.close(&id, 22, None).unwrap().unwrap();
        assert_eq!(first.by, Some(cli.clone()));
        let seen = asker.get(&id).unwrap().unwrap();
        assert_eq!(seen.answer, Some(a));
        assert_eq!(seen.asked_ms, 10);
        assert_eq!(seen.recorded()["via"], "aido answer");
        assert_eq!(seen.recorded()["by"]["surface"], "cli");
        assert_eq!(seen.recorded()["by"]["person"], "alice");
        assert!(asker.pending().unwrap().is_empty());
    }

    /// A question the asking call closed takes no answer: the late one is refused with its
    /// own code.
    #[test]
    fn a_closed_question_refuses_a_late_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Questions::open(&dir.path().join("questions.sqlite")).unwrap();
        let q = Question {
            kind: Kind::Confirm,
            question: "Write x.txt?".into(),
        };
        store.ask("q-1", "s", 1, &q, 10).unwrap();
        assert_eq!(store.close("q-1", 20, None).unwrap(), None);
        let late = Answerer::new(Surface::MissionControl, None);
        let refused = store
            .answer(
                "q-1",
                Some(&serde_json::json!({"approved": true})),
                30,
                &late,
            )
            .unwrap_err();
        assert_eq!(refused.code(), "question_closed");
        assert_eq!(store.get("q-1").unwrap().unwrap().state, "closed");
        assert!(store.pending().unwrap().is_empty());
    }

    /// A store written before answers named who gave them opens, migrated once: its waiting
    /// questions still wait, its answers are kept, and a new answer names who gave it.
    #[test]
    fn a_version_0_store_is_migrated_keeping_its_questions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("questions.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE questions (
                     id TEXT PRIMARY KEY, session TEXT NOT NULL, seq INTEGER NOT NULL,
                     question TEXT NOT NULL, asked_ms INTEGER NOT NULL,
                     state TEXT NOT NULL CHECK (state IN ('pending', 'accept', 'decline')),
                     answer TEXT, answered_ms INTEGER
                 ) STRICT;
                 CREATE INDEX questions_pending ON questions (state, asked_ms);
                 INSERT INTO questions VALUES
                     ('q-old', 's', 1, '{\"kind\":\"text\",\"question\":\"a\"}', 5, 'pending', NULL, NULL),
                     ('q-done', 's', 2, '{\"kind\":\"text\",\"question\":\"b\"}', 5, 'decline', NULL, 6);",
            )
            .unwrap();
        }
        let (one, two) = (
            Questions::open(&path).unwrap(),
            Questions::open(&path).unwrap(),
        );
        assert_eq!(one.pending().unwrap().len(), 1);
        assert_eq!(two.get("q-done").unwrap().unwrap().state, "decline");
        let by = Answerer::new(Surface::Watch, Some("bob"));
        let a = serde_json::json!({"text": "x"});
        assert_eq!(two.answer("q-old", Some(&a), 9, &by).unwrap().by, Some(by));
        assert_eq!(
            one.close("q-done", 9, None).unwrap().unwrap().state,
            "decline"
        );
    }

    /// Old questions go when new ones come: answered ones after 7 days, unanswered ones after
    /// 30; younger ones stay.
    #[test]
    fn old_questions_are_pruned_as_new_ones_are_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = Questions::open(&dir.path().join("questions.sqlite")).unwrap();
        let q = |text: &str| Question {
            kind: Kind::Text,
            question: text.into(),
        };
        let day = 24 * 3600 * 1000;
        let (answered, waiting, young) = ("q-answered", "q-waiting", "q-young");
        store.ask(answered, "s", 1, &q("a"), day).unwrap();
        let by = Answerer::new(Surface::Cli, None);
        store
            .answer(answered, Some(&serde_json::json!({"text": "x"})), day, &by)
            .unwrap();
        store.ask(waiting, "s", 2, &q("b"), day).unwrap();
        store.ask(young, "s", 3, &q("c"), 20 * day).unwrap();
        // Day 9: the answered one was asked 8 days ago and goes; the unanswered one stays.
        store.ask("q-new", "s", 4, &q("d"), 9 * day).unwrap();
        assert!(store.get(answered).unwrap().is_none());
        assert!(store.get(waiting).unwrap().is_some());
        // Day 32: the unanswered one is 31 days old and goes; the young one stays.
        assert_eq!(store.prune(32 * day).unwrap(), 1);
        assert!(store.get(waiting).unwrap().is_none());
        assert!(store.get(young).unwrap().is_some());
    }
}
