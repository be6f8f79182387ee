//! Lock hand-off rate against the raw write rate of the same backend, measured in one run.
//!
//! ```text
//! cargo run --release -p locks --example raw_vs_lock -- [seconds per measurement, default 5]
//! ```
//!
//! Starts its own ZooKeeper and etcd (sandbox), then for each backend measures
//! * **raw**: create+delete cycles (ZooKeeper, one session) or put+delete cycles (etcd, one
//!   client), one at a time — the floor of what any lock built on two writes can cost;
//! * **lock**: 16 contenders, each its own client, acquiring one lock in a loop with an empty
//!   critical section; every grant is a hand-off from one contender to the next.
//!
//! The ratio says what the recipe costs on top of its writes: the list/range after each
//! wake-up, the watch notification's trip, the waiter's own scheduling.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use locks::etcd::EtcdLock;
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock};
use zookeeper_client::{Acls, CreateMode};

const CONTENDERS: usize = 16;
const LEASE: Duration = Duration::from_secs(10);

fn main() -> anyhow::Result<()> {
    let seconds: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().context("seconds per measurement")?,
        None => 5,
    };
    let window = Duration::from_secs(seconds);
    let zookeeper = sandbox::ZooKeeper::start()?;
    let etcd = sandbox::Etcd::start()?;
    println!(
        "ZooKeeper {}, etcd {}; {seconds} s per measurement, {CONTENDERS} contenders",
        zookeeper.version()?,
        etcd.version()?
    );
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let zk = zookeeper.connect_string();
        let raw = zookeeper_raw(&zk, window).await?;
        let lock = handoffs(window, || ZooKeeperLock::connect(&zk, LEASE)).await?;
        report("zookeeper", "create+delete", raw, lock);
        let endpoints = vec![etcd.endpoint()];
        let raw = etcd_raw(&endpoints, window).await?;
        let lock = handoffs(window, || EtcdLock::connect(&endpoints)).await?;
        report("etcd", "put+delete", raw, lock);
        anyhow::Ok(())
    })
}

/// Hand-offs per second, and requests per hand-off.
struct Handoffs {
    per_second: f64,
    requests_per_grant: f64,
}

fn report(backend: &str, raw_name: &str, raw: f64, lock: Handoffs) {
    println!(
        "{backend:>9}: raw {raw_name} {raw:>8.0}/s | lock hand-offs {:>8.0}/s = {:.2} of raw | {:.1} requests per hand-off",
        lock.per_second,
        lock.per_second / raw,
        lock.requests_per_grant,
    );
}

async fn zookeeper_raw(connect: &str, window: Duration) -> anyhow::Result<f64> {
    let client = zookeeper_client::Client::connect(connect).await?;
    let dir = "/raw-rate";
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    client.mkdir(dir, &persistent).await?;
    let node = format!("{dir}/node");
    let end = Instant::now() + window;
    let mut cycles = 0u64;
    let started = Instant::now();
    while Instant::now() < end {
        client.create(&node, &[], &ephemeral).await?;
        client.delete(&node, None).await?;
        cycles += 1;
    }
    Ok(cycles as f64 / started.elapsed().as_secs_f64())
}

async fn etcd_raw(endpoints: &[String], window: Duration) -> anyhow::Result<f64> {
    let mut client = etcd_client::Client::connect(endpoints, None).await?;
    let end = Instant::now() + window;
    let mut cycles = 0u64;
    let started = Instant::now();
    while Instant::now() < end {
        client.put("/raw-rate/key", "x", None).await?;
        client.delete("/raw-rate/key", None).await?;
        cycles += 1;
    }
    Ok(cycles as f64 / started.elapsed().as_secs_f64())
}

/// 16 clients contend for one lock for `window`; counts grants made inside the window.
async fn handoffs<L, F, Fut>(window: Duration, connect: F) -> anyhow::Result<Handoffs>
where
    L: DistributedLock + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<L, locks::LockError>>,
{
    let mut clients = Vec::new();
    for _ in 0..CONTENDERS {
        clients.push(Arc::new(connect().await?));
    }
    let key = format!("handoff:{}", locks::new_owner_id());
    let grants = Arc::new(AtomicU64::new(0));
    let requests_before: u64 = clients.iter().map(|c| c.backend_requests()).sum();
    let started = Instant::now();
    let end = started + window;
    let mut tasks = tokio::task::JoinSet::new();
    for client in &clients {
        let (client, key, grants) = (Arc::clone(client), key.clone(), grants.clone());
        tasks.spawn(async move {
            loop {
                let options = AcquireOptions::new(LEASE).wait(LEASE);
                let guard = client.acquire(&key, options).await?;
                if Instant::now() >= end {
                    return guard.release().await.map(drop);
                }
                grants.fetch_add(1, Ordering::Relaxed);
                guard.release().await?;
            }
        });
    }
    tokio::time::sleep_until(end.into()).await;
    let grants = grants.load(Ordering::Relaxed);
    let requests: u64 = clients.iter().map(|c| c.backend_requests()).sum();
    // Every contender stops at its next grant, so the queue drains.
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(Handoffs {
        per_second: grants as f64 / window.as_secs_f64(),
        requests_per_grant: (requests - requests_before) as f64 / grants.max(1) as f64,
    })
}
