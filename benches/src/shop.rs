//! The app, started in-process against the bench's servers ([`testkit::TestApp`]), so one
//! purchase can be made both by calling a strategy object and through the HTTP API.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use app::AppState;
use app::api::{OrderRequest, Strategy};
use app::strategy::{Purchase, PurchaseError, PurchaseStats, Purchased, StockStrategy};
use testkit::TestApp;

/// Stock of every benchmarked product: no run ever sells it out.
pub const STOCK: i64 = 1_000_000_000_000;
/// The one buyer the bench buys as.
const BUYER: &str = "bench";

/// A running app: its state (for direct calls) and its address (for HTTP calls).
pub struct Shop {
    pub state: AppState,
    pub url: String,
    pub http: reqwest::Client,
    /// `Bearer <token>` of the bench's one buyer, signed with the app's buyer key.
    buyer: String,
    requests: AtomicU64,
    run: String,
    _app: TestApp,
}

impl Shop {
    /// Builds the app over its own fresh database and every lock service of `endpoints`.
    pub async fn start(endpoints: &sandbox::Endpoints) -> Shop {
        let app = TestApp::start(testkit::config_on(endpoints))
            .await
            .expect("the app starts");
        Shop {
            state: app.state.clone(),
            url: app.url.clone(),
            http: reqwest::Client::new(),
            buyer: authorization(&app.state, BUYER),
            requests: AtomicU64::new(0),
            run: uuid::Uuid::new_v4().simple().to_string(),
            _app: app,
        }
    }

    /// `Bearer <token>` of `user`, signed with the app's buyer key: what the `Authorization`
    /// header of that buyer's requests carries.
    pub fn authorization(&self, user: &str) -> String {
        authorization(&self.state, user)
    }

    /// Every strategy of the catalogue its database's engine runs, in catalogue order.
    pub fn strategies(&self) -> Vec<Strategy> {
        self.state.pool.engine().strategies()
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
        self.state.memory.forget(id);
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
            user_id: BUYER.into(),
            quantity: 1,
            request_id: self.request_id(),
            strategy: name,
            per_user_limit: STOCK,
            pay_within: std::time::Duration::from_millis(
                app::api::DEFAULT_PAYMENT_WINDOW_MS as u64,
            ),
            redis_epoch: 0,
            redis_parts: 0,
            hold: None,
            stats: PurchaseStats::default(),
        };
        strategy.purchase(&purchase).await
    }

    /// One unit of `product` through `strategy`, over HTTP; the response's status.
    pub async fn buy_http(&self, name: Strategy, product: u64) -> reqwest::StatusCode {
        let body = OrderRequest {
            user_id: Some(BUYER.into()),
            quantity: 1,
            request_id: self.request_id(),
            strategy: Some(name),
            purchase_token: None,
        };
        let response = self
            .http
            .post(format!("{}/api/products/{product}/orders", self.url))
            .header(reqwest::header::AUTHORIZATION, &self.buyer)
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

/// `Bearer <token>` of `user`, signed with the buyer key of the app of `state`, good for a day.
fn authorization(state: &AppState, user: &str) -> String {
    let key = (state.settings.buyer_key.as_ref()).expect("testkit's apps have a buyer key");
    let a_day = std::time::Duration::from_secs(24 * 3600);
    format!(
        "Bearer {}",
        key.sign(user, std::time::SystemTime::now() + a_day)
    )
}
