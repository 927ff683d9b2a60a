//! The listener `aido serve` accepts on, and what it holds against clients that hold places
//! without finishing their requests.
//!
//! # Places
//!
//! At most [`Limits::connections_max`] connections are held at once, and at most
//! [`Limits::connections_per_peer_max`] from one peer address. Each connection is in one
//! [`Phase`]: a place that is *answering* (its whole request arrived and the answer, an SSE
//! stream included, is being sent) is never taken away; every other place (connected and
//! silent, a request head or body still arriving, idle between requests) can be. When a new
//! connection finds its peer's share or the whole cap full, a place is closed to make room
//! (within the peer's own connections for its share, among all for the cap): a request not
//! sent whole before an idle keep-alive connection, and the longest waiting first. Only when every place is answering is the new connection refused, with
//! `503 serve_peer_busy` or `503 serve_busy`. So a flood of clients that trickle their
//! requests takes only places from itself: a client that sends its request whole is the
//! newest place while it sends, and is answering once it has.
//!
//! # Deadlines
//!
//! - A new connection must send its first byte within [`Limits::first_byte`].
//! - A request must arrive whole, head and body, within [`Limits::request`] of its first
//!   byte: a head still arriving then closes the connection; a body still arriving is
//!   answered `408 request_timeout` (by the server's request layer, [`Conn::body_deadline`])
//!   and the connection closed.
//! - An answer the client does not read for [`Limits::write_stall`] closes the connection, so
//!   a client that asks and never reads cannot keep an answering place forever either.
//!
//! Once a request is in, its answer may take as long as it takes: an SSE stream's client
//! only reads.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How many connections, and how long each phase of a request may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections held at once.
    pub connections_max: usize,
    /// Connections held at once from one peer address.
    pub connections_per_peer_max: usize,
    /// A new connection's first byte must come within this.
    pub first_byte: Duration,
    /// A request, head and body, must arrive within this of its first byte.
    pub request: Duration,
    /// An answer the client reads nothing of for this long closes the connection.
    pub write_stall: Duration,
}

impl Limits {
    /// `aido serve`'s: 1,024 connections, 256 from one peer, the first byte within 10 s, a
    /// whole request within 30 s, an answer unread for 30 s.
    pub const DEFAULT: Self = Self {
        connections_max: 1024,
        connections_per_peer_max: 256,
        first_byte: Duration::from_secs(10),
        request: Duration::from_secs(30),
        write_stall: Duration::from_secs(30),
    };
}

/// How long past the request deadline a body still arriving has before the connection is
/// closed under it: the request layer answers `408 request_timeout` at the deadline itself.
const BODY_GRACE: Duration = Duration::from_secs(2);

/// The code a connection over the cap gets (listed with the HTTP codes).
pub const BUSY_CODE: &str = "serve_busy";

/// The code a connection over its peer's share gets (listed with the HTTP codes).
pub const PEER_BUSY_CODE: &str = "serve_peer_busy";

/// Why a new connection got no place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Every place is answering (or too many are still closing).
    Busy,
    /// Every place of this peer is answering.
    PeerBusy,
}

impl Refusal {
    /// What the connection is told before it is closed: 503 with a coded JSON body.
    fn answer(self, limits: &Limits) -> Vec<u8> {
        let (code, message) = match self {
            Self::Busy => (
                BUSY_CODE,
                format!(
                    "aido serve holds as many connections as it allows ({}), every one answering; retry",
                    limits.connections_max
                ),
            ),
            Self::PeerBusy => (
                PEER_BUSY_CODE,
                format!(
                    "this address holds as many connections as one peer may ({}), every one answering; retry",
                    limits.connections_per_peer_max
                ),
            ),
        };
        let body = serde_json::json!({"code": code, "message": message}).to_string();
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// Where a connection is in its exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; nothing read yet.
    Connected,
    /// A request's head is arriving.
    Head,
    /// The head is read; the body is arriving.
    Body,
    /// The whole request is in and is being answered. Never closed to make room.
    Answering,
    /// Between requests (keep-alive).
    Idle,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// When the phase began; for `Head` and `Body`, the request's first byte.
    since: Instant,
    /// The first byte of a next request read while answering (a pipelined head).
    early: Option<Instant>,
}

/// One held connection: its peer, its phase, and the switch that closes it. The server's
/// request layer finds it in each request's extensions ([`Connection`]) and moves its phase.
#[derive(Debug)]
pub struct Conn {
    id: u64,
    peer: IpAddr,
    limits: Limits,
    state: Mutex<State>,
    close: CancellationToken,
}

impl Conn {
    /// The address the connection came from.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The limits it is held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The phase it is in.
    pub fn phase(&self) -> Phase {
        self.state().phase
    }

    /// Bytes were read from the client.
    fn read_bytes(&self, now: Instant) {
        let mut state = self.state();
        match state.phase {
            Phase::Connected | Phase::Idle => {
                state.phase = Phase::Head;
                state.since = now;
            }
            Phase::Answering => {
                state.early.get_or_insert(now);
            }
            Phase::Head | Phase::Body => {}
        }
    }

    /// The request layer has the head: the body (if any) arrives next.
    pub fn head_read(&self) {
        let mut state = self.state();
        match state.phase {
            Phase::Head => state.phase = Phase::Body,
            // A head read while the last answer was still going out (pipelined): its first
            // byte is when it started.
            Phase::Answering | Phase::Idle | Phase::Connected => {
                state.since = state.early.take().unwrap_or_else(Instant::now);
                state.phase = Phase::Body;
            }
            Phase::Body => {}
        }
    }

    /// The whole request is in: it is answered from now on.
    pub fn request_read(&self) {
        let mut state = self.state();
        state.phase = Phase::Answering;
    }

    /// The answer is over (sent, or dropped with the connection).
    pub fn answered(&self) {
        let mut state = self.state();
        match state.early.take() {
            Some(first) => {
                state.phase = Phase::Head;
                state.since = first;
            }
            None => {
                state.phase = Phase::Idle;
                state.since = Instant::now();
            }
        }
    }

    /// When the request now arriving must be in whole.
    pub fn body_deadline(&self) -> Instant {
        self.state().since + self.limits.request
    }

    /// When the connection is closed if its phase has not moved on by then.
    fn deadline(&self) -> Option<Instant> {
        let state = self.state();
        match state.phase {
            Phase::Connected => Some(state.since + self.limits.first_byte),
            Phase::Head => Some(state.since + self.limits.request),
            Phase::Body => Some(state.since + self.limits.request + BODY_GRACE),
            Phase::Answering | Phase::Idle => None,
        }
    }

    /// Which of its places goes first when room is made: a request not sent whole (or not
    /// begun) before an idle keep-alive, each the longest waiting first; `None` while
    /// answering.
    fn give_up_order(&self) -> Option<(bool, Instant)> {
        let state = self.state();
        match state.phase {
            Phase::Connected | Phase::Head | Phase::Body => Some((false, state.since)),
            Phase::Idle => Some((true, state.since)),
            Phase::Answering => None,
        }
    }
}

/// A request's connection, in its extensions (axum's `ConnectInfo`).
#[derive(Clone, Debug)]
pub struct Connection(pub Arc<Conn>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Bounded>>
    for Connection
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, Bounded>) -> Self {
        Self(stream.io().conn.clone())
    }
}

/// The places held: every live connection by id, how many per peer, and how many were told
/// to close and have not yet.
#[derive(Debug, Default)]
struct Places {
    live: HashMap<u64, Arc<Conn>>,
    per_peer: HashMap<IpAddr, usize>,
    closing: usize,
    next_id: u64,
}

impl Places {
    /// A place for a new connection from `peer`, made by closing the longest-waiting place
    /// that is not answering (the peer's own first) when its share or the cap is full.
    fn admit(&mut self, peer: IpAddr, limits: Limits) -> Result<Arc<Conn>, Refusal> {
        // Connections told to close that have not yet count too, so descriptors stay bounded
        // (at most twice the cap) even if some are slow to go.
        if self.closing >= limits.connections_max {
            return Err(Refusal::Busy);
        }
        if self.per_peer.get(&peer).copied().unwrap_or(0) >= limits.connections_per_peer_max {
            let victim = self.longest_waiting(Some(peer)).ok_or(Refusal::PeerBusy)?;
            self.close(victim);
        }
        if self.live.len() >= limits.connections_max {
            let victim = self.longest_waiting(None).ok_or(Refusal::Busy)?;
            self.close(victim);
        }
        self.next_id += 1;
        let conn = Arc::new(Conn {
            id: self.next_id,
            peer,
            limits,
            state: Mutex::new(State {
                phase: Phase::Connected,
                since: Instant::now(),
                early: None,
            }),
            close: CancellationToken::new(),
        });
        self.live.insert(conn.id, conn.clone());
        *self.per_peer.entry(peer).or_insert(0) += 1;
        assert!(self.live.len() <= limits.connections_max);
        assert!(self.per_peer.get(&peer).copied().unwrap_or(0) <= limits.connections_per_peer_max);
        Ok(conn)
    }

    /// The id of the place (of `peer`, or of anyone) to give up first: an unfinished
    /// request before an idle connection, the longest waiting first; never one answering.
    fn longest_waiting(&self, peer: Option<IpAddr>) -> Option<u64> {
        self.live
            .values()
            .filter(|c| peer.is_none_or(|p| c.peer == p))
            .filter_map(|c| Some((c.give_up_order()?, c.id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Give up `id`'s place now and tell its connection to close.
    fn close(&mut self, id: u64) {
        if let Some(conn) = self.live.remove(&id) {
            self.forget_peer(conn.peer);
            self.closing += 1;
            tracing::debug!(peer = %conn.peer, phase = ?conn.phase(), "connection closed to make room");
            conn.close.cancel();
        }
    }

    fn forget_peer(&mut self, peer: IpAddr) {
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
    }

    /// A connection ended: its place (or its count among those closing) is free.
    fn release(&mut self, conn: &Conn) {
        if self.live.remove(&conn.id).is_some() {
            self.forget_peer(conn.peer);
        } else {
            self.closing -= 1;
        }
    }
}

/// A [`TcpListener`] with the [`Limits`].
pub struct Bounded {
    inner: TcpListener,
    places: Arc<Mutex<Places>>,
    limits: Limits,
}

impl Bounded {
    pub fn new(inner: TcpListener, limits: Limits) -> Self {
        Self {
            inner,
            places: Arc::new(Mutex::new(Places::default())),
            limits,
        }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Counted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (mut tcp, addr) = match self.inner.accept().await {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Err(e) = tcp.set_nodelay(true) {
                // Without TCP_NODELAY an SSE answer's last small write waits for the
                // client's delayed ACK: ~40 ms per request.
                tracing::debug!(error = %e, "TCP_NODELAY not set");
            }
            let peer = addr.ip().to_canonical();
            let admitted = self
                .places
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .admit(peer, self.limits);
            match admitted {
                Ok(conn) => {
                    let closed = Box::pin(conn.close.clone().cancelled_owned());
                    return (
                        Counted {
                            tcp,
                            places: self.places.clone(),
                            deadline: Box::pin(tokio::time::sleep_until(
                                conn.deadline().unwrap_or_else(Instant::now),
                            )),
                            conn,
                            closed,
                            stall: Box::pin(tokio::time::sleep(self.limits.write_stall)),
                            stalling: false,
                        },
                        addr,
                    );
                }
                Err(refusal) => {
                    tracing::warn!(%addr, ?refusal, "connection refused");
                    let answer = refusal.answer(&self.limits);
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(1), async {
                            let _ = tcp.write_all(&answer).await;
                            let _ = tcp.shutdown().await;
                        })
                        .await;
                    });
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// An accepted connection holding its place until it is dropped.
pub struct Counted {
    tcp: TcpStream,
    conn: Arc<Conn>,
    places: Arc<Mutex<Places>>,
    /// Ready once its place was given to another connection.
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The deadline of its phase (moved as the phase moves).
    deadline: Pin<Box<Sleep>>,
    /// When a write that cannot proceed gives up, armed while writes wait.
    stall: Pin<Box<Sleep>>,
    stalling: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.places
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(&self.conn);
    }
}

fn made_room() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed to make room: the connection had not sent its request whole",
    )
}

impl Counted {
    /// Whether the place was taken away or the phase's deadline passed (registering the
    /// waker on both).
    fn poll_ended(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.closed.as_mut().poll(cx).is_ready() {
            return Some(made_room());
        }
        let deadline = self.conn.deadline()?;
        if self.deadline.deadline() != deadline {
            self.deadline.as_mut().reset(deadline);
        }
        self.deadline.as_mut().poll(cx).is_ready().then(|| {
            let why = match self.conn.phase() {
                Phase::Connected => "the client sent nothing after connecting",
                _ => "the client did not send its request whole in time",
            };
            io::Error::new(io::ErrorKind::TimedOut, why)
        })
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.conn.close.is_cancelled() {
            return Poll::Ready(Err(made_room()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.conn.read_bytes(Instant::now());
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.poll_ended(cx) {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending,
            },
        }
    }
}

impl Counted {
    /// A write's result: progress disarms the stall deadline, waiting arms it.
    fn wrote<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(result) => {
                self.stalling = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                if self.closed.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(made_room()));
                }
                if !self.stalling {
                    self.stalling = true;
                    let until = Instant::now() + self.conn.limits.write_stall;
                    self.stall.as_mut().reset(until);
                }
                if self.stall.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing of its answer in time",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.wrote(cx, result)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.tcp).poll_flush(cx);
        this.wrote(cx, result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.wrote(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_peer: usize) -> Limits {
        Limits {
            connections_max: max,
            connections_per_peer_max: per_peer,
            ..Limits::DEFAULT
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// The places taken: the oldest waiting goes first, the peer's own first, and answering
    /// places are never taken.
    #[tokio::test(start_paused = true)]
    async fn room_is_made_from_the_longest_waiting_place_that_is_not_answering() {
        let limits = limits(4, 3);
        let mut places = Places::default();
        let mut a = Vec::new();
        for _ in 0..3 {
            tokio::time::advance(Duration::from_millis(10)).await;
            a.push(places.admit(ip(2), limits).unwrap());
        }
        tokio::time::advance(Duration::from_millis(10)).await;
        let b = places.admit(ip(3), limits).unwrap();
        // The peer's share is full: its longest waiting place goes, not another peer's.
        a[0].read_bytes(Instant::now());
        a[0].head_read();
        a[0].request_read();
        let a4 = places.admit(ip(2), limits).unwrap();
        assert!(
            a[1].close.is_cancelled(),
            "the peer's longest waiting place"
        );
        assert!(!a[0].close.is_cancelled(), "an answering place is kept");
        assert!(!b.close.is_cancelled());
        assert_eq!(places.per_peer[&ip(2)], 3);
        // The cap is full: the longest waiting of all goes.
        let c = places.admit(ip(4), limits).unwrap();
        assert!(a[2].close.is_cancelled());
        assert_eq!(places.live.len(), 4);
        // Every place answering: refused.
        for conn in [&a4, &b, &c] {
            conn.head_read();
            conn.request_read();
        }
        assert_eq!(places.admit(ip(5), limits).unwrap_err(), Refusal::Busy);
        assert_eq!(places.admit(ip(2), limits).unwrap_err(), Refusal::Busy);
        // The closed ones are counted until they go; then their count is free.
        assert_eq!(places.closing, 2);
        places.release(&a[1]);
        places.release(&a[2]);
        assert_eq!(places.closing, 0);
        // An answered place waits again, and can be taken.
        b.answered();
        let d = places.admit(ip(5), limits).unwrap();
        assert!(b.close.is_cancelled());
        assert_eq!(d.phase(), Phase::Connected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_whose_places_all_answer_is_refused_with_its_own_code() {
        let limits = limits(8, 2);
        let mut places = Places::default();
        for _ in 0..2 {
            let conn = places.admit(ip(2), limits).unwrap();
            conn.head_read();
            conn.request_read();
        }
        assert_eq!(places.admit(ip(2), limits).unwrap_err(), Refusal::PeerBusy);
        assert!(places.admit(ip(3), limits).is_ok());
        let answer = String::from_utf8(Refusal::PeerBusy.answer(&limits)).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("\"code\":\"serve_peer_busy\""), "{answer}");
    }

    /// Each phase's deadline: the first byte, the whole request (head and body, from its
    /// first byte), none while answering or idle; a head read while answering dates from its
    /// first byte.
    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_the_phases() {
        let limits = Limits::DEFAULT;
        let mut places = Places::default();
        let conn = places.admit(ip(2), limits).unwrap();
        let start = Instant::now();
        assert_eq!(conn.deadline(), Some(start + limits.first_byte));
        tokio::time::advance(Duration::from_secs(1)).await;
        let first = Instant::now();
        conn.read_bytes(first);
        assert_eq!(conn.deadline(), Some(first + limits.request));
        tokio::time::advance(Duration::from_secs(1)).await;
        conn.read_bytes(Instant::now());
        conn.head_read();
        assert_eq!(conn.body_deadline(), first + limits.request);
        assert_eq!(conn.deadline(), Some(first + limits.request + BODY_GRACE));
        conn.request_read();
        assert_eq!(conn.deadline(), None);
        let early = Instant::now();
        conn.read_bytes(early);
        tokio::time::advance(Duration::from_secs(1)).await;
        conn.answered();
        assert_eq!(conn.phase(), Phase::Head);
        assert_eq!(conn.deadline(), Some(early + limits.request));
        conn.head_read();
        conn.request_read();
        conn.answered();
        assert_eq!((conn.phase(), conn.deadline()), (Phase::Idle, None));
    }
}
