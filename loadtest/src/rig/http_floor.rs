//! HTTP's floor: a server with nothing of the service behind its routes, for the baselines
//! `http-floor-noop` and `http-floor-refusal`.
//!
//! It runs the service's own accept loop ([`app::serve::serve`]: hyper's HTTP/1 server, its
//! header deadline, `TCP_NODELAY`) in a process of its own, as an app instance runs, and
//! answers two requests: `GET /api/noop` with `204`, as the service does, and a purchase —
//! `POST /api/products/{id}/orders` with an order's body — with the service's own `409
//! sold_out`, having read the body and nothing else (no parse, no lookup, no count). What a
//! refusal costs there beside the no-op is HTTP's own difference between the two requests —
//! a body to read, a path parameter to route, an answer with a body — which no refusal of the
//! service's can go below.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use app::error::ApiError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{get, post};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The line a floor server prints once it listens, followed by its address.
const LISTENING: &str = "http-floor listening on ";
/// How long a floor server may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The floor's routes.
pub fn router() -> Router {
    Router::new()
        .route("/api/noop", get(noop))
        .route("/api/products/{id}/orders", post(refuse))
}

async fn noop() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// A purchase refused as the service refuses one of a sold-out product, its body read and
/// left unread beyond that.
async fn refuse(_product: Path<u64>, _order: Bytes) -> ApiError {
    ApiError::SoldOut
}

/// Serves the floor on `listen` (port 0: any free port) until the process is killed; prints
/// [`LISTENING`] and the address on standard output once it listens.
pub async fn serve(listen: SocketAddr) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!("{LISTENING}{}", listener.local_addr()?);
    let limits = app::serve::Limits {
        header_read: Duration::from_secs(10),
        grace: Duration::from_secs(1),
    };
    app::serve::serve(listener, router(), limits, std::future::pending()).await?;
    Ok(())
}

/// Floor servers, one process each, killed when this is dropped.
pub struct Floor {
    _children: Vec<Child>,
    bases: Vec<String>,
}

impl Floor {
    /// Starts `instances` floor servers from `binary` (`seckill-bench`), each on a free port.
    pub async fn start(binary: &std::path::Path, instances: usize) -> Result<Floor> {
        let mut children = Vec::new();
        let mut bases = Vec::new();
        for _ in 0..instances {
            let command = sandbox::at_server_priority(std::process::Command::new(binary));
            let mut child = Command::from(command)
                .args(["http-floor", "--listen", "127.0.0.1:0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {} http-floor", binary.display()))?;
            let stdout = child.stdout.take().context("the floor server's output")?;
            let address = tokio::time::timeout(START_TIMEOUT, listening(stdout))
                .await
                .context("the floor server did not say where it listens")??;
            bases.push(format!("http://{address}"));
            children.push(child);
        }
        Ok(Floor {
            _children: children,
            bases,
        })
    }

    /// The servers' base URLs.
    pub fn bases(&self) -> Vec<String> {
        self.bases.clone()
    }
}

/// The address a floor server prints once it listens.
async fn listening(stdout: tokio::process::ChildStdout) -> Result<String> {
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some(address) = line.strip_prefix(LISTENING) {
            return Ok(address.trim().to_string());
        }
    }
    bail!("the floor server ended before it listened")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_floor_refuses_a_purchase_with_the_services_own_sold_out_answer() {
        let request = Request::post("/api/products/7/orders")
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"user_id":"u","quantity":1,"request_id":"r"}"#,
            ))
            .unwrap();
        let answer = router().oneshot(request).await.unwrap();
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 16)
            .await
            .unwrap();
        let refusal: app::api::ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(refusal.error, app::api::ErrorCode::SoldOut);
        let noop = Request::get("/api/noop").body(Body::empty()).unwrap();
        assert_eq!(
            router().oneshot(noop).await.unwrap().status(),
            StatusCode::NO_CONTENT
        );
    }
}
