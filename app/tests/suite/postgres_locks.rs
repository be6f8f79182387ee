//! The strategies that lock, guarding a row kept in PostgreSQL: with the database's own locks —
//! the lock table's rows (`db-lock` and its forms), the row locks held by an open transaction
//! (`db-row-lock`, `db-blocking-insert`), PostgreSQL's advisory locks — and with locks outside
//! it — Redis, Redlock, ZooKeeper, etcd, memcached, the in-process mutex: the suites of
//! MariaDB's `safe_strategies`, `lock_backends`, `redis_split` and `unsafe_strategies`, run on
//! the sandbox's PostgreSQL. The lock decides who writes; the row's engine keeps what the holder
//! wrote, and the fenced forms' guarded `UPDATE` refuses a stale token there as on MariaDB.

use crate::postgres::sells_exactly_the_stock_on_postgres_across;
use crate::unsafe_strategies::local_mutex_oversells_across_instances;

use crate::common::fresh_postgres_url;

/// One test per strategy: `$name` sells exactly the stock to 200 buyers over `$instances`
/// instances, its rows on PostgreSQL.
macro_rules! sells_exactly_the_stock_on_postgres {
    ($($test:ident: $strategy:literal over $instances:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $test() {
            sells_exactly_the_stock_on_postgres_across($instances, $strategy).await;
        }
    )*};
}

sells_exactly_the_stock_on_postgres! {
    db_lock_table_never_oversells_on_postgres: "db-lock" over 1;
    fenced_db_lock_never_oversells_on_postgres: "db-lock-fenced" over 1;
    renewed_db_lock_never_oversells_on_postgres: "db-lock-renewed" over 1;
    reentrant_db_lock_never_oversells_on_postgres: "db-lock-reentrant" over 1;
    fenced_reentrant_db_lock_never_oversells_on_postgres: "db-lock-reentrant-fenced" over 1;
    row_lock_of_a_lock_table_never_oversells_on_postgres: "db-row-lock" over 1;
    fenced_row_lock_of_a_lock_table_never_oversells_on_postgres: "db-row-lock-fenced" over 1;
    blocking_insert_lock_never_oversells_on_postgres: "db-blocking-insert" over 1;
    fenced_blocking_insert_lock_never_oversells_on_postgres: "db-blocking-insert-fenced" over 1;
    session_advisory_lock_never_oversells_on_postgres: "pg-advisory" over 1;
    fenced_session_advisory_lock_never_oversells_on_postgres: "pg-advisory-fenced" over 1;
    transaction_advisory_lock_never_oversells_on_postgres: "pg-advisory-xact" over 1;
    fenced_transaction_advisory_lock_never_oversells_on_postgres: "pg-advisory-xact-fenced" over 1;
    redis_lock_never_oversells_on_postgres: "redis-lock" over 1;
    redis_watchdog_never_oversells_on_postgres: "redis-watchdog" over 1;
    fenced_redis_watchdog_never_oversells_on_postgres: "redis-watchdog-fenced" over 1;
    redis_fair_never_oversells_on_postgres: "redis-fair" over 1;
    fenced_redis_fair_never_oversells_on_postgres: "redis-fair-fenced" over 1;
    redlock_never_oversells_on_postgres: "redlock" over 1;
    zookeeper_lock_never_oversells_on_postgres: "zookeeper" over 1;
    fenced_zookeeper_lock_never_oversells_on_postgres: "zookeeper-fenced" over 1;
    etcd_lock_never_oversells_on_postgres: "etcd" over 1;
    fenced_etcd_lock_never_oversells_on_postgres: "etcd-fenced" over 1;
    memcached_lock_never_oversells_across_two_instances_on_postgres: "memcached" over 2;
    fenced_memcached_lock_never_oversells_across_two_instances_on_postgres: "memcached-fenced" over 2;
    local_mutex_never_oversells_with_one_instance_on_postgres: "local-mutex" over 1;
    split_redis_stock_never_oversells_across_two_instances_on_postgres: "redis-split" over 2;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_mutex_oversells_with_two_instances_on_postgres() {
    local_mutex_oversells_across_instances(&fresh_postgres_url().await).await;
}
