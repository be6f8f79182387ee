//! The app in-process: built from a [`Config`] with [`app::build_with`] and served on a free
//! loopback port, so a test or a benchmark can call it over HTTP and reach its state (its
//! pool, its strategies) directly.

use std::time::Duration;

use app::{AppState, Config, Registry, StartupError};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::client::Api;

/// A running in-process instance. Dropping it aborts the server; [`TestApp::stop`] drains it.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub state: AppState,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestApp {
    /// Starts an instance with `config` on a free port (the configuration's `listen` is set to
    /// it, so instances of one test name their stream consumers apart).
    pub async fn start(config: Config) -> Result<TestApp, StartupError> {
        TestApp::start_with(config, |_| {}).await
    }

    /// [`TestApp::start`], letting `customize` change the registry (in-process locks behind
    /// the locked strategies, say).
    pub async fn start_with(
        mut config: Config,
        customize: impl FnOnce(&mut Registry),
    ) -> Result<TestApp, StartupError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        config.listen = listener.local_addr()?;
        let url = format!("http://{}", config.listen);
        let (router, state) = app::build_with(&config, customize).await?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = rx.await;
            };
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await;
        });
        Ok(TestApp {
            url,
            state,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// A client of this instance alone (no admin token), signing its buyers' tokens with the
    /// instance's buyer key if it has one.
    pub fn api(&self) -> Api {
        let api = Api::new(vec![self.url.clone()], None).expect("the instance's own URL");
        match &self.state.settings.buyer_key {
            Some(key) => api.with_buyer_key(key.clone()),
            None => api,
        }
    }

    /// Stops the instance gracefully and waits (up to 10 s) for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A configuration that reaches every server of `endpoints`, over a fresh database of its own
/// on their MariaDB (`t_<random>`, created by the app at start-up) and a lock prefix of its
/// own, so that instances of different tests never meet; every strategy offered, the unsafe
/// ones too; and a buyer key of its own, which [`TestApp::api`] signs with.
pub fn config_on(endpoints: &sandbox::Endpoints) -> Config {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let database = format!("{}/t_{run}", endpoints.database_url.trim_end_matches('/'));
    let mut config = Config::for_database(database);
    config.redis_url = Some(endpoints.redis_url.clone());
    config.redlock_urls = endpoints.redlock_urls.clone();
    config.zookeeper = Some(endpoints.zookeeper.clone());
    config.etcd = endpoints.etcd.clone();
    config.memcached = Some(endpoints.memcached.clone());
    config.lock_prefix = format!("t{run}:");
    // Every strategy offered, the unsafe ones too: what drives the app from outside compares
    // them all.
    config.offer_unsafe = true;
    config.buyer_key = Some(uuid::Uuid::new_v4().simple().to_string());
    config
}
