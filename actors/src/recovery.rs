//! Crash safety for restores and rewinds. Before the body starts one, a marker naming the
//! session, the proposal, the exact steps and the effects the action records is written (and
//! synced) beside the journal it belongs to (`<journal>.recovery/`, so `journal/main`'s
//! markers are in `journal/main.recovery`); it is removed once the action's outcome is
//! journaled, completed or failed. A runtime that starts and finds a marker of its own journal
//! finishes the job (the steps are idempotent) and journals that it did, with the same effects
//! a live run records, so the workspace is never left half restored: it is either as before
//! (the crash came before the marker, and nothing ran) or as after, and the journal says
//! which. Another aido on the same `AIDO_HOME` has another journal and so never sees them. A
//! composite (a safe_change, a pipeline) cut by the crash is journaled as `interrupted`, with
//! the finished restore's effects: the rest of it never ran.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use aido_actions::{Action, Effect, Failure};
use aido_journal::{Event, SessionId};
use aido_policy::SessionContext;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::RuntimeError;
use crate::fs::intent::{self, Intents};
use crate::fs::{FsMsg, SnapshotOp, Step};
use crate::shared::Shared;

/// How long recovery waits for the filesystem body to finish an interrupted apply.
const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

#[derive(Serialize, Deserialize)]
struct Marker {
    session: SessionId,
    proposal: u64,
    steps: Vec<Step>,
    /// For a rewind: what its `rewound` record says.
    rewind: Option<RewindMark>,
    /// The effects the action records when it finishes.
    #[serde(default)]
    effects: Vec<Effect>,
    /// The process that ran it: the temporary files its writes left carry this pid.
    #[serde(default)]
    pid: u32,
}

/// What a rewind's `rewound` record says, kept in its marker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RewindMark {
    pub(crate) to_seq: u64,
    pub(crate) cut: u64,
    pub(crate) undo_target: bool,
    pub(crate) branch: u32,
    pub(crate) snapshot: Option<String>,
}

/// A marker on disk for one restore or rewind in progress.
pub(crate) struct Recovery;

/// The markers of this runtime's journal live beside it.
fn dir(shared: &Shared) -> PathBuf {
    intent::recovery_dir(shared.journal.path())
}

fn marker_path(shared: &Shared, session: SessionId, proposal: u64) -> PathBuf {
    dir(shared).join(format!("{session}-{proposal}.json"))
}

impl Recovery {
    /// Write the marker (synced) before the first step runs.
    pub(crate) fn begin(
        shared: &Shared,
        session: SessionId,
        proposal: u64,
        steps: &[Step],
        rewind: Option<RewindMark>,
        effects: Vec<Effect>,
    ) -> Result<Self, Failure> {
        let marker = Marker {
            session,
            proposal,
            steps: steps.to_vec(),
            rewind,
            effects,
            pid: std::process::id(),
        };
        let path = marker_path(shared, session, proposal);
        shared.marked(session, proposal);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            std::fs::create_dir_all(dir(shared))?;
            let temp = path.with_extension("tmp");
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(&serde_json::to_vec(&marker).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
            std::fs::rename(&temp, &path)?;
            std::fs::File::open(dir(shared))?.sync_all()
        };
        write().map_err(|e| RuntimeError::RecoveryMarkerFailed {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Ok(Self)
    }

    /// The body finished; the marker stays until the outcome is journaled ([`Recovery::clear`]).
    pub(crate) fn finish(self) {}

    /// Remove the marker of (session, proposal), if any: its outcome is in the journal,
    /// completed or failed.
    pub(crate) fn clear(shared: &Shared, session: SessionId, proposal: u64) {
        if !shared.take_mark(session, proposal) {
            return;
        }
        Intents::of(shared.journal.path(), session, proposal).clear();
        let path = marker_path(shared, session, proposal);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(marker = %path.display(), error = %e, "cannot remove a recovery marker; the next start will see the action's outcome and leave it be")
            }
        }
    }

    /// Finish every restore or rewind a crash interrupted. Returns how many were finished.
    pub(crate) async fn recover(shared: &Arc<Shared>) -> usize {
        let Ok(entries) = std::fs::read_dir(dir(shared)) else {
            return 0;
        };
        let mut finished = 0;
        // Writes are judged after every restore and rewind is finished: a restore a crash cut
        // decides what its composite's writes left behind.
        let mut writes = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                writes.push(path);
                continue;
            }
            if path.extension().is_some_and(|e| e == "tmp") {
                // The marker was being written when aido stopped: no step had run.
                if let Err(f) = Self::never_started(shared, &path).await {
                    tracing::error!(code = %f.code, message = %f.message, "recovery failed");
                    continue;
                }
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "json") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Ok(marker) = std::fs::read(&path)
                .map_err(|_| ())
                .and_then(|b| serde_json::from_slice::<Marker>(&b).map_err(|_| ()))
            else {
                tracing::error!(marker = %path.display(), "an unreadable recovery marker; leaving it for a person");
                continue;
            };
            match Self::finish_one(shared, &marker).await {
                Ok(()) => {
                    finished += 1;
                    let _ = std::fs::remove_file(&path);
                }
                Err(f) => tracing::error!(code = %f.code, message = %f.message, "recovery failed"),
            }
        }
        writes.sort();
        for path in writes {
            match Self::finish_writes(shared, &path).await {
                Ok(true) => finished += 1,
                Ok(false) => {}
                Err(f) => {
                    tracing::error!(code = %f.code, message = %f.message, "recovery of writes failed");
                    continue;
                }
            }
            intent::remove(&path);
        }
        finished
    }

    /// Journal what the writes of an action a crash cut did: each write whose file holds its
    /// new contents happened (its effects are recorded, with the contents it replaced, so a
    /// rewind gives them back); one whose file does not never renamed (only the directories
    /// it made are recorded). `Ok(true)` when an outcome was journaled.
    async fn finish_writes(shared: &Arc<Shared>, dir: &std::path::Path) -> Result<bool, Failure> {
        let Some((session, proposal, intents)) = intent::read(dir) else {
            return Ok(false);
        };
        let coded = <Failure as From<aido_journal::ReadError>>::from;
        let records = shared.journal.all_records(session).map_err(coded)?;
        let answered = answered(&records, proposal);
        let proposed = records
            .iter()
            .any(|r| r.seq == proposal && matches!(r.event, Event::ActionProposed { .. }));
        if answered || !proposed {
            return Ok(false);
        }
        let max = shared.config_limits().blob_bytes_max;
        let (mut effects, mut blobs, mut happened) = (Vec::new(), Vec::new(), 0usize);
        for intent in intents {
            // The temporary file a crash left beside the target is aido's own (unlink does
            // not follow a symlink put in its place).
            let _ = std::fs::remove_file(&intent.temp);
            match written(&intent, max) {
                Some(bytes) => {
                    happened += 1;
                    blobs.push((intent.blob.clone(), bytes));
                    if let Some(before) = intent
                        .before
                        .as_deref()
                        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    {
                        blobs.push((blake3::hash(&before).to_hex().to_string(), before));
                    }
                    effects.extend(intent.effects);
                }
                // Never renamed: only the directories it made (still there) are recorded.
                None => effects.extend(intent.effects.into_iter().filter(|e| {
                    matches!(e, Effect::DirCreated { path } if std::path::Path::new(path).is_dir())
                })),
            }
        }
        let failure: Failure = RuntimeError::Interrupted {
            finished: if happened > 0 {
                "aido stopped after this action wrote and before its outcome was journaled; what it wrote is recorded here, so a rewind undoes it"
            } else {
                "aido stopped before this action's writes changed anything; the workspace is as it was before it"
            },
        }
        .into();
        shared
            .journal
            .append_with_blobs(
                session,
                shared.clock.now_ms(),
                Event::ActionFailed {
                    proposal,
                    failure,
                    effects,
                    inputs: Vec::new(),
                    duration_ms: 0,
                },
                blobs,
            )
            .await
            .map_err(Failure::from)?;
        tracing::warn!(%session, proposal, happened, "journaled the writes of an interrupted action");
        Ok(true)
    }

    /// Journal that the action named by a half-written marker never began.
    async fn never_started(shared: &Arc<Shared>, path: &std::path::Path) -> Result<(), Failure> {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some((session, proposal)) = name.rsplit_once('-') else {
            return Ok(());
        };
        let (Some(session), Ok(proposal)) = (SessionId::parse(session), proposal.parse::<u64>())
        else {
            return Ok(());
        };
        let records = shared.journal.all_records(session).map_err(Failure::from)?;
        let done = answered(&records, proposal);
        if done {
            return Ok(());
        }
        let failure: Failure = RuntimeError::Interrupted {
            finished: "aido stopped before this action changed anything; the workspace is as it was before it",
        }
        .into();
        let event = Event::ActionFailed {
            proposal,
            failure,
            effects: Vec::new(),
            inputs: Vec::new(),
            duration_ms: 0,
        };
        shared
            .journal
            .append(session, shared.clock.now_ms(), event)
            .await
            .map_err(Failure::from)?;
        Ok(())
    }

    async fn finish_one(shared: &Arc<Shared>, marker: &Marker) -> Result<(), Failure> {
        let coded = <Failure as From<aido_journal::ReadError>>::from;
        let records = shared.journal.all_records(marker.session).map_err(coded)?;
        let done = answered(&records, marker.proposal);
        if done {
            return Ok(());
        }
        let blobs = fetch_blobs(&shared.journal, &marker.steps)?;
        let ctx = SessionContext::new(shared.policy.workdir().to_owned());
        let op = SnapshotOp::Apply {
            steps: marker.steps.clone(),
            blobs,
        };
        // Recovery waits as long as the work takes: nothing else runs before it is done.
        let result = shared
            .bodies
            .fs
            .ask(RECOVERY_WAIT, |reply| FsMsg::Snapshot {
                op,
                session: ctx,
                reply,
            })
            .await;
        let append = |event| async {
            shared
                .journal
                .append(marker.session, shared.clock.now_ms(), event)
                .await
                .map_err(Failure::from)
        };
        // The restore or rewind was the action itself, or one step of a composite.
        let leaf = records.iter().any(|r| {
            r.seq == marker.proposal
                && matches!(
                    &r.event,
                    Event::ActionProposed {
                        action: Action::RestoreSnapshot(_) | Action::Rewind(_),
                        ..
                    }
                )
        });
        if result.is_ok() {
            leftovers(marker);
        }
        let events = match result {
            Ok(applied) => {
                tracing::warn!(session = %marker.session, proposal = marker.proposal, "finished an interrupted restore or rewind");
                finished(marker, &records, &applied, leaf)?
            }
            Err(failure) => {
                let failure: Failure = RuntimeError::RecoveryFailed {
                    why: format!("[{}] {}", failure.code, failure.message),
                }
                .into();
                vec![Event::ActionFailed {
                    proposal: marker.proposal,
                    failure,
                    effects: Vec::new(),
                    inputs: Vec::new(),
                    duration_ms: 0,
                }]
            }
        };
        for event in events {
            append(event).await?;
        }
        Ok(())
    }
}

/// What a finished restore or rewind journals: its `rewound` record when it was a rewind (and
/// none is journaled yet), then its outcome: completed when it was the action itself (`leaf`),
/// else `interrupted`, as one step of a composite whose later steps never ran.
fn finished(
    marker: &Marker,
    records: &[aido_journal::Record],
    applied: &serde_json::Value,
    leaf: bool,
) -> Result<Vec<Event>, Failure> {
    let mut events = Vec::new();
    if let Some(mark) = &marker.rewind {
        let rewound = records.iter().any(
            |r| matches!(&r.event, Event::Rewound { proposal, .. } if *proposal == marker.proposal),
        );
        if !rewound {
            let method = if mark.snapshot.is_some() {
                "snapshot"
            } else {
                "undo"
            };
            events.push(Event::Rewound {
                to_seq: mark.to_seq,
                cut: Some(mark.cut),
                undo_target: mark.undo_target,
                proposal: marker.proposal,
                branch: mark.branch,
                method: method.into(),
                snapshot: mark.snapshot.clone(),
                recovered: true,
            });
        }
    }
    if leaf {
        let mut outcome = crate::render::recovered(aido_walk::snapshot::Recovered {
            steps: marker.steps.len(),
            applied: aido_walk::snapshot::read(applied)?,
        });
        outcome.effects = marker.effects.clone();
        outcome.inputs.push(aido_actions::Input::Answer {
            from: "recovery".into(),
            value: json!({"steps": marker.steps.len(), "applied": applied}),
        });
        events.push(Event::ActionCompleted {
            proposal: marker.proposal,
            outcome,
            duration_ms: 0,
        });
        return Ok(events);
    }
    let changes = marker
        .steps
        .iter()
        .any(|s| matches!(s, Step::Changes { checked: true, .. }));
    let failure = RuntimeError::Interrupted {
        finished: if changes {
            "aido stopped while this action's file changes were being applied; they were applied whole when aido started again and are recorded here, so a rewind undoes them"
        } else {
            "the restore it was running was finished when aido started again; its later steps never ran"
        },
    };
    events.push(Event::ActionFailed {
        proposal: marker.proposal,
        failure: failure.into(),
        effects: marker.effects.clone(),
        inputs: Vec::new(),
        duration_ms: 0,
    });
    Ok(events)
}

/// The bytes of every blob the steps write.
pub(crate) fn fetch_blobs(
    journal: &aido_journal::Journal,
    steps: &[Step],
) -> Result<HashMap<String, Vec<u8>>, Failure> {
    let mut blobs = HashMap::new();
    for step in steps {
        if let Step::Write { blob, .. } = step
            && !blobs.contains_key(blob)
        {
            let bytes = journal
                .blob(blob)
                .map_err(Failure::from)?
                .ok_or_else(|| RuntimeError::BlobMissing { blob: blob.clone() })?;
            blobs.insert(blob.clone(), bytes);
        }
    }
    Ok(blobs)
}

/// The new contents of an intended write, if its file holds exactly them (the write renamed).
/// The file is opened without following a final symlink and read up to the intended size;
/// only contents hashing to the intended blob (what the agent itself wrote) are ever kept.
fn written(intent: &intent::Intent, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if intent.bytes > max {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&intent.resolved)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(intent.bytes + 1).read_to_end(&mut bytes).ok()?;
    (blake3::hash(&bytes).to_hex().as_str() == intent.blob).then_some(bytes)
}

/// The action proposed at `proposal` has its outcome record (completed or failed).
fn answered(records: &[aido_journal::Record], proposal: u64) -> bool {
    records.iter().any(|r| match &r.event {
        Event::ActionCompleted { proposal: p, .. } | Event::ActionFailed { proposal: p, .. } => {
            *p == proposal
        }
        _ => false,
    })
}

/// Remove the temporary files the interrupted run's writes left beside their targets
/// (`.NAME.aido-PID-N.tmp`, made by the process that wrote the marker); the steps themselves
/// were just finished by this one.
fn leftovers(marker: &Marker) {
    if marker.pid == 0 {
        return;
    }
    for step in &marker.steps {
        let Step::Write { path, .. } = step else {
            continue;
        };
        let path = std::path::Path::new(path);
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let prefix = format!(".{}.aido-{}-", name.to_string_lossy(), marker.pid);
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            if file.starts_with(&prefix) && file.ends_with(".tmp") {
                // unlink does not follow a symlink put in its place.
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
