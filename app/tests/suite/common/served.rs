//! The service through its own accept loop ([`app::serve_with_shutdown`]), as the binary serves
//! it: its connection bounds and deadlines, which an instance served by `axum::serve` has not.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Far longer than any deadline these tests set: what a connection still open after it is held.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The service started with `config` through its own accept loop, as the binary serves.
pub struct Served {
    /// Where it listens.
    pub address: SocketAddr,
    client: reqwest::Client,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), app::StartupError>>,
}

impl Served {
    /// Starts the service with `config` on a free port; ready once it listens.
    pub async fn start(config: app::Config) -> Served {
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
        // Listening, and holding no connection but the one that asks.
        super::wait_until(
            "the service to listen and hold no other connection",
            || async { served.metric("seckill_connections{door=\"buyers\"}").await == Some(1) },
        )
        .await;
        served
    }

    /// The status of `GET path` from a new connection; `None` if the connection was closed.
    pub async fn get(&self, path: &str) -> Option<StatusCode> {
        let url = format!("http://{}{path}", self.address);
        self.client.get(url).send().await.ok().map(|r| r.status())
    }

    /// One unlabelled value of the service's `/metrics` (`None`: not there, or no answer).
    pub async fn metric(&self, name: &str) -> Option<u64> {
        let url = format!("http://{}/metrics", self.address);
        let text = self.client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
    }

    /// Stops the service gracefully and waits for it.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.expect("join").expect("served");
    }
}
