//! The accept loop: hyper's HTTP/1 server under the router, configured as a service facing a
//! flash-sale crowd needs — a deadline for a request's headers and one for its body
//! ([`deadline`]), so a client that connects and sends nothing, or a byte a minute, cannot hold
//! a connection and its memory for as long as it likes; a bound on the connections held at
//! once, the last few kept for the operators ([`crate::overload::connections`]); `TCP_NODELAY`;
//! each request told its peer's address (for per-address rate limits); and a graceful shutdown
//! that lets requests in flight finish within the grace period. (`axum::serve` gives hyper no
//! timer, so a header deadline cannot be set through it.) The metrics listener
//! (`--metrics-listen`) is served by the same loop, with a bound of its own ([`Doors::alone`]).

pub mod deadline;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;

pub use deadline::{BodyTimedOut, Deadline};

use crate::overload::Connections;

/// How the server treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a client may take to send a request's headers, on a new connection or between
    /// two requests of a kept-alive one.
    pub header_read: Duration,
    /// How long a client may take to send a request's body once its headers came.
    pub body_read: Duration,
    /// How long requests in flight may take to finish once shutdown begins.
    pub grace: Duration,
}

/// Connections the metrics listener (`--metrics-listen`) holds at once: a scraper or two and
/// an operator. A bound of its own, apart from the public listener's, so that buyers holding
/// every public connection never shut a scrape out, and the listener never holds files the
/// public one counted on: its few fit in the files kept besides (`OTHER_FILES` of
/// [`crate::overload::connections`]).
pub const METRICS_CONNECTIONS: u32 = 16;

/// What the server serves, and to how many connections at once.
pub struct Doors {
    /// Every route: what a connection within the buyers' share is served.
    pub all: Router,
    /// The operators' routes: what a connection past the buyers' share is served.
    pub operators: Router,
    pub connections: Arc<Connections>,
}

impl Doors {
    /// `router` to every connection, at most [`METRICS_CONNECTIONS`] at once: a listener the
    /// operators have to themselves.
    pub fn alone(router: Router) -> Doors {
        Doors {
            all: router.clone(),
            operators: router,
            connections: Arc::new(Connections::new(METRICS_CONNECTIONS, 0)),
        }
    }
}

/// Serves `doors` on `listener` until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    doors: Doors,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // keep serving the others.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Every door taken: closed at once, so that it waits in no queue a health check would
        // wait behind.
        let Some(held) = doors.connections.open() else {
            tracing::debug!(%peer, "connection refused: every door is taken");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = match held.operators_only() {
            true => doors.operators.clone(),
            false => doors.all.clone(),
        };
        let body_read = limits.body_read;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut request = request.map(|body| Deadline::new(body, body_read));
            request
                .extensions_mut()
                .insert(ConnectInfo::<SocketAddr>(peer));
            router.clone().oneshot(request)
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read)
            // An operator's connection serves one request: the next operator needs it.
            .keep_alive(!held.operators_only())
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _held = held;
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.grace) => {
            tracing::warn!(grace = ?limits.grace, "grace period over; dropping the remaining connections");
        }
    }
    Ok(())
}
