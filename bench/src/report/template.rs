//! A section's prose as a template (`notes/<section>.md`), filled from named parameters.
//!
//! The first line is the heading (`## Title`). Then blocks, one per blank-line-separated
//! chunk: `{rows}` is where the section's rows go, `{table:NAME}` a detail table (left out
//! when the builder has none by that name), `### Heading` a sub-heading, anything else text.
//! `{name}` in a line is replaced by the parameter's value; a line naming a parameter the
//! builder did not give is left out, so a parameter with an empty value is a condition
//! (`...{tcg}` shows the line only on TCG) and two alternative lines can follow each other.

use super::schema::{Block, Section, Table};

/// A section from its template, parameters and detail tables.
pub(super) fn section(
    id: &str,
    template: &str,
    params: &[(&str, String)],
    mut tables: Vec<(&str, Table)>,
) -> Section {
    let (title, body) = template.split_once('\n').unwrap_or((template, ""));
    let title = fill(title.trim_start_matches("## "), params).unwrap_or_default();
    let mut blocks = Vec::new();
    for chunk in body.split("\n\n").map(str::trim).filter(|c| !c.is_empty()) {
        if chunk == "{rows}" {
            blocks.push(Block::Rows);
        } else if let Some(name) = chunk
            .strip_prefix("{table:")
            .and_then(|c| c.strip_suffix('}'))
        {
            if let Some(k) = tables.iter().position(|(n, _)| *n == name) {
                blocks.push(Block::Table(tables.remove(k).1));
            }
        } else {
            let lines: Vec<String> = chunk.lines().filter_map(|l| fill(l, params)).collect();
            let text = lines.join("\n");
            match text.strip_prefix("### ") {
                _ if text.trim().is_empty() => {}
                Some(heading) => blocks.push(Block::Heading(heading.into())),
                None => blocks.push(Block::Text(text)),
            }
        }
    }
    Section {
        id: id.into(),
        title,
        blocks,
    }
}

/// `line` with every `{name}` replaced; `None` when a name has no parameter.
fn fill(line: &str, params: &[(&str, String)]) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}')? + open;
        let name = &rest[open + 1..close];
        let value = params.iter().find(|(n, _)| *n == name)?;
        out.push_str(&rest[..open]);
        out.push_str(&value.1);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_without_their_parameters_are_left_out() {
        let template = "## Title {x}\n\nA {x} line.\nOnly with y{y}.\n\n{rows}\n\n{table:t}\n\n\
                        {table:missing}\n\n### Sub\n\n- one{flag}\n- two";
        let table = Table {
            columns: vec!["a".into()],
            cells: vec![],
        };
        let s = section(
            "s",
            template,
            &[("x", "X".into()), ("flag", String::new())],
            vec![("t", table.clone())],
        );
        assert_eq!(s.title, "Title X");
        assert_eq!(
            s.blocks,
            vec![
                Block::Text("A X line.".into()),
                Block::Rows,
                Block::Table(table),
                Block::Heading("Sub".into()),
                Block::Text("- one\n- two".into()),
            ]
        );
    }

    #[test]
    fn every_template_has_a_heading_and_rows() {
        for (name, template) in super::super::NOTES {
            assert!(template.starts_with("## "), "{name}");
            let rows = template.split("\n\n").any(|c| c.trim() == "{rows}");
            assert_eq!(rows, *name != "reproduce", "{name}");
        }
    }
}
