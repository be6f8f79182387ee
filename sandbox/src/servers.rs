//! A whole set of servers, and the endpoints that name one.

use std::process::Command;

use serde::Serialize;

use crate::{Error, Etcd, MariaDb, Memcached, Redis, Result, ZooKeeper};

/// How many independent Redis instances the Redlock set has.
pub const REDLOCK_INSTANCES: usize = 5;

/// Where each backend is reachable. The same variables configure the app, the benchmark and
/// the tests (see [`crate::Mode`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoints {
    /// `mysql://user[:password]@host:port`, without a database name.
    pub database_url: String,
    pub redis_url: String,
    /// Independent Redis instances for Redlock.
    pub redlock_urls: Vec<String>,
    /// ZooKeeper connect string, `host:port[,host:port…]`.
    pub zookeeper: String,
    /// etcd client endpoints.
    pub etcd: Vec<String>,
    /// memcached address, `host:port`.
    pub memcached: String,
    /// PostgreSQL, `postgres://user@host:port` without a database, for its advisory locks
    /// (`pg-advisory`, `pg-advisory-xact`); `None`: none here (the harness's set starts none:
    /// who needs one starts it, as the lock matrix does for its rows).
    pub postgres_url: Option<String>,
}

impl Endpoints {
    pub const DATABASE_URL: &str = "DATABASE_URL";
    pub const REDIS_URL: &str = "REDIS_URL";
    pub const REDLOCK_URLS: &str = "REDLOCK_URLS";
    pub const ZOOKEEPER_CONNECT: &str = "ZOOKEEPER_CONNECT";
    pub const ETCD_ENDPOINTS: &str = "ETCD_ENDPOINTS";
    pub const MEMCACHED_ADDR: &str = "MEMCACHED_ADDR";
    pub const POSTGRES_URL: &str = "POSTGRES_URL";

    /// Reads the six variables (and `POSTGRES_URL`, if set); lists are comma-separated.
    pub fn from_env() -> Result<Endpoints> {
        Ok(Endpoints {
            database_url: var(Self::DATABASE_URL)?,
            redis_url: var(Self::REDIS_URL)?,
            redlock_urls: list(&var(Self::REDLOCK_URLS)?),
            zookeeper: var(Self::ZOOKEEPER_CONNECT)?,
            etcd: list(&var(Self::ETCD_ENDPOINTS)?),
            memcached: var(Self::MEMCACHED_ADDR)?,
            postgres_url: var(Self::POSTGRES_URL).ok(),
        })
    }

    /// The variables that name these endpoints, for a child process's environment.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            (Self::DATABASE_URL, self.database_url.clone()),
            (Self::REDIS_URL, self.redis_url.clone()),
            (Self::REDLOCK_URLS, self.redlock_urls.join(",")),
            (Self::ZOOKEEPER_CONNECT, self.zookeeper.clone()),
            (Self::ETCD_ENDPOINTS, self.etcd.join(",")),
            (Self::MEMCACHED_ADDR, self.memcached.clone()),
        ]
        .into_iter()
        .chain((self.postgres_url.clone()).map(|url| (Self::POSTGRES_URL, url)))
        .collect()
    }

    /// Sets [`Self::env_vars`] on `command`.
    pub fn apply(&self, command: &mut Command) {
        command.envs(self.env_vars());
    }
}

pub(crate) fn var(name: &'static str) -> Result<String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(Error::Env {
            var: name,
            reason: "not set (external mode needs every backend's address)".into(),
        }),
    }
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Every backend the project uses, started together: MariaDB, one Redis, the Redlock set of
/// [`REDLOCK_INSTANCES`] Redis instances, ZooKeeper, etcd and memcached.
pub struct Servers {
    pub mariadb: MariaDb,
    pub redis: Redis,
    pub redlock: Vec<Redis>,
    pub zookeeper: ZooKeeper,
    pub etcd: Etcd,
    pub memcached: Memcached,
}

/// Each server's name and version, for reports.
#[derive(Debug, Clone, Serialize)]
pub struct Versions {
    pub mariadb: String,
    pub redis: String,
    pub zookeeper: String,
    pub etcd: String,
    pub memcached: String,
}

impl Servers {
    /// Starts everything in parallel; fails with the first server's error (logs included).
    pub fn start() -> Result<Servers> {
        std::thread::scope(|s| {
            let mariadb = s.spawn(MariaDb::start);
            let zookeeper = s.spawn(ZooKeeper::start);
            let etcd = s.spawn(Etcd::start);
            let redis = s.spawn(Redis::start);
            let redlock = s.spawn(|| Redis::start_many(REDLOCK_INSTANCES));
            let memcached = s.spawn(Memcached::start);
            let join = "server start thread panicked";
            Ok(Servers {
                mariadb: mariadb.join().expect(join)?,
                redis: redis.join().expect(join)?,
                redlock: redlock.join().expect(join)?,
                zookeeper: zookeeper.join().expect(join)?,
                etcd: etcd.join().expect(join)?,
                memcached: memcached.join().expect(join)?,
            })
        })
    }

    pub fn endpoints(&self) -> Endpoints {
        Endpoints {
            database_url: self.mariadb.url(),
            redis_url: self.redis.url(),
            redlock_urls: self.redlock.iter().map(Redis::url).collect(),
            zookeeper: self.zookeeper.connect_string(),
            etcd: vec![self.etcd.endpoint()],
            memcached: self.memcached.addr(),
            postgres_url: None,
        }
    }

    pub fn versions(&self) -> Result<Versions> {
        Ok(Versions {
            mariadb: self.mariadb.version()?,
            redis: self.redis.version()?,
            zookeeper: self.zookeeper.version()?,
            etcd: self.etcd.version()?,
            memcached: self.memcached.version()?,
        })
    }
}
