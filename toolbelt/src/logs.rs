//! `read_logs` as a pure function of the arguments and the (already redacted) lines the
//! runtime read: the filters (since, grep), the tail and the byte cap run here, live and in
//! playback. Also the journal-derived activity of a session, as log lines, and the RFC 3339
//! times both use.

use std::collections::HashMap;

use aido_actions::tools::{LogSource, ReadLogs};
use aido_actions::{Action, Outcome, Verdict};
use aido_journal::{Event, Record};
use serde_json::json;

use super::error::ToolError;

/// Who answers when the activity is recorded (`Input::Answer { from }`).
pub const ACTIVITY_FROM: &str = "journal";

/// The largest compiled regex `grep` may make (bytes); linear-time matching, bounded memory.
const GREP_COMPILED_BYTES_MAX: usize = 1 << 20;

/// The filters the arguments ask for, checked.
pub struct Filters {
    /// Only lines at or after this time (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Only lines matching this.
    pub grep: Option<regex::Regex>,
    /// The last this many.
    pub tail: usize,
    /// Most bytes of lines.
    pub bytes_max: usize,
}

/// The arguments' own rules and the compiled filters (checked before anything is read).
pub fn check(a: &ReadLogs) -> Result<Filters, ToolError> {
    let invalid = |why: String| Err(ToolError::invalid("read_logs", why));
    match (a.source, &a.path) {
        (LogSource::File, None) => return invalid("source file needs a path".into()),
        (LogSource::Aido | LogSource::Activity, Some(_)) => {
            return invalid("path is only for source file".into());
        }
        _ => {}
    }
    match (a.source, &a.session) {
        (LogSource::Activity, Some(id)) if aido_journal::SessionId::parse(id).is_none() => {
            return invalid("session is a session id: 32 hex digits".into());
        }
        (LogSource::Aido | LogSource::File, Some(_)) => {
            return invalid("session is only for source activity".into());
        }
        _ => {}
    }
    let tail = a.tail.unwrap_or(ReadLogs::TAIL_DEFAULT);
    if !(1..=ReadLogs::TAIL_MAX).contains(&tail) {
        return invalid(format!("tail is 1 to {}", ReadLogs::TAIL_MAX));
    }
    let bytes_max = a.bytes_max.unwrap_or(ReadLogs::BYTES_DEFAULT);
    if !(1..=ReadLogs::BYTES_MAX).contains(&bytes_max) {
        return invalid(format!("bytes_max is 1 to {}", ReadLogs::BYTES_MAX));
    }
    if let Some(scan) = a.scan_bytes
        && !(1..=ReadLogs::SCAN_BYTES_MAX).contains(&scan)
    {
        return invalid(format!("scan_bytes is 1 to {}", ReadLogs::SCAN_BYTES_MAX));
    }
    let since_ms = match &a.since {
        Some(given) => Some(parse_rfc3339(given).ok_or_else(|| ToolError::SinceInvalid {
            given: given.chars().take(64).collect(),
        })?),
        None => None,
    };
    let grep = match &a.grep {
        Some(pattern) if pattern.len() > ReadLogs::GREP_BYTES_MAX => {
            return Err(ToolError::GrepInvalid {
                why: format!(
                    "the pattern is {} bytes; at most {}",
                    pattern.len(),
                    ReadLogs::GREP_BYTES_MAX
                ),
            });
        }
        Some(pattern) => Some(
            regex::RegexBuilder::new(pattern)
                .case_insensitive(a.ignore_case)
                .size_limit(GREP_COMPILED_BYTES_MAX)
                .dfa_size_limit(GREP_COMPILED_BYTES_MAX)
                .build()
                .map_err(|e| ToolError::GrepInvalid {
                    why: e.to_string().chars().take(2000).collect(),
                })?,
        ),
        None => None,
    };
    Ok(Filters {
        since_ms,
        grep,
        tail: tail as usize,
        bytes_max: bytes_max as usize,
    })
}

/// What was read: the source's name for the result, the redacted lines, whether the read
/// window began after the start of the source, and how many secrets were redacted.
pub struct Read<'a> {
    /// The resolved path, `AIDO_HOME/logs/aido.log`, or `journal:SESSION`.
    pub label: &'a str,
    /// Whole lines, secrets already redacted.
    pub text: &'a str,
    /// The window started after the beginning of the source.
    pub more_before: bool,
    /// Secrets redacted in `text`.
    pub redacted: u64,
}

/// The result: the last `tail` lines that pass the filters, within `bytes_max` (newest kept).
pub fn render(a: &ReadLogs, read: &Read) -> Result<Outcome, ToolError> {
    let filters = check(a)?;
    let mut stamp: Option<u64> = None;
    let mut scanned = 0u64;
    let mut passed: Vec<&str> = Vec::new();
    for line in read.text.lines() {
        scanned += 1;
        if let Some(t) = leading_time(line) {
            stamp = Some(t);
        }
        if let Some(since) = filters.since_ms
            && stamp.is_none_or(|t| t < since)
        {
            continue;
        }
        if let Some(grep) = &filters.grep
            && !grep.is_match(line)
        {
            continue;
        }
        passed.push(line);
    }
    let matched = passed.len();
    let mut kept: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    let mut cut = false;
    for line in passed.iter().rev().take(filters.tail) {
        let room = filters.bytes_max - bytes;
        if line.len() + 1 > room {
            // The newest line alone is larger than the cap: its start, cut at a character.
            if kept.is_empty() {
                let mut end = room.saturating_sub(1);
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                kept.push(line[..end].to_owned());
            }
            cut = true;
            break;
        }
        bytes += line.len() + 1;
        kept.push((*line).to_owned());
    }
    kept.reverse();
    let truncated = cut || matched > kept.len();
    let source = match a.source {
        LogSource::Aido => "aido",
        LogSource::Activity => "activity",
        LogSource::File => "file",
    };
    let text: String = kept.iter().map(|l| format!("{l}\n")).collect();
    let output = json!({
        "source": source,
        "path": read.label,
        "lines": kept,
        "returned": kept.len(),
        "matched": matched,
        "scanned": scanned,
        "truncated": truncated,
        "more_before": read.more_before,
        "redacted": read.redacted,
    });
    let mut outcome = Outcome::from_output(output);
    outcome.text = text;
    Ok(outcome)
}

/// The time at the start of a line, when it starts with an RFC 3339 one (as tracing writes
/// them, `2026-12-01T14:43:33.123456Z`), possibly after a `[`.
fn leading_time(line: &str) -> Option<u64> {
    let line = line.trim_start_matches('[');
    let end = line
        .find(|c: char| c.is_whitespace() || c == ']')
        .unwrap_or(line.len());
    parse_rfc3339(&line[..end])
}

/// Milliseconds since the epoch of an RFC 3339 time (`T` or a space between date and time;
/// `Z` or an offset; fractions of a second). None for anything else or before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = text.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &text[start..i.min(start + 3)];
        millis = digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
    }
    let offset_minutes = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (h, m) = (num(i + 1, 2)?, num(i + 4, 2)?);
            let total = h * 60 + m;
            if *sign == b'+' { total } else { -total }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    let ms = seconds.checked_mul(1000)?.checked_add(millis)?;
    u64::try_from(ms).ok()
}

/// `2026-12-01T14:43:33.123Z` for milliseconds since the epoch.
pub fn format_rfc3339(ms: u64) -> String {
    let seconds = (ms / 1000) as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A session's activity as log lines, one per record, oldest first: what was proposed and
/// how the policy judged it, how each action ended (by code) and how long it ran, calls that
/// never became actions, snapshots, rewinds and body restarts. Arguments and results are not
/// shown (they can hold anything), only primitives, seqs, times and codes.
pub fn activity(records: &[Record]) -> String {
    let mut primitives: HashMap<u64, &'static str> = HashMap::new();
    let mut out = String::new();
    for r in records {
        let time = format_rfc3339(r.time_ms);
        let what = match &r.event {
            Event::ActionProposed {
                action, verdict, ..
            } => {
                primitives.insert(r.seq, Action::primitive(action));
                let judged = match verdict {
                    Verdict::Allow => "allowed".to_owned(),
                    Verdict::Deny { code, .. } => format!("denied code={}", code.code()),
                    Verdict::Confirm { .. } => "confirm".to_owned(),
                };
                format!("proposed {} {judged}", action.primitive())
            }
            Event::ActionCompleted {
                proposal,
                duration_ms,
                ..
            } => format!(
                "completed {} proposal={proposal} duration_ms={duration_ms}",
                primitives.get(proposal).copied().unwrap_or("?")
            ),
            Event::ActionFailed {
                proposal,
                failure,
                duration_ms,
                ..
            } => format!(
                "failed {} proposal={proposal} code={} duration_ms={duration_ms}",
                primitives.get(proposal).copied().unwrap_or("?"),
                failure.code
            ),
            Event::ConfirmAnswered {
                proposal,
                answer,
                by,
                ..
            } => match by {
                Some(by) => format!(
                    "confirm_answered proposal={proposal} answer={answer} by={}",
                    by.surface.name()
                ),
                None => format!("confirm_answered proposal={proposal} answer={answer}"),
            },
            Event::CallRejected { tool, code, .. } => {
                let tool: String = tool.chars().take(64).collect();
                format!("rejected tool={tool:?} code={code}")
            }
            Event::SnapshotTaken { snapshot, .. } => format!("snapshot_taken {snapshot}"),
            Event::Rewound { to_seq, branch, .. } => {
                format!("rewound to_seq={to_seq} branch={branch}")
            }
            Event::BodyRestarted { body, .. } => format!("body_restarted {body}"),
            Event::BodyFailed { body, .. } => format!("body_failed {body}"),
            Event::HandleLost { handle, .. } => format!("handle_lost {handle}"),
            Event::EventsDelivered {
                subscription,
                changes,
                lagged,
                ..
            } => format!(
                "events_delivered {subscription} changes={} lagged={lagged}",
                changes.len()
            ),
            other => other.kind().to_owned(),
        };
        out.push_str(&format!("{time} seq={} {what}\n", r.seq));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn args(v: serde_json::Value) -> ReadLogs {
        serde_json::from_value(v).unwrap()
    }

    fn read(text: &str) -> Read<'_> {
        Read {
            label: "log",
            text,
            more_before: false,
            redacted: 0,
        }
    }

    const LOG: &str = "\
2026-12-01T10:00:00.000Z  INFO start
2026-12-01T11:00:00.000Z  WARN disk low
  continued detail
2026-12-01T12:00:00.000Z ERROR failed to open x
2026-12-01T13:00:00.000Z  INFO done
";

    #[test]
    fn times_parse_and_format_both_ways() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-12-01T14:43:33.123456Z"),
            Some(1_796_136_213_123)
        );
        assert_eq!(
            format_rfc3339(1_796_136_213_123),
            "2026-12-01T14:43:33.123Z"
        );
        assert_eq!(
            parse_rfc3339("2026-12-01T15:43:33+01:00"),
            parse_rfc3339("2026-12-01T14:43:33Z")
        );
        for bad in [
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-12-01T00:00:00",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn since_keeps_continuation_lines_with_their_entry_and_grep_and_tail_filter() {
        let since = render(&args(json!({"since": "2026-12-01T11:00:00Z"})), &read(LOG)).unwrap();
        assert_eq!(since.output["returned"], 4);
        assert_eq!(since.output["lines"][1], "  continued detail");
        let grep = render(
            &args(json!({"grep": "error|warn", "ignore_case": true})),
            &read(LOG),
        )
        .unwrap();
        assert_eq!(grep.output["matched"], 2);
        let tail = render(&args(json!({"tail": 2})), &read(LOG)).unwrap();
        assert_eq!(
            tail.output["lines"][1],
            "2026-12-01T13:00:00.000Z  INFO done"
        );
        assert_eq!(tail.output["truncated"], true);
        assert_eq!(tail.output["scanned"], 5);
    }

    #[test]
    fn the_byte_cap_keeps_the_newest_lines() {
        let capped = render(&args(json!({"bytes_max": 80})), &read(LOG)).unwrap();
        let lines = capped.output["lines"].as_array().unwrap();
        assert_eq!(lines.last().unwrap(), "2026-12-01T13:00:00.000Z  INFO done");
        assert!(capped.text.len() <= 80);
        assert_eq!(capped.output["truncated"], true);
        let one = render(&args(json!({"bytes_max": 10})), &read(LOG)).unwrap();
        assert_eq!(one.output["lines"][0], "2026-12-0");
    }

    #[test]
    fn bad_filters_are_coded_before_anything_is_read() {
        let cases = [
            (json!({"grep": "("}), "logs_grep_invalid"),
            (json!({"grep": "a".repeat(513)}), "logs_grep_invalid"),
            // Compiles to more than the bound: refused, not built.
            (json!({"grep": "\\w{1000}\\w{1000}"}), "logs_grep_invalid"),
            (json!({"since": "noon"}), "logs_since_invalid"),
            (json!({"source": "file"}), "tool_arguments_invalid"),
            (json!({"path": "x"}), "tool_arguments_invalid"),
            (json!({"tail": 0}), "tool_arguments_invalid"),
            (
                json!({"source": "activity", "session": "nope"}),
                "tool_arguments_invalid",
            ),
            (
                json!({"session": "00112233445566778899aabbccddeeff"}),
                "tool_arguments_invalid",
            ),
            (json!({"bytes_max": 600000}), "tool_arguments_invalid"),
        ];
        for (given, code) in cases {
            let e = check(&args(given.clone())).err().expect("refused");
            assert_eq!(e.code(), code, "{given}");
        }
    }
}
