//! Lock latency against real servers: uncontended acquire+release of every safe backend beside
//! its backend's raw round trips, and the hand-off between two contenders.
//!
//! Run with `cargo bench -p benches --bench locks`. At the end it prints the "N round trips"
//! table, from a second pass that measures each family's operations interleaved (see
//! `benches::interleave`), and the table of individual hand-offs (also written to
//! `<target>/criterion/round-trips.md` and `handoffs.md`). The deliberately broken Redis
//! variants are left out: they are not meant to be used, and their cost is the plain lock's
//! plus their extra commands.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use benches::interleave::{self, Op};
use benches::raw::{EtcdOps, RedisPing, ZooKeeperOps};
use benches::report::{LockRow, criterion_home, round_trip_table};
use benches::{handoff, lock_endpoints, unique_key};
use criterion::{Criterion, SamplingMode};
use futures::FutureExt;
use locks::{AcquireOptions, Backend, DistributedLock};
use tokio::runtime::Runtime;

/// Lease of the uncontended locks: never runs out during a cycle.
const LEASE: Duration = Duration::from_secs(10);

/// Cycles run before criterion's own warm-up, to count the requests a cycle sends (and to load
/// scripts, create lock directories, grant the etcd lease: one-time costs the figures exclude).
const COUNTED_CYCLES: u64 = 50;

/// Acquire and release a free lock once.
async fn cycle(lock: &dyn DistributedLock, key: &str) {
    let guard = lock
        .acquire(key, AcquireOptions::new(LEASE))
        .await
        .expect("a free lock is granted");
    guard.release().await.expect("release");
}

/// A lock benchmarked in a family, and the raw operations (by name, with how many) one
/// acquire+release of it cannot do without.
type LockSpec = (Backend, &'static [(&'static str, u32)]);

/// Benchmarks the raw operations of one backend and the locks built on it in one criterion
/// group, then measures them again interleaved for the round-trip table (`rounds` rounds).
fn family(
    c: &mut Criterion,
    rt: &Runtime,
    group_name: &str,
    raw: &[(&'static str, Op<'_>)],
    specs: &[LockSpec],
    rounds: usize,
    raw_medians: &mut Vec<(&'static str, Duration)>,
) -> Vec<LockRow> {
    let endpoints = lock_endpoints(&benches::env().endpoints);
    let clients: Vec<(Arc<dyn DistributedLock>, String, f64)> = specs
        .iter()
        .map(|&(backend, _)| {
            let lock = rt
                .block_on(locks::connect(backend, &endpoints))
                .unwrap_or_else(|e| panic!("cannot connect lock backend {backend}: {e}"));
            let key = unique_key(backend.name());
            let before = lock.backend_requests();
            rt.block_on(async {
                for _ in 0..COUNTED_CYCLES {
                    cycle(lock.as_ref(), &key).await;
                }
            });
            let per_cycle = (lock.backend_requests() - before) as f64 / COUNTED_CYCLES as f64;
            (lock, key, per_cycle)
        })
        .collect();
    let lock_ops: Vec<(&'static str, Op<'_>)> = specs
        .iter()
        .zip(&clients)
        .map(|((backend, _), (lock, key, _))| {
            let op: Op<'_> = Box::new(move || cycle(lock.as_ref(), key).boxed());
            (backend.name(), op)
        })
        .collect();
    // Re-boxed so that their futures share the (shorter) lifetime of the lock ops'.
    let raw_ops: Vec<(&'static str, Op<'_>)> = raw
        .iter()
        .map(|(name, op)| {
            let op: Op<'_> = Box::new(move || op());
            (*name, op)
        })
        .collect();
    let all: Vec<(&str, &Op<'_>)> = raw_ops
        .iter()
        .chain(&lock_ops)
        .map(|(name, op)| (*name, op))
        .collect();

    let mut group = c.benchmark_group(group_name);
    for (name, op) in &all {
        group.bench_function(*name, |b| b.to_async(rt).iter(op));
    }
    group.finish();

    let medians = rt.block_on(interleave::medians(&all, rounds));
    let median_of = |op: &str| medians[all.iter().position(|(n, _)| *n == op).expect("an op")];
    raw_medians.extend(raw.iter().map(|(name, _)| (*name, median_of(name))));
    specs
        .iter()
        .zip(&clients)
        .map(|((backend, minimum), (_, _, per_cycle))| LockRow {
            lock: backend.name(),
            median: median_of(backend.name()),
            requests_per_cycle: *per_cycle,
            minimum: minimum
                .iter()
                .map(|(op, n)| (*op, *n, median_of(op)))
                .collect(),
        })
        .collect()
}

/// The round-trip table's rows, and the medians of the raw operations.
fn uncontended(c: &mut Criterion, rt: &Runtime) -> (Vec<LockRow>, Vec<(&'static str, Duration)>) {
    let endpoints = &benches::env().endpoints;
    let mut rows = Vec::new();
    let mut raw = Vec::new();

    let redis = rt.block_on(RedisPing::connect(std::slice::from_ref(
        &endpoints.redis_url,
    )));
    let ping: Op<'_> = Box::new(|| redis.ping().boxed());
    let script: Op<'_> = Box::new(|| redis.empty_script().boxed());
    rows.extend(family(
        c,
        rt,
        "uncontended-redis",
        &[("ping", ping), ("empty-script", script)],
        // Each: one script to grant (with the fence), one to release.
        &[
            (Backend::Redis, &[("ping", 2)]),
            (Backend::RedisWatchdog, &[("ping", 2)]),
        ],
        1_000,
        &mut raw,
    ));

    let redlock = rt.block_on(RedisPing::connect(&endpoints.redlock_urls));
    let ping_all: Op<'_> = Box::new(|| redlock.ping_all().boxed());
    rows.extend(family(
        c,
        rt,
        "uncontended-redlock",
        &[("ping-all", ping_all)],
        // Three parallel rounds over all instances: grant, raise the fence, release.
        &[(Backend::Redlock, &[("ping-all", 3)])],
        500,
        &mut raw,
    ));

    let zookeeper = rt.block_on(ZooKeeperOps::connect(&endpoints.zookeeper));
    let exists: Op<'_> = Box::new(|| zookeeper.exists().boxed());
    let set_data: Op<'_> = Box::new(|| zookeeper.set_data().boxed());
    rows.extend(family(
        c,
        rt,
        "uncontended-zookeeper",
        &[("exists", exists), ("set-data", set_data)],
        // Writes: create the sequential node, delete it. Reads: list the queue, watch the own
        // node (the watch is what makes `Guard::lost` fire if the node goes).
        &[(Backend::ZooKeeper, &[("set-data", 2), ("exists", 2)])],
        200,
        &mut raw,
    ));

    let etcd = rt.block_on(EtcdOps::connect(&endpoints.etcd));
    let get: Op<'_> = Box::new(|| etcd.get().boxed());
    let put: Op<'_> = Box::new(|| etcd.put().boxed());
    rows.extend(family(
        c,
        rt,
        "uncontended-etcd",
        &[("get", get), ("put", put)],
        // Writes: put the queue key, delete it. Read: range for a predecessor. (The lease is
        // granted once per client and renewed in the background.)
        &[(Backend::Etcd, &[("put", 2), ("get", 1)])],
        200,
        &mut raw,
    ));

    (rows, raw)
}

/// Benchmarks the hand-off of every safe backend but the database locks; returns the table of individual hand-offs.
fn handoffs(c: &mut Criterion, rt: &Runtime) -> String {
    let endpoints = lock_endpoints(&benches::env().endpoints);
    let mut group = c.benchmark_group("handoff");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    let mut table = String::from(
        "| lock | hand-off (median) | 90th percentile | hand-offs |\n|---|---:|---:|---:|\n",
    );
    // The database locks (MariaDB's, PostgreSQL's) are not among the lock services this bench
    // connects to.
    let measured = |b: &Backend| !b.is_broken() && !b.uses_database() && !b.uses_postgres();
    for backend in Backend::ALL.into_iter().filter(measured) {
        let name = backend.name();
        let connect = || -> Arc<dyn DistributedLock> {
            rt.block_on(locks::connect(backend, &endpoints))
                .unwrap_or_else(|e| panic!("cannot connect lock backend {name}: {e}"))
        };
        let (holder, waiter) = (connect(), connect());
        let key = unique_key(&format!("handoff-{name}"));
        let samples = Arc::new(Mutex::new(Vec::new()));
        group.bench_function(name, |b| {
            b.to_async(rt).iter_custom(|iters| {
                handoff::total(
                    Arc::clone(&holder),
                    Arc::clone(&waiter),
                    key.clone(),
                    iters,
                    Arc::clone(&samples),
                )
            });
        });
        let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
        if samples.is_empty() {
            continue; // filtered out
        }
        let count = samples.len();
        let (median, p90) = handoff::percentiles(samples);
        let _ = writeln!(
            table,
            "| {name} | {:.2} ms | {:.2} ms | {count} |",
            median.as_secs_f64() * 1e3,
            p90.as_secs_f64() * 1e3
        );
    }
    group.finish();
    table
}

fn main() {
    let rt = benches::runtime();
    let mut c = benches::criterion();
    let (rows, raw) = uncontended(&mut c, &rt);
    let handoff_table = handoffs(&mut c, &rt);
    c.final_summary();

    let mut table = round_trip_table(&rows);
    let raw: Vec<String> = raw
        .iter()
        .map(|(op, d)| format!("{op} {:.0} µs", d.as_secs_f64() * 1e6))
        .collect();
    let _ = writeln!(table, "\nRaw operations (medians): {}.", raw.join(", "));
    println!(
        "\nUncontended acquire+release against the raw operations it is made of \
         (medians, measured interleaved):\n"
    );
    println!("{table}");
    println!(
        "Hand-off, from the holder's release call to the waiter's grant (every hand-off \
         measured, warm-up included):\n"
    );
    println!("{handoff_table}");
    if let Some(home) = criterion_home()
        && std::fs::create_dir_all(&home).is_ok()
    {
        let _ = std::fs::write(home.join("round-trips.md"), &table);
        let _ = std::fs::write(home.join("handoffs.md"), &handoff_table);
    }
}
