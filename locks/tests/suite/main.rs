//! The lock library's integration tests, one module per lock or property, in one test binary (one
//! link and one compile of the shared helpers instead of one per file). They run against the shared
//! or throwaway servers (`sandbox`); fault tests start private ones.

mod leases;
mod relay;

mod acquire_within_budget;
mod cluster_etcd;
mod cluster_etcd_leader_loss;
mod cluster_redis_sentinel;
mod cluster_zookeeper;
mod cluster_zookeeper_leader_loss;
mod contention;
mod database;
mod etcd;
mod etcd_lease_at_grant;
mod memcached;
mod postgres;
mod redis_broken_variants;
mod redis_fair;
mod redis_lease_distance;
mod redis_plain;
mod redis_redlock;
mod redis_replicated;
mod redis_watchdog;
mod redis_watchdog_handoff;
mod redis_watchdog_loss_deadline;
mod zookeeper;
mod zookeeper_and_etcd_failed_deletes;
mod zookeeper_and_etcd_partitioned_holder;
mod zookeeper_and_etcd_waiters;
mod zookeeper_handoff;
