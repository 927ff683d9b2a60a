//! The outermost request layer: it moves the connection through its [`Phase`]s (head read,
//! whole request read, answered) so the listener knows which places can be taken, holds the
//! body to the request's deadline, and answers a body that could not be read in time (`408
//! request_timeout`) or at all (`400 request_body_invalid`: malformed chunking, a client
//! that went away) with a coded error, whoever was reading it.
//!
//! [`Phase`]: crate::listener::Phase

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

use crate::HttpError;
use crate::listener::{Conn, Connection};

/// Why a request's body could not be read.
#[derive(Debug)]
enum BodyFailure {
    /// It was still arriving at the request's deadline.
    TimedOut,
    /// It could not be read (malformed chunking, the connection broke).
    Unreadable(String),
}

/// Phases, the body's deadline and its failures, for every request.
pub(crate) async fn phases(request: Request, next: Next) -> Response {
    let Some(axum::extract::ConnectInfo(Connection(conn))) = request
        .extensions()
        .get::<axum::extract::ConnectInfo<Connection>>()
        .cloned()
    else {
        return next.run(request).await;
    };
    conn.head_read();
    if request.body().is_end_stream() {
        conn.request_read();
    }
    let failure = Arc::new(OnceLock::new());
    let deadline = conn.body_deadline();
    let request = request.map(|body| {
        Body::new(Arriving {
            inner: body,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            conn: conn.clone(),
            failure: failure.clone(),
        })
    });
    let mut response = next.run(request).await;
    if let Some(failure) = failure.get() {
        let error = match failure {
            BodyFailure::TimedOut => HttpError::RequestTimeout {
                ms: u64::try_from(conn.limits().request.as_millis()).unwrap_or(u64::MAX),
            },
            BodyFailure::Unreadable(why) => HttpError::BodyInvalid(why.clone()),
        };
        tracing::warn!(code = error.code(), %error, "a request body was not read whole");
        response = error.into_response();
        // The rest of the body cannot be told from a next request: the connection ends.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    hold_while_sent(response, Answered(conn))
}

/// `response` with `held` dropped only once its body is (sent whole, or dropped with the
/// connection): a guard that must last as long as the answer does.
pub(crate) fn hold_while_sent<T: Send + 'static>(response: Response, held: T) -> Response {
    response.map(|body| {
        Body::new(Answer {
            inner: body,
            _held: Box::new(held),
        })
    })
}

/// A request body held to the request's deadline.
struct Arriving {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    conn: Arc<Conn>,
    failure: Arc<OnceLock<BodyFailure>>,
}

impl HttpBody for Arriving {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.conn.request_read();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    this.conn.request_read();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                let _ = this.failure.set(BodyFailure::Unreadable(error.to_string()));
                Poll::Ready(Some(Err(error)))
            }
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    let _ = this.failure.set(BodyFailure::TimedOut);
                    return Poll::Ready(Some(Err(axum::Error::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the request body did not arrive in time",
                    )))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Marks the answer over when dropped: sent whole, or dropped with the connection.
struct Answered(Arc<Conn>);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0.answered();
    }
}

/// An answer's body, carrying what must last as long as it ([`hold_while_sent`]).
struct Answer {
    inner: Body,
    _held: Box<dyn Send>,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
