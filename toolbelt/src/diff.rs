//! `diff` as a pure function of the arguments and the bytes of its two sides.

use aido_actions::Outcome;
use aido_actions::tools::Diff;
use serde_json::json;

use super::error::ToolError;

/// Most lines one side may have (more is `diff_too_large`). imara-diff's histogram diff, with
/// git's cost heuristics when it falls back to Myers, is close to linear, so this bounds
/// memory and output more than time.
pub const SIDE_LINES_MAX: usize = 200_000;

/// Bytes looked at for a NUL when deciding whether a side is binary (as git does).
const BINARY_SNIFF_BYTES: usize = 8000;

/// One side of a diff: how the result names it, and its bytes.
pub struct Side<'a> {
    /// The resolved path, or `text`.
    pub label: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
}

/// The arguments' own rules (checked before anything is read).
pub fn check(a: &Diff) -> Result<(), ToolError> {
    let invalid = |why: String| Err(ToolError::invalid("diff", why));
    match (&a.other_path, &a.text) {
        (Some(_), Some(_)) | (None, None) => {
            return invalid("give exactly one of other_path and text".into());
        }
        (None, Some(text)) if text.len() > Diff::TEXT_BYTES_MAX => {
            return invalid(format!(
                "text is {} bytes; at most {}",
                text.len(),
                Diff::TEXT_BYTES_MAX
            ));
        }
        _ => {}
    }
    if a.context_lines.unwrap_or(0) > Diff::CONTEXT_LINES_MAX {
        return invalid(format!(
            "context_lines is at most {}",
            Diff::CONTEXT_LINES_MAX
        ));
    }
    if let Some(n) = a.lines_max
        && !(1..=Diff::LINES_MAX_MAX).contains(&n)
    {
        return invalid(format!("lines_max is 1 to {}", Diff::LINES_MAX_MAX));
    }
    Ok(())
}

/// Prints hunks as `diff -u` does, with `\\ No newline at end of file` after a last line
/// that has none (so `apply_patch` gives back the exact bytes).
struct Printer<'a>(&'a imara_diff::Interner<&'a str>);

impl Printer<'_> {
    fn line(
        &self,
        mut f: impl std::fmt::Write,
        mark: char,
        token: imara_diff::Token,
    ) -> std::fmt::Result {
        let text = self.0[token];
        write!(f, "{mark}{text}")?;
        if !text.ends_with('\n') {
            write!(f, "\n\\ No newline at end of file\n")?;
        }
        Ok(())
    }
}

impl imara_diff::UnifiedDiffPrinter for Printer<'_> {
    fn display_header(
        &self,
        mut f: impl std::fmt::Write,
        start_before: u32,
        start_after: u32,
        len_before: u32,
        len_after: u32,
    ) -> std::fmt::Result {
        // An empty range names the line before it, as diff -u does.
        let from = |start: u32, len: u32| if len == 0 { start } else { start + 1 };
        writeln!(
            f,
            "@@ -{},{len_before} +{},{len_after} @@",
            from(start_before, len_before),
            from(start_after, len_after)
        )
    }

    fn display_context_token(
        &self,
        f: impl std::fmt::Write,
        token: imara_diff::Token,
    ) -> std::fmt::Result {
        self.line(f, ' ', token)
    }

    fn display_hunk(
        &self,
        mut f: impl std::fmt::Write,
        before: &[imara_diff::Token],
        after: &[imara_diff::Token],
    ) -> std::fmt::Result {
        for &token in before {
            self.line(&mut f, '-', token)?;
        }
        for &token in after {
            self.line(&mut f, '+', token)?;
        }
        Ok(())
    }
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) || std::str::from_utf8(bytes).is_err()
}

/// The diff of `original` and `modified`: unified, with the asked context, cut to the line
/// budget (`truncated`); binary sides are compared by bytes only.
pub fn diff(a: &Diff, original: Side, modified: Side) -> Result<Outcome, ToolError> {
    check(a)?;
    let identical = original.bytes == modified.bytes;
    let binary = [original.bytes, modified.bytes].map(is_binary);
    if binary[0] || binary[1] {
        let output = json!({
            "path": original.label,
            "other": modified.label,
            "identical": identical,
            "binary": true,
            "diff": "",
            "hunks": 0,
            "added": 0,
            "removed": 0,
            "lines": 0,
            "truncated": false,
        });
        let mut outcome = Outcome::from_output(output);
        outcome.text = if identical {
            "the files are identical (binary)".into()
        } else {
            format!(
                "binary files {} and {} differ",
                original.label, modified.label
            )
        };
        return Ok(outcome);
    }
    // Both are UTF-8 (checked just above).
    let (old, new) = (
        String::from_utf8_lossy(original.bytes),
        String::from_utf8_lossy(modified.bytes),
    );
    for (side, text) in [(original.label, &old), (modified.label, &new)] {
        let lines = text.lines().count();
        if lines > SIDE_LINES_MAX {
            return Err(ToolError::DiffTooLarge {
                side: side.to_owned(),
                lines,
                max: SIDE_LINES_MAX,
            });
        }
    }
    let context = a.context_lines.unwrap_or(Diff::CONTEXT_LINES_DEFAULT);
    let budget = a.lines_max.unwrap_or(Diff::LINES_MAX_DEFAULT) as usize;
    let input = imara_diff::InternedInput::new(old.as_ref(), new.as_ref());
    let mut found = imara_diff::Diff::compute(imara_diff::Algorithm::Histogram, &input);
    found.postprocess_lines(&input);
    let (added, removed) = (found.count_additions(), found.count_removals());
    let mut config = imara_diff::UnifiedDiffConfig::default();
    config.context_len(context);
    let printer = Printer(&input.interner);
    let body = found.unified_diff(&printer, config, &input).to_string();
    let full = if body.is_empty() {
        body
    } else {
        format!("--- {}\n+++ {}\n{body}", original.label, modified.label)
    };
    let hunks = full.lines().filter(|l| l.starts_with("@@ ")).count();
    let total = full.lines().count();
    let truncated = total > budget;
    let shown: String = if truncated {
        full.split_inclusive('\n').take(budget).collect()
    } else {
        full
    };
    let output = json!({
        "path": original.label,
        "other": modified.label,
        "identical": identical,
        "binary": false,
        "hunks": hunks,
        "added": added,
        "removed": removed,
        "lines": total,
        "truncated": truncated,
        "diff": shown,
    });
    let mut outcome = Outcome::from_output(output);
    outcome.text = if identical {
        "the files are identical".into()
    } else if truncated {
        format!("{shown}[diff cut at {budget} of {total} lines]\n")
    } else {
        shown
    };
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn args(v: serde_json::Value) -> Diff {
        serde_json::from_value(v).unwrap()
    }

    fn side<'a>(label: &'a str, bytes: &'a [u8]) -> Side<'a> {
        Side { label, bytes }
    }

    #[test]
    fn a_unified_diff_with_context_and_counts() {
        let a = args(json!({"path": "a", "text": "x", "context_lines": 1}));
        let old = "1\n2\n3\n4\n5\n6\n7\n";
        let new = "1\n2\n3\nfour\n5\n6\n7\n";
        let done = diff(
            &a,
            side("a.txt", old.as_bytes()),
            side("b.txt", new.as_bytes()),
        )
        .unwrap();
        assert_eq!(
            done.output["diff"],
            "--- a.txt\n+++ b.txt\n@@ -3,3 +3,3 @@\n 3\n-4\n+four\n 5\n"
        );
        assert_eq!(done.output["added"], 1);
        assert_eq!(done.output["removed"], 1);
        assert_eq!(done.output["truncated"], false);
        // The patch it gives applies.
        let patch = diffy::Patch::from_str(done.output["diff"].as_str().unwrap()).unwrap();
        assert_eq!(diffy::apply(old, &patch).unwrap(), new);
    }

    #[test]
    fn a_missing_last_newline_and_an_empty_side_round_trip_through_apply() {
        let a = args(json!({"path": "a", "text": "x"}));
        for (old, new) in [
            ("a\nb", "a\nc"),
            ("", "x\ny\n"),
            ("x\ny\n", ""),
            ("a\n", "a"),
        ] {
            let done = diff(&a, side("a", old.as_bytes()), side("b", new.as_bytes())).unwrap();
            let text = done.output["diff"].as_str().unwrap();
            let patch = diffy::Patch::from_str(text).unwrap();
            assert_eq!(diffy::apply(old, &patch).unwrap(), new, "{text}");
        }
    }

    #[test]
    fn the_line_budget_cuts_at_a_line_and_says_so() {
        let a = args(json!({"path": "a", "text": "x", "lines_max": 4}));
        let old: String = (0..100).map(|i| format!("{i}\n")).collect();
        let new: String = (0..100).map(|i| format!("{}\n", i * 7)).collect();
        let done = diff(&a, side("a", old.as_bytes()), side("b", new.as_bytes())).unwrap();
        assert_eq!(done.output["truncated"], true);
        assert_eq!(done.output["diff"].as_str().unwrap().lines().count(), 4);
        assert!(done.output["lines"].as_u64().unwrap() > 4);
    }

    #[test]
    fn binary_sides_are_compared_not_diffed() {
        let a = args(json!({"path": "a", "text": "x"}));
        let done = diff(&a, side("a", b"\0\x01\x02"), side("b", b"\0\x01\x03")).unwrap();
        assert_eq!(done.output["binary"], true);
        assert_eq!(done.output["identical"], false);
        assert_eq!(done.output["diff"], "");
        let same = diff(&a, side("a", b"\xff\xfe"), side("b", b"\xff\xfe")).unwrap();
        assert_eq!(same.output["identical"], true);
    }

    #[test]
    fn bad_arguments_and_huge_sides_are_coded() {
        let both = args(json!({"path": "a", "text": "x", "other_path": "b"}));
        assert_eq!(check(&both).unwrap_err().code(), "tool_arguments_invalid");
        let neither = args(json!({"path": "a"}));
        assert_eq!(
            check(&neither).unwrap_err().code(),
            "tool_arguments_invalid"
        );
        let context = args(json!({"path": "a", "text": "", "context_lines": 101}));
        assert_eq!(
            check(&context).unwrap_err().code(),
            "tool_arguments_invalid"
        );
        let a = args(json!({"path": "a", "text": "x"}));
        let big = "x\n".repeat(SIDE_LINES_MAX + 1);
        let e = diff(&a, side("a", big.as_bytes()), side("b", b"x\n")).unwrap_err();
        assert_eq!(e.code(), "diff_too_large");
    }

    #[test]
    fn two_unrelated_sides_at_the_bound_finish() {
        let a = args(json!({"path": "a", "text": "x", "lines_max": 10}));
        let old: String = (0..SIDE_LINES_MAX).map(|i| format!("a{i}\n")).collect();
        let new: String = (0..SIDE_LINES_MAX).map(|i| format!("b{i}\n")).collect();
        let started = std::time::Instant::now();
        let done = diff(&a, side("a", old.as_bytes()), side("b", new.as_bytes())).unwrap();
        eprintln!(
            "{SIDE_LINES_MAX} unrelated lines a side: {:?}",
            started.elapsed()
        );
        assert_eq!(done.output["added"], SIDE_LINES_MAX as u64);
        assert_eq!(done.output["truncated"], true);
    }
}
