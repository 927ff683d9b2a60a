//! A section's facts (named values its prose in bench/report.md.j2 shows) and detail tables,
//! as records.

use super::schema::{Section, Table};
use crate::record;

/// A section from its facts and detail tables.
pub(super) fn section(id: &str, params: &[(&str, String)], tables: Vec<(&str, Table)>) -> Section {
    let mut out = record::Section::new(id);
    for (name, value) in params {
        out.fact(name, value.clone());
    }
    for (name, table) in tables {
        for (k, cells) in table.cells.iter().enumerate() {
            let cells: Vec<(&str, String)> = table
                .columns
                .iter()
                .map(String::as_str)
                .zip(cells.iter().cloned())
                .collect();
            out.line(name, k + 1, &cells);
        }
    }
    Section {
        id: id.into(),
        records: out.records,
    }
}
