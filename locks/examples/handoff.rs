//! Lock hand-off benchmark: how fast and how fairly one contended lock changes hands.
//!
//! Starts its own throwaway Redis, measures the single-connection `PING` rate (one round trip
//! at a time: the physical limit of anything that needs round trips), then lets `TASKS` tasks
//! of one client contend for one lock with an empty critical section for `SECONDS`, and prints
//! hand-offs per second, their ratio to the `PING` rate, and the acquire wait distribution.
//!
//! ```text
//! cargo run --release -p locks --example handoff [BACKEND] [SECONDS] [TASKS] [CLIENTS]
//! ```
//! `BACKEND` is any Redis backend's name, `redis-watchdog` by default; defaults: 5 seconds, 16
//! tasks spread over 1 client (several clients stand for several processes). What
//! `redis-watchdog` aims at: hand-offs ≥ 20% of the PING rate, p99 wait within a few times the
//! mean (no waiter starves).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use locks::{AcquireOptions, Backend, DistributedLock, Endpoints};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let backend: Backend = args
        .next()
        .map_or(Ok(Backend::RedisWatchdog), |s| s.parse())?;
    let seconds: u64 = args
        .next()
        .map_or(Ok(5), |s| s.parse())
        .context("SECONDS")?;
    let tasks: usize = args.next().map_or(Ok(16), |s| s.parse()).context("TASKS")?;
    let clients: usize = args
        .next()
        .map_or(Ok(1), |s| s.parse())
        .context("CLIENTS")?;
    let run = Duration::from_secs(seconds);

    let redis = tokio::task::spawn_blocking(sandbox::Redis::start).await??;
    let url = redis.url();
    let endpoints = Endpoints {
        redis: Some(url.clone()),
        ..Endpoints::default()
    };
    let mut locks: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..clients.max(1) {
        locks.push(locks::connect(backend, &endpoints).await?);
    }

    let pings_per_sec = ping_rate(&url, run.min(Duration::from_secs(2))).await?;

    let deadline = Instant::now() + run;
    let started = Instant::now();
    let mut contenders = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let lock = Arc::clone(&locks[task % locks.len()]);
        contenders.spawn(async move {
            let mut waits = Vec::new();
            let options =
                AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(30));
            while Instant::now() < deadline {
                let asked = Instant::now();
                let guard = lock.acquire("handoff", options).await?;
                waits.push(asked.elapsed().as_micros() as u64);
                guard.release().await?;
            }
            anyhow::Ok(waits)
        });
    }
    let mut waits = Vec::new();
    for outcome in contenders.join_all().await {
        waits.extend(outcome?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    waits.sort_unstable();
    let grants = waits.len();
    let handoffs_per_sec = grants as f64 / elapsed;
    let mean = waits.iter().sum::<u64>() as f64 / grants.max(1) as f64;
    let pct = |p: f64| waits[((grants as f64 - 1.0) * p).round() as usize];

    println!(
        "backend            {backend} ({tasks} tasks, {} client(s), {seconds} s)",
        locks.len()
    );
    println!("PING rate          {pings_per_sec:.0}/s (one connection, sequential)");
    println!("hand-offs          {handoffs_per_sec:.0}/s ({grants} grants)");
    println!(
        "ratio              {:.1}% of the PING rate",
        100.0 * handoffs_per_sec / pings_per_sec
    );
    println!(
        "acquire wait (µs)  p50 {}  p99 {}  mean {mean:.0}  max {}",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    println!("p99 / mean         {:.2}", pct(0.99) as f64 / mean);
    let requests: u64 = locks.iter().map(|l| l.backend_requests()).sum();
    println!(
        "requests per grant {:.2}",
        requests as f64 / grants.max(1) as f64
    );
    Ok(())
}

/// Sequential PINGs over one connection for `for_how_long`: round trips per second.
async fn ping_rate(url: &str, for_how_long: Duration) -> anyhow::Result<f64> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let started = Instant::now();
    let mut pings = 0u64;
    while started.elapsed() < for_how_long {
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        pings += 1;
    }
    Ok(pings as f64 / started.elapsed().as_secs_f64())
}
