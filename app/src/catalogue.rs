//! The strategy catalogue: every strategy the service offers, one line each, and the facts
//! every client shares about them (name, safety, the service it needs, where it takes stock
//! from). It sits at the bottom of the crate, beside the wire types: it names strategies, it
//! does not build them ([`crate::strategy::registry`] does, from the same lines).
//!
//! A line names the strategy (the [`Strategy`] variant and its wire name), says how safe it is
//! ([`Safety`]), how it is made ([`Kind`]: a strategy of its own, with its service, its stock's
//! home and its builder; or the generic locked strategy over a [`Backend`], fenced or not) and
//! what it does in one sentence. `for_each_strategy!` hands the lines to a macro: here they
//! become the [`Strategy`] enum and an exhaustive `match`; in the registry, the builders. A
//! strategy is known to the service, the benchmark and the report the moment its line exists,
//! and a variant without a line cannot compile.
//!
//! **Adding a strategy** is one file under `app/src/strategy/` (a type implementing
//! [`crate::strategy::StockStrategy`] with a `build(&Deps)` function and a `//!` header
//! explaining why it is safe or unsafe) and one line below.

use std::fmt;
use std::str::FromStr;

use locks::Backend;
use serde::{Deserialize, Serialize};

/// How far a strategy keeps the sale's invariants under concurrency, across instances:
/// `sold ≤ initial stock`, and no buyer holding more than the per-user limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Safety {
    /// Never oversells, whatever the timing: the database or a fencing token enforces it.
    Safe,
    /// Never oversells *while the lock holds*: a holder that outlives its lease or session
    /// (a pause, a slow critical section, a partition) lets a second holder in, and nothing in
    /// the database stops the second write. Timing-dependent by design.
    WhileLeasesHold,
    /// Breaks an invariant under ordinary concurrency — oversells the stock, or sells one
    /// buyer more than the limit; exists to show how.
    Unsafe,
}

impl Safety {
    /// The words the README and the report use.
    pub fn words(self) -> &'static str {
        match self {
            Safety::Safe => "safe",
            Safety::WhileLeasesHold => "safe while leases hold",
            Safety::Unsafe => "unsafe",
        }
    }
}

impl fmt::Display for Safety {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.words())
    }
}

/// What a strategy needs to run: where its stock or its lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// MariaDB alone.
    Mariadb,
    /// The service process itself (memory).
    Process,
    Redis,
    /// Several independent Redis instances.
    Redlock,
    Zookeeper,
    Etcd,
    Memcached,
    /// PostgreSQL: its advisory locks, or the rows of a deployment on it.
    Postgres,
}

impl Service {
    /// The service a lock backend runs on.
    pub fn of(backend: Backend) -> Service {
        match backend {
            Backend::Redis
            | Backend::RedisWatchdog
            | Backend::RedisFair
            | Backend::RedisSetnxNoTtl
            | Backend::RedisGetThenSet
            | Backend::RedisUnsafeRelease => Service::Redis,
            Backend::Redlock => Service::Redlock,
            Backend::ZooKeeper => Service::Zookeeper,
            Backend::Etcd => Service::Etcd,
            Backend::DbLock
            | Backend::DbLockRenewed
            | Backend::DbLockReentrant
            | Backend::DbRowLock
            | Backend::DbBlockingInsert => Service::Mariadb,
            Backend::Memcached => Service::Memcached,
            Backend::PgAdvisory | Backend::PgAdvisoryXact => Service::Postgres,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Service::Mariadb => "mariadb",
            Service::Process => "process",
            Service::Redis => "redis",
            Service::Redlock => "redlock",
            Service::Zookeeper => "zookeeper",
            Service::Etcd => "etcd",
            Service::Memcached => "memcached",
            Service::Postgres => "postgres",
        }
    }
}

/// Where a product's live stock counter is kept.
///
/// A product's stock lives in exactly one home, chosen when the product is created or reset
/// (`PUT /api/products/{id}` with `"home"`); every other home holds zero units of it. A
/// strategy takes stock from its own home only, so a strategy of another home finds the
/// product sold out: strategies of different homes can be mixed on one product without ever
/// selling a unit twice.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Home {
    /// The `stock` column of the product's row in MariaDB, written in the order's transaction.
    #[default]
    Row,
    /// A counter in Redis (`--redis-url`), taken by a Lua script; the row keeps `stock = 0`.
    Redis,
    /// Rows of `stock_buckets`: the stock split over several rows (buckets) of one product, so
    /// that concurrent buyers lock different rows; the stock is their sum.
    Buckets,
    /// Counters in Redis: the stock split over several parts (the product's buckets), each in a
    /// slot of its own, so that on a Redis Cluster one product spreads over several shards (see
    /// [`crate::redis_stock::split`]); the row keeps `stock = 0`.
    RedisSplit,
}

impl Home {
    pub fn name(self) -> &'static str {
        match self {
            Home::Row => "row",
            Home::Redis => "redis",
            Home::Buckets => "buckets",
            Home::RedisSplit => "redis-split",
        }
    }
}

impl Home {
    /// Whether the stock is kept in Redis (one counter, or split in parts).
    pub fn in_redis(self) -> bool {
        matches!(self, Home::Redis | Home::RedisSplit)
    }
}

impl fmt::Display for Home {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Home {
    type Err = String;

    fn from_str(name: &str) -> Result<Home, String> {
        match name {
            "row" => Ok(Home::Row),
            "redis" => Ok(Home::Redis),
            "buckets" => Ok(Home::Buckets),
            "redis-split" => Ok(Home::RedisSplit),
            other => Err(format!("unknown stock home `{other}`")),
        }
    }
}

/// Whether a locked strategy hands its fencing token to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// The stock write trusts the lock alone.
    Off,
    /// The stock write is refused when a newer holder has claimed the product.
    On,
}

/// How a strategy is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A strategy of its own, running on `service`, taking stock from `home`.
    Own { service: Service, home: Home },
    /// The generic locked strategy over a lock backend.
    Locked { backend: Backend, fencing: Fencing },
}

/// One catalogue line.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub safety: Safety,
    pub kind: Kind,
    pub description: &'static str,
}

// `$name` is a `tt`, not a `literal`: a `literal` fragment reaches the derives wrapped in an
// invisible group, which serde reads through but utoipa does not — the document then listed
// the Rust variant names (`"Naive"`) instead of the wire names.
macro_rules! define_catalogue {
    ($($variant:ident = $name:tt, $safety:ident, $kind:ident ($($how:tt)*), $description:literal;)+) => {
        /// A strategy of the catalogue, by its wire name (`"conditional"`, `"redis-lock"`, …).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
                 Serialize, Deserialize, utoipa::ToSchema)]
        pub enum Strategy {
            $(#[serde(rename = $name)] $variant,)+
        }

        impl Strategy {
            /// Every strategy, in catalogue order (the order of reports and listings).
            pub const ALL: &[Strategy] = &[$(Strategy::$variant,)+];

            /// The wire name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Strategy::$variant => $name,)+
                }
            }

            /// Its catalogue line.
            pub fn spec(self) -> Spec {
                match self {
                    $(Strategy::$variant => Spec {
                        safety: Safety::$safety,
                        kind: kind!($kind($($how)*)),
                        description: $description,
                    },)+
                }
            }
        }
    };
}

/// The [`Kind`] of a line, its builder left out.
macro_rules! kind {
    (Own($service:ident, $home:ident, $module:ident :: $build:ident)) => {
        Kind::Own {
            service: Service::$service,
            home: Home::$home,
        }
    };
    (Locked($backend:ident, $fencing:ident)) => {
        Kind::Locked {
            backend: Backend::$backend,
            fencing: Fencing::$fencing,
        }
    };
}

/// Calls `$then!` with every catalogue line. A line is
/// `Variant = "wire-name", Safety, Own(Service, Home, module::builder) | Locked(Backend,
/// Fencing), "what it does";` — the builder, a function of the strategy's module under
/// `app/src/strategy/`, is read only where strategies are built.
macro_rules! for_each_strategy {
    ($then:ident) => {
        #[rustfmt::skip]
        $then! {
            Naive = "naive", Unsafe, Own(Mariadb, Row, naive::build), "reads stock, computes in the app, writes the absolute value back";
            Unchecked = "unchecked", Unsafe, Own(Mariadb, Row, unchecked::build), "checks stock, then `SET stock = stock - q` with no guard in the UPDATE";
            LocalMutex = "local-mutex", Unsafe, Own(Process, Row, local_mutex::build), "`naive` inside a per-product in-process mutex: correct with one instance only";
            Conditional = "conditional", Safe, Own(Mariadb, Row, conditional::build), "`UPDATE … SET stock = stock - q WHERE stock >= q` in one statement";
            RacyLimit = "racy-limit", Unsafe, Own(Mariadb, Row, racy_limit::build), "`conditional` for the stock, the per-user limit checked by a plain read first: one buyer's concurrent clicks all pass it";
            Optimistic = "optimistic", Safe, Own(Mariadb, Row, optimistic::build), "reads stock and version, `UPDATE … WHERE version = v`, bounded jittered retries";
            Pessimistic = "pessimistic", Safe, Own(Mariadb, Row, pessimistic::build_waiting), "`SELECT … FOR UPDATE` in a transaction: buyers queue on the row lock";
            PessimisticNowait = "pessimistic-nowait", Safe, Own(Mariadb, Row, pessimistic::build_nowait), "`SELECT … FOR UPDATE NOWAIT`: answers busy instead of queueing";
            Batched = "batched", Safe, Own(Mariadb, Row, batched::build), "purchases of a product queued for a few ms, committed as one conditional `UPDATE` and one multi-row order `INSERT`";
            Sharded = "sharded", Safe, Own(Mariadb, Buckets, sharded::build), "stock split over N bucket rows; a conditional decrement on a random non-empty bucket, sold out only when all are";
            DbLock = "db-lock", WhileLeasesHold, Locked(DbLock, Off), "lock row in a lock table (unique name, expiry, release by row id); stock read-modify-write inside";
            DbLockFenced = "db-lock-fenced", Safe, Locked(DbLock, On), "`db-lock`, and the stock write is fenced by the lock name's counter, bumped by every grant";
            DbLockRenewed = "db-lock-renewed", WhileLeasesHold, Locked(DbLockRenewed, Off), "`db-lock` with a renewal task that extends the lease while the holder lives";
            DbLockReentrant = "db-lock-reentrant", WhileLeasesHold, Locked(DbLockReentrant, Off), "`db-lock` whose row names its owner and counts its entries: the holder may enter again";
            DbLockReentrantFenced = "db-lock-reentrant-fenced", Safe, Locked(DbLockReentrant, On), "`db-lock-reentrant`, and the stock write is fenced by the lock name's counter";
            DbRowLock = "db-row-lock", WhileLeasesHold, Locked(DbRowLock, Off), "`SELECT … FOR UPDATE` of the product's row in a lock table, held by a transaction left open on the lock pool; stock read-modify-write inside";
            DbRowLockFenced = "db-row-lock-fenced", Safe, Locked(DbRowLock, On), "`db-row-lock`, and the stock write is fenced by a token drawn from a sequence once the row is locked";
            DbBlockingInsert = "db-blocking-insert", WhileLeasesHold, Locked(DbBlockingInsert, Off), "`INSERT … ON DUPLICATE KEY UPDATE` of the product's lock row in a transaction left open: the next buyer's upsert waits on the row";
            DbBlockingInsertFenced = "db-blocking-insert-fenced", Safe, Locked(DbBlockingInsert, On), "`db-blocking-insert`, and the stock write is fenced by a token drawn from a sequence once the row is locked";
            PgAdvisory = "pg-advisory", WhileLeasesHold, Locked(PgAdvisory, Off), "PostgreSQL's session advisory lock (`pg_try_advisory_lock`) on a connection kept out of the pool; stock read-modify-write inside";
            PgAdvisoryFenced = "pg-advisory-fenced", Safe, Locked(PgAdvisory, On), "`pg-advisory`, and the stock write is fenced by a token drawn from a sequence once the lock is held";
            PgAdvisoryXact = "pg-advisory-xact", WhileLeasesHold, Locked(PgAdvisoryXact, Off), "PostgreSQL's transaction advisory lock (`pg_advisory_xact_lock`) in a transaction held open, freed by its commit: waiters queue in the server";
            PgAdvisoryXactFenced = "pg-advisory-xact-fenced", Safe, Locked(PgAdvisoryXact, On), "`pg-advisory-xact`, and the stock write is fenced by a token drawn from a sequence once the lock is held";
            RedisLock = "redis-lock", WhileLeasesHold, Locked(Redis, Off), "`SET NX PX` lock per product, stock read-modify-write inside; unsafe past its lease";
            RedisLockFenced = "redis-lock-fenced", Safe, Locked(Redis, On), "`redis-lock` with the stock write fenced by the lock's `INCR` token";
            RedisWatchdog = "redis-watchdog", WhileLeasesHold, Locked(RedisWatchdog, Off), "Redisson-like lock renewed by a watchdog, waiters woken by pub/sub";
            RedisWatchdogFenced = "redis-watchdog-fenced", Safe, Locked(RedisWatchdog, On), "`redis-watchdog` with the stock write fenced by the lock's token";
            RedisFair = "redis-fair", WhileLeasesHold, Locked(RedisFair, Off), "`redis-watchdog` with a wait queue in Redis: buyers served first come, first served";
            RedisFairFenced = "redis-fair-fenced", Safe, Locked(RedisFair, On), "`redis-fair` with the stock write fenced by the lock's token";
            Redlock = "redlock", WhileLeasesHold, Locked(Redlock, Off), "quorum lock over independent Redis instances";
            RedisSetnxNoTtl = "redis-setnx-no-ttl", Unsafe, Locked(RedisSetnxNoTtl, Off), "`SETNX` then a separate `EXPIRE`: a crash between them leaves the lock stuck";
            RedisGetThenSet = "redis-get-then-set", Unsafe, Locked(RedisGetThenSet, Off), "`GET`, then `SET` if empty: two round trips, two holders";
            RedisUnsafeRelease = "redis-unsafe-release", Unsafe, Locked(RedisUnsafeRelease, Off), "release by plain `DEL`: deletes the next holder's lock after a lease expiry";
            Zookeeper = "zookeeper", WhileLeasesHold, Locked(ZooKeeper, Off), "Curator-style ephemeral sequential nodes, waiting on the predecessor";
            ZookeeperFenced = "zookeeper-fenced", Safe, Locked(ZooKeeper, On), "`zookeeper` with the stock write fenced by the lock node's czxid";
            Etcd = "etcd", WhileLeasesHold, Locked(Etcd, Off), "lease-bound keys, ownership by lowest create revision, watch on the predecessor";
            EtcdFenced = "etcd-fenced", Safe, Locked(Etcd, On), "`etcd` with the stock write fenced by the key's create revision";
            Memcached = "memcached", WhileLeasesHold, Locked(Memcached, Off), "memcached `add` lock with an expiry, CAS release; a restart or an eviction frees it";
            MemcachedFenced = "memcached-fenced", Safe, Locked(Memcached, On), "`memcached` with the stock write fenced by the lock's `incr` token";
            RedisLua = "redis-lua", Safe, Own(Redis, Redis, redis_lua::build), "stock counter in Redis: one Lua script checks, decrements and records the request id; then the order insert, given back if it fails";
            RedisLuaStream = "redis-lua-stream", Safe, Own(Redis, Redis, redis_lua_stream::build), "`redis-lua` that appends the order to a Redis Stream in the same script and answers 202; consumers place the orders in batches";
            RedisSplit = "redis-split", Safe, Own(Redis, RedisSplit, redis_split::build), "`redis-lua` on stock split over counters in different slots: each buyer charged in her home part, units moved home from the others when it is empty";
        }
    };
}
pub(crate) use for_each_strategy;

for_each_strategy!(define_catalogue);

impl Strategy {
    pub fn safety(self) -> Safety {
        self.spec().safety
    }

    /// The service it needs.
    pub fn service(self) -> Service {
        match self.spec().kind {
            Kind::Own { service, .. } => service,
            Kind::Locked { backend, .. } => Service::of(backend),
        }
    }

    /// Its description, one sentence.
    pub fn description(self) -> &'static str {
        self.spec().description
    }

    /// Where it takes stock from (locked strategies: the product row).
    pub fn home(self) -> Home {
        match self.spec().kind {
            Kind::Own { home, .. } => home,
            Kind::Locked { .. } => Home::Row,
        }
    }

    /// Whether only its lock guards its stock write: a locked strategy without fencing, which
    /// writes back an absolute figure computed from a plain read. A writer that does not take
    /// the lock is overwritten by it (so returns of its units take the lock too).
    pub fn lock_alone_guards_stock(self) -> bool {
        matches!(
            self.spec().kind,
            Kind::Locked {
                fencing: Fencing::Off,
                ..
            }
        )
    }

    /// The lock backend of a locked strategy.
    pub fn lock_backend(self) -> Option<Backend> {
        match self.spec().kind {
            Kind::Own { .. } => None,
            Kind::Locked { backend, .. } => Some(backend),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not in the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy `{0}`; known: {known}", known = known_names())]
pub struct UnknownStrategy(pub String);

fn known_names() -> String {
    let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
    names.join(", ")
}

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(name: &str) -> Result<Strategy, UnknownStrategy> {
        Strategy::ALL
            .iter()
            .copied()
            .find(|s| s.name() == name)
            .ok_or_else(|| UnknownStrategy(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_name_parses_back_to_itself_and_serializes_as_its_name() {
        for &s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(serde_json::json!(s.name()))
            );
        }
        let unknown = "nope".parse::<Strategy>().unwrap_err().to_string();
        assert!(unknown.contains("conditional"), "{unknown}");
    }

    #[test]
    fn a_fenced_locked_strategy_is_safe_and_an_unfenced_one_only_while_leases_hold() {
        for &s in Strategy::ALL {
            if let Kind::Locked { backend, fencing } = s.spec().kind {
                let expected = match (backend.is_broken(), fencing) {
                    (true, _) => Safety::Unsafe,
                    (false, Fencing::On) => Safety::Safe,
                    (false, Fencing::Off) => Safety::WhileLeasesHold,
                };
                assert_eq!(s.safety(), expected, "{s}");
            }
        }
    }
}
