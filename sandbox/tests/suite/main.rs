//! The harness's integration tests, one module per subject, in one test binary (one link instead of
//! one per file): real servers started, paused, killed and partitioned.

mod cleanup;
mod cluster_etcd;
mod cluster_mariadb_replication;
mod cluster_redis;
mod cluster_redis_sentinel;
mod cluster_zookeeper;
mod galera;
mod mariadb_replication;
mod pgbouncer;
mod postgres;
mod process_control;
mod relay;
mod relay_delay;
mod relay_exchanges;
