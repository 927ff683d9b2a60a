//! The listener `aido serve` accepts on: at most [`Limits::connections_max`] connections at
//! once (one more is answered `503 serve_busy` and closed, so a flood of connections can
//! never take the file descriptors or memory of the runtime), and a connection that sends
//! nothing within [`Limits::first_byte`] of being accepted is closed (so idle sockets cannot
//! hold the places of clients that talk). Once a connection has spoken it may stay quiet as
//! long as it likes: an SSE stream's client only reads.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many connections, and how long one may stay silent at first.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub connections_max: usize,
    /// A new connection's first byte must come within this.
    pub first_byte: Duration,
}

/// What a connection over the cap is told before it is closed.
fn busy() -> Vec<u8> {
    let body = format!(
        "{{\"code\":\"{BUSY_CODE}\",\"message\":\"aido serve holds as many connections as it allows; retry\"}}"
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The code a connection over the cap gets (listed with the HTTP codes).
pub const BUSY_CODE: &str = "serve_busy";

/// A [`TcpListener`] with the [`Limits`].
pub struct Bounded {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    limits: Limits,
}

impl Bounded {
    pub fn new(inner: TcpListener, limits: Limits) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(limits.connections_max)),
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
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    let deadline = Box::pin(tokio::time::sleep(self.limits.first_byte));
                    return (
                        Counted {
                            tcp,
                            _permit: permit,
                            first_byte: Some(deadline),
                        },
                        addr,
                    );
                }
                Err(_) => {
                    tracing::warn!(%addr, max = self.limits.connections_max, "connection refused: serve_busy");
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(1), async {
                            let _ = tcp.write_all(&busy()).await;
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

/// An accepted connection holding its place under the cap until it is dropped.
pub struct Counted {
    tcp: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Until the first byte is read: when the client must have spoken.
    first_byte: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.first_byte = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                if let Some(deadline) = this.first_byte.as_mut()
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing after connecting",
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
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
