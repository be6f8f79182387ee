//! The benchmark's integration tests, one module per subject, in one test binary (one link and one
//! compile of the shared helpers instead of one per file).

mod common;

mod accounting;
mod baselines;
mod committed;
mod coordinated_omission;
mod distance;
mod expiry;
mod flood;
mod galera;
mod isolation;
mod live_page;
mod lock_bench;
mod lock_matrix;
mod lock_peers;
mod on_postgres;
mod order_scenarios;
mod overload;
mod redis_cluster;
mod replicas;
mod scenarios;
