//! What a command's proxy shares with its connection tasks: the phase it is in, its log of
//! records and totals, and the connection slots under the command's and the process's caps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, watch};

use crate::{
    EGRESS_MESSAGE_BYTES_MAX, EGRESS_RECORDS_MAX, EGRESS_RESOLUTIONS_MAX, EgressPolicy,
    EgressRecord, EgressTotals, ProxyError,
};

/// Connections open through every proxy of this process (what `connections_total_max`
/// bounds).
static OPEN_TOTAL: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn connections_open() -> usize {
    OPEN_TOTAL.load(Ordering::SeqCst)
}

/// Where a command's proxy is in its life; each phase follows the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Accepting and serving.
    Serving,
    /// The command ended: no more accepts; open connections may finish.
    Draining,
    /// Every connection still open is cut.
    Cut,
}

/// Resolves once the proxy reached `phase` (or was dropped).
pub(crate) async fn reached(phase: &mut watch::Receiver<Phase>, at: Phase) {
    let _ = phase.wait_for(|now| *now >= at).await;
}

/// What a command's proxy shares with its tasks.
pub(crate) struct Shared {
    pub(crate) policy: EgressPolicy,
    pub(crate) log: Mutex<Log>,
    /// The command's resolver permits.
    pub(crate) resolvers: Arc<Semaphore>,
    pub(crate) phase: watch::Receiver<Phase>,
    open: AtomicUsize,
}

impl Shared {
    /// A new proxy's state under `policy`, in the phase `phase` follows.
    pub(crate) fn new(policy: EgressPolicy, phase: watch::Receiver<Phase>) -> Self {
        Shared {
            policy,
            log: Mutex::default(),
            resolvers: Arc::new(Semaphore::new(EGRESS_RESOLUTIONS_MAX)),
            phase,
            open: AtomicUsize::new(0),
        }
    }

    /// The command's connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

/// What the proxy has seen so far.
#[derive(Default)]
pub(crate) struct Log {
    pub(crate) records: Vec<EgressRecord>,
    pub(crate) totals: EgressTotals,
}

impl Log {
    /// Appends a record; its index, to update the byte counts later.
    fn record(&mut self, entry: EgressRecord) -> Option<usize> {
        if self.records.len() >= EGRESS_RECORDS_MAX {
            self.totals.records_dropped += 1;
            return None;
        }
        self.records.push(entry);
        Some(self.records.len() - 1)
    }

    /// An admitted connection's record.
    pub(crate) fn admitted(&mut self, entry: EgressRecord) -> Option<usize> {
        self.totals.admitted += 1;
        self.record(entry)
    }

    /// Counts a refusal and records it; one that names no target (over a cap, a bad or
    /// late head) only the first time its code is seen, so a flood cannot fill the list.
    pub(crate) fn refused(&mut self, mut entry: EgressRecord, error: &ProxyError) {
        let count = self
            .totals
            .refused
            .entry(error.code().to_owned())
            .or_default();
        *count += 1;
        if entry.host.is_empty() && *count > 1 {
            self.totals.records_dropped += 1;
            return;
        }
        entry.code = Some(error.code().to_owned());
        entry.message = Some(cut(error.to_string(), EGRESS_MESSAGE_BYTES_MAX));
        self.record(entry);
    }
}

/// `text` cut to at most `bytes_max` bytes (on a character boundary), marked when cut.
fn cut(mut text: String, bytes_max: usize) -> String {
    if text.len() > bytes_max {
        let mut end = bytes_max - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// One open connection's place under the command's and the process's caps, given back when
/// its task ends, however it ends.
pub(crate) struct Slot {
    shared: Arc<Shared>,
}

impl Slot {
    pub(crate) fn take(shared: &Arc<Shared>) -> Result<Slot, ProxyError> {
        let below = |max: usize| move |open: usize| (open < max).then_some(open + 1);
        let mine = shared.policy.connections_max;
        shared
            .open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, below(mine))
            .map_err(|_| ProxyError::ConnectionsMax { open: mine })?;
        let total = shared.policy.connections_total_max;
        if OPEN_TOTAL
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, below(total))
            .is_err()
        {
            shared.open.fetch_sub(1, Ordering::SeqCst);
            return Err(ProxyError::ConnectionsTotalMax { open: total });
        }
        Ok(Slot {
            shared: Arc::clone(shared),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        OPEN_TOTAL.fetch_sub(1, Ordering::SeqCst);
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short".into(), 512), "short");
        let long = "é".repeat(400);
        let kept = cut(long, 512);
        assert!(kept.len() <= 512 && kept.ends_with('…'), "{}", kept.len());
    }

    /// A refusal that names no target is recorded the first time its code is seen, and
    /// counted every time; past the record cap, attempts are counted only.
    #[test]
    fn refusals_are_recorded_once_per_code_when_anonymous_and_always_counted() {
        let mut log = Log::default();
        for _ in 0..3 {
            log.refused(EgressRecord::anonymous(), &ProxyError::HeadTimeout);
        }
        let mut named = EgressRecord::anonymous();
        named.host = "example.com".into();
        let refusal = ProxyError::Net(aido_net::NetError::HostDenied {
            host: "example.com".into(),
            port: 443,
        });
        for _ in 0..EGRESS_RECORDS_MAX {
            log.refused(named.clone(), &refusal);
        }
        assert_eq!(log.records.len(), EGRESS_RECORDS_MAX);
        assert_eq!(log.totals.refused["egress_head_timeout"], 3);
        assert_eq!(log.totals.refused["net_denied"], EGRESS_RECORDS_MAX as u64);
        assert_eq!(log.totals.records_dropped, 2 + 1);
    }
}
