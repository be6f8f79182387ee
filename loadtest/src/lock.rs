//! `seckill-bench lock`: W tasks contend for one lock; inside it each increments a plain
//! read-then-write counter in Redis. Under a correct lock the increments never overlap, so
//! the counter ends equal to the number of grants; every overlap of two "holders" can lose an
//! increment, so `violations = grants − final counter` is a lower bound on how often mutual
//! exclusion failed.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use deadpool_redis::redis;
use locks::{AcquireOptions, Backend, DistributedLock, LockError};
use sandbox::Endpoints;
use serde::Serialize;
use tokio::time::Instant;

use crate::latency::Latencies;

/// Lease of every acquisition: far longer than any probe, so a correct lock never expires
/// under a live holder.
const LEASE: Duration = Duration::from_secs(10);
/// How long one `acquire` may wait before the worker re-checks the deadline.
const WAIT: Duration = Duration::from_secs(1);

/// The result, with exactly the keys of issue 6.
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
}

/// ZooKeeper session timeout: the lease of the ZooKeeper lock.
const ZOOKEEPER_SESSION: Duration = Duration::from_secs(10);

/// Connects `backend` at the harness's endpoints.
pub async fn connect_backend(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<Arc<dyn DistributedLock>, locks::ConnectError> {
    let endpoints = locks::Endpoints {
        redis: Some(endpoints.redis_url.clone()),
        redlock: endpoints.redlock_urls.clone(),
        zookeeper: Some(endpoints.zookeeper.clone()),
        etcd: endpoints.etcd.clone(),
        memcached: Some(endpoints.memcached.clone()),
        zookeeper_session_timeout: ZOOKEEPER_SESSION,
        database: None,
    };
    locks::connect(backend, &endpoints).await
}

/// Runs the contention benchmark against `lock` (reported as `backend`), probing with a counter in `redis_url`.
pub async fn bench(
    backend: Backend,
    lock: Arc<dyn DistributedLock>,
    redis_url: &str,
    workers: usize,
    seconds: f64,
    hold: Duration,
) -> Result<LockReport> {
    if workers == 0 {
        bail!("--workers must be at least 1");
    }
    let run = uuid::Uuid::new_v4().simple().to_string();
    let key = Arc::new(format!("seckill-bench:lock:{run}"));
    let counter = Arc::new(format!("seckill-bench:lock-probe:{run}"));
    let mut config = deadpool_redis::Config::from_url(redis_url);
    config.pool = Some(deadpool_redis::PoolConfig::new(workers));
    let pool = config.create_pool(Some(deadpool_redis::Runtime::Tokio1))?;

    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (lock, key, counter, pool) =
                (lock.clone(), key.clone(), counter.clone(), pool.clone());
            tokio::spawn(async move {
                let mut latencies = Latencies::default();
                let mut grants = 0u64;
                while Instant::now() < end {
                    let asked = Instant::now();
                    let guard = match lock
                        .acquire(&key, AcquireOptions::new(LEASE).wait(WAIT))
                        .await
                    {
                        Ok(g) => g,
                        Err(LockError::Timeout { .. } | LockError::NoQuorum { .. }) => continue,
                        Err(e) => return Err(anyhow::Error::from(e)),
                    };
                    latencies.record(asked.elapsed());
                    grants += 1;
                    probe(&pool, &counter).await?;
                    if !hold.is_zero() {
                        tokio::time::sleep(hold).await;
                    }
                    // Whether it still owned the lock does not matter here: the counter tells.
                    let _ = guard.release().await;
                }
                Ok::<_, anyhow::Error>((grants, latencies))
            })
        })
        .collect();
    let mut grants = 0u64;
    let mut latencies = Latencies::default();
    for h in handles {
        let (g, l) = h.await??;
        grants += g;
        latencies.add(&l);
    }
    let elapsed = start.elapsed().as_secs_f64();
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
    })
}

/// The mutual-exclusion probe: GET, then SET the value plus one, as two separate commands so
/// that two overlapping holders lose an increment.
async fn probe(pool: &deadpool_redis::Pool, counter: &str) -> Result<()> {
    let mut conn = pool.get().await?;
    let v: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query_async(&mut conn)
        .await?;
    redis::cmd("SET")
        .arg(counter)
        .arg(v.unwrap_or(0) + 1)
        .query_async::<()>(&mut conn)
        .await?;
    Ok(())
}

impl std::fmt::Display for LockReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "backend {}: {} workers, {:.1} s",
            self.backend, self.workers, self.seconds
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
        write!(f, "  violations    {}", self.violations)
    }
}
