//! `aido undo [N]`: the person at the terminal takes back the last N actions that changed
//! something in this project (the newest sessions started here or below, `aido exec` ones
//! included, so a Claude Code hook's commands too), seeing first what will be undone; and the
//! preview `aido rewind` and `aido replay rewind` show before they rewind a session.

use std::path::Path;

use aido_journal::{Event, Record};
use serde_json::Value;

/// One action that changed something, as the preview shows it.
pub(crate) struct Undoable {
    pub(crate) session: String,
    pub(crate) seq: u64,
    pub(crate) line: String,
}

/// The last `count` actions that changed something in sessions started in `here` or below,
/// newest first.
pub(crate) fn last_changes(
    journals: &[aido_journal::Journal],
    here: &Path,
    count: usize,
) -> Result<Vec<Undoable>, aido_journal::ReadError> {
    let mut chosen = Vec::new();
    for summary in aido_journal::dir::sessions(journals)?.iter().rev() {
        if chosen.len() >= count {
            break;
        }
        if !Path::new(&summary.cwd).starts_with(here) {
            continue;
        }
        let id = summary.id.to_string();
        let (journal, sid) = aido_journal::dir::find(journals, &id)?;
        let found = undoable(&id, here, &journal.all_records(sid)?);
        let wanted = count - chosen.len();
        chosen.extend(found.into_iter().rev().take(wanted));
    }
    Ok(chosen)
}

/// The newest session started in `here` or below: the one `aido rewind` takes by default.
pub(crate) fn newest_session_in(
    journals: &[aido_journal::Journal],
    here: &Path,
) -> Result<Option<String>, aido_journal::ReadError> {
    Ok(aido_journal::dir::sessions(journals)?
        .iter()
        .rev()
        .find(|summary| Path::new(&summary.cwd).starts_with(here))
        .map(|summary| summary.id.to_string()))
}

/// What a rewind of `session` to `target` undoes: every action proposed after the kept seq
/// (how many), and of them those that changed something, newest first.
pub(crate) fn preview(
    journals: &[aido_journal::Journal],
    session: &str,
    target: &aido_actions::snapshot::Rewind,
) -> Result<(usize, Vec<Undoable>), aido_journal::ReadError> {
    let (journal, sid) = aido_journal::dir::find(journals, session)?;
    let records = journal.all_records(sid)?;
    let id = sid.to_string();
    let cwd = records
        .iter()
        .find_map(|record| match &record.event {
            Event::SessionStarted { cwd, .. } => Some(cwd.clone()),
            _ => None,
        })
        .unwrap_or_default();
    // The first seq that goes: after the kept one, or the named proposal itself.
    let first = match target.target() {
        Some(aido_actions::snapshot::RewindTarget::Keep(seq)) => seq + 1,
        Some(aido_actions::snapshot::RewindTarget::Undo(seq)) => seq,
        None => u64::MAX,
    };
    let gone = aido_journal::timeline::abandoned(&records);
    let actions = records
        .iter()
        .filter(|record| record.seq >= first && !gone.contains_key(&record.seq))
        .filter(|record| matches!(record.event, Event::ActionProposed { .. }))
        .count();
    let changed = undoable(&id, Path::new(&cwd), &records)
        .into_iter()
        .filter(|one| one.seq >= first)
        .rev()
        .collect();
    Ok((actions, changed))
}

/// One rewind per session, before its oldest chosen action, newest session first.
pub(crate) fn rewinds(chosen: &[Undoable]) -> Vec<(String, u64)> {
    let mut order: Vec<(String, u64)> = Vec::new();
    for one in chosen {
        match order
            .iter_mut()
            .find(|(session, _)| *session == one.session)
        {
            Some((_, seq)) => *seq = (*seq).min(one.seq),
            None => order.push((one.session.clone(), one.seq)),
        }
    }
    order
}

/// The paths an action's effects touched, as journaled.
fn paths(effects: &[aido_actions::Effect]) -> Vec<String> {
    let mut out = Vec::new();
    for effect in effects {
        let value = serde_json::to_value(effect).unwrap_or(Value::Null);
        for key in ["path", "to", "from"] {
            if let Some(path) = value.get(key).and_then(Value::as_str) {
                out.push(path.to_owned());
                break;
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A session's actions that changed something and were not already rewound, oldest first.
fn undoable(session: &str, cwd: &Path, records: &[Record]) -> Vec<Undoable> {
    let gone = aido_journal::timeline::abandoned(records);
    let mut out = Vec::new();
    for record in records {
        let (proposal, effects) = match &record.event {
            Event::ActionCompleted {
                proposal, outcome, ..
            } => (*proposal, &outcome.effects),
            Event::ActionFailed {
                proposal, effects, ..
            } => (*proposal, effects),
            _ => continue,
        };
        if effects.is_empty() || gone.contains_key(&proposal) {
            continue;
        }
        let action = records
            .iter()
            .find(|r| r.seq == proposal)
            .and_then(|r| match &r.event {
                Event::ActionProposed { action, .. } => Some(action),
                _ => None,
            });
        // A rewind's own effects are the undoing: it is not taken back in turn.
        if action.is_some_and(|action| action.primitive() == "rewind") {
            continue;
        }
        let what = action.map_or_else(|| "an action".into(), describe);
        let touched = paths(effects);
        let shown: Vec<String> = touched
            .iter()
            .take(5)
            .map(|p| {
                Path::new(p)
                    .strip_prefix(cwd)
                    .map(|rel| rel.display().to_string())
                    .unwrap_or_else(|_| p.clone())
            })
            .collect();
        let more = touched.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        out.push(Undoable {
            session: session.to_owned(),
            seq: proposal,
            line: format!(
                "{} #{proposal} {what}: {}{more}",
                &session[..8.min(session.len())],
                shown.join(", ")
            ),
        });
    }
    out
}

fn describe(action: &aido_actions::Action) -> String {
    let value = serde_json::to_value(action).unwrap_or(Value::Null);
    let primitive = action.primitive();
    let detail = match primitive {
        "run_command" => value
            .get("shell")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                value.get("argv").and_then(Value::as_array).map(|argv| {
                    argv.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
            }),
        _ => value.get("path").and_then(Value::as_str).map(str::to_owned),
    };
    match detail {
        Some(detail) => {
            let detail: String = detail.chars().take(80).collect();
            format!("{primitive} `{detail}`")
        }
        None => primitive.to_owned(),
    }
}
