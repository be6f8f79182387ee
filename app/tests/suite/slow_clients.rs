//! A slow client holds nothing for long. A body that stops coming is answered `408` and its
//! connection closed at the body deadline.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{drop_database, fresh_database_url, test_config};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Far longer than any deadline these tests set: what a connection still open after it is held.
const PATIENCE: Duration = Duration::from_secs(60);

/// The service started with `config` through its own accept loop, as the binary serves.
struct Served {
    address: SocketAddr,
    client: reqwest::Client,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), app::StartupError>>,
}

impl Served {
    async fn start(config: app::Config) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app::serve_with_shutdown(config, listener, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder()
            .timeout(PATIENCE)
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        let served = Served {
            address,
            client,
            stop,
            server,
        };
        common::wait_until("the service to listen", || async {
            served.get("/healthz").await == Some(StatusCode::OK)
        })
        .await;
        served
    }

    /// The status of `GET path` from a new connection; `None` if the connection was closed.
    async fn get(&self, path: &str) -> Option<StatusCode> {
        let url = format!("http://{}{path}", self.address);
        self.client.get(url).send().await.ok().map(|r| r.status())
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.expect("join").expect("served");
    }
}

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
