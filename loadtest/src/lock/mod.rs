//! `seckill-bench lock`: W tasks contend for one lock; inside it each increments a plain
//! read-then-write counter in Redis. Under a correct lock the increments never overlap, so
//! the counter ends equal to the number of grants; every overlap of two "holders" can lose an
//! increment, so `violations = grants − final counter` is a lower bound on how often mutual
//! exclusion failed.
//!
//! The workers are spread over C lock clients (`--clients`, default 1: all share one client,
//! one connection): fairness across processes is what C = W shows. Besides speed the report
//! says how the grants were shared ([`fairness`]: per-worker counts, Jain's index, the longest
//! wait, how often the longest waiter was served) and what a grant cost in requests: as the
//! clients count them ([`locks::DistributedLock::backend_requests`]: round trips), and the
//! commands the server executed for them where it can tell ([`server_commands`]), and how long
//! a hand-off took, from a release to the next grant ([`handoff`]). The database lock
//! (`db-lock`) keeps its table in a database of its own on the harness's MariaDB.
//!
//! [`matrix`] (`seckill-bench lock matrix`) runs this benchmark and a few probes for every
//! backend and sets the figures against the requirements of a lock service; [`peers`] runs the
//! same workload with the Python lock libraries beside ours.

mod fairness;
mod handoff;
pub mod matrix;
pub mod peers;
mod server_commands;

pub use fairness::jain_index;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use app::api::Service;
use deadpool_redis::redis;
use locks::history::{self, History};
use locks::recorded::FencedStore;
use locks::{AcquireOptions, Backend, DistributedLock, LockError};
use sandbox::Endpoints;
use serde::Serialize;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use tokio::time::Instant;

use crate::analyse::history::Checked;
use crate::drive::latency::Latencies;

/// Lease of every acquisition: far longer than any probe, so a correct lock never expires
/// under a live holder.
const LEASE: Duration = Duration::from_secs(10);
/// How long one `acquire` may wait before the worker re-checks the deadline.
const WAIT: Duration = Duration::from_secs(1);

/// What a contention run measured: speed and mutual exclusion, then fairness and what a grant
/// cost in requests.
#[derive(Debug, Clone, Serialize)]
pub struct LockReport {
    pub backend: Backend,
    pub workers: usize,
    pub seconds: f64,
    pub acquisitions: u64,
    pub acquisitions_per_sec: f64,
    pub acquire_p50_us: u64,
    pub acquire_p99_us: u64,
    pub acquire_max_us: u64,
    pub violations: i64,
    /// Lock clients the workers were spread over (worker `i` uses client `i mod clients`).
    pub clients: usize,
    /// Grants per worker, in worker order.
    pub grants_per_worker: Vec<u64>,
    /// Jain's fairness index over `grants_per_worker` (1 = even, 1/workers = one took all).
    pub fairness_index: Option<f64>,
    /// The longest time a worker wanted the lock before it got it, across timed-out acquires.
    pub longest_wait_us: u64,
    /// Share of grants that went to the worker that had waited longest (1 = first come, first
    /// served).
    pub oldest_waiter_served: Option<f64>,
    /// Requests the lock clients sent per grant (their own count).
    pub client_requests_per_grant: Option<f64>,
    /// Commands the lock's Redis servers executed per grant, the probe's taken off: Redis's
    /// `total_commands_processed`, which counts a script once plus every command it calls, so
    /// this is server work, not round trips (those are `client_requests_per_grant`). `None`
    /// where the server has no cheap counter (ZooKeeper, etcd, the database).
    pub server_commands_per_grant: Option<f64>,
    /// From a holder's release call to the next grant: median and 99th percentile, in µs.
    pub handoff_p50_us: Option<u64>,
    pub handoff_p99_us: Option<u64>,
    /// With `--check`: how many violations the lock-history checker found in the run's
    /// recorded history (every attempt, grant, release and fenced write of every worker); 0 when
    /// clean, `None` without `--check`.
    pub history_violations: Option<usize>,
    /// The same, by the property each violation breaks.
    pub history_by_rule: Option<Checked>,
    /// The offending slices of history of the first [`SHOWN_VIOLATIONS`] violations.
    pub history_slices: Vec<String>,
    /// The round trip relays added to every server the locks reached (`--rtt`), in µs; `None`:
    /// reached directly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_trip_added_us: Option<u64>,
}

/// Violations whose slice of history the report keeps.
pub const SHOWN_VIOLATIONS: usize = 5;

/// ZooKeeper session timeout: the lease of the ZooKeeper lock.
const ZOOKEEPER_SESSION: Duration = Duration::from_secs(10);

/// The database that holds the lock table of the database lock (`db-lock`), created if missing.
const LOCK_DATABASE: &str = "seckill_bench_locks";
/// Connections of one database-lock client (the app's default lock pool).
const LOCK_POOL: u32 = 8;

/// Connects `backend` at the harness's endpoints.
pub async fn connect_backend(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<Arc<dyn DistributedLock>, locks::ConnectError> {
    connect_leased(backend, endpoints, ZOOKEEPER_SESSION).await
}

/// [`connect_backend`] with a ZooKeeper session of `session`: the ZooKeeper lock's lease.
pub async fn connect_leased(
    backend: Backend,
    endpoints: &Endpoints,
    session: Duration,
) -> Result<Arc<dyn DistributedLock>, locks::ConnectError> {
    let database: Option<locks::Database> = match Service::of(backend) {
        Service::Mariadb => Some(
            lock_database(&endpoints.database_url)
                .await
                .map_err(LockError::unavailable)?
                .into(),
        ),
        _ => None,
    };
    let postgres: Option<locks::Database> = match Service::of(backend) {
        Service::Postgres => {
            let url =
                (endpoints.postgres_url.as_deref()).ok_or(locks::ConnectError::NotConfigured {
                    backend,
                    what: "a PostgreSQL server (POSTGRES_URL)",
                })?;
            Some(
                lock_postgres(url)
                    .await
                    .map_err(LockError::unavailable)?
                    .into(),
            )
        }
        _ => None,
    };
    let endpoints = locks::Endpoints {
        redis: Some(endpoints.redis_url.clone()),
        redlock: endpoints.redlock_urls.clone(),
        zookeeper: Some(endpoints.zookeeper.clone()),
        etcd: endpoints.etcd.clone(),
        memcached: Some(endpoints.memcached.clone()),
        zookeeper_session_timeout: session,
        database,
        postgres,
    };
    locks::connect(backend, &endpoints).await
}

/// A pool of its own on the PostgreSQL server `url` (its default database: advisory locks are
/// kept per database, and nothing else is written there but the tokens' sequence): each client
/// has its own connections, as separate processes would.
async fn lock_postgres(url: &str) -> Result<sqlx::PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(LOCK_POOL)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
}

/// A pool of its own on [`LOCK_DATABASE`] at the server `server_url` (the database created if
/// missing): each database-lock client has its own connections, as separate processes would.
pub(crate) async fn lock_database(server_url: &str) -> Result<sqlx::MySqlPool, sqlx::Error> {
    let server = server_url.trim_end_matches('/');
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(server)
        .await?;
    // A constant identifier, no input.
    let create = format!("CREATE DATABASE IF NOT EXISTS {LOCK_DATABASE}");
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(&admin)
        .await?;
    admin.close().await;
    MySqlPoolOptions::new()
        .max_connections(LOCK_POOL)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&format!("{server}/{LOCK_DATABASE}"))
        .await
}

/// Connects `clients` independent clients of `backend` (each with its own connections).
pub async fn connect_clients(
    backend: Backend,
    endpoints: &Endpoints,
    clients: usize,
) -> Result<Vec<Arc<dyn DistributedLock>>> {
    if clients == 0 {
        bail!("--clients must be at least 1");
    }
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        connected.push(connect_backend(backend, endpoints).await?);
    }
    Ok(connected)
}

/// Runs the contention benchmark against `clients` of `backend` (worker `i` uses client
/// `i mod clients.len()`), probing with a counter in the harness's Redis.
pub async fn bench(
    backend: Backend,
    clients: Vec<Arc<dyn DistributedLock>>,
    endpoints: &Endpoints,
    workers: usize,
    seconds: f64,
    hold: Duration,
    check: bool,
) -> Result<LockReport> {
    if workers == 0 {
        bail!("--workers must be at least 1");
    }
    if clients.is_empty() || clients.len() > workers {
        bail!("--clients must be between 1 and --workers ({workers})");
    }
    let run = uuid::Uuid::new_v4().simple().to_string();
    let key = Arc::new(format!("seckill-bench:lock:{run}"));
    let counter = Arc::new(format!("seckill-bench:lock-probe:{run}"));
    let mut config = deadpool_redis::Config::from_url(endpoints.redis_url.as_str());
    config.pool = Some(deadpool_redis::PoolConfig::new(workers));
    let pool = config.create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
    // One probe connection per worker, made before the run and kept: each probe costs exactly
    // GET and SET (taking a connection from the pool per probe would add the pool's check of a
    // reused connection, UNWATCH and PING, one more round trip inside every critical section).
    let mut probe_conns = futures::future::try_join_all((0..workers).map(|_| pool.get())).await?;
    let mut server = match server_commands::servers(backend, endpoints) {
        Some((urls, probe_there)) => {
            Some((server_commands::Counter::open(&urls).await?, probe_there))
        }
        None => None,
    };
    let server_before = match &mut server {
        Some((counter, _)) => Some(counter.read().await?),
        None => None,
    };
    let requests_before: u64 = clients.iter().map(|c| c.backend_requests()).sum();
    let queue = Arc::new(fairness::Queue::new(workers));
    let handoffs = Arc::new(handoff::Handoffs::default());
    // `--check`: each worker writes down its steps, and the probe is also a fenced write.
    let store = check.then(|| Arc::new(FencedStore::new(Arc::new(History::new()))));

    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let lock = clients[w % clients.len()].clone();
            let (key, counter, queue, handoffs, store) = (
                key.clone(),
                counter.clone(),
                queue.clone(),
                handoffs.clone(),
                store.clone(),
            );
            let mut conn = probe_conns.pop().expect("one probe connection per worker");
            let me = format!("worker-{w}");
            tokio::spawn(async move {
                let mut latencies = Latencies::default();
                let mut grants = 0u64;
                let mut longest = Duration::ZERO;
                while Instant::now() < end {
                    let asked = Instant::now();
                    queue.wants(w, asked);
                    if let Some(store) = &store {
                        store.history().attempt(&me);
                    }
                    let guard = match lock
                        .acquire(&key, AcquireOptions::new(LEASE).wait(WAIT))
                        .await
                    {
                        Ok(g) => g,
                        Err(LockError::Timeout { .. } | LockError::NoQuorum { .. }) => continue,
                        Err(e) => return Err(anyhow::Error::from(e)),
                    };
                    let now = Instant::now();
                    handoffs.granted(now);
                    latencies.record(now - asked);
                    longest = longest.max(queue.granted(w, now));
                    grants += 1;
                    if let Some(store) = &store {
                        store.history().grant(&me, guard.fencing_token());
                        store.write(&me, guard.fencing_token());
                    }
                    probe(&mut conn, &counter).await?;
                    if !hold.is_zero() {
                        tokio::time::sleep(hold).await;
                    }
                    if let Some(store) = &store {
                        store.history().release(&me, guard.fencing_token());
                    }
                    handoffs.releasing(Instant::now());
                    // Whether it still owned the lock does not matter here: the counter tells.
                    let _ = guard.release().await;
                }
                Ok::<_, anyhow::Error>((grants, latencies, longest))
            })
        })
        .collect();
    let mut grants_per_worker = Vec::with_capacity(workers);
    let mut latencies = Latencies::default();
    let mut longest_wait = Duration::ZERO;
    for h in handles {
        let (g, l, longest) = h.await??;
        grants_per_worker.push(g);
        latencies.add(&l);
        longest_wait = longest_wait.max(longest);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let grants: u64 = grants_per_worker.iter().sum();
    let per_grant = |n: u64| (grants > 0).then(|| n as f64 / grants as f64);
    let server_commands = match (&mut server, server_before) {
        (Some((counter, probe_there)), Some(before)) => {
            let all = counter.since(before).await?;
            let probe = if *probe_there { 2 * grants } else { 0 };
            Some(all.saturating_sub(probe))
        }
        _ => None,
    };
    let requests: u64 = clients.iter().map(|c| c.backend_requests()).sum::<u64>() - requests_before;
    let mut conn = pool.get().await?;
    let final_count: Option<i64> = redis::cmd("GET")
        .arg(&*counter)
        .query_async(&mut conn)
        .await?;
    redis::cmd("DEL")
        .arg(&*counter)
        .query_async::<()>(&mut conn)
        .await?;
    let summary = latencies.summary();
    let found = store.map(|store| history::check_events(&store.history().events()));
    let handoff = handoffs.p50_p99();
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    Ok(LockReport {
        backend,
        workers,
        seconds: elapsed,
        acquisitions: grants,
        acquisitions_per_sec: grants as f64 / elapsed,
        acquire_p50_us: summary.p50_us,
        acquire_p99_us: summary.p99_us,
        acquire_max_us: summary.max_us,
        violations: grants as i64 - final_count.unwrap_or(0),
        clients: clients.len(),
        fairness_index: jain_index(&grants_per_worker),
        grants_per_worker,
        longest_wait_us: u64::try_from(longest_wait.as_micros()).unwrap_or(u64::MAX),
        oldest_waiter_served: queue.oldest_served_share(),
        client_requests_per_grant: per_grant(requests),
        server_commands_per_grant: server_commands.and_then(per_grant),
        handoff_p50_us: handoff.map(|(p50, _)| micros(p50)),
        handoff_p99_us: handoff.map(|(_, p99)| micros(p99)),
        history_violations: found.as_ref().map(Vec::len),
        history_by_rule: found.as_deref().map(Checked::from_violations),
        history_slices: found
            .iter()
            .flatten()
            .take(SHOWN_VIOLATIONS)
            .map(ToString::to_string)
            .collect(),
        round_trip_added_us: None,
    })
}

/// The mutual-exclusion probe: GET, then SET the value plus one, as two separate commands so
/// that two overlapping holders lose an increment.
async fn probe(conn: &mut deadpool_redis::Connection, counter: &str) -> Result<()> {
    let v: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query_async(&mut *conn)
        .await?;
    redis::cmd("SET")
        .arg(counter)
        .arg(v.unwrap_or(0) + 1)
        .query_async::<()>(&mut *conn)
        .await?;
    Ok(())
}

impl std::fmt::Display for LockReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let distance = match self.round_trip_added_us {
            None => "servers reached directly".to_string(),
            Some(us) => format!("every server {} ms away (relays)", us as f64 / 1e3),
        };
        writeln!(
            f,
            "backend {}: {} workers over {} clients, {:.1} s, {distance}",
            self.backend, self.workers, self.clients, self.seconds
        )?;
        writeln!(
            f,
            "  acquisitions  {} ({:.0}/s)",
            self.acquisitions, self.acquisitions_per_sec
        )?;
        writeln!(
            f,
            "  acquire µs    p50 {}  p99 {}  max {}",
            self.acquire_p50_us, self.acquire_p99_us, self.acquire_max_us
        )?;
        writeln!(f, "  violations    {}", self.violations)?;
        let or_none = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
        };
        writeln!(
            f,
            "  fairness      Jain {}  oldest waiter served {}  longest wait {} µs",
            or_none(self.fairness_index, 3),
            or_none(self.oldest_waiter_served, 3),
            self.longest_wait_us
        )?;
        writeln!(f, "  grants/worker {:?}", self.grants_per_worker)?;
        writeln!(
            f,
            "  per grant     {} client requests, {} server commands",
            or_none(self.client_requests_per_grant, 2),
            or_none(self.server_commands_per_grant, 2)
        )?;
        let us = |v: Option<u64>| v.map_or_else(|| "n/a".to_owned(), |v| v.to_string());
        write!(
            f,
            "  hand-off µs   p50 {}  p99 {} (release call to next grant)",
            us(self.handoff_p50_us),
            us(self.handoff_p99_us)
        )?;
        if let Some(found) = self.history_violations {
            write!(f, "\n  history check {found} violation(s)")?;
            for slice in &self.history_slices {
                write!(f, "\n{slice}")?;
            }
            if found > self.history_slices.len() {
                write!(f, "\n… and {} more", found - self.history_slices.len())?;
            }
        }
        Ok(())
    }
}
