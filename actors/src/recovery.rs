//! Crash safety for restores and rewinds. Before the body starts one, a marker naming the
//! session, the proposal and the exact steps is written (and synced) under
//! `AIDO_HOME/recovery`; it is removed once the action's outcome is journaled. A runtime that
//! starts and finds a marker finishes the job (the steps are idempotent) and journals that it
//! did, so the workspace is never left half restored: it is either as before (the crash came
//! before the marker, and nothing ran) or as after, and the journal says which.

use std::path::PathBuf;
use std::sync::Arc;

use aido_actions::Failure;
use aido_journal::{Event, SessionId};
use aido_policy::SessionContext;
use ractor::rpc::CallResult;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::fs::{FsMsg, SnapshotOp, Step};
use crate::runtime::Shared;

#[derive(Serialize, Deserialize)]
struct Marker {
    session: SessionId,
    proposal: u64,
    steps: Vec<Step>,
    /// For a rewind: (to_seq, branch, snapshot).
    rewind: Option<(u64, u32, Option<String>)>,
}

/// A marker on disk for one restore or rewind in progress.
pub(crate) struct Recovery;

fn dir(shared: &Shared) -> PathBuf {
    shared.aido_home.join("recovery")
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
        rewind: Option<(u64, u32, Option<String>)>,
    ) -> Result<Self, Failure> {
        let marker = Marker {
            session,
            proposal,
            steps: steps.to_vec(),
            rewind,
        };
        let path = marker_path(shared, session, proposal);
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
        write().map_err(|e| {
            Failure::new(
                "recovery_marker_failed",
                format!("cannot write {}: {e}", path.display()),
            )
        })?;
        Ok(Self)
    }

    /// The body finished; the marker stays until the outcome is journaled ([`Recovery::clear`]).
    pub(crate) fn finish(self) {}

    /// Remove the marker of (session, proposal), if any: its outcome is in the journal.
    pub(crate) fn clear(shared: &Shared, session: SessionId, proposal: u64) {
        let _ = std::fs::remove_file(marker_path(shared, session, proposal));
    }

    /// Finish every restore or rewind a crash interrupted. Returns how many were finished.
    pub(crate) async fn recover(shared: &Arc<Shared>) -> usize {
        let Ok(entries) = std::fs::read_dir(dir(shared)) else {
            return 0;
        };
        let mut finished = 0;
        for entry in entries.flatten() {
            let path = entry.path();
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
        finished
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
        let records = shared
            .journal
            .all_records(session)
            .map_err(|e| Failure::new(e.code(), e.to_string()))?;
        let done = records.iter().any(|r| match &r.event {
            Event::ActionCompleted { proposal: p, .. }
            | Event::ActionFailed { proposal: p, .. } => *p == proposal,
            _ => false,
        });
        if done {
            return Ok(());
        }
        let failure = Failure::new(
            "interrupted",
            "aido stopped before this action changed anything; the workspace is as it was before it",
        );
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
            .map_err(|e| Failure::new(e.code(), e.to_string()))?;
        Ok(())
    }

    async fn finish_one(shared: &Arc<Shared>, marker: &Marker) -> Result<(), Failure> {
        let coded = |e: aido_journal::ReadError| Failure::new(e.code(), e.to_string());
        let records = shared.journal.all_records(marker.session).map_err(coded)?;
        let done = records.iter().any(|r| match &r.event {
            Event::ActionCompleted { proposal, .. } | Event::ActionFailed { proposal, .. } => {
                *proposal == marker.proposal
            }
            _ => false,
        });
        if done {
            return Ok(());
        }
        let blobs = crate::executor::fetch_blobs(&shared.journal, &marker.steps)?;
        let fs = shared
            .fs()
            .ok_or_else(|| Failure::new("body_crashed", "no filesystem body"))?;
        let ctx = SessionContext::new(shared.policy.workdir().to_owned());
        let op = SnapshotOp::Apply {
            steps: marker.steps.clone(),
            blobs,
        };
        let result = match fs
            .call(
                |reply| FsMsg::Snapshot {
                    op,
                    session: ctx,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(CallResult::Success(r)) => r,
            _ => Err(Failure::new(
                "body_crashed",
                "the filesystem body stopped during recovery",
            )),
        };
        let append = |event| async {
            shared
                .journal
                .append(marker.session, shared.clock.now_ms(), event)
                .await
                .map_err(|e| Failure::new(e.code(), e.to_string()))
        };
        match result {
            Ok(applied) => {
                if let Some((to_seq, branch, snapshot)) = &marker.rewind {
                    let rewound = records.iter().any(|r| matches!(&r.event, Event::Rewound { proposal, .. } if *proposal == marker.proposal));
                    if !rewound {
                        let method = if snapshot.is_some() {
                            "snapshot"
                        } else {
                            "undo"
                        };
                        append(Event::Rewound {
                            to_seq: *to_seq,
                            proposal: marker.proposal,
                            branch: *branch,
                            method: method.into(),
                            snapshot: snapshot.clone(),
                            recovered: true,
                        })
                        .await?;
                    }
                }
                let mut outcome = crate::render::recovered(marker.steps.len(), &applied);
                outcome.inputs.push(aido_actions::Input::Answer {
                    from: "recovery".into(),
                    value: json!({"steps": marker.steps.len(), "applied": applied}),
                });
                append(Event::ActionCompleted {
                    proposal: marker.proposal,
                    outcome,
                    duration_ms: 0,
                })
                .await?;
                tracing::warn!(session = %marker.session, proposal = marker.proposal, "finished an interrupted restore or rewind");
            }
            Err(failure) => {
                let failure = Failure::new(
                    "recovery_failed",
                    format!(
                        "finishing the interrupted action failed: {}",
                        failure.message
                    ),
                );
                append(Event::ActionFailed {
                    proposal: marker.proposal,
                    failure,
                    effects: Vec::new(),
                    inputs: Vec::new(),
                    duration_ms: 0,
                })
                .await?;
            }
        }
        Ok(())
    }
}
