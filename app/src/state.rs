//! What every handler shares.

use std::sync::Arc;

use crate::db::Db;

use crate::metrics::Metrics;
use crate::product_memory::ProductMemory;
use crate::redis_stock::RedisStock;
use crate::strategy::Registry;

/// Request-independent settings the handlers need.
#[derive(Debug, Clone)]
pub struct Settings {
    pub admin_token: Option<String>,
    pub default_strategy: crate::api::Strategy,
    /// The strategies clients may name, in catalogue order.
    pub offered: Vec<crate::api::Strategy>,
    pub max_quantity: u32,
    pub allow_fault_injection: bool,
    /// How old a Redis charge without an order must be before `reconcile` presumes it lost.
    pub reconcile_grace: std::time::Duration,
    /// What purchase tokens are signed with.
    pub token_key: crate::purchase_token::TokenKey,
    /// How long a purchase token is good for, from its issue.
    pub purchase_token_ttl: std::time::Duration,
    /// A product's payment window when its reset names none.
    pub payment_window_ms: i64,
    /// How the expiry sweep runs (also `POST /api/products/{id}/expire`).
    pub sweep: crate::lifecycle::sweep::Pace,
    /// What buyer tokens are verified with; `None`: a buyer is whoever a request names.
    pub buyer_key: Option<crate::buyer::BuyerKey>,
    /// Whether `/metrics` is served on a listener of its own (`--metrics-listen`), and not on
    /// the public one.
    pub metrics_apart: bool,
    /// How long a buyer waits for a purchase's answer.
    pub request_timeout: std::time::Duration,
    /// How many times a purchase whose transaction the database rolled back is run again
    /// before its buyer is told `busy` ([`crate::strategy::PurchaseError::RolledBack`]).
    pub rollback_retries: u32,
}

impl Settings {
    /// Whether clients may name `strategy`.
    pub fn offers(&self, strategy: crate::api::Strategy) -> bool {
        self.offered.contains(&strategy)
    }
}

/// The application state, one per service instance: every handler's `State` is a clone of it,
/// so it is one `Arc` — a clone per request is one increment, not one per field (each a cache
/// line the cores pass between them).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What an [`AppState`] holds.
pub struct Shared {
    pub pool: Db,
    /// Every purchase is admitted through it, or refused `503 overloaded`.
    pub limiter: Arc<crate::overload::Limiter>,
    /// The buyers' and addresses' rates, on every buyer route.
    pub rates: Arc<crate::overload::Rates>,
    /// The connections the instance holds, by door.
    pub connections: Arc<crate::overload::Connections>,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub settings: Arc<Settings>,
    /// Where Redis-held stock lives, if Redis is configured.
    pub redis: Option<RedisStock>,
    /// The queues of the products sold first come, first served (`None`: without Redis).
    pub first_come: Option<Arc<crate::first_come::FirstCome>>,
    /// What this instance remembers of each product.
    pub memory: Arc<ProductMemory>,
    /// The products' public pages, and the pool they and the accounting are read through.
    pub pages: Arc<crate::pages::Pages>,
    /// Paces the views of the pages (`None`: unpaced).
    pub page_pacer: Option<crate::overload::Pacer>,
    pub readers: Db,
    /// Whether the database node is in its Galera cluster's primary component (always, on a
    /// server that is not a Galera node).
    pub membership: Arc<crate::db::galera::Membership>,
    /// Whether the primary's commits wait for a replica (read only with
    /// `--require-semi-sync`; see [`crate::db::semi_sync`]).
    pub semi_sync: Arc<crate::db::semi_sync::SemiSync>,
    /// Paying, cancelling and expiring orders.
    pub life: crate::lifecycle::Lifecycle,
    /// Background work of this instance (the stream consumer, the stock-back listener, the
    /// expiry sweep),
    /// stopped when the last clone of the state is dropped.
    pub background: Arc<Background>,
}

/// Tasks that live as long as the service instance.
#[derive(Debug, Default)]
pub struct Background {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    pub fn new(tasks: Vec<tokio::task::JoinHandle<()>>) -> Background {
        Background { tasks }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
