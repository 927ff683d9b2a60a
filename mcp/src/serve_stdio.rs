//! `aido mcp`: one MCP connection over stdin/stdout (the framing and the era checks are
//! [`crate::stdio`]'s).

use std::sync::Arc;

use aido_actors::Runtime;
use rmcp::ServiceExt;

use crate::server::AidoServer;
use crate::versions::STDIO_PROTOCOL_VERSIONS;

/// Serve one MCP connection over stdin/stdout until the client closes it.
pub async fn serve_stdio(
    runtime: Arc<Runtime>,
    grant: Option<String>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let max = crate::stdio::request_bytes_max(runtime.policy().config().limits.argument_bytes_max);
    let server = AidoServer::new(runtime).with_grant(grant);
    let sessions = server.place.session.clone();
    let (transport, reader) = crate::stdio::start(
        crate::stdio::Stdin::open(),
        crate::stdio::Stdout::open(),
        sessions.clone(),
        max,
        STDIO_PROTOCOL_VERSIONS,
    );
    // The reader may sit in a blocking read of stdin; it has nothing left to do once the
    // session is over, however that came.
    let _reader = AbortOnDrop(reader);
    let service = match server.serve(transport).await {
        Ok(service) => service,
        // A client that goes away before initializing is not an error of aido's.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("the MCP client closed the connection before initializing");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    // A client closing stdin ends the session; so do SIGTERM and SIGINT, and the session's
    // last record says which.
    let reason = tokio::select! {
        quit = service.waiting() => format!("the client closed the connection ({quit:?})"),
        signal = shutdown_signal() => format!("aido received {signal}"),
    };
    tracing::info!(%reason, "session over");
    if let Some(session) = sessions.get() {
        session.close(&reason).await;
    }
    Ok(())
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Wait for SIGTERM or SIGINT; the name of the one that came (`aido serve` waits on it too).
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        // Without signal handlers, only the client can end the session.
        _ => std::future::pending().await,
    }
}
