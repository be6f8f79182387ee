//! Every safe strategy sells exactly the stock to a crowd of 200 concurrent buyers, over HTTP,
//! and the database accounts for every unit.

use crate::common;

use common::sells_exactly_the_stock;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_update_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("conditional", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_versioning_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("optimistic", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_row_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("pessimistic", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pessimistic_nowait_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("pessimistic-nowait", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_lock_table_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_db_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock-fenced", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewed_db_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock-renewed", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn row_lock_of_a_lock_table_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-row-lock", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_row_lock_of_a_lock_table_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-row-lock-fenced", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blocking_insert_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-blocking-insert", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_blocking_insert_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-blocking-insert-fenced", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reentrant_db_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock-reentrant", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_reentrant_db_lock_never_oversells_under_200_buyers() {
    sells_exactly_the_stock("db-lock-reentrant-fenced", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_mutex_never_oversells_with_one_instance() {
    sells_exactly_the_stock("local-mutex", |_| {}).await;
}
