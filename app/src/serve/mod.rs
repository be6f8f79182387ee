//! The accept loop: hyper's HTTP/1 server under the router, configured as a service facing a
//! flash-sale crowd needs — a deadline for a request's headers and one for its body
//! ([`deadline`]), so a client that connects and sends nothing, or a byte a minute, cannot hold
//! a connection and its memory for as long as it likes; `TCP_NODELAY`; each request told its
//! peer's address (for per-address rate limits); and a graceful shutdown that lets requests in
//! flight finish within the grace period. (`axum::serve` gives hyper no timer, so a header
//! deadline cannot be set through it.)

pub mod deadline;

use std::future::Future;
use std::net::SocketAddr;
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

/// Serves `router` on `listener` until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    router: Router,
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
        let _ = stream.set_nodelay(true);
        let router = router.clone();
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
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
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
