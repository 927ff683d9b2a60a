//! What a section builder measured, before it becomes records (crate::record): its rows
//! (value, peer, ratio), its facts and its detail tables.

pub use crate::record::Unit;

/// One measured row.
#[derive(Clone, Debug, PartialEq)]
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
    pub peer: Option<Peer>,
    /// For side-by-side rows: this row's value over the peer's.
    pub ratio: Option<f64>,
}

/// A row's value, or why it has none.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Measured.
    Measured(Value),
    /// Not run, and why.
    NotRun(String),
    /// Started and failed, and how.
    Failed(String),
}

/// A measured value: the median (or the one value) and what else was measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Value {
    /// The unit of every number here.
    pub unit: Unit,
    /// The median, or the value when there is one.
    pub median: f64,
    /// The smallest sample.
    pub min: Option<f64>,
    /// The largest sample.
    pub max: Option<f64>,
    /// The 99th percentile.
    pub p99: Option<f64>,
    /// The median's 95% confidence interval (criterion's).
    pub ci95: Option<[f64; 2]>,
    /// How many samples the median is of.
    pub n: Option<u64>,
    /// The samples, in the order they were taken, when the report lists them.
    pub samples: Vec<f64>,
}

/// The peer of a side-by-side row.
#[derive(Clone, Debug, PartialEq)]
pub struct Peer {
    /// Who.
    pub name: String,
    /// Its value, measured like the row's.
    pub value: Value,
}

/// A section's facts and detail tables, as records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Section {
    /// The section's id.
    pub id: String,
    /// Its facts and table cells.
    pub records: Vec<crate::record::Record>,
}

/// A detail table.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The column headings.
    pub columns: Vec<String>,
    /// The cells, line by line.
    pub cells: Vec<Vec<String>>,
}

impl Value {
    /// This value as a lane of `row`.
    fn record(&self, section: &str, row: &str, lane: Option<String>) -> crate::record::Record {
        let stats = crate::record::Stats {
            median: self.median,
            min: self.min,
            max: self.max,
            p99: self.p99,
            n: self.n,
            ci95: self.ci95,
        };
        let bare = stats
            == crate::record::Stats {
                median: self.median,
                ..Default::default()
            };
        crate::record::Record {
            section: section.into(),
            row: row.into(),
            lane,
            unit: Some(self.unit),
            samples: self.samples.clone(),
            value: bare.then_some(self.median),
            stats: (!bare).then_some(stats),
            ..Default::default()
        }
    }
}

impl Row {
    /// The row's records: its own lane (with its description), its peer's, its ratio.
    pub fn records(&self) -> Vec<crate::record::Record> {
        let (s, id) = (self.section.as_str(), self.id.as_str());
        let value = match &self.outcome {
            Outcome::Measured(value) => value,
            Outcome::NotRun(why) | Outcome::Failed(why) => {
                let kind = if matches!(self.outcome, Outcome::NotRun(_)) {
                    "not run"
                } else {
                    "failed"
                };
                return vec![crate::record::Record {
                    section: s.into(),
                    row: id.into(),
                    note: Some(self.what.clone()),
                    error: Some(format!("{kind}: {why}")),
                    ..Default::default()
                }];
            }
        };
        let mut own = value.record(s, id, None);
        own.note = Some(self.what.clone());
        let mut out = vec![own];
        if let Some(peer) = &self.peer {
            out.push(peer.value.record(s, id, Some(peer.name.clone())));
        }
        if let Some(ratio) = self.ratio {
            let mut r = crate::record::Record {
                section: s.into(),
                row: id.into(),
                lane: Some(crate::record::RATIO.into()),
                unit: Some(crate::record::Unit::Ratio),
                ..Default::default()
            };
            r.value = Some(ratio);
            out.push(r);
        }
        out
    }
}

/// A fact the prose names: text, or a raw number the template formats.
#[derive(Clone, Debug, PartialEq)]
pub enum Fact {
    /// Text shown as it is.
    Text(String),
    /// A number in the unit its name or the template says.
    Number(f64),
}

impl From<String> for Fact {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<f64> for Fact {
    fn from(number: f64) -> Self {
        Self::Number(number)
    }
}

impl From<usize> for Fact {
    fn from(number: usize) -> Self {
        Self::Number(number as f64)
    }
}

impl From<u32> for Fact {
    fn from(number: u32) -> Self {
        Self::Number(f64::from(number))
    }
}

impl From<u64> for Fact {
    fn from(number: u64) -> Self {
        Self::Number(number as f64)
    }
}
