//! A slow client holds nothing for long. A body that stops coming is answered `408` and its
//! connection closed at the body deadline; past its connections the service closes new ones
//! at once, and keeps a few for its operators, so that a health check, a scrape and the admin
//! routes get in while buyers' connections are full.

use crate::common;

use std::net::SocketAddr;

use common::served::{PATIENCE, Served};
use common::{drop_database, fresh_database_url, test_config};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection that sends a request's headers, announcing a body of 100 bytes, and 10 of them.
async fn slow_body(address: SocketAddr, method: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n{{\"user_id\""
    );
    // A connection closed at once may refuse the write: that is its answer too.
    let _ = stream.write_all(request.as_bytes()).await;
    stream
}

/// What the server sent on `stream` until it closed it; `None` if it kept it open for
/// [`PATIENCE`].
async fn until_closed(mut stream: TcpStream) -> Option<String> {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer)).await;
    read.is_ok()
        .then(|| String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_body_that_stops_coming_is_answered_408_and_its_connection_closed() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.body_read_timeout_ms = 300;
    let served = Served::start(config).await;
    let mut slow = Vec::new();
    for i in 0..10 {
        slow.push(slow_body(served.address, "POST", &format!("/api/products/{i}/orders")).await);
        slow.push(slow_body(served.address, "PUT", &format!("/api/products/{i}")).await);
    }
    for stream in slow {
        let answer = until_closed(stream)
            .await
            .expect("a slow body's connection held past a minute");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"request_timeout\""), "{answer}");
    }
    served.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_its_connections_the_service_closes_new_ones_and_still_answers_its_operators() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.max_connections = 16;
    config.operator_connections = 4;
    config.body_read_timeout_ms = 600_000;
    let served = Served::start(config).await;
    let buyers = 12;
    let crowd = 40;
    let mut open = Vec::new();
    for i in 0..crowd {
        open.push(tokio::spawn(until_closed(
            slow_body(served.address, "POST", &format!("/api/products/{i}/orders")).await,
        )));
    }
    // Every connection past the buyers' share is closed at once: those past all of them
    // unanswered, those on an operator's connection answered `503 overloaded`.
    let mut closed = 0;
    while closed < crowd - buyers {
        let (ended, _, rest) = futures::future::select_all(open).await;
        open = rest;
        let answer = ended
            .expect("join")
            .expect("a connection past the bound was held");
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
            "{answer}"
        );
        closed += 1;
    }
    assert_eq!(
        served.metric("seckill_connections{door=\"buyers\"}").await,
        Some(buyers as u64),
        "the buyers' connections held"
    );
    assert_eq!(served.get("/healthz").await, Some(StatusCode::OK));
    assert_eq!(
        served.get("/api/noop").await,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "a buyer's request on an operator's connection"
    );
    assert!(
        open.iter().all(|held| !held.is_finished()),
        "a buyer's connection was closed before its body deadline"
    );
    for held in open {
        held.abort();
    }
    common::wait_until("the buyers' connections to be given back", || async {
        served.get("/api/noop").await == Some(StatusCode::NO_CONTENT)
    })
    .await;
    served.stop().await;
    drop_database(&database_url).await;
}
