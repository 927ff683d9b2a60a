//! The results file (docs/benchmarks.json): what one run measured, as data. docs/BENCHMARKS.md
//! is rendered from it and from nothing else.
//!
//! A [`Document`] holds the machine's facts, every measured [`Row`] (id, section, the words
//! the report shows, the value with its unit, the target and the verdict) and, per section,
//! its prose and detail tables as [`Block`]s. Verdicts are stored so the file can be read and
//! diffed alone, and re-derived from value and target on every load ([`Document::check`]): a
//! stored verdict that disagrees is an error, never silently trusted.

use serde::{Deserialize, Serialize};

/// The schema version; bumped when a field changes meaning.
pub const SCHEMA: u32 = 1;

/// One run's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// [`SCHEMA`].
    pub schema: u32,
    /// Where the numbers come from ("measured by aido-bench ...", or a conversion).
    pub source: String,
    /// When the run happened (UTC), as the header states it.
    pub date: String,
    /// Facts about the machine and the build, in report order.
    pub machine: Vec<Fact>,
    /// Every measured row, in report order.
    pub rows: Vec<Row>,
    /// The sections, in report order; a row's `section` names one of them.
    pub sections: Vec<Section>,
}

/// One machine fact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// What ("CPUs (nproc)").
    pub fact: String,
    /// Its value.
    pub value: String,
}

/// One measured row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// Stable id (`policy_gates_write_file_10_deny_globs`, `vm_rss_pool_clone`).
    pub id: String,
    /// The id of the [`Section`] it belongs to.
    pub section: String,
    /// What it measures, in the words the report shows.
    pub what: String,
    /// The value, or why there is none.
    pub outcome: Outcome,
    /// For side-by-side rows: the peer measured the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
    /// For side-by-side rows: this row's value over the peer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The target (from [`crate::report::targets`]), or why there is none.
    pub target: Target,
    /// Computed from `outcome`, `ratio` and `target` ([`Row::judge`]).
    pub result: Verdict,
}

/// A row's value, or why it has none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Measured.
    Measured(Value),
    /// Not run, and why.
    NotRun(String),
    /// Started and failed, and how.
    Failed(String),
}

/// A measured value: the median (or the one value) and what else was measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Value {
    /// The unit of every number here.
    pub unit: Unit,
    /// The median, or the value when there is one.
    pub median: f64,
    /// The smallest sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The largest sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The 99th percentile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    /// The median's 95% confidence interval (criterion's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<[f64; 2]>,
    /// How many samples the median is of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// The samples, in the order they were taken, when the report lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<f64>,
}

/// The unit of a [`Value`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Nanoseconds.
    #[default]
    Ns,
    /// Bytes (shown in decimal megabytes, as the issue states its figures).
    Bytes,
    /// Operations per second.
    PerSecond,
    /// A plain ratio (a row's value over its peer's).
    Ratio,
    /// A count (scenarios, checks).
    Count,
}

/// The peer of a side-by-side row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// Who.
    pub name: String,
    /// Its value, measured like the row's.
    pub value: Value,
}

/// Which number of a row a target judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// The median (or the one value).
    Median,
    /// The largest sample: "every one under".
    Max,
    /// The row's ratio over its peer.
    Ratio,
}

/// A row's target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// Passes when the statistic is strictly below the limit.
    Below {
        /// What is judged.
        of: Statistic,
        /// The limit.
        limit: f64,
        /// The limit's unit.
        unit: Unit,
        /// The reference system's figure from the issue, when it gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
    },
    /// Passes when the statistic is strictly above the limit.
    Above {
        /// What is judged.
        of: Statistic,
        /// The limit.
        limit: f64,
        /// The limit's unit.
        unit: Unit,
        /// The reference system's figure from the issue, when it gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
    },
    /// No target, and why.
    None {
        /// Why ("informational; the issue gives no reference").
        reason: String,
    },
}

/// A row's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Measured and met its target.
    Pass,
    /// Measured and missed it.
    Fail,
    /// Measured, with no target.
    Informational,
    /// Not measured (not run or failed).
    NotRun,
}

/// One section of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// Stable id, named by rows.
    pub id: String,
    /// The heading.
    pub title: String,
    /// What the section shows, in order; [`Block::Rows`] is where its rows' table goes.
    pub blocks: Vec<Block>,
}

/// A piece of a section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// A paragraph (markdown), or a list when it starts with `- `.
    Text(String),
    /// A sub-heading.
    Heading(String),
    /// The table of the section's rows.
    Rows,
    /// A detail table, cells as shown.
    Table(Table),
}

/// A detail table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// The header.
    pub columns: Vec<String>,
    /// The rows, one cell per column.
    pub cells: Vec<Vec<String>>,
}

/// Why a document is not self-consistent.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CheckError {
    /// The schema version is not this program's.
    #[error("schema {found}, this program reads {SCHEMA}")]
    Schema {
        /// The file's.
        found: u32,
    },
    /// A stored verdict disagrees with the value and the target.
    #[error("row {id}: stored result {stored:?}, value and target give {computed:?}")]
    Verdict {
        /// The row.
        id: String,
        /// In the file.
        stored: Verdict,
        /// Recomputed.
        computed: Verdict,
    },
    /// A row names a section the document does not have.
    #[error("row {id}: no section {section}")]
    Section {
        /// The row.
        id: String,
        /// The missing section.
        section: String,
    },
    /// Two rows share an id.
    #[error("two rows have the id {id}")]
    Duplicate {
        /// The id.
        id: String,
    },
}

impl Target {
    /// The statistic judged and the limit, when there is a target.
    fn limit(&self) -> Option<(Statistic, f64, bool)> {
        match self {
            Self::Below { of, limit, .. } => Some((*of, *limit, true)),
            Self::Above { of, limit, .. } => Some((*of, *limit, false)),
            Self::None { .. } => None,
        }
    }
}

impl Row {
    /// The verdict from the value, the ratio and the target. A limit is strict: a value at the
    /// target is not under it.
    pub fn judge(&self) -> Verdict {
        let Outcome::Measured(value) = &self.outcome else {
            return Verdict::NotRun;
        };
        let Some((of, limit, below)) = self.target.limit() else {
            return Verdict::Informational;
        };
        let judged = match of {
            Statistic::Median => Some(value.median),
            Statistic::Max => value.max,
            Statistic::Ratio => self.ratio,
        };
        match judged {
            Some(v) if (below && v < limit) || (!below && v > limit) => Verdict::Pass,
            Some(_) => Verdict::Fail,
            None => Verdict::NotRun,
        }
    }
}

impl Document {
    /// Checks what a reader relies on: the schema version, unique ids, every row's section,
    /// every stored verdict against its value and target.
    pub fn check(&self) -> Result<(), CheckError> {
        if self.schema != SCHEMA {
            return Err(CheckError::Schema { found: self.schema });
        }
        let mut seen = std::collections::HashSet::new();
        for row in &self.rows {
            if !seen.insert(row.id.as_str()) {
                return Err(CheckError::Duplicate { id: row.id.clone() });
            }
            if !self.sections.iter().any(|s| s.id == row.section) {
                return Err(CheckError::Section {
                    id: row.id.clone(),
                    section: row.section.clone(),
                });
            }
            let computed = row.judge();
            if computed != row.result {
                return Err(CheckError::Verdict {
                    id: row.id.clone(),
                    stored: row.result,
                    computed,
                });
            }
        }
        Ok(())
    }

    /// Parses and checks a results file's text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let document: Self = serde_json::from_str(text)?;
        document.check()?;
        Ok(document)
    }

    /// The file's text: pretty JSON, one trailing newline, so diffs stay line by line.
    pub fn to_text(&self) -> anyhow::Result<String> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(median: f64, max: Option<f64>, ratio: Option<f64>, target: Target) -> Row {
        let mut row = Row {
            id: "r".into(),
            section: "s".into(),
            what: "a thing".into(),
            outcome: Outcome::Measured(Value {
                unit: Unit::Ns,
                median,
                max,
                ..Value::default()
            }),
            peer: None,
            ratio,
            target,
            result: Verdict::NotRun,
        };
        row.result = row.judge();
        row
    }

    fn below(of: Statistic, limit: f64) -> Target {
        Target::Below {
            of,
            limit,
            unit: Unit::Ns,
            reference: None,
        }
    }

    #[test]
    fn verdicts_from_value_and_target() {
        let median = |v| row(v, None, None, below(Statistic::Median, 2_000.0)).result;
        assert_eq!(median(1_999.0), Verdict::Pass);
        // At the target is not under it.
        assert_eq!(median(2_000.0), Verdict::Fail);
        assert_eq!(median(3_470.0), Verdict::Fail);
        // Every sample must be under a max target, whatever the median.
        let max = |v| row(100.0, Some(v), None, below(Statistic::Max, 1e9)).result;
        assert_eq!(max(433e6), Verdict::Pass);
        assert_eq!(max(1.2e9), Verdict::Fail);
        // A max target without a max is not judged.
        assert_eq!(
            row(1.0, None, None, below(Statistic::Max, 1e9)).result,
            Verdict::NotRun
        );
        let above = |r| {
            let t = Target::Above {
                of: Statistic::Ratio,
                limit: 1.0,
                unit: Unit::Ratio,
                reference: None,
            };
            row(1.0, None, r, t).result
        };
        assert_eq!(above(Some(5.03)), Verdict::Pass);
        assert_eq!(above(Some(1.0)), Verdict::Fail);
        assert_eq!(above(None), Verdict::NotRun);
        let none = Target::None {
            reason: "informational".into(),
        };
        assert_eq!(row(1.0, None, None, none).result, Verdict::Informational);
        let mut r = row(1.0, None, None, below(Statistic::Median, 2.0));
        r.outcome = Outcome::NotRun("`--skip-vm`".into());
        assert_eq!(r.judge(), Verdict::NotRun);
        r.outcome = Outcome::Failed("no qemu".into());
        assert_eq!(r.judge(), Verdict::NotRun);
    }

    fn document() -> Document {
        let mut rows = vec![
            row(3_470.0, None, None, below(Statistic::Median, 2_000.0)),
            row(1.0, Some(2.0), Some(0.73), below(Statistic::Max, 3.0)),
        ];
        rows[1].id = "side".into();
        rows[1].peer = Some(Peer {
            name: "peer".into(),
            value: Value {
                unit: Unit::PerSecond,
                median: 1_023.0,
                n: Some(2000),
                samples: vec![1.0, 2.0],
                ..Value::default()
            },
        });
        Document {
            schema: SCHEMA,
            source: "a test".into(),
            date: "today".into(),
            machine: vec![Fact {
                fact: "CPUs (nproc)".into(),
                value: "2".into(),
            }],
            rows,
            sections: vec![Section {
                id: "s".into(),
                title: "S".into(),
                blocks: vec![
                    Block::Text("words".into()),
                    Block::Heading("sub".into()),
                    Block::Rows,
                    Block::Table(Table {
                        columns: vec!["a".into()],
                        cells: vec![vec!["1".into()]],
                    }),
                ],
            }],
        }
    }

    #[test]
    fn the_schema_round_trips() {
        let d = document();
        let text = d.to_text().unwrap();
        assert_eq!(Document::parse(&text).unwrap(), d);
        // The wire names are part of the schema.
        for part in [
            "\"result\": \"fail\"",
            "\"kind\": \"below\"",
            "\"of\": \"median\"",
            "\"measured\": {",
            "\"unit\": \"per_second\"",
            "\"rows\"",
            "\"heading\": \"sub\"",
        ] {
            assert!(text.contains(part), "missing {part} in {text}");
        }
    }

    #[test]
    fn a_stored_verdict_that_disagrees_is_refused() {
        let mut d = document();
        d.rows[0].result = Verdict::Pass;
        assert_eq!(
            d.check(),
            Err(CheckError::Verdict {
                id: "r".into(),
                stored: Verdict::Pass,
                computed: Verdict::Fail
            })
        );
        let mut d = document();
        d.rows[1].section = "nowhere".into();
        assert!(matches!(d.check(), Err(CheckError::Section { .. })));
        let mut d = document();
        d.rows[1].id = "r".into();
        assert!(matches!(d.check(), Err(CheckError::Duplicate { .. })));
        let mut d = document();
        d.schema = 0;
        assert_eq!(d.check(), Err(CheckError::Schema { found: 0 }));
        let unknown =
            document()
                .to_text()
                .unwrap()
                .replacen("\"source\"", "\"extra\": 1, \"source\"", 1);
        assert!(Document::parse(&unknown).is_err());
    }
}
