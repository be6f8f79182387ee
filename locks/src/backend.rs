//! Every lock backend this crate implements, as one enum: the vocabulary the app's strategy
//! catalogue, the benchmark's `--backend` flag and the reports share.
//!
//! The kebab-case [`Backend::name`] is the one spelling everywhere (reports, CLI flags, JSON):
//! [`Display`](std::fmt::Display), [`FromStr`], serde and (with the `clap` feature)
//! `clap::ValueEnum` all use it, so parsing user input happens here and nowhere else.

use std::fmt;
use std::str::FromStr;

/// A lock backend of this crate. Connect one with [`crate::connect()`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// `SET NX PX` + compare-and-delete ([`crate::redis::RedisLock`]).
    Redis,
    /// Reentrant hash lock renewed by a watchdog ([`crate::redis::RedisWatchdogLock`]).
    RedisWatchdog,
    /// Majority of independent Redis instances ([`crate::redis::Redlock`]).
    Redlock,
    /// Ephemeral sequential znodes ([`crate::zookeeper::ZooKeeperLock`]).
    ZooKeeper,
    /// Leased keys ordered by create revision ([`crate::etcd::EtcdLock`]).
    Etcd,
    /// A row per held lock in a MySQL/MariaDB table, lease only (`database::DbLock::leased`,
    /// feature `mysql`).
    DbLock,
    /// The lock-table row with a renewal task (`database::DbLock::renewed`, feature `mysql`).
    DbLockRenewed,
    /// The lock-table row with its owner and a hold count: reentrant
    /// (`database::DbReentrantLock`, feature `mysql`).
    DbLockReentrant,
    /// A row lock taken by `SELECT … FOR UPDATE` and held by the open transaction
    /// (`database::DbRowLock`, feature `mysql`).
    DbRowLock,
    /// A row lock taken by `INSERT … ON DUPLICATE KEY UPDATE` and held by the open transaction
    /// (`database::DbInsertLock`, feature `mysql`).
    DbBlockingInsert,
    /// `add` with an expiry, compare-and-swap release, `incr` fence ([`crate::memcached::MemcachedLock`]).
    Memcached,
    /// The watchdog's hash lock with a wait queue in Redis: first come, first served
    /// ([`crate::redis::RedisFairLock`]).
    RedisFair,
    /// PostgreSQL's session advisory lock, held by a connection of its own
    /// (`postgres::PgAdvisoryLock`, feature `postgres`).
    PgAdvisory,
    /// PostgreSQL's transaction advisory lock, held by an open transaction
    /// (`postgres::PgAdvisoryXactLock`, feature `postgres`).
    PgAdvisoryXact,
    /// BROKEN: `SETNX`, then a separate `EXPIRE` ([`crate::redis::SetnxNoTtlLock`]).
    RedisSetnxNoTtl,
    /// BROKEN: `GET`, then `SET` if empty ([`crate::redis::GetThenSetLock`]).
    RedisGetThenSet,
    /// BROKEN: release by plain `DEL` ([`crate::redis::UnsafeReleaseLock`]).
    RedisUnsafeRelease,
}

impl Backend {
    /// Every backend, in the order reports list them: the safe ones, then the broken ones.
    pub const ALL: [Backend; 17] = [
        Backend::Redis,
        Backend::RedisWatchdog,
        Backend::Redlock,
        Backend::ZooKeeper,
        Backend::Etcd,
        Backend::DbLock,
        Backend::DbLockRenewed,
        Backend::DbLockReentrant,
        Backend::DbRowLock,
        Backend::DbBlockingInsert,
        Backend::Memcached,
        Backend::RedisFair,
        Backend::PgAdvisory,
        Backend::PgAdvisoryXact,
        Backend::RedisSetnxNoTtl,
        Backend::RedisGetThenSet,
        Backend::RedisUnsafeRelease,
    ];

    /// The stable kebab-case name, as reports and CLI flags spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::RedisWatchdog => "redis-watchdog",
            Backend::Redlock => "redlock",
            Backend::ZooKeeper => "zookeeper",
            Backend::Etcd => "etcd",
            Backend::DbLock => "db-lock",
            Backend::DbLockRenewed => "db-lock-renewed",
            Backend::DbLockReentrant => "db-lock-reentrant",
            Backend::DbRowLock => "db-row-lock",
            Backend::DbBlockingInsert => "db-blocking-insert",
            Backend::Memcached => "memcached",
            Backend::RedisFair => "redis-fair",
            Backend::PgAdvisory => "pg-advisory",
            Backend::PgAdvisoryXact => "pg-advisory-xact",
            Backend::RedisSetnxNoTtl => "redis-setnx-no-ttl",
            Backend::RedisGetThenSet => "redis-get-then-set",
            Backend::RedisUnsafeRelease => "redis-unsafe-release",
        }
    }

    /// One line: how it locks, and what it survives or breaks.
    pub const fn description(self) -> &'static str {
        match self {
            Backend::Redis => {
                "SET NX PX + compare-and-delete; safe while the holder beats its lease"
            }
            Backend::RedisWatchdog => {
                "Redisson-like reentrant hash lock, renewed by a watchdog, pub/sub hand-off"
            }
            Backend::Redlock => {
                "majority of independent Redis instances; survives a minority's loss"
            }
            Backend::ZooKeeper => {
                "ephemeral sequential nodes, each waiter watching its predecessor"
            }
            Backend::Etcd => "leased keys ordered by create revision, waiting on the predecessor",
            Backend::DbLock => {
                "row in a lock table: unique name, expiry by the database clock, release by row id"
            }
            Backend::DbLockRenewed => {
                "the lock-table row, its lease extended every third of it while the holder lives"
            }
            Backend::DbLockReentrant => {
                "the lock-table row with its owner and a hold count: the holder may enter again"
            }
            Backend::DbRowLock => {
                "SELECT … FOR UPDATE of the name's row in an open transaction; COMMIT releases, a closed connection frees it"
            }
            Backend::DbBlockingInsert => {
                "INSERT … ON DUPLICATE KEY UPDATE of the name's row in an open transaction: the next inserter waits on the row"
            }
            Backend::Memcached => {
                "memcached `add` with an expiry, CAS release; a restart or an eviction frees it"
            }
            Backend::RedisFair => {
                "the watchdog lock plus a wait queue in Redis: first come, first served, one waiter woken per turn"
            }
            Backend::PgAdvisory => {
                "PostgreSQL session advisory lock on a connection of its own; unlock or a closed session frees it"
            }
            Backend::PgAdvisoryXact => {
                "PostgreSQL transaction advisory lock: held by an open transaction, freed by its end"
            }
            Backend::RedisSetnxNoTtl => {
                "SETNX then a separate EXPIRE: a crash in between locks out everyone"
            }
            Backend::RedisGetThenSet => "GET, then SET if empty: two round trips, two holders",
            Backend::RedisUnsafeRelease => {
                "release by plain DEL: deletes the next holder's lock after an expiry"
            }
        }
    }

    /// `true` for the locks kept in the database (feature `mysql`): MariaDB's
    /// ([`crate::Endpoints::database`]) or, where only it is given, PostgreSQL's
    /// ([`crate::Endpoints::postgres`], feature `postgres` too).
    pub const fn uses_database(self) -> bool {
        matches!(
            self,
            Backend::DbLock
                | Backend::DbLockRenewed
                | Backend::DbLockReentrant
                | Backend::DbRowLock
                | Backend::DbBlockingInsert
        )
    }

    /// `true` for PostgreSQL's advisory locks (feature `postgres`, [`crate::Endpoints::postgres`]).
    pub const fn uses_postgres(self) -> bool {
        matches!(self, Backend::PgAdvisory | Backend::PgAdvisoryXact)
    }

    /// `true` for the variants that exist to show a failure: they do not give mutual exclusion
    /// even while every lease holds.
    pub const fn is_broken(self) -> bool {
        match self {
            Backend::RedisSetnxNoTtl | Backend::RedisGetThenSet | Backend::RedisUnsafeRelease => {
                true
            }
            Backend::Redis
            | Backend::RedisWatchdog
            | Backend::Redlock
            | Backend::ZooKeeper
            | Backend::Etcd
            | Backend::DbLock
            | Backend::DbLockRenewed
            | Backend::DbLockReentrant
            | Backend::DbRowLock
            | Backend::DbBlockingInsert
            | Backend::Memcached
            | Backend::RedisFair
            | Backend::PgAdvisory
            | Backend::PgAdvisoryXact => false,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no [`Backend`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown lock backend `{0}` (known: {known})", known = known_names())]
pub struct UnknownBackend(pub String);

fn known_names() -> String {
    Backend::ALL.map(Backend::name).join(", ")
}

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(name: &str) -> Result<Backend, UnknownBackend> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| UnknownBackend(name.to_owned()))
    }
}

impl serde::Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Backend {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Backend, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for Backend {
    fn value_variants<'a>() -> &'a [Backend] {
        &Backend::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.description()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_backend() {
        for backend in Backend::ALL {
            assert_eq!(backend.name().parse::<Backend>(), Ok(backend));
            assert_eq!(backend.to_string(), backend.name());
        }
    }

    #[test]
    fn names_are_distinct() {
        let mut names = Backend::ALL.map(Backend::name).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Backend::ALL.len());
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_known_ones_listed() {
        let e = "tair".parse::<Backend>().unwrap_err();
        let message = e.to_string();
        assert!(message.contains("`tair`"), "{message}");
        for backend in Backend::ALL {
            assert!(message.contains(backend.name()), "{message}");
        }
    }

    #[test]
    fn serde_spells_a_backend_by_its_name() {
        let json = serde_json::to_string(&Backend::ZooKeeper).unwrap();
        assert_eq!(json, r#""zookeeper""#);
        let back: Backend = serde_json::from_str(r#""redis-get-then-set""#).unwrap();
        assert_eq!(back, Backend::RedisGetThenSet);
        assert!(serde_json::from_str::<Backend>(r#""ZooKeeper""#).is_err());
    }
}
