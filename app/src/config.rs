//! Every setting of the service: a clap flag with an environment-variable fallback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// The flash-sale order service: sells a product's stock through a strategy chosen per request.
#[derive(Debug, Clone, Parser)]
#[command(name = "seckill-app", version, about)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Address of a listener for the operators alone, serving `/metrics` and `/healthz` and
    /// nothing else. When set, the public listener (`--listen`) answers `/metrics` with `404`:
    /// its sales volumes are not for buyers. Its connections are its own (at most 16), apart
    /// from `--max-connections`, so a scrape gets in while buyers hold every public one. It
    /// changes nothing, so it takes no admin token on any address: keep it where only the
    /// operators reach. Unset: `/metrics` on the public listener.
    #[arg(long, env = "SECKILL_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// The database server's URL, whose scheme names the engine: `mysql://…` (MariaDB or
    /// MySQL) or `postgres://…` (PostgreSQL). The database name is optional (default
    /// `seckill`); the database is created and migrated at start-up. The strategies that lock
    /// with a table of MariaDB's (`db-lock`, `db-row-lock`, `db-blocking-insert` and their
    /// variants) answer `backend_unavailable` on PostgreSQL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "mysql://root@127.0.0.1:3306/seckill",
        hide_env_values = true
    )]
    pub database_url: String,

    /// A replica of that database the products' public pages are read from, so a crowd
    /// refreshing pages costs the primary nothing (the database name defaults to the
    /// primary's). A page read there may show units the primary has sold since (a replica
    /// lags): the page is advice, the purchase's conditional write on the primary decides. A
    /// product the replica does not have yet, or a replica that does not answer, is read on
    /// the primary. The accounting and every purchase stay on the primary.
    #[arg(long, env = "SECKILL_DATABASE_REPLICA_URL", hide_env_values = true)]
    pub database_replica_url: Option<String>,

    /// Redis URL for the single-instance Redis lock strategies and Redis-held stock, when no
    /// `--redis-sentinels` are given. With Sentinels it is ignored: a fixed address would keep
    /// sending locks and deductions to a primary that died or was demoted. A Redis Cluster is
    /// `redis+cluster://host:port,…` (any of its members): Redis-held stock is then kept on the
    /// cluster, its keys dealt into lanes of one slot each; the Redis locks take no cluster
    /// address, and their strategies answer `503 backend_unavailable`.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Redis Sentinels (comma-separated `host:port`) monitoring `--redis-master-name`. When set,
    /// the Redis locks (`redis-lock*`, `redis-watchdog*`, `redis-fair*`) and Redis-held stock
    /// (`redis-lua*`) ask them for the current primary and follow a failover (answering `503`
    /// until a promoted replica answers); `--redis-url` is then ignored.
    #[arg(long, env = "REDIS_SENTINELS", value_delimiter = ',')]
    pub redis_sentinels: Vec<String>,

    /// The name the Sentinels monitor the primary under.
    #[arg(long, env = "REDIS_MASTER_NAME", default_value = "mymaster")]
    pub redis_master_name: String,

    /// Connections of the pool to the Redis that keeps Redis-held stock (`redis-lua*`).
    #[arg(long, env = "SECKILL_REDIS_POOL_SIZE", default_value_t = 64)]
    pub redis_pool_size: usize,

    /// Replicas that must acknowledge a `redis-lua*` deduction before it counts (`WAIT N` after
    /// the script). 0 (the default) trusts the primary alone: a failover to a replica that
    /// missed the last deductions then sells their units again. With N ≥ 1 a deduction N
    /// replicas did not acknowledge in time is answered `503` and never becomes an order.
    #[arg(long, env = "SECKILL_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,

    /// Replicas that must confirm each grant of the `redis-watchdog*` locks (`WAIT N` after the
    /// grant, `RedisWatchdogLock::connect_replicated`). 0 (the default) trusts the primary
    /// alone: a failover to a replica that missed a grant hands the lock to a second holder.
    /// With N ≥ 1 a grant too few replicas confirm within `--redis-wait-timeout-ms` is given
    /// back and the purchase answers `503`: the holder never acts on a grant a failover can lose.
    #[arg(long, env = "SECKILL_REDIS_LOCK_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_lock_wait_replicas: u32,

    /// How long a deduction waits for `--redis-wait-replicas` acknowledgements (and a
    /// `redis-watchdog*` grant for `--redis-lock-wait-replicas` confirmations), in
    /// milliseconds (below the Redis connection's 500 ms reply timeout).
    #[arg(long, env = "SECKILL_REDIS_WAIT_TIMEOUT_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=400))]
    pub redis_wait_timeout_ms: u64,

    /// Orders the stream consumer of `redis-lua-stream` places in one database transaction.
    #[arg(long, env = "SECKILL_STREAM_BATCH", default_value_t = 200)]
    pub stream_batch: usize,

    /// Consumers of `redis-lua-stream`'s stream that each instance runs, all in one consumer
    /// group (on a Redis Cluster, whose stream is dealt into lanes, at least one per lane). Each
    /// places its batch in a transaction of its own: one consumer waits for every commit before
    /// it reads the next batch, so the orders reach the database no faster than one commit at a
    /// time; several let the database flush their commits together.
    #[arg(long, env = "SECKILL_STREAM_CONSUMERS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub stream_consumers: u32,

    /// Most orders `redis-lua-stream` lets wait in the stream (accepted, not yet placed in the
    /// database); past it a purchase is refused `503 overloaded` and takes nothing. Without a bound
    /// the `202`s of a crowd faster than the consumers promise orders that arrive later and
    /// later — after their payment deadline, if buyers wait for them to pay.
    #[arg(long, env = "SECKILL_STREAM_MAX_LAG", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub stream_max_lag: u64,

    /// Refuse purchases `503 backend_unavailable` while the database's primary says its commits
    /// wait for no replica (`Rpl_semi_sync_master_status` `OFF`: semi-synchronous replication
    /// fell back to asynchronous, or is not on), read every 100 ms: an order answered then could
    /// be lost by a failover.
    #[arg(long, env = "SECKILL_REQUIRE_SEMI_SYNC", default_value_t = false, action = clap::ArgAction::Set)]
    pub require_semi_sync: bool,

    /// Whether a `redis-split` buyer whose home part is empty moves units home from the other
    /// parts before she is told "sold out". `false` shows why the fallback is there: buyers
    /// refused while other parts still hold units (undersell).
    #[arg(long, env = "SECKILL_SPLIT_FALLBACK", default_value_t = true, action = clap::ArgAction::Set)]
    pub split_fallback: bool,

    /// How long an instance believes the stream full once a purchase found it at its bound, in
    /// milliseconds: meanwhile it refuses `redis-lua-stream`'s purchases `503 overloaded` at
    /// the door, without a round trip each. Far shorter than the consumers take to place what
    /// the stream holds, so it is topped up long before it runs dry. 0: every purchase asks.
    #[arg(long, env = "SECKILL_FULL_QUEUE_MEMORY_MS", default_value_t = 1)]
    pub full_queue_memory_ms: u64,

    /// How long a stream entry may stay read and unacknowledged by its consumer before another
    /// consumer claims it (the first one is presumed dead), in milliseconds.
    #[arg(long, env = "SECKILL_STREAM_CLAIM_IDLE_MS", default_value_t = 5000)]
    pub stream_claim_idle_ms: u64,

    /// How old a `redis-lua` deduction without an order must be before `reconcile` presumes its
    /// purchase lost, in milliseconds. A younger one is in flight (between the Lua script and
    /// the order insert) and is left alone.
    #[arg(long, env = "SECKILL_RECONCILE_GRACE_MS", default_value_t = 10_000)]
    pub reconcile_grace_ms: u64,

    /// Independent Redis instances for Redlock (comma-separated URLs).
    #[arg(
        long,
        env = "REDLOCK_URLS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redlock_urls: Vec<String>,

    /// ZooKeeper connect string (`host:port[,host:port]`).
    #[arg(long, env = "ZOOKEEPER_CONNECT")]
    pub zookeeper: Option<String>,

    /// ZooKeeper session timeout in milliseconds (the server may clamp it).
    #[arg(
        long,
        env = "SECKILL_ZOOKEEPER_SESSION_TIMEOUT_MS",
        default_value_t = 4000
    )]
    pub zookeeper_session_timeout_ms: u64,

    /// etcd client endpoints (comma-separated).
    #[arg(long, env = "ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd: Vec<String>,

    /// memcached address (`host:port`) for the memcached lock strategies.
    #[arg(long, env = "MEMCACHED_ADDR")]
    pub memcached: Option<String>,

    /// When set, `PUT /api/products/{id}` requires `Authorization: Bearer <token>`.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// The key buyer tokens are signed with. The buyer routes (purchase, status, pay, cancel,
    /// purchase token) require `Authorization: Bearer <buyer token>` signed with it, and take
    /// the buyer from it: a request's `user_id` may be left out, and when given must be the
    /// token's (see `app::buyer`). `seckill-app buyer-token --user <id>` mints one by hand.
    /// Required, unless `--anonymous-buyers`.
    #[arg(long, env = "SECKILL_BUYER_KEY", hide_env_values = true)]
    pub buyer_key: Option<String>,

    /// Take buyers on their word, without a buyer key: every buyer route names its buyer
    /// (`user_id`), and anyone may buy, read, pay or cancel as anyone. For a benchmark on a
    /// closed network, never for a sale; a warning says so at start.
    #[arg(long, env = "SECKILL_ANONYMOUS_BUYERS")]
    pub anonymous_buyers: bool,

    /// The strategies products may be sold by, comma-separated (default: every strategy of the
    /// catalogue that is not unsafe; see `--offer-unsafe`). Each product names its own among
    /// them when it is reset.
    #[arg(long, env = "SECKILL_STRATEGIES", value_delimiter = ',')]
    pub strategies: Vec<crate::api::Strategy>,

    /// Offer the unsafe strategies too (`naive`, `unchecked`, …), which oversell by design: for
    /// showing how, never for a sale. Naming one in `--strategies` offers it as well.
    #[arg(long, env = "SECKILL_OFFER_UNSAFE")]
    pub offer_unsafe: bool,

    /// How long an instance trusts what it remembers of a product (its rules; that it is sold
    /// out) before reading it again, in milliseconds. A reset, a reconciliation or units given
    /// back make every instance forget at once when Redis is configured (one fixed address),
    /// and within this time in any case. A product nobody asks about for twice this time, and
    /// an id found to have no product once this time has passed, are dropped from memory.
    /// 0: remember nothing.
    #[arg(long, env = "SECKILL_PRODUCT_MEMORY_MS", default_value_t = 1000)]
    pub product_memory_ms: u64,

    /// How long an instance keeps a product's public page before reading it again, in
    /// milliseconds (each copy between three and five quarters of it, so that instances do not
    /// all read at once). 0: read for every request, one read at a time.
    #[arg(long, env = "SECKILL_PAGE_TTL_MS", default_value_t = 500)]
    pub page_ttl_ms: u64,

    /// Fault switch: keep products' pages as a plain cache does — every copy expiring at the
    /// same moments on every instance, every request that finds it expired reading it, summing
    /// the orders on the purchases' pool: the cache stampede the `cache-stampede` scenario
    /// shows.
    #[arg(long, env = "SECKILL_PAGE_REFRESH_TOGETHER")]
    pub page_refresh_together: bool,

    /// Views of products' public pages an instance serves per second, each in its turn (a
    /// tenth of a second's worth at once after a quiet moment): a crowd refreshing a page waits
    /// on a timer instead of taking the cores the purchases need. 0: unpaced.
    #[arg(long, env = "SECKILL_PAGE_VIEWS_PER_SECOND", default_value_t = 2_000)]
    pub page_views_per_second: u32,

    /// The longest a page view waits for its turn, in milliseconds; one whose turn is further
    /// off is refused `503 busy` with a `Retry-After`.
    #[arg(long, env = "SECKILL_PAGE_MAX_WAIT_MS", default_value_t = 1_000)]
    pub page_max_wait_ms: u64,

    /// How long a buyer has to pay an order when its product's reset names no payment window,
    /// in milliseconds; past it the order expires and its units go back on sale.
    #[arg(long, env = "SECKILL_PAYMENT_WINDOW_MS", default_value_t = 900_000, value_parser = clap::value_parser!(i64).range(1..=604_800_000))]
    pub payment_window_ms: i64,

    /// How often this instance's expiry sweep looks for reserved orders past their payment
    /// deadline, in milliseconds (a full batch is followed by the next at once). 0: this
    /// instance does not sweep (the others must).
    #[arg(long, env = "SECKILL_EXPIRY_INTERVAL_MS", default_value_t = 1_000)]
    pub expiry_interval_ms: u64,

    /// Most orders one round of the expiry sweep reads and ends.
    #[arg(long, env = "SECKILL_EXPIRY_BATCH", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub expiry_batch: u32,

    /// How long an order's units may be on their way back (to a Redis counter, or to a row
    /// under the lock of the unfenced locked strategy that sold them) before any instance's
    /// sweep finishes the return (the instance that started it presumed dead), in
    /// milliseconds.
    #[arg(long, env = "SECKILL_RETURN_GRACE_MS", default_value_t = 10_000)]
    pub return_grace_ms: u64,

    /// Fault switch, for the `stale-sold-out` scenario: units that come back (an order expired
    /// or cancelled) do not make this instance forget that their product was sold out, and it
    /// does not listen for other instances' announcements; only the memory's lifetime
    /// (`--product-memory-ms`) ends what it remembers.
    #[arg(long, env = "SECKILL_KEEP_SOLD_OUT_ON_RETURN")]
    pub keep_sold_out_on_return: bool,

    /// The secret purchase tokens are signed with (products that require one). Every instance
    /// of a deployment needs the same secret; without one each instance makes a random one,
    /// and a token is good only on the instance that issued it.
    #[arg(long, env = "SECKILL_PURCHASE_TOKEN_SECRET", hide_env_values = true)]
    pub purchase_token_secret: Option<String>,

    /// How long a purchase token is good for, in milliseconds from its issue. A token admits
    /// one purchase, under the request id it names; past its life it admits none, though a
    /// retry of the purchase it made is still answered with its order.
    #[arg(long, env = "SECKILL_PURCHASE_TOKEN_TTL_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub purchase_token_ttl_ms: u64,

    /// Strategy used when an order names none.
    #[arg(long, env = "SECKILL_DEFAULT_STRATEGY", default_value = "conditional")]
    pub default_strategy: crate::api::Strategy,

    /// Maximum number of database connections of this instance.
    #[arg(long, env = "SECKILL_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,

    /// Connections of the separate pool the database-lock strategies (`db-lock*`,
    /// `db-row-lock*`, `db-blocking-insert*`) use for their lock tables; 0 puts the locks on
    /// the purchases' own pool, as a deployment with one pool for everything does (the
    /// `connection-cost` scenario shows what that costs).
    #[arg(long, env = "SECKILL_DB_LOCK_POOL_SIZE", default_value_t = 8)]
    pub db_lock_pool_size: u32,

    /// Connections of the readers' pool: products' public pages and their accounting are read
    /// through it, apart from the purchases' pool, so a crowd reading never takes a buyer's
    /// connection.
    #[arg(long, env = "SECKILL_DB_READER_POOL_SIZE", default_value_t = 4)]
    pub db_reader_pool_size: u32,

    /// How long a request waits for a database connection before answering
    /// `backend_unavailable`, in milliseconds.
    #[arg(long, env = "SECKILL_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 3000)]
    pub db_acquire_timeout_ms: u64,

    /// Row-lock wait budget (MariaDB's `innodb_lock_wait_timeout`, PostgreSQL's
    /// `lock_timeout`), whole seconds; a purchase that waits longer for a row lock answers
    /// `busy`.
    #[arg(long, env = "SECKILL_ROW_LOCK_WAIT_SECS", default_value_t = 5)]
    pub row_lock_wait_secs: u64,

    /// On a Galera node, the causality checks of every session (`wsrep_sync_wait`, a bitmask:
    /// 1 reads, 2 updates and deletes, 4 inserts). With 0 a statement on one node may miss a
    /// write another node committed and answered a moment before: an order just placed through
    /// one instance is "not found" when its buyer pays through another. The default, 3, waits
    /// before each read, update and delete until the node has applied everything the cluster
    /// had committed when it was sent. Ignored by a server that is not a Galera node.
    #[arg(long, env = "SECKILL_GALERA_SYNC_WAIT", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub galera_sync_wait: u8,

    /// Largest quantity one order may ask for.
    #[arg(long, env = "SECKILL_MAX_QUANTITY", default_value_t = 5)]
    pub max_quantity: u32,

    /// Lease of the distributed locks taken by lock-based strategies, in milliseconds.
    #[arg(long, env = "SECKILL_LOCK_LEASE_MS", default_value_t = 5000)]
    pub lock_lease_ms: u64,

    /// Prefix of every lock name (`<prefix>product:<id>`) and of every key of Redis-held stock,
    /// to keep several deployments or test runs apart on one lock service.
    #[arg(long, env = "SECKILL_LOCK_PREFIX", default_value = "")]
    pub lock_prefix: String,

    /// How long a lock-based strategy waits for its lock before answering `busy`, in ms.
    #[arg(long, env = "SECKILL_LOCK_WAIT_MS", default_value_t = 3000)]
    pub lock_wait_ms: u64,

    /// Times a purchase whose transaction the database rolled back — a deadlock victim, a write
    /// set a Galera cluster's certification refused (`1213`) — is run again before its buyer
    /// is told `busy`. Nothing of a rolled-back purchase happened, so running it again is safe
    /// for every strategy; on one MariaDB such rollbacks are rare, on Galera with every node
    /// taking writes to a hot row they are most purchases' fate.
    #[arg(long, env = "SECKILL_ROLLBACK_RETRIES", default_value_t = 0)]
    pub rollback_retries: u32,

    /// Attempts of the `optimistic` strategy before it answers `busy`.
    #[arg(long, env = "SECKILL_OPTIMISTIC_RETRIES", default_value_t = 16)]
    pub optimistic_retries: u32,

    /// Most `optimistic` purchases this instance admits at once, whatever its admission limit
    /// (and at most `--max-in-flight`). A compare-and-set on one hot row lets one contender win
    /// per round; each contender past a few adds only rounds that fail.
    #[arg(long, env = "SECKILL_OPTIMISTIC_IN_FLIGHT", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub optimistic_in_flight: u32,

    /// How long the `batched` strategy collects purchases of one product before committing
    /// them as one transaction, in milliseconds.
    #[arg(long, env = "SECKILL_BATCH_WINDOW_MS", default_value_t = 2)]
    pub batch_window_ms: u64,

    /// Most purchases the `batched` strategy commits in one transaction (a full batch is
    /// committed at once, before its window ends). Larger is not faster: with two instances
    /// and 200 buyers on two cores, 128 sold a third of what 64 sells and 256 half, each
    /// part of a batch's transaction growing faster than the batch, round after round.
    #[arg(long, env = "SECKILL_BATCH_MAX", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch_max: u32,

    /// Honour the `X-Seckill-Hold-Ms` request header (sleep inside the critical section) and
    /// `X-Seckill-Unchecked-Transition` (pay, cancel and expire by reading the order's state,
    /// then writing it: the check-then-act race). For fault scenarios and benchmarks only.
    #[arg(long, env = "SECKILL_ALLOW_FAULT_INJECTION")]
    pub allow_fault_injection: bool,

    /// Purchases this instance works on at once; one more is refused at once with `503
    /// overloaded` and a spread `Retry-After`, instead of waiting behind the others. Bounds the
    /// memory. Refusals from memory do not count.
    #[arg(long, env = "SECKILL_MAX_IN_FLIGHT", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,

    /// Once a crowd has stayed for a second and a half (the door turning away at least one
    /// purchase for every four it admits), how late the instance may get to a ready request, in
    /// milliseconds — read as the lateness of a 1 ms timer — before a purchase that arrives is
    /// refused `503 overloaded` (unless fewer than the strategy's least are in flight), so that
    /// the refusals are answered at once. 0: never.
    #[arg(long, env = "SECKILL_LAG_TARGET_MS", default_value_t = 4)]
    pub lag_target_ms: u64,

    /// The time a purchase should spend inside the service, in milliseconds: each strategy
    /// admits as many purchases at once as it answers in this time at its current rate, and
    /// refuses the next at once with `503 overloaded` — never fewer than 4 (a whole batch for
    /// `batched`), never more than `--max-in-flight` (`--optimistic-in-flight` for
    /// `optimistic`). 0: a fixed limit, the most.
    #[arg(long, env = "SECKILL_LATENCY_BUDGET_MS", default_value_t = 200)]
    pub latency_budget_ms: u64,

    /// How long a buyer waits for a purchase's answer before being told `503 busy`, in
    /// milliseconds, counted from the request's headers: the time its body took to come is
    /// part of it. The purchase itself goes on (it finishes, or gives its stock back); a retry
    /// with the same request id gets its outcome.
    #[arg(long, env = "SECKILL_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,

    /// How long a client may take to send a request's headers, in milliseconds: a connection
    /// that sends nothing is closed, not kept.
    #[arg(long, env = "SECKILL_HEADER_READ_TIMEOUT_MS", default_value_t = 5_000)]
    pub header_read_timeout_ms: u64,

    /// How long a client may take to send a request's body once its headers came, in
    /// milliseconds: a body not all come by then is answered `408 request_timeout` and its
    /// connection closed, however steadily it trickles.
    #[arg(long, env = "SECKILL_BODY_READ_TIMEOUT_MS", default_value_t = 5_000)]
    pub body_read_timeout_ms: u64,

    /// Connections this instance holds at once; one more is closed as soon as it is accepted.
    /// Each is a file the process has open: keep it below `ulimit -n` (it is lowered, with a
    /// warning, to leave 256 files for the pools and the rest).
    #[arg(long, env = "SECKILL_MAX_CONNECTIONS", default_value_t = 768, value_parser = clap::value_parser!(u32).range(2..))]
    pub max_connections: u32,

    /// Of `--max-connections`, how many are kept for the operators: once buyers hold the rest,
    /// a new connection is served `/healthz`, `/metrics` and the admin routes (one request,
    /// then closed) and any other route `503 overloaded`, so that a health check and an
    /// operator get in while buyers' connections are full.
    #[arg(long, env = "SECKILL_OPERATOR_CONNECTIONS", default_value_t = 32)]
    pub operator_connections: u32,

    /// Requests of the buyer routes (purchases, purchase tokens, an order's status, payment and
    /// cancellation) per second one buyer (user id) may make, counted together, bursts of as
    /// many allowed; beyond, `429 rate_limited`. Unset: no limit.
    #[arg(long, env = "SECKILL_RATE_PER_USER")]
    pub rate_per_user: Option<u32>,

    /// Requests of the buyer routes (purchases, purchase tokens, an order's status, payment and
    /// cancellation) per second one client address may make, counted together, bursts of as
    /// many allowed; beyond, `429 rate_limited`. The address is the connection's peer
    /// (`X-Forwarded-For` is not read): behind a reverse proxy, one limit all buyers share.
    /// Unset: no limit.
    #[arg(long, env = "SECKILL_RATE_PER_ADDRESS")]
    pub rate_per_address: Option<u32>,

    /// Longest a database statement of a purchase may run (`max_statement_time`), in
    /// milliseconds; beyond, it is aborted and the purchase answers `busy`.
    #[arg(long, env = "SECKILL_STATEMENT_TIMEOUT_MS", default_value_t = 5_000)]
    pub statement_timeout_ms: u64,

    /// Purchases one product's `batched` line holds waiting for their batch; one more is
    /// refused at once (`503 overloaded`). 0: four batches' worth (`--batch-max` × 4).
    #[arg(long, env = "SECKILL_BATCH_QUEUE", default_value_t = 0)]
    pub batch_queue: u32,

    /// How long in-flight requests may take to finish after SIGTERM/Ctrl-C, in milliseconds.
    #[arg(long, env = "SECKILL_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    pub shutdown_grace_ms: u64,
}

impl Config {
    /// Defaults plus this database URL (and nothing from the environment): handy in tests.
    pub fn for_database(database_url: impl Into<String>) -> Config {
        let mut config = Config::parse_from(["seckill-app"]);
        config.database_url = database_url.into();
        config.database_replica_url = None;
        config.metrics_listen = None;
        config.redis_url = None;
        config.redis_sentinels.clear();
        config.redlock_urls.clear();
        config.zookeeper = None;
        config.etcd.clear();
        config.memcached = None;
        config.admin_token = None;
        config.buyer_key = None;
        config.anonymous_buyers = false;
        config.purchase_token_secret = None;
        config
    }

    pub fn lock_lease(&self) -> Duration {
        Duration::from_millis(self.lock_lease_ms)
    }

    pub fn lock_wait(&self) -> Duration {
        Duration::from_millis(self.lock_wait_ms)
    }

    /// The confirmation each `redis-watchdog*` grant waits for, if any
    /// (`--redis-lock-wait-replicas`).
    pub fn redis_lock_replication(&self) -> Option<locks::redis::Replication> {
        (self.redis_lock_wait_replicas > 0).then(|| {
            locks::redis::Replication::new(
                self.redis_lock_wait_replicas,
                Duration::from_millis(self.redis_wait_timeout_ms),
            )
        })
    }

    /// Where the Redis locks and Redis-held stock find Redis: the Sentinels' address of the
    /// primary (`redis+sentinel://…`, [`locks::redis::Target`]) if Sentinels are configured,
    /// else `--redis-url`.
    pub fn redis_address(&self) -> Option<String> {
        match self.redis_sentinels.is_empty() {
            true => self.redis_url.clone(),
            false => Some(locks::redis::Target::sentinel_url(
                &self.redis_sentinels,
                &self.redis_master_name,
            )),
        }
    }

    pub fn batch_window(&self) -> Duration {
        Duration::from_millis(self.batch_window_ms)
    }
}
