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
    /// Where its listener for `/metrics` alone listens, if it has one.
    pub metrics_address: Option<SocketAddr>,
    client: reqwest::Client,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), app::StartupError>>,
}

impl Served {
    /// Starts the service with `config` on a free port; ready once it listens.
    pub async fn start(config: app::Config) -> Served {
        Served::start_on(config, false).await
    }

    /// [`Served::start`], with a listener for `/metrics` alone on another free port, as
    /// `--metrics-listen` makes.
    pub async fn start_with_metrics_listener(config: app::Config) -> Served {
        Served::start_on(config, true).await
    }

    async fn start_on(config: app::Config, metrics_listener: bool) -> Served {
        let bind = || async {
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind")
        };
        let listeners = app::Listeners {
            public: bind().await,
            metrics: match metrics_listener {
                true => Some(bind().await),
                false => None,
            },
        };
        let address = listeners.public.local_addr().expect("address");
        let metrics_address =
            (listeners.metrics.as_ref()).map(|l| l.local_addr().expect("address"));
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app::serve_with_shutdown(config, listeners, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder()
            .timeout(PATIENCE)
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        let served = Served {
            address,
            metrics_address,
            client,
            stop,
            server,
        };
        // Listening, and holding no connection but the one that asks — which asks the metrics
        // listener, when there is one, and holds none of the public ones.
        let asking = u64::from(metrics_address.is_none());
        super::wait_until(
            "the service to listen and hold no other connection",
            || async {
                served.metric("seckill_connections{door=\"buyers\"}").await == Some(asking)
            },
        )
        .await;
        served
    }

    /// The status of `GET path` from a new connection; `None` if the connection was closed.
    pub async fn get(&self, path: &str) -> Option<StatusCode> {
        self.get_from(self.address, path).await
    }

    /// The status of `GET path` of `address` from a new connection; `None` if the connection
    /// was closed.
    pub async fn get_from(&self, address: SocketAddr, path: &str) -> Option<StatusCode> {
        let url = format!("http://{address}{path}");
        self.client.get(url).send().await.ok().map(|r| r.status())
    }

    /// One unlabelled value of the service's `/metrics`, from the metrics listener if it has
    /// one (`None`: not there, or no answer).
    pub async fn metric(&self, name: &str) -> Option<u64> {
        let address = self.metrics_address.unwrap_or(self.address);
        let url = format!("http://{address}/metrics");
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
