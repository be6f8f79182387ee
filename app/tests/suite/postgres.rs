//! The service on PostgreSQL (`DATABASE_URL=postgres://…`): every SQL strategy that is safe
//! sells exactly the stock, every one that is meant to be unsafe fails as it does on MariaDB,
//! the stock kept in Redis places its orders here, and an order's life (paid, cancelled,
//! expired, and a cancellation racing the expiry) gives its units back once — the suites of
//! MariaDB, run on the sandbox's PostgreSQL. The strategies that lock, in the database or
//! outside it, are in `postgres_locks`.

use crate::common;
use crate::expiry_sweep::two_sweeps_expire_each_order_once;
use crate::order_cancellation::{cancellation_races_expiry, cancelled_unit_sells_again};
use crate::order_payment::{late_payment_refused, paid_within_its_deadline};
use crate::per_user_limit::racy_limit_past_the_limit;
use crate::unsafe_strategies::{
    naive_loses_updates_and_oversells, unchecked_drives_stock_negative,
};

use common::{fresh_postgres_url, sells_exactly_the_stock_in, test_config};

/// [`common::sells_exactly_the_stock`] on a fresh PostgreSQL database, with every service the
/// strategy may need.
async fn sells_exactly_the_stock_on_postgres(strategy: &str) {
    sells_exactly_the_stock_on_postgres_across(1, strategy).await;
}

/// [`sells_exactly_the_stock_on_postgres`] with the buyers spread over `instances` instances.
pub(crate) async fn sells_exactly_the_stock_on_postgres_across(instances: usize, strategy: &str) {
    let database_url = fresh_postgres_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    sells_exactly_the_stock_in(&database_url, instances, strategy, |c| *c = config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_update_never_oversells_on_postgres() {
    sells_exactly_the_stock_on_postgres("conditional").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_versioning_never_oversells_on_postgres() {
    sells_exactly_the_stock_on_postgres("optimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_row_lock_never_oversells_on_postgres() {
    sells_exactly_the_stock_on_postgres("pessimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_nowait_never_oversells_on_postgres() {
    sells_exactly_the_stock_on_postgres("pessimistic-nowait").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_never_oversells_on_postgres() {
    sells_exactly_the_stock_on_postgres("batched").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_buckets_never_oversell_on_postgres() {
    sells_exactly_the_stock_on_postgres("sharded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fenced_redis_lock_never_oversells_a_postgres_row() {
    sells_exactly_the_stock_on_postgres("redis-lock-fenced").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_held_stock_places_its_orders_in_postgres() {
    sells_exactly_the_stock_on_postgres("redis-lua").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_stream_consumers_place_their_orders_in_postgres() {
    sells_exactly_the_stock_on_postgres("redis-lua-stream").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_read_modify_write_loses_updates_and_oversells_on_postgres() {
    naive_loses_updates_and_oversells(&fresh_postgres_url().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unchecked_decrement_drives_stock_negative_on_postgres() {
    unchecked_drives_stock_negative(&fresh_postgres_url().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racy_limit_lets_one_buyers_concurrent_clicks_past_the_limit_on_postgres() {
    racy_limit_past_the_limit(&fresh_postgres_url().await).await;
}

#[tokio::test]
async fn two_instances_sweeping_the_same_overdue_row_orders_expire_each_once_on_postgres() {
    two_sweeps_expire_each_order_once(&fresh_postgres_url().await, "row", "conditional").await;
}

#[tokio::test]
async fn two_instances_sweeping_the_same_overdue_bucketed_orders_expire_each_once_on_postgres() {
    two_sweeps_expire_each_order_once(&fresh_postgres_url().await, "buckets", "sharded").await;
}

#[tokio::test]
async fn two_instances_sweeping_the_same_overdue_redis_orders_expire_each_once_on_postgres() {
    two_sweeps_expire_each_order_once(&fresh_postgres_url().await, "redis", "redis-lua").await;
}

#[tokio::test]
async fn an_order_paid_within_its_deadline_is_paid_and_keeps_its_unit_on_postgres() {
    paid_within_its_deadline(&fresh_postgres_url().await).await;
}

#[tokio::test]
async fn a_payment_after_the_deadline_is_refused_and_no_unit_changes_hands_on_postgres() {
    late_payment_refused(&fresh_postgres_url().await).await;
}

#[tokio::test]
async fn a_cancelled_order_gives_its_unit_back_once_and_it_sells_again_on_postgres() {
    cancelled_unit_sells_again(&fresh_postgres_url().await).await;
}

#[tokio::test]
async fn cancellation_racing_expiry_gives_a_row_held_unit_back_once_on_postgres() {
    cancellation_races_expiry(&fresh_postgres_url().await, "row", "conditional", 5, 10).await;
}

#[tokio::test]
async fn cancellation_racing_expiry_gives_a_bucket_held_unit_back_once_on_postgres() {
    cancellation_races_expiry(&fresh_postgres_url().await, "buckets", "sharded", 5, 10).await;
}

#[tokio::test]
async fn cancellation_racing_expiry_gives_a_redis_held_unit_back_once_on_postgres() {
    cancellation_races_expiry(&fresh_postgres_url().await, "redis", "redis-lua", 5, 10).await;
}

#[tokio::test]
async fn a_deployment_on_postgres_offers_its_advisory_locks_and_every_lock_of_the_database() {
    let database_url = fresh_postgres_url().await;
    let app = common::spawn_app(test_config(&database_url)).await;
    let list = app.strategies().await;
    let service = |name: &str| {
        let all = list["strategies"].as_array().expect("array");
        let line = all.iter().find(|s| s["name"] == name)?;
        line["service"].as_str().map(String::from)
    };
    // The rows' strategies name the engine they run on; the locks in the database are its own.
    assert_eq!(service("conditional").as_deref(), Some("postgres"));
    assert_eq!(service("pg-advisory-fenced").as_deref(), Some("postgres"));
    assert_eq!(service("redis-lua").as_deref(), Some("redis"));
    for lock in [
        "db-lock",
        "db-lock-reentrant-fenced",
        "db-row-lock",
        "db-blocking-insert",
    ] {
        assert_eq!(service(lock).as_deref(), Some("postgres"), "{lock}: {list}");
    }
    app.stop().await;
    common::drop_database(&database_url).await;
}
