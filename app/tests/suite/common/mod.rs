//! Test helpers: start the service in-process on port 0 against its own database, buy over
//! HTTP as authenticated buyers ([`TestApp::as_buyer`]), and read the truth straight from the
//! database.

pub mod buyers;
pub mod conformance;
pub mod fake_locks;
pub mod life;
pub mod served;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use app::Config;
use app::api::{OrderRequest, Strategy};
use app::buyer::BuyerKey;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The buyer key of [`test_config`]: the tests' buyers are signed in.
pub const BUYER_KEY: &str = "the tests' buyer key";

/// Sends `request` (a buyer's: see [`TestApp::purchase`]) and returns the answer, sending it
/// again on a `busy` or `overloaded` one (up to 100 times, 20 ms apart) as a client honouring
/// Retry-After would.
pub async fn post_retrying_busy(request: RequestBuilder) -> (StatusCode, Value) {
    for _ in 0..100 {
        let again = request.try_clone().expect("a body of bytes");
        let r = again.send().await.expect("post");
        let status = r.status();
        let value: Value = r.json().await.expect("json");
        let again = matches!(value["error"].as_str(), Some("busy" | "overloaded"));
        if status != StatusCode::SERVICE_UNAVAILABLE || !again {
            return (status, value);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still busy after 100 attempts");
}

/// Signs buyers in, as a deployment's sign-in service would: a request of a buyer's carries
/// their buyer token, signed with the instance's buyer key (none without one).
#[derive(Debug, Clone, Default)]
pub struct Buyers(Option<BuyerKey>);

impl Buyers {
    /// The buyers of instances with buyer key `key`.
    pub fn with_key(key: &str) -> Buyers {
        Buyers(Some(BuyerKey::new(key.as_bytes())))
    }

    /// `user`'s buyer token, good for an hour (none without a buyer key).
    pub fn token(&self, user: &str) -> Option<String> {
        let key = self.0.as_ref()?;
        Some(key.sign(user, SystemTime::now() + Duration::from_secs(3600)))
    }

    /// `request` as `user`'s: with `Authorization: Bearer <their token>`.
    pub fn sign(&self, request: RequestBuilder, user: &str) -> RequestBuilder {
        match self.token(user) {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

/// A running in-process instance of the service.
pub struct TestApp {
    pub url: String,
    pub client: reqwest::Client,
    pub database_url: String,
    /// Signs this instance's buyers in; for requests sent from a task of their own (see
    /// [`TestApp::as_buyer`]).
    pub buyers: Buyers,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl TestApp {
    /// `request` (of a buyer route) as `user`'s: with their buyer token, as every buyer's
    /// request of a deployment with a buyer key carries one.
    pub fn as_buyer(&self, request: RequestBuilder, user: &str) -> RequestBuilder {
        self.buyers.sign(request, user)
    }

    /// `POST /api/products/{id}/orders` with `body`, as the buyer its `user_id` names.
    pub fn purchase(&self, id: u64, body: &Value) -> RequestBuilder {
        let request = (self.client)
            .post(format!("{}/api/products/{id}/orders", self.url))
            .json(body);
        match body["user_id"].as_str() {
            Some(user) => self.as_buyer(request, user),
            None => request,
        }
    }

    /// Stops the instance gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }

    /// `GET /api/strategies`: what the instance offers, as JSON.
    pub async fn strategies(&self) -> Value {
        (self.client.get(format!("{}/api/strategies", self.url)))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    /// `PUT /api/products/{id}` with `stock` units in the product row (no admin token).
    pub async fn reset(&self, id: u64, stock: i64) {
        self.reset_in(id, stock, app::api::Home::Row).await;
    }

    /// `PUT /api/products/{id}` with `stock` units kept in `home` (no admin token) and a
    /// per-user limit no test reaches: the tests of other subjects buy several units as one
    /// buyer. The limit's own tests reset with [`TestApp::reset_with`].
    pub async fn reset_in(&self, id: u64, stock: i64, home: app::api::Home) {
        let body = json!({ "stock": stock, "home": home, "per_user_limit": app::api::MAX_STOCK });
        self.reset_with(id, &body).await;
    }

    /// `PUT /api/products/{id}` with `body` (no admin token). A body that names no strategies
    /// lets every strategy the instance offers for the product's home sell it: the tests of
    /// other subjects buy one product through several.
    pub async fn reset_with(&self, id: u64, body: &Value) {
        let mut body = body.clone();
        if body.get("strategies").is_none() {
            let home: app::api::Home =
                serde_json::from_value(body.get("home").cloned().unwrap_or(json!("row")))
                    .expect("a home");
            body["strategies"] = json!(self.offered_for(home).await);
        }
        let r = self
            .client
            .put(format!("{}/api/products/{id}", self.url))
            .json(&body)
            .send()
            .await
            .expect("reset request");
        assert_eq!(
            r.status(),
            StatusCode::OK,
            "reset: {}",
            r.text().await.unwrap_or_default()
        );
    }

    /// The strategies this instance offers (`GET /api/strategies`).
    pub async fn offered(&self) -> Vec<Strategy> {
        let list: app::api::StrategyList = self
            .client
            .get(format!("{}/api/strategies", self.url))
            .send()
            .await
            .expect("strategies")
            .json()
            .await
            .expect("strategy list");
        list.strategies.iter().map(|info| info.name).collect()
    }

    /// The strategies this instance offers that sell stock kept in `home`.
    pub async fn offered_for(&self, home: app::api::Home) -> Vec<Strategy> {
        let mut offered = self.offered().await;
        offered.retain(|s| s.home() == home);
        offered
    }

    /// Purchases that reached a strategy so far.
    pub async fn purchases_started(&self) -> u64 {
        self.metric("seckill_purchases_started_total")
            .await
            .expect("the started counter")
    }

    /// One unlabelled value of the service's Prometheus text (`None`: not there).
    pub async fn metric(&self, name: &str) -> Option<u64> {
        let text = self
            .client
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
    }

    /// `GET /api/products/{id}/accounting` once no accepted order of the product waits in the stream
    /// (at once for strategies that place orders before answering); panics after 5 minutes.
    pub async fn drained(&self, id: u64) -> app::api::ProductView {
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        loop {
            let view: app::api::ProductView = self
                .client
                .get(format!("{}/api/products/{id}/accounting", self.url))
                .send()
                .await
                .expect("product request")
                .json()
                .await
                .expect("product view");
            if view.pending == 0 {
                return view;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the stream did not drain within 5 minutes: {view:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `POST /api/products/{id}/reconcile` (no admin token), which must answer `200`.
    pub async fn reconcile(&self, id: u64) -> app::api::Reconciliation {
        let r = self
            .client
            .post(format!("{}/api/products/{id}/reconcile", self.url))
            .send()
            .await
            .expect("reconcile");
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.expect("reconciliation")
    }

    /// `POST /api/products/{id}/orders` with `body`, as the buyer its `user_id` names; returns
    /// the status and the JSON body.
    pub async fn order(&self, id: u64, body: &Value, hold_ms: Option<u64>) -> (StatusCode, Value) {
        let mut request = self.purchase(id, body);
        if let Some(ms) = hold_ms {
            request = request.header("x-seckill-hold-ms", ms.to_string());
        }
        let r = request.send().await.expect("order request");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

/// A server URL with a fresh, unique database name (created by the app at start-up).
pub async fn fresh_database_url() -> String {
    let server = tokio::task::spawn_blocking(sandbox::shared::database_url)
        .await
        .expect("sandbox MariaDB did not start");
    with_fresh_database(&server)
}

/// A PostgreSQL server URL with a fresh, unique database name (created by the app at start-up).
pub async fn fresh_postgres_url() -> String {
    let server = tokio::task::spawn_blocking(sandbox::shared::postgres_url)
        .await
        .expect("sandbox PostgreSQL did not start");
    with_fresh_database(&server)
}

/// `server` (a URL without a database) plus a unique database name.
pub fn with_fresh_database(server: &str) -> String {
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    format!("{}/{name}", server.trim_end_matches('/'))
}

/// Test defaults: buyers signed in with [`BUYER_KEY`], fault injection allowed, and budgets that
/// suit 200 buyers on 2 cores.
pub fn test_config(database_url: &str) -> Config {
    let mut config = Config::for_database(database_url);
    config.listen = "127.0.0.1:0".parse().expect("address");
    config.buyer_key = Some(BUYER_KEY.into());
    config.allow_fault_injection = true;
    // The tests show the unsafe strategies failing.
    config.offer_unsafe = true;
    config.shutdown_grace_ms = 2_000;
    // Admission by latency budget turns buyers away when purchases take longer than 250 ms, as
    // they often do on a test machine running many suites at once: the tests of other
    // properties would see `503 overloaded` they do not count on. It is tested on its own
    // (`overload.rs`), with the budget set there.
    config.latency_budget_ms = 0;
    // Likewise the shedding under a crowd: it refuses while the runtime wakes late, which on
    // a test machine is the other suites' doing as much as this instance's. It is tested in
    // the app's unit tests (`overload/shedding.rs`, `overload/limiter.rs`).
    config.lag_target_ms = 0;
    config
}

/// Test defaults on `database_url` with the sandbox's shared Redis, under a key prefix of its
/// own.
pub async fn config_with_redis(database_url: &str) -> Config {
    let mut config = test_config(database_url);
    config.redis_url = Some(
        tokio::task::spawn_blocking(sandbox::shared::redis_url)
            .await
            .expect("sandbox Redis"),
    );
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    config
}

/// Sends `click` to `product` in the background, pausing `hold_ms` in its critical section
/// when given; its status and body.
pub fn sent(
    app: &TestApp,
    product: u64,
    click: Value,
    hold_ms: Option<u64>,
) -> JoinHandle<(StatusCode, Value)> {
    let mut request = app.purchase(product, &click);
    if let Some(ms) = hold_ms {
        request = request.header("x-seckill-hold-ms", ms.to_string());
    }
    tokio::spawn(async move {
        let r = request.send().await.expect("order");
        (r.status(), r.json().await.unwrap_or(Value::Null))
    })
}

/// Starts an instance with `config` on a free port. Each request carries its peer's address, as
/// the service's own accept loop gives it (the per-address rate reads it).
pub async fn spawn_app(config: Config) -> TestApp {
    spawn_app_with(config, |_| {}).await
}

/// [`spawn_app`] with extra strategies registered by `customize`.
pub async fn spawn_app_with(config: Config, customize: impl FnOnce(&mut app::Registry)) -> TestApp {
    init_tracing();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let database_url = config.database_url.clone();
    let buyers = (config.buyer_key.as_deref()).map_or_else(Buyers::default, Buyers::with_key);
    let (router, _state) = app::build_with(&config, customize)
        .await
        .expect("app starts");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = rx.await;
        };
        let router = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
    });
    TestApp {
        url,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client"),
        database_url,
        buyers,
        shutdown: Some(tx),
        task: Some(task),
    }
}

/// Logs to the test's captured output (shown when it fails); `RUST_LOG` overrides the level.
fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// The truth about a product, read from the database, not through the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    pub initial: i64,
    pub stock: i64,
    /// Units the orders hold (reserved and paid).
    pub sold: i64,
    pub orders: i64,
}

impl Ledger {
    /// Units sold beyond what existed.
    pub fn oversell(&self) -> i64 {
        (self.sold - self.initial).max(0)
    }

    /// Sales that the stock column does not account for (lost updates).
    pub fn unaccounted(&self) -> i64 {
        self.sold - (self.initial - self.stock)
    }
}

/// The product's ledger as the app's accounting reads it from the database
/// ([`app::db::products::view`]: the stock of the row or the buckets; a Redis-home product's
/// row holds 0, its counter is read through the service, see [`TestApp::drained`]), over a
/// connection of its own.
pub async fn ledger(database_url: &str, id: u64) -> Ledger {
    let pool = app::db::open(database_url).await.expect("connect");
    let view = app::db::products::view(&pool, id)
        .await
        .expect("ledger")
        .expect("product row");
    let truth = app::accounting::Ledger::of(view);
    pool.close().await;
    Ledger {
        initial: truth.initial_stock,
        stock: truth.final_stock,
        sold: truth.units_in_orders,
        orders: truth.orders,
    }
}

/// How many order rows carry each request id.
pub async fn rows_per_request_id(database_url: &str) -> HashMap<String, i64> {
    let mut conn = MySqlConnection::connect(database_url)
        .await
        .expect("connect");
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT request_id, COUNT(*) FROM orders GROUP BY request_id")
            .fetch_all(&mut conn)
            .await
            .expect("orders");
    rows.into_iter().collect()
}

/// A side connection to `database_url` with a transaction begun on it and left open: what the
/// tests that hold rows locked behind the service's back start from.
pub async fn open_transaction(database_url: &str) -> MySqlConnection {
    let mut conn = MySqlConnection::connect(database_url)
        .await
        .expect("a side connection");
    sqlx::query("BEGIN")
        .execute(&mut conn)
        .await
        .expect("begin");
    conn
}

/// Drops the test's database.
pub async fn drop_database(database_url: &str) {
    let (server, name) = database_url.rsplit_once('/').expect("url with a database");
    if app::db::Engine::of_url(server) == Some(app::db::Engine::Postgres) {
        let admin = format!("{server}/postgres");
        if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
            let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await;
        }
        return;
    }
    if let Ok(mut conn) = MySqlConnection::connect(server).await {
        let sql = format!("DROP DATABASE IF EXISTS `{name}`");
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await;
    }
}

/// What a crowd of buyers was told.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub created: usize,
    /// `202`: accepted, placed later by the stream consumers.
    pub accepted: usize,
    pub sold_out: usize,
    pub busy: usize,
    pub lock_lost: usize,
    /// Anything else, with its body, for the failure message.
    pub unexpected: Vec<(u16, Value)>,
}

/// How the crowd behaves.
#[derive(Debug, Clone, Copy)]
pub struct Crowd {
    pub buyers: usize,
    /// Injected pause inside each critical section.
    pub hold_ms: Option<u64>,
    /// Retries of a `503` (same request id, short pause) before counting it.
    pub busy_retries: usize,
}

/// `crowd.buyers` concurrent buyers, one unit each, spread round-robin over `apps`.
pub async fn flash_sale(apps: &[&TestApp], product: u64, strategy: &str, crowd: Crowd) -> Tally {
    let strategy: Strategy = strategy.parse().expect("a strategy of the catalogue");
    flash_sale_mixed(apps, product, &[strategy], crowd).await
}

/// [`flash_sale`] where every attempt (retries included) picks one of `strategies` at random.
/// A `409 lock_lost` is retried like a `503 busy`: nothing was bought.
pub async fn flash_sale_mixed(
    apps: &[&TestApp],
    product: u64,
    strategies: &[Strategy],
    crowd: Crowd,
) -> Tally {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut tasks = Vec::with_capacity(crowd.buyers);
    for buyer in 0..crowd.buyers {
        let app = apps[buyer % apps.len()];
        let (client, buyers) = (app.client.clone(), app.buyers.clone());
        let url = format!("{}/api/products/{product}/orders", app.url);
        let strategies = strategies.to_vec();
        let (user_id, request_id) = (format!("u-{buyer}"), format!("{run}-{buyer}"));
        tasks.push(tokio::spawn(async move {
            let mut attempt = 0;
            loop {
                let body = OrderRequest {
                    user_id: Some(user_id.clone()),
                    quantity: 1,
                    request_id: request_id.clone(),
                    strategy: Some(strategies[rand::random_range(0..strategies.len())]),
                    purchase_token: None,
                };
                let mut request = buyers.sign(client.post(&url).json(&body), &user_id);
                if let Some(ms) = crowd.hold_ms {
                    request = request.header("x-seckill-hold-ms", ms.to_string());
                }
                let r = request.send().await.expect("order request");
                let status = r.status();
                let value: Value = r.json().await.unwrap_or(Value::Null);
                // Nothing was bought: a `503` (busy, or a backend too slow to answer on a
                // loaded machine, as Redlock's quorum can be) or a lost lock in a mix.
                let lost = strategies.len() > 1 && value["error"] == "lock_lost";
                let busy = lost || status == StatusCode::SERVICE_UNAVAILABLE;
                if busy && attempt < crowd.busy_retries {
                    attempt += 1;
                    let pause = 10 + rand::random_range(0..40);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    continue;
                }
                return (status, value);
            }
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        let (status, value) = task.await.expect("buyer task");
        match (status.as_u16(), value["error"].as_str()) {
            (201, _) => tally.created += 1,
            (202, _) => tally.accepted += 1,
            (409, Some("sold_out")) => tally.sold_out += 1,
            (409, Some("lock_lost")) => tally.lock_lost += 1,
            (503, Some("busy" | "overloaded" | "backend_unavailable")) => tally.busy += 1,
            (code, _) => tally.unexpected.push((code, value)),
        }
    }
    tally
}

/// 200 buyers (retrying `busy` with the same request id) against 100 units of one product,
/// through `strategy` on an instance configured by `configure`: exactly the stock is sold,
/// everyone else hears `sold_out`, and the database accounts for every unit.
pub async fn sells_exactly_the_stock(strategy: &str, configure: impl FnOnce(&mut Config)) {
    sells_exactly_the_stock_on(1, strategy, configure).await;
}

/// [`sells_exactly_the_stock`] with the buyers spread round-robin over `instances` instances
/// of the service on one database.
pub async fn sells_exactly_the_stock_on(
    instances: usize,
    strategy: &str,
    configure: impl FnOnce(&mut Config),
) {
    let database_url = fresh_database_url().await;
    sells_exactly_the_stock_in(&database_url, instances, strategy, configure).await;
}

/// [`sells_exactly_the_stock_on`] with the rows in the database `database_url` names (on
/// either engine).
pub async fn sells_exactly_the_stock_in(
    database_url: &str,
    instances: usize,
    strategy: &str,
    configure: impl FnOnce(&mut Config),
) {
    const STOCK: i64 = 100;
    const BUYERS: usize = 200;
    let mut config = test_config(database_url);
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    configure(&mut config);
    let mut apps = Vec::new();
    for _ in 0..instances.max(1) {
        apps.push(spawn_app(config.clone()).await);
    }
    let app = &apps[0];
    let home = strategy
        .parse::<app::api::Strategy>()
        .map_or(app::api::Home::Row, |s| s.home());
    app.reset_in(1, STOCK, home).await;
    let crowd = Crowd {
        buyers: BUYERS,
        hold_ms: None,
        busy_retries: 200,
    };
    let tally = flash_sale(&apps.iter().collect::<Vec<_>>(), 1, strategy, crowd).await;
    assert!(
        tally.unexpected.is_empty(),
        "{strategy}: unexpected answers {:?}",
        tally.unexpected
    );
    assert_eq!(
        (tally.created + tally.accepted, tally.sold_out),
        (STOCK as usize, BUYERS - STOCK as usize),
        "{strategy}: {tally:?}"
    );
    // The stock as its home holds it (the Redis counter for `redis`), after the stream drained.
    let view = app.drained(1).await;
    let truth = ledger(database_url, 1).await;
    assert_eq!(
        (view.stock, truth.sold, truth.orders),
        (0, STOCK, STOCK),
        "{strategy}: {truth:?}"
    );
    assert_eq!(
        (truth.stock, truth.unaccounted()),
        (0, 0),
        "{strategy}: {truth:?}"
    );
    for app in apps {
        app.stop().await;
    }
    drop_database(database_url).await;
}

/// Points `config` at every shared service (Redis, the Redlock set, ZooKeeper, etcd,
/// memcached), so that every strategy of the catalogue can run, with a key prefix of its own.
pub async fn with_every_service(config: &mut Config) {
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    (
        config.redis_url,
        config.redlock_urls,
        config.zookeeper,
        config.etcd,
        config.memcached,
    ) = tokio::task::spawn_blocking(|| {
        use sandbox::shared;
        (
            Some(shared::redis_url()),
            shared::redlock_urls(),
            Some(shared::zookeeper()),
            shared::etcd(),
            Some(shared::memcached()),
        )
    })
    .await
    .expect("sandbox servers");
}

/// An order row as stored, its text columns read as bytes (no collation in between).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOrder {
    pub product_id: u64,
    pub user_id: String,
    pub request_id: String,
    pub quantity: u32,
}

/// Every order of the database that holds units (voided purchases left out), its ids read as
/// bytes.
pub async fn stored_orders(database_url: &str) -> Vec<StoredOrder> {
    let rows: Vec<(u64, Vec<u8>, Vec<u8>, u32)> =
        if app::db::Engine::of_url(database_url) == Some(app::db::Engine::Postgres) {
            let mut conn = sqlx::PgConnection::connect(database_url)
                .await
                .expect("connect");
            let rows: Vec<(i64, Vec<u8>, Vec<u8>, i64)> = sqlx::query_as(
                "SELECT product_id, convert_to(user_id, 'UTF8'), convert_to(request_id, 'UTF8'), \
                        quantity FROM orders WHERE state IN ('reserved', 'paid')",
            )
            .fetch_all(&mut conn)
            .await
            .expect("orders");
            (rows.into_iter())
                .map(|(p, u, r, q)| (p as u64, u, r, q as u32))
                .collect()
        } else {
            let mut conn = MySqlConnection::connect(database_url)
                .await
                .expect("connect");
            sqlx::query_as(
                "SELECT product_id, CAST(user_id AS BINARY), CAST(request_id AS BINARY), quantity \
                 FROM orders WHERE state IN ('reserved', 'paid')",
            )
            .fetch_all(&mut conn)
            .await
            .expect("orders")
        };
    rows.into_iter()
        .map(|(product_id, user, request, quantity)| StoredOrder {
            product_id,
            user_id: String::from_utf8(user).expect("utf-8 user id"),
            request_id: String::from_utf8(request).expect("utf-8 request id"),
            quantity,
        })
        .collect()
}

/// Polls `check` every 20 ms until it holds. A state the test waits for, not a deadline: the
/// cap (five minutes) only turns a service that never gets there into a failure, not a hang.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "still waiting after five minutes: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
