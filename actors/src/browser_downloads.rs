//! A page's downloads, landed in the walls: the browser body stages each finished download in
//! the session's profile; here they become one change set of the action (staged whole into
//! the journal, then applied by the filesystem body, as a command's changes are), under
//! `[browser] downloads`, judged by the walls as writes. So the journal holds every byte a page
//! brought in before the file is in the workspace, and a rewind takes it away. A download the
//! walls refuse is reported with the refusal's code and never lands.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use aido_actions::Failure;
use aido_journal::SessionId;
use aido_policy::SessionContext;
use serde_json::{Value, json};

use crate::fs::changeset::{CommandChange, Contents};
use crate::shared::Shared;

/// Longest name a landed download keeps, in bytes.
const NAME_BYTES_MAX: usize = 200;

/// The file name a download lands under: the server's suggestion reduced to one plain
/// component (no separators, no control characters, no leading dot), else `download`.
pub(crate) fn safe_name(suggested: &str) -> String {
    let base = suggested.rsplit(['/', '\\']).next().unwrap_or_default();
    let mut name: String = base
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect();
    while name.starts_with('.') {
        name.replace_range(0..1, "_");
    }
    if name.len() > NAME_BYTES_MAX {
        let cut = (0..=NAME_BYTES_MAX)
            .rev()
            .find(|i| name.is_char_boundary(*i))
            .unwrap_or(0);
        name.truncate(cut);
    }
    if name.trim().is_empty() {
        "download".to_owned()
    } else {
        name
    }
}

/// `name`, or `stem (2).ext`, ... : one no file in `dir` has and none chosen before.
fn unique(dir: &Path, name: &str, taken: &mut BTreeSet<String>) -> String {
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem.to_owned(), format!(".{ext}")),
        _ => (name.to_owned(), String::new()),
    };
    let mut candidate = name.to_owned();
    let mut n = 2;
    while taken.contains(&candidate) || dir.join(&candidate).symlink_metadata().is_ok() {
        candidate = format!("{stem} ({n}){ext}");
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

/// Land the downloads `answer` names (`answer["downloads"]`), and say in it where each went
/// (`landed`: `{guid, path, bytes}` or `{guid, error}`) and the change set's effects
/// (`effects`). The staged files go either way.
pub(crate) async fn land(
    shared: &Shared,
    session: SessionId,
    proposal: u64,
    ctx: &SessionContext,
    answer: &mut Value,
) {
    let Some(downloads) = answer.get("downloads").and_then(Value::as_array).cloned() else {
        return;
    };
    let config = shared.policy.config();
    let configured = Path::new(&config.browser.downloads);
    let dir = if configured.is_absolute() {
        configured.to_owned()
    } else {
        shared.policy.workdir().join(configured)
    };
    let mut taken = BTreeSet::new();
    let mut changes = vec![CommandChange::Dir {
        path: dir.clone(),
        mode: 0o755,
        mtime_ns: None,
        layer: None,
    }];
    let mut landing: Vec<(Value, Option<PathBuf>)> = Vec::new();
    let mut staged_files = Vec::new();
    for download in downloads {
        let Some(staged) = download["staged"].as_str().map(PathBuf::from) else {
            // A download that failed in the browser: said as it is.
            landing.push((download, None));
            continue;
        };
        let name = unique(
            &dir,
            &safe_name(download["name"].as_str().unwrap_or("")),
            &mut taken,
        );
        let path = dir.join(name);
        changes.push(CommandChange::File {
            path: path.clone(),
            mode: 0o644,
            mtime_ns: None,
            contents: Contents::File(staged.clone()),
        });
        staged_files.push(staged);
        landing.push((download, Some(path)));
    }
    let applied = if changes.len() > 1 {
        let max = config.processes.change_bytes_max;
        Some(crate::change_sets::apply(shared, session, proposal, ctx, changes, max).await)
    } else {
        None
    };
    let refused: Option<Failure> = match &applied {
        Some(Err(failure)) => Some(failure.clone()),
        _ => None,
    };
    let landed: Vec<Value> = landing
        .into_iter()
        .map(|(download, path)| match (path, &refused) {
            (Some(path), None) => json!({
                "guid": download["guid"], "url": download["url"], "name": download["name"],
                "bytes": download["bytes"], "path": path.display().to_string(),
            }),
            (Some(_), Some(failure)) => json!({
                "guid": download["guid"], "url": download["url"], "name": download["name"],
                "error": {"code": failure.code, "message": failure.message},
            }),
            (None, _) => download,
        })
        .collect();
    answer["landed"] = json!(landed);
    if let Some(Ok(applied)) = applied {
        answer["effects"] = json!(applied.effects);
    }
    tokio::task::spawn_blocking(move || {
        for staged in staged_files {
            let _ = std::fs::remove_file(staged);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suggested_name_is_one_plain_component() {
        assert_eq!(safe_name("report.pdf"), "report.pdf");
        assert_eq!(safe_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_name("a\\b\\c.txt"), "c.txt");
        assert_eq!(safe_name(".bashrc"), "_bashrc");
        assert_eq!(safe_name("x\ny"), "x_y");
        assert_eq!(safe_name(""), "download");
        assert_eq!(safe_name("dir/"), "download");
        assert!(safe_name(&"é".repeat(300)).len() <= NAME_BYTES_MAX);
    }

    #[test]
    fn names_are_made_unique() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "").unwrap();
        let mut taken = BTreeSet::new();
        assert_eq!(unique(dir.path(), "a.txt", &mut taken), "a (2).txt");
        assert_eq!(unique(dir.path(), "a.txt", &mut taken), "a (3).txt");
        assert_eq!(unique(dir.path(), "b", &mut taken), "b");
        assert_eq!(unique(dir.path(), "b", &mut taken), "b (2)");
    }
}
