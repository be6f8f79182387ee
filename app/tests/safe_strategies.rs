//! Every safe strategy sells exactly the stock to a crowd of 200 concurrent buyers, over HTTP,
//! and the database accounts for every unit.

mod common;

use common::{Crowd, flash_sale, fresh_database_url, ledger, spawn_app, test_config};

const STOCK: i64 = 100;
const BUYERS: usize = 200;

/// 200 buyers (retrying `busy` answers with the same request id) against 100 units.
async fn sells_exactly_the_stock(strategy: &str) {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, STOCK).await;

    let crowd = Crowd {
        buyers: BUYERS,
        hold_ms: None,
        busy_retries: 200,
    };
    let tally = flash_sale(&[&app], 1, strategy, crowd).await;
    let truth = ledger(&database_url, 1).await;

    assert!(
        tally.unexpected.is_empty(),
        "{strategy}: unexpected answers {:?}",
        tally.unexpected
    );
    assert_eq!(tally.created, STOCK as usize, "{strategy}: {tally:?}");
    assert_eq!(
        tally.sold_out,
        BUYERS - STOCK as usize,
        "{strategy}: {tally:?}"
    );
    assert_eq!(truth.stock, 0, "{strategy}: {truth:?}");
    assert_eq!(truth.sold, STOCK, "{strategy}: {truth:?}");
    assert_eq!(truth.orders, STOCK, "{strategy}: {truth:?}");
    assert_eq!(
        truth.unaccounted(),
        0,
        "{strategy}: initial - stock != sum(orders): {truth:?}"
    );
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_update_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("conditional").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_versioning_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("optimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_row_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("pessimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_nowait_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("pessimistic-nowait").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_lock_table_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_db_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock-fenced").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewed_db_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock-renewed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_mutex_never_oversells_with_one_instance() {
    sells_exactly_the_stock("local-mutex").await;
}
