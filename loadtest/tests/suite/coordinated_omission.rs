//! The open loop sees a stalled server's queue; the closed loop hides it (same client, same
//! requests, same server: the loop is the only difference).

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use loadtest::drive::load::{Window, closed_loop, open_loop};
use testkit::Api;
use tokio::time::Instant;

/// Every second, the server stops answering for this long (a GC pause, a stalled disk).
const STALL: Duration = Duration::from_millis(400);
const PERIOD: Duration = Duration::from_millis(1000);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Answers 204, except during the stall part of each period, when it holds the request until
/// the stall ends.
async fn stalling() -> StatusCode {
    let phase = epoch().elapsed().as_nanos() % PERIOD.as_nanos();
    let stall_from = (PERIOD - STALL).as_nanos();
    if phase >= stall_from {
        let left = PERIOD.as_nanos() - phase;
        tokio::time::sleep(Duration::from_nanos(left as u64)).await;
    }
    StatusCode::NO_CONTENT
}

async fn serve() -> String {
    epoch();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new().route("/api/noop", get(stalling));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test(flavor = "multi_thread")]
async fn open_loop_latency_exceeds_closed_loop_latency_when_the_server_stalls() {
    let base = serve().await;
    let window = Window::from_secs(0.2, 3.0);
    // Both loops send the same request through the same client: only the loop differs.
    let api = Api::new(vec![base], None).unwrap();
    let noop = move |i: u64| {
        let api = api.clone();
        async move { api.noop(i as usize).await }
    };
    let closed = closed_loop(4, window, noop.clone()).await;
    let open = open_loop(4, 200.0, window, noop).await;

    for result in [&closed, &open] {
        assert!(result.outcomes.served > 0, "{}", result.outcomes);
        assert_eq!(result.outcomes.served, result.outcomes.total());
    }
    assert!(
        open.latency.p99_us > closed.latency.p99_us,
        "open p99 {} µs should exceed closed p99 {} µs",
        open.latency.p99_us,
        closed.latency.p99_us
    );
    assert!(
        open.latency.p90_us > closed.latency.p90_us,
        "open p90 {} µs should exceed closed p90 {} µs",
        open.latency.p90_us,
        closed.latency.p90_us
    );
}
