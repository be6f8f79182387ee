//! The app, built in-process against the bench's servers and served on port 0, so one purchase
//! can be made both by calling a strategy object and through the HTTP API.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use app::api::{OrderRequest, Strategy};
use app::strategy::{Purchase, PurchaseError, PurchaseStats, Purchased, StockStrategy};
use app::{AppState, Config};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Stock of every benchmarked product: no run ever sells it out.
pub const STOCK: i64 = 1_000_000_000_000;

/// A running app: its state (for direct calls) and its address (for HTTP calls).
pub struct Shop {
    pub state: AppState,
    pub url: String,
    pub http: reqwest::Client,
    requests: AtomicU64,
    run: String,
    server: JoinHandle<()>,
}

impl Drop for Shop {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Shop {
    /// Builds the app over its own fresh database and every lock service of `endpoints`.
    pub async fn start(endpoints: &sandbox::Endpoints) -> Shop {
        let run = uuid::Uuid::new_v4().simple().to_string();
        let database = format!(
            "{}/bench_{run}",
            endpoints.database_url.trim_end_matches('/')
        );
        let mut config = Config::for_database(database);
        config.redis_url = Some(endpoints.redis_url.clone());
        config.redlock_urls = endpoints.redlock_urls.clone();
        config.zookeeper = Some(endpoints.zookeeper.clone());
        config.etcd = endpoints.etcd.clone();
        config.memcached = Some(endpoints.memcached.clone());
        config.lock_prefix = format!("bench:{run}:");
        let (router, state) = app::build(&config).await.expect("the app starts");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.expect("serve");
        });
        Shop {
            state,
            url,
            http: reqwest::Client::new(),
            requests: AtomicU64::new(0),
            run,
            server,
        }
    }

    /// Every strategy of the catalogue, in catalogue order.
    pub fn strategies(&self) -> Vec<Strategy> {
        Strategy::ALL.to_vec()
    }

    /// The built `strategy`.
    pub fn strategy(&self, strategy: Strategy) -> Arc<dyn StockStrategy> {
        Arc::clone(self.state.registry.get(strategy))
    }

    /// Gives product `id` [`STOCK`] units, no orders, and a per-user limit no run reaches (the
    /// bench buys as one buyer: it measures the deduction, not the limit).
    pub async fn stock_up(&self, id: u64) {
        let rules = app::api::SaleRules {
            per_user_limit: STOCK,
            ..app::api::SaleRules::default()
        };
        let buckets = app::api::DEFAULT_BUCKETS;
        app::db::products::reset_with(
            &self.state.pool,
            id,
            STOCK,
            app::api::Home::Row,
            buckets,
            &rules,
        )
        .await
        .expect("reset the product");
        self.state.shelf.forget(id);
    }

    /// A request id no other purchase of this run has.
    fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.run)
    }

    /// One unit of `product` through `strategy`, called directly.
    pub async fn buy_direct(
        &self,
        strategy: &dyn StockStrategy,
        name: Strategy,
        product: u64,
    ) -> Result<Purchased, PurchaseError> {
        let purchase = Purchase {
            product_id: product,
            user_id: "bench".into(),
            quantity: 1,
            request_id: self.request_id(),
            strategy: name,
            per_user_limit: STOCK,
            hold: None,
            stats: PurchaseStats::default(),
        };
        strategy.purchase(&purchase).await
    }

    /// One unit of `product` through `strategy`, over HTTP; the response's status.
    pub async fn buy_http(&self, name: Strategy, product: u64) -> reqwest::StatusCode {
        let body = OrderRequest {
            user_id: "bench".into(),
            quantity: 1,
            request_id: self.request_id(),
            strategy: Some(name),
            purchase_token: None,
        };
        let response = self
            .http
            .post(format!("{}/api/products/{product}/orders", self.url))
            .json(&body)
            .send()
            .await
            .expect("the order request is answered");
        let status = response.status();
        // Read the body, as a client would: the connection is reused only once it is drained.
        let _ = response.bytes().await;
        status
    }

    /// `GET /api/noop`: an HTTP round trip through the app's stack that touches no backend.
    pub async fn http_only(&self) {
        let response = self
            .http
            .get(format!("{}/api/noop", self.url))
            .send()
            .await
            .expect("GET /api/noop");
        assert!(
            response.status().is_success(),
            "GET /api/noop answered {}",
            response.status()
        );
        let _ = response.bytes().await;
    }
}
