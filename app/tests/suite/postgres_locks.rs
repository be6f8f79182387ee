//! The strategies that lock outside the database — Redis, Redlock, ZooKeeper, etcd, memcached,
//! the in-process mutex — guarding a row kept in PostgreSQL: the suites of MariaDB's
//! `lock_backends`, `redis_split` and `unsafe_strategies`, run on the sandbox's PostgreSQL. The
//! lock decides who writes; the row's engine only has to keep what the holder wrote, and the
//! fenced forms' guarded `UPDATE` has to refuse a stale token there as it does on MariaDB.

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
