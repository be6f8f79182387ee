//! The flash-sale order service (`seckill-app`): sells a product's stock through a strategy
//! chosen per request, so the strategies can be compared under the same load.
//!
//! ```text
//! export SECKILL_BUYER_KEY=$(openssl rand -hex 32)   # what buyer tokens are signed with
//! seckill-app --database-url mysql://root@127.0.0.1:3306/seckill --listen 127.0.0.1:8080
//! curl -X PUT localhost:8080/api/products/1 -d '{"stock": 100}' -H 'content-type: application/json'
//! TOKEN=$(seckill-app buyer-token --user u-1)
//! curl -X POST localhost:8080/api/products/1/orders -H 'content-type: application/json' \
//!      -H "authorization: Bearer $TOKEN" -d '{"quantity": 1, "request_id": "r-1"}'
//! ```
//!
//! Layout, from the bottom up — a module uses only those before it in this list:
//! [`api`] (the wire types every client shares) with [`catalogue`] (every strategy's name and
//! facts), [`accounting`] (what a sale really did), [`metrics`]; [`config`] (flags and
//! environment); the storage: [`db`] (pool, migrations, queries) and [`redis_stock`] (stock kept
//! in Redis: counter, stream, consumer, reconciliation); [`inventory`] (a product read from
//! wherever its stock lives); [`product_memory`] (what an instance remembers of each product,
//! to refuse from memory); [`pages`] (a product's public page, read once per lifetime);
//! [`lifecycle`] (an order's life after its purchase: pay, cancel, expire,
//! units given back); [`strategy`] (the `StockStrategy` trait, one file per strategy,
//! the registry that builds them); [`overload`] (refusing what the service cannot take: the
//! admission limiter, the rates, the connections); [`first_come`] (a product's clicks
//! given places in one queue as they come); [`backends`] (the lock services);
//! [`purchase_token`] and [`buyer`] (who a buyer is: the buyer token's);
//! [`state`]; [`error`] (the
//! one mapping from failures to status codes); [`http`] (routes, handlers, the OpenAPI
//! document).
//!
//! Tests start the service in-process with [`build`] or [`serve_with_shutdown`] on port 0.

pub mod accounting;
pub mod api;
pub mod backends;
pub mod buyer;
pub mod catalogue;
pub mod config;
pub mod db;
pub mod error;
pub mod first_come;
pub mod http;
pub mod inventory;
pub mod lifecycle;
pub mod metrics;
pub mod overload;
pub mod pages;
pub mod product_memory;
pub mod purchase_token;
pub mod redis_stock;
pub mod serve;
pub mod state;
pub mod strategy;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;

pub use config::Config;
use metrics::Metrics;
use product_memory::ProductMemory;
use redis_stock::RedisStock;
use redis_stock::consumer::Consumer;
pub use state::{AppState, Background, Settings};
use strategy::Deps;
pub use strategy::Registry;

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Database(#[from] db::SetupError),
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "refusing to listen on {0} without an admin token: anyone who can reach it could reset \
         products (deleting their orders) and reconcile stock. Set SECKILL_ADMIN_TOKEN (or \
         --admin-token) to a secret, or listen on a loopback address such as 127.0.0.1"
    )]
    OpenAdminDoors(std::net::SocketAddr),
    #[error("the default strategy `{0}` is not among the offered ones (--strategies)")]
    DefaultNotOffered(api::Strategy),
    #[error(
        "refusing to start without a buyer key: anyone could buy, read, pay or cancel as any \
         user_id. Set SECKILL_BUYER_KEY (or --buyer-key) to the secret buyer tokens are signed \
         with, or say --anonymous-buyers (SECKILL_ANONYMOUS_BUYERS) to take user ids from the \
         requests, as a benchmark on a closed network may"
    )]
    NoBuyerKey,
    #[error(
        "--require-semi-sync reads MariaDB's semi-synchronous replication; the database URL \
         names PostgreSQL"
    )]
    SemiSyncOnPostgres,
}

/// Connects to the database (creating and migrating it), connects the lock services, and
/// builds the router with its state.
pub async fn build(config: &Config) -> Result<(Router, AppState), StartupError> {
    build_with(config, |_| {}).await
}

/// [`build`], letting `customize` change the registry (tests put in-process locks behind the
/// locked strategies).
pub async fn build_with(
    config: &Config,
    customize: impl FnOnce(&mut Registry),
) -> Result<(Router, AppState), StartupError> {
    if config.buyer_key.is_none() && !config.anonymous_buyers {
        return Err(StartupError::NoBuyerKey);
    }
    // Unless named, the strategies whose locks the deployment's engine holds (a lock kept in
    // the service's database is written for one engine).
    let engine = db::Engine::of_url(&config.database_url).unwrap_or(db::Engine::MySql);
    let offered: Vec<api::Strategy> = match config.strategies.is_empty() {
        true => engine
            .strategies()
            .into_iter()
            .filter(|s| config.offer_unsafe || s.safety() != api::Safety::Unsafe)
            .collect(),
        false => api::Strategy::ALL
            .iter()
            .copied()
            .filter(|s| config.strategies.contains(s))
            .collect(),
    };
    if !offered.contains(&config.default_strategy) {
        return Err(StartupError::DefaultNotOffered(config.default_strategy));
    }
    let pool = db::connect(config).await?;
    if config.require_semi_sync && pool.engine() == db::Engine::Postgres {
        return Err(StartupError::SemiSyncOnPostgres);
    }
    let redis = RedisStock::from_config(config);
    let deps = Deps {
        pool: pool.clone(),
        lock_pool: match config.db_lock_pool_size {
            0 => pool.clone(),
            _ => db::lock_pool(&pool, config),
        },
        lock_lease: config.lock_lease(),
        lock_wait: config.lock_wait(),
        lock_prefix: config.lock_prefix.clone(),
        optimistic_retries: config.optimistic_retries,
        redis: redis.clone(),
        batch_window: config.batch_window(),
        batch_max: config.batch_max,
        batch_queue: config.batch_queue,
        stream_max_lag: config.stream_max_lag,
        full_queue_memory: Duration::from_millis(config.full_queue_memory_ms),
        optimistic_in_flight: config.optimistic_in_flight,
        split_fallback: config.split_fallback,
    };
    let locks = backends::connect_all(config, &deps).await;
    let mut registry = Registry::new(deps, locks);
    customize(&mut registry);
    let metrics = Arc::new(Metrics::default());
    let memory = Arc::new(ProductMemory::new(
        pool.clone(),
        metrics.clone(),
        redis.clone(),
        Duration::from_millis(config.product_memory_ms),
    ));
    let forgetting_products = tokio::spawn(Arc::clone(&memory).forget_idle_products());
    let forget_on_return = !config.keep_sold_out_on_return;
    let listener = redis
        .as_ref()
        .filter(|_| forget_on_return)
        .and_then(|r| {
            let channels = redis_stock::announce::Channels::of(r.keys());
            Some((r.fixed_url()?.to_string(), channels))
        })
        .map(|(url, channels)| {
            let memory = Arc::clone(&memory);
            tokio::spawn(redis_stock::announce::listen(
                url,
                channels,
                move |id, news| match news {
                    redis_stock::News::Restocked => memory.restocked(id),
                    redis_stock::News::Changed => memory.forget(id),
                },
            ))
        });
    // Every instance with Redis places orders of the streams, whichever strategies it serves:
    // `--stream-consumers` consumers, dealt over the lanes, at least one per lane.
    let consumers: Vec<_> = redis
        .iter()
        .flat_map(|redis| {
            let lanes = redis.keys().lanes();
            let per_lane = u64::from(config.stream_consumers).div_ceil(lanes).max(1);
            (0..lanes)
                .flat_map(move |lane| std::iter::repeat_n(lane, per_lane as usize))
                .map(move |lane| (redis.clone(), lane))
        })
        .map(|(redis, lane)| {
            let claim_idle = Duration::from_millis(config.stream_claim_idle_ms);
            let consumer = Consumer::new(redis, pool.clone(), config.stream_batch, claim_idle)
                .in_lane(lane)
                .named(&config.listen.to_string())
                .with_metrics(metrics.clone());
            tokio::spawn(consumer.run())
        })
        .collect();
    let limiter = Arc::new(overload::Limiter::new(
        config.max_in_flight,
        Duration::from_millis(config.latency_budget_ms),
        Duration::from_millis(config.lag_target_ms),
        |strategy| registry.get(strategy).at_once(),
    ));
    let watching = tokio::spawn(Arc::clone(&limiter).watch(Arc::clone(&metrics)));
    let rates = Arc::new(overload::Rates::new(
        config.rate_per_user,
        config.rate_per_address,
    ));
    let forgetting = tokio::spawn({
        let rates = Arc::clone(&rates);
        async move { rates.forget_idle_keys().await }
    });
    let registry = Arc::new(registry);
    let life = lifecycle::Lifecycle::new(
        pool.clone(),
        redis.clone(),
        Arc::clone(&memory),
        Arc::clone(&metrics),
        Arc::clone(&registry),
        forget_on_return,
    );
    let pace = lifecycle::sweep::Pace {
        interval: Duration::from_millis(config.expiry_interval_ms),
        batch: config.expiry_batch,
        return_grace: Duration::from_millis(config.return_grace_ms),
    };
    // Every instance sweeps (see `lifecycle::sweep`), unless told to leave it to the others.
    let sweep = (config.expiry_interval_ms > 0)
        .then(|| tokio::spawn(lifecycle::sweep::run(life.clone(), pace)));
    let membership = Arc::new(db::galera::Membership::default());
    let asking = tokio::spawn(Arc::clone(&membership).watch(pool.clone()));
    let semi_sync = Arc::new(db::semi_sync::SemiSync::new(config.require_semi_sync));
    let reading_replication = (config.require_semi_sync)
        .then(|| tokio::spawn(Arc::clone(&semi_sync).watch(pool.clone())));
    let readers = db::reader_pool(&pool, config);
    let (page_pool, refresh) = match config.page_refresh_together {
        true => (pool.clone(), pages::Refresh::Together),
        false => (readers.clone(), pages::Refresh::OneAtATime),
    };
    let pages = Arc::new(
        pages::Pages::new(
            page_pool,
            redis.clone(),
            Duration::from_millis(config.page_ttl_ms),
            refresh,
        )
        .reading_on(db::replica_pool(config)?),
    );
    let connections = Arc::new(overload::Connections::new(
        overload::connections::within_open_files(config.max_connections),
        config.operator_connections,
    ));
    // A place its instance never settles (the instance died serving it) is given up after
    // twice the longest a purchase waits for room and its answer.
    let keep_place = Duration::from_millis(config.request_timeout_ms.saturating_mul(2));
    let first_come =
        (redis.clone()).map(|r| Arc::new(first_come::FirstCome::new(r, pool.clone(), keep_place)));
    let state = AppState::new(state::Shared {
        pool,
        limiter,
        rates,
        connections,
        registry,
        metrics,
        settings: Arc::new(Settings {
            admin_token: config.admin_token.clone(),
            default_strategy: config.default_strategy,
            offered,
            max_quantity: config.max_quantity,
            allow_fault_injection: config.allow_fault_injection,
            reconcile_grace: Duration::from_millis(config.reconcile_grace_ms),
            token_key: match &config.purchase_token_secret {
                Some(secret) => purchase_token::TokenKey::new(secret.as_bytes()),
                None => purchase_token::TokenKey::random(),
            },
            purchase_token_ttl: Duration::from_millis(config.purchase_token_ttl_ms),
            payment_window_ms: config.payment_window_ms,
            sweep: pace,
            buyer_key: (config.buyer_key.as_deref()).map(|k| buyer::BuyerKey::new(k.as_bytes())),
            metrics_apart: config.metrics_listen.is_some(),
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            rollback_retries: config.rollback_retries,
        }),
        redis,
        first_come,
        memory,
        pages,
        page_pacer: overload::Pacer::new(
            config.page_views_per_second,
            Duration::from_millis(config.page_max_wait_ms),
        ),
        readers,
        membership,
        semi_sync,
        life,
        background: Arc::new(Background::new(
            consumers
                .into_iter()
                .chain(listener)
                .chain(sweep)
                .chain(reading_replication)
                .chain([forgetting, watching, forgetting_products, asking])
                .collect(),
        )),
    });
    Ok((http::router(state.clone()), state))
}

/// Where the service listens: the public listener, and the operators' own for `/metrics` when
/// there is one (`--metrics-listen`).
pub struct Listeners {
    pub public: TcpListener,
    /// Serves `/metrics` and `/healthz` alone; while there is one, the public listener does not
    /// serve `/metrics`.
    pub metrics: Option<TcpListener>,
}

impl From<TcpListener> for Listeners {
    /// The public listener alone, serving `/metrics` too.
    fn from(public: TcpListener) -> Listeners {
        Listeners {
            public,
            metrics: None,
        }
    }
}

/// Serves until SIGTERM or Ctrl-C, then lets in-flight requests finish (within the grace
/// period of the configuration).
pub async fn serve(config: Config, listeners: impl Into<Listeners>) -> Result<(), StartupError> {
    serve_with_shutdown(config, listeners, shutdown_signal()).await
}

/// Serves until `shutdown` resolves, then drains like [`serve()`]. What is served where follows
/// `listeners`, whatever `config.metrics_listen` says: `/metrics` leaves the public listener
/// only for a listener of its own.
pub async fn serve_with_shutdown(
    mut config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartupError> {
    let Listeners {
        public: listener,
        metrics,
    } = listeners.into();
    config.metrics_listen = (metrics.as_ref().map(TcpListener::local_addr)).transpose()?;
    let listen = listener.local_addr()?;
    if config.admin_token.is_none() {
        if !listen.ip().is_loopback() {
            return Err(StartupError::OpenAdminDoors(listen));
        }
        tracing::warn!(%listen, "no admin token: anyone who can reach this address can reset \
            products and reconcile stock; set SECKILL_ADMIN_TOKEN before exposing it");
    }
    if config.buyer_key.is_none() && config.anonymous_buyers {
        tracing::warn!(
            "anonymous buyers: every request names its buyer, and anyone can buy, \
            read, pay or cancel as anyone; set SECKILL_BUYER_KEY for a sale"
        );
    }
    if config.purchase_token_secret.is_none() {
        tracing::info!("no purchase-token secret: tokens this instance issues are good here only");
    }
    let (router, state) = build(&config).await?;
    tracing::info!(
        %listen,
        metrics_listen = ?config.metrics_listen,
        strategies = state.settings.offered.len(),
        default_strategy = %config.default_strategy,
        fault_injection = config.allow_fault_injection,
        "serving"
    );
    let limits = serve::Limits {
        header_read: Duration::from_millis(config.header_read_timeout_ms),
        body_read: Duration::from_millis(config.body_read_timeout_ms),
        grace: Duration::from_millis(config.shutdown_grace_ms),
    };
    let doors = serve::Doors {
        all: router,
        operators: http::operator_router(state.clone()),
        connections: Arc::clone(&state.connections),
    };
    let shutdown = futures::FutureExt::shared(shutdown);
    let public = serve::serve(listener, doors, limits, shutdown.clone());
    let metrics = async {
        match metrics {
            Some(listener) => {
                let doors = serve::Doors::alone(http::metrics_router(state.clone()));
                serve::serve(listener, doors, limits, shutdown).await
            }
            None => Ok(()),
        }
    };
    tokio::try_join!(public, metrics)?;
    state.pool.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
        () = terminate => tracing::info!("SIGTERM: shutting down"),
    }
}

/// The size of the future `call` would return, without calling it: what the tests that keep a
/// hot path's future small measure.
#[cfg(test)]
pub(crate) fn future_size<F: Future>(_: impl FnOnce() -> F) -> usize {
    std::mem::size_of::<F>()
}
