//! One connection from the command: its head within one deadline, its judgement, then the
//! relay, as a task on the egress runtime. However it ends (answered, relayed, cut by the
//! command's end), [`Attempt`]'s drop leaves its record and gives its slot back.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::request::{parse_head, read_head};
use super::{EGRESS_HEAD_TIMEOUT_MS, EgressRecord, ProxyError, RELAY_BUFFER_BYTES, judge};
use crate::shared::{Phase, Shared, Slot, reached};

/// How long a refusal's answer may take to write (a client that does not read cannot hold
/// the task).
const ANSWER_TIMEOUT_MS: u64 = 1_000;

/// Serves one connection until it ends or the proxy cuts it.
pub(super) async fn serve(client: TcpStream, slot: Slot) {
    let shared = Arc::clone(slot.shared());
    let mut phase = shared.phase.clone();
    let mut attempt = Attempt {
        shared,
        entry: EgressRecord::anonymous(),
        stage: Stage::Head,
        up: 0,
        down: 0,
        _slot: slot,
    };
    tokio::select! {
        () = attempt.run(client) => {}
        () = reached(&mut phase, Phase::Cut) => {}
    }
}

/// How far a connection got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Reading its head.
    Head,
    /// Its target is known: being judged, resolved or connected.
    Judging,
    /// Admitted and relaying; its record's index (none past the record cap).
    Relaying { index: Option<usize> },
    /// Answered with a refusal and recorded.
    Settled,
}

struct Attempt {
    shared: Arc<Shared>,
    entry: EgressRecord,
    stage: Stage,
    up: u64,
    down: u64,
    /// Dropped after [`Attempt`]'s own drop has recorded it.
    _slot: Slot,
}

impl Attempt {
    async fn run(&mut self, mut client: TcpStream) {
        // One deadline for the whole head, from the accept: a client trickling a byte at a
        // time does not extend it.
        let head = tokio::time::timeout(
            Duration::from_millis(EGRESS_HEAD_TIMEOUT_MS),
            read_head(&mut client),
        )
        .await
        .unwrap_or(Err(ProxyError::HeadTimeout));
        let parsed = head.and_then(|(head, rest)| Ok((parse_head(&head)?, rest)));
        let (request, rest) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(client, error).await,
        };
        self.entry.method = request.method.clone();
        self.entry.host = request.host.clone();
        self.entry.port = request.port;
        self.stage = Stage::Judging;
        let policy = &self.shared.policy;
        let judged = judge::admit(
            &policy.net,
            policy.grant.as_ref(),
            &self.shared.resolvers,
            &request.host,
            request.port,
        );
        let addresses = match judged.await {
            Ok(addresses) => addresses,
            Err(error) => return self.refuse(client, error).await,
        };
        let (address, upstream) = match judge::connect(&request.host, &addresses).await {
            Ok(connected) => connected,
            Err(error) => return self.refuse(client, error).await,
        };
        self.entry.address = Some(address.to_string());
        let index = match self.shared.log.lock() {
            Ok(mut log) => log.admitted(self.entry.clone()),
            Err(_) => None,
        };
        self.stage = Stage::Relaying { index };
        self.relay(client, upstream, request.forward, rest).await;
    }

    /// Records the refusal, then answers it (within [`ANSWER_TIMEOUT_MS`]) and closes.
    async fn refuse(&mut self, mut client: TcpStream, error: ProxyError) {
        self.stage = Stage::Settled;
        if let Ok(mut log) = self.shared.log.lock() {
            log.refused(self.entry.clone(), &error);
        }
        let answer = error.answer();
        let _ = tokio::time::timeout(
            Duration::from_millis(ANSWER_TIMEOUT_MS),
            client.write_all(answer.as_bytes()),
        )
        .await;
        let _ = client.shutdown().await;
    }

    /// The greeting (`CONNECT`) or the rewritten head (plain HTTP), what followed the head,
    /// then both directions until each ends, counting the bytes as they go.
    async fn relay(
        &mut self,
        mut client: TcpStream,
        mut upstream: TcpStream,
        forward: Option<Vec<u8>>,
        rest: Vec<u8>,
    ) {
        let first = match forward {
            None => {
                let greeting = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                if greeting.is_err() {
                    return;
                }
                Vec::new()
            }
            Some(head) => head,
        };
        if upstream.write_all(&first).await.is_err() || upstream.write_all(&rest).await.is_err() {
            return;
        }
        self.up += (first.len() + rest.len()) as u64;
        let (mut client_read, mut client_write) = client.split();
        let (mut upstream_read, mut upstream_write) = upstream.split();
        let Attempt { up, down, .. } = self;
        tokio::join!(
            pump(&mut client_read, &mut upstream_write, up),
            pump(&mut upstream_read, &mut client_write, down),
        );
    }
}

impl Drop for Attempt {
    /// What the connection leaves in the log, however it ended: its byte counts, or, cut by
    /// the command's end before its judgement, a refusal coded `egress_command_ended`.
    fn drop(&mut self) {
        let Ok(mut log) = self.shared.log.lock() else {
            return;
        };
        match self.stage {
            Stage::Settled | Stage::Relaying { index: None } => {}
            Stage::Relaying { index: Some(index) } => {
                if let Some(entry) = log.records.get_mut(index) {
                    entry.bytes_up = self.up;
                    entry.bytes_down = self.down;
                }
            }
            Stage::Head | Stage::Judging => {
                log.refused(self.entry.clone(), &ProxyError::CommandEnded);
            }
        }
    }
}

/// Copies until `from` ends or either side fails, then ends `to`'s writing; counts in `total`
/// as it goes, so a cut relay still has its counts.
async fn pump<R, W>(from: &mut R, to: &mut W, total: &mut u64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; RELAY_BUFFER_BYTES];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if to.write_all(&buffer[..read]).await.is_err() {
                    break;
                }
                *total += read as u64;
            }
        }
    }
    let _ = to.shutdown().await;
}
