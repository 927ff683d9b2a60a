//! A session's timeline as `aido watch` holds it: a window of rows read a page at a time
//! (the newest page first, older pages as the person scrolls up, the live tail as it is
//! written), never the whole session. Outcomes are folded into the row of their action, as
//! Mission Control's timeline endpoint folds them within a page; across pages the fold is
//! done here.

use serde::Deserialize;

/// Records asked for at once.
pub const PAGE_RECORDS: usize = 200;
/// Most rows held; past it the far end of the window is let go.
pub const ROWS_KEPT_MAX: usize = 2000;

/// One row of a timeline, as `/mc/api/sessions/ID` gives it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Row {
    pub seq: u64,
    pub time_ms: u64,
    /// The record's kind (`action_proposed`, `rewound`, ...).
    pub kind: String,
    pub primitive: Option<String>,
    /// The arguments, shortened.
    pub arguments: Option<String>,
    /// `allow`, `confirm`, `deny` or `rejected`.
    pub verdict: Option<String>,
    /// Why it was denied or asked about: `code by gate: reason`.
    pub why: Option<String>,
    pub code: Option<String>,
    pub text: Option<String>,
    /// The action an outcome closes.
    pub proposal: Option<u64>,
    /// `completed` or `failed` (an outcome).
    pub status: Option<String>,
    pub duration_ms: Option<u64>,
    /// How many changes an outcome made.
    pub changes: Option<u64>,
    /// The paths they touched (at most 20).
    pub paths: Vec<String>,
    /// The branch of the rewind that abandoned this row.
    pub abandoned_by_branch: Option<u32>,
    /// A rewind's new branch.
    pub branch: Option<u32>,
    /// The action that started this one (a pipeline's step).
    pub parent: Option<u64>,
    /// The action's outcome, folded in.
    pub done: Option<Box<Row>>,
}

impl Row {
    /// Whether this row is an action's outcome.
    pub fn is_outcome(&self) -> bool {
        matches!(self.kind.as_str(), "action_completed" | "action_failed")
    }

    /// Whether this row is an action (its proposal).
    pub fn is_action(&self) -> bool {
        self.kind == "action_proposed"
    }

    /// The last record this row stands for (its outcome's, when folded).
    pub fn last_seq(&self) -> u64 {
        self.done.as_ref().map_or(self.seq, |d| d.seq.max(self.seq))
    }
}

/// One page of a timeline as the endpoint answers.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Page {
    /// The session's head seq when it was read.
    pub records: u64,
    /// The first record the page holds.
    pub shown_from: Option<u64>,
    pub rows: Vec<Row>,
}

/// Which page to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// The newest records.
    Newest,
    /// Those before this seq (scrolling up).
    Before(u64),
    /// Those after this seq (the live tail).
    After(u64),
}

impl Ask {
    /// The query string of the ask.
    pub fn query(self) -> String {
        match self {
            Self::Newest => format!("?limit={PAGE_RECORDS}"),
            Self::Before(seq) => format!("?before={seq}&limit={PAGE_RECORDS}"),
            Self::After(seq) => format!("?after={seq}&limit={PAGE_RECORDS}"),
        }
    }
}

/// The window of a session's timeline held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// The session's id.
    pub session: String,
    /// Rows, oldest first.
    pub rows: Vec<Row>,
    /// The session's head seq as last read.
    pub records: u64,
    /// The first record the window holds (1: it reaches the session's start).
    pub from: u64,
    /// The last record the window holds.
    pub to: u64,
    /// Whether the live tail is added as it is written (off after paging far back let the
    /// newest rows go).
    pub following: bool,
}

impl Timeline {
    /// A window of the newest page.
    pub fn newest(session: &str, page: Page) -> Self {
        let mut timeline = Self {
            session: session.to_owned(),
            following: true,
            ..Self::default()
        };
        timeline.rows = fold(page.rows);
        timeline.records = page.records;
        timeline.bounds(page.shown_from);
        timeline
    }

    /// Whether older records than the window's exist.
    pub fn older(&self) -> bool {
        self.from > 1
    }

    /// Add a page of the live tail; how many rows were added. A rewind among them means the
    /// rows before it may now be abandoned: the caller reads the newest page again.
    pub fn append(&mut self, page: Page) -> usize {
        self.records = self.records.max(page.records);
        if page.rows.is_empty() {
            return 0;
        }
        let before = self.rows.len();
        let mut rows = std::mem::take(&mut self.rows);
        rows.extend(page.rows);
        self.rows = fold(rows);
        let added = self.rows.len().saturating_sub(before);
        if self.rows.len() > ROWS_KEPT_MAX {
            let extra = self.rows.len() - ROWS_KEPT_MAX;
            self.rows.drain(..extra);
            self.from = self.rows.first().map_or(self.from, |r| r.seq);
        }
        self.to = self.rows.iter().map(Row::last_seq).max().unwrap_or(self.to);
        added
    }

    /// Add an older page before the window; how many rows were added at the front.
    pub fn prepend(&mut self, page: Page) -> usize {
        self.records = self.records.max(page.records);
        if page.rows.is_empty() {
            self.from = 1;
            return 0;
        }
        let before = self.rows.len();
        let mut rows = page.rows;
        rows.append(&mut self.rows);
        self.rows = fold(rows);
        let added = self.rows.len().saturating_sub(before);
        self.from = page.shown_from.unwrap_or(self.from);
        if self.rows.len() > ROWS_KEPT_MAX {
            self.rows.truncate(ROWS_KEPT_MAX);
            self.following = false;
            self.to = self.rows.iter().map(Row::last_seq).max().unwrap_or(self.to);
        }
        added
    }

    fn bounds(&mut self, shown_from: Option<u64>) {
        self.from = shown_from
            .or_else(|| self.rows.first().map(|r| r.seq))
            .unwrap_or(1);
        self.to = self.rows.iter().map(Row::last_seq).max().unwrap_or(0);
    }

    /// The index of the row that stands for record `seq` (its own or its outcome's).
    pub fn index_of(&self, seq: u64) -> Option<usize> {
        self.rows
            .iter()
            .position(|r| r.seq == seq || r.done.as_ref().is_some_and(|d| d.seq == seq))
    }
}

/// Fold each outcome into the row of its action, when that row is held; keep seq order.
fn fold(rows: Vec<Row>) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::with_capacity(rows.len());
    // Actions by seq (where an outcome goes), and every row by seq.
    let mut at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut seen: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for mut row in rows {
        if let Some(&i) = seen.get(&row.seq) {
            // The same record read twice (a page that overlaps): the newer read wins.
            out[i] = row;
            continue;
        }
        if row.is_outcome()
            && let Some(&i) = row.proposal.as_ref().and_then(|p| at.get(p))
        {
            row.abandoned_by_branch = None;
            out[i].done = Some(Box::new(row));
            continue;
        }
        if row.is_action() {
            at.insert(row.seq, out.len());
        }
        seen.insert(row.seq, out.len());
        out.push(row);
    }
    out.sort_by_key(|r| r.seq);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn action(seq: u64, primitive: &str) -> Row {
        Row {
            seq,
            kind: "action_proposed".into(),
            primitive: Some(primitive.into()),
            verdict: Some("allow".into()),
            ..Row::default()
        }
    }

    pub(crate) fn outcome(seq: u64, proposal: u64) -> Row {
        Row {
            seq,
            kind: "action_completed".into(),
            proposal: Some(proposal),
            status: Some("completed".into()),
            duration_ms: Some(3),
            ..Row::default()
        }
    }

    fn page(rows: Vec<Row>, records: u64) -> Page {
        Page {
            records,
            shown_from: rows.first().map(|r| r.seq),
            rows,
        }
    }

    #[test]
    fn outcomes_fold_into_their_action_across_pages() {
        let mut t = Timeline::newest("s", page(vec![outcome(5, 4), action(6, "read_file")], 6));
        assert_eq!(t.from, 5);
        assert!(t.older());
        assert_eq!(t.rows.len(), 2);
        let added = t.prepend(page(
            vec![
                action(2, "write_file"),
                outcome(3, 2),
                action(4, "list_dir"),
            ],
            6,
        ));
        assert_eq!(added, 1, "the lone outcome row went into its action");
        let seqs: Vec<u64> = t.rows.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [2, 4, 6]);
        assert_eq!(t.rows[1].done.as_ref().unwrap().seq, 5);
        assert_eq!(t.from, 2);
        let added = t.append(page(vec![outcome(7, 6), action(8, "rewind")], 8));
        assert_eq!(added, 1);
        assert_eq!(t.rows[2].done.as_ref().unwrap().seq, 7);
        assert_eq!(t.to, 8);
        assert_eq!(t.index_of(7), Some(2));
    }

    #[test]
    fn the_window_lets_the_far_end_go() {
        let many: Vec<Row> = (1..=ROWS_KEPT_MAX as u64 + 10)
            .map(|s| action(s, "read_file"))
            .collect();
        let mut t = Timeline::newest("s", page(vec![action(ROWS_KEPT_MAX as u64 + 11, "x")], 0));
        t.prepend(page(many.clone(), 0));
        assert_eq!(t.rows.len(), ROWS_KEPT_MAX);
        assert!(
            !t.following,
            "the newest rows went: the tail is not followed"
        );
        let mut t = Timeline::newest("s", page(vec![action(1, "x")], 0));
        t.append(page(many[1..].to_vec(), 0));
        assert_eq!(t.rows.len(), ROWS_KEPT_MAX);
        assert_eq!(t.from, t.rows[0].seq);
        assert!(t.following);
    }

    #[test]
    fn asks_are_paged_queries() {
        assert_eq!(Ask::Newest.query(), "?limit=200");
        assert_eq!(Ask::Before(40).query(), "?before=40&limit=200");
        assert_eq!(Ask::After(40).query(), "?after=40&limit=200");
    }
}
