//! Criterion micro-benchmarks of every lock and strategy, against real servers.
//!
//! ```text
//! cargo bench -p benches                      # everything (a few minutes on 2 cores)
//! cargo bench -p benches --bench locks        # locks only
//! cargo bench -p benches -- 'uncontended/'    # one group (criterion's filter is a regex)
//! cargo bench -p benches -- --save-baseline before   # …change something…
//! cargo bench -p benches -- --baseline before        # compare against it
//! ```
//!
//! Each bench binary starts one set of throwaway servers ([`sandbox::Servers`]) and shares it
//! between its benchmarks; with `SECKILL_EXTERNAL=1` it uses the ones named by `DATABASE_URL`,
//! `REDIS_URL`, … instead (see [`sandbox::Endpoints::from_env`]).
//!
//! What each group measures, and why beside what:
//! * `uncontended-<backend>/…` (`benches/locks.rs`): one acquire + release of a free lock, in
//!   the same group as the raw operations of its backend (a Redis `PING`, a `PING` to all
//!   Redlock instances at once, a ZooKeeper `exists` and `setData`, an etcd `get` and `put`), so
//!   a lock reads as "N round trips". At the end the binary prints that table ([`report`]),
//!   from medians measured interleaved ([`interleave`]), with the requests each cycle sent as
//!   counted by [`locks::DistributedLock::backend_requests`].
//! * `handoff/<backend>` (`benches/locks.rs`): two contenders on two clients; from the moment
//!   the holder calls `release` to the moment the waiter's `acquire` returns ([`handoff`]).
//! * `purchase/<strategy>/{direct,http}` (`benches/strategies.rs`): one purchase through the
//!   strategy object, and the same through the HTTP API of the app served in-process, so the
//!   HTTP layer's share is the difference ([`shop`]); beside them `select-1/direct` (MariaDB)
//!   and `noop/http` (the HTTP stack alone).
//! * `refusal/<strategy>/<n>-thread` (`benches/refusals.rs`): a late click on a sold-out
//!   product refused from memory, the router called in-process by one thread and by two at
//!   once, beside `GET /api/noop` and HTTP's floor ([`testkit::floor`]) called alike.
//! * `statement/{cached,evicting}` (`benches/statements.rs`): a MariaDB statement whose
//!   connection's statement cache holds it, and one that must evict another first.

pub mod handoff;
pub mod interleave;
pub mod raw;
pub mod report;
pub mod shop;

use std::sync::OnceLock;
use std::time::Duration;

use criterion::Criterion;

/// The servers of one bench binary: started here, or named by the environment.
pub struct Env {
    pub endpoints: sandbox::Endpoints,
    /// Kept alive for the whole run; `None` in external mode.
    _servers: Option<sandbox::Servers>,
}

/// The bench binary's servers, started on first use.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| match sandbox::mode() {
        sandbox::Mode::External => Env {
            endpoints: sandbox::Endpoints::from_env()
                .unwrap_or_else(|e| panic!("SECKILL_EXTERNAL=1 but {e}")),
            _servers: None,
        },
        _ => {
            let servers = sandbox::Servers::start()
                .unwrap_or_else(|e| panic!("could not start the sandbox servers: {e}"));
            Env {
                endpoints: servers.endpoints(),
                _servers: Some(servers),
            }
        }
    })
}

/// Where the lock backends are, for [`fn@locks::connect`].
pub fn lock_endpoints(endpoints: &sandbox::Endpoints) -> locks::Endpoints {
    locks::Endpoints {
        redis: Some(endpoints.redis_url.clone()),
        redlock: endpoints.redlock_urls.clone(),
        zookeeper: Some(endpoints.zookeeper.clone()),
        etcd: endpoints.etcd.clone(),
        memcached: Some(endpoints.memcached.clone()),
        zookeeper_session_timeout: Duration::from_secs(10),
        database: None,
        postgres: None,
    }
}

/// The runtime every benchmark runs on: a current-thread one. Criterion drives each iteration
/// with `block_on`, on its own thread; on a multi-threaded runtime the connections' driver
/// tasks run on the workers, so every round trip of a call made by the benchmark paid a
/// cross-thread wake-up that a call made inside the app (on a worker) does not. That made a
/// direct strategy call *slower* than the same call over HTTP (whose handler runs on a worker)
/// by up to 0.8 ms. On one thread, both pay only their own work and round trips.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// Criterion settings that keep a whole `cargo bench -p benches` to a few minutes on 2 cores;
/// command-line flags (`--save-baseline`, `--baseline`, filters, `--sample-size`) still apply.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        // Criterion's default of 100 000 bootstrap resamples takes longer than the measurement
        // itself on 2 busy cores; 10 000 gives the same confidence intervals to a few percent.
        .nresamples(10_000)
        .configure_from_args()
}

/// A key no other run uses: `<what>:<random>`.
pub fn unique_key(what: &str) -> String {
    format!("bench:{what}:{}", uuid::Uuid::new_v4().simple())
}
