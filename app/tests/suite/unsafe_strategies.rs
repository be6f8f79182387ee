//! Every unsafe strategy is observably unsafe: within a bounded number of rounds of a crowd it
//! oversells or drives the stock negative. The first round is plain load (on this machine it
//! already fails); later rounds inject a pause into the critical section to widen the race
//! window, so a fast machine cannot hide the bug. `local-mutex` only fails once there are two
//! instances.

use crate::common;

use common::{
    Crowd, Ledger, TestApp, flash_sale, fresh_database_url, ledger, spawn_app, test_config,
};

const STOCK: i64 = 20;
const ROUNDS: usize = 5;

const BUYERS: usize = 80;
const HOLD_MS: u64 = 20;

/// Runs rounds until `failed` says the ledger shows the failure; returns that ledger.
async fn observe(
    apps: &[&TestApp],
    strategy: &str,
    failed: impl Fn(&Ledger) -> bool,
) -> Option<Ledger> {
    for round in 0..ROUNDS {
        let product = round as u64 + 1;
        apps[0].reset(product, STOCK).await;
        let crowd = Crowd {
            buyers: BUYERS,
            hold_ms: (round > 0).then_some(HOLD_MS),
            busy_retries: 0,
        };
        let tally = flash_sale(apps, product, strategy, crowd).await;
        assert!(
            tally.unexpected.is_empty(),
            "{strategy}: unexpected answers {:?}",
            tally.unexpected
        );
        let truth = ledger(&apps[0].database_url, product).await;
        // Whatever else goes wrong, every 201 is an order row.
        assert_eq!(
            truth.orders, tally.created as i64,
            "{strategy}: {truth:?} {tally:?}"
        );
        eprintln!("{strategy}, round {round}: {truth:?}");
        if failed(&truth) {
            return Some(truth);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_read_modify_write_loses_updates_and_oversells() {
    naive_loses_updates_and_oversells(&fresh_database_url().await).await;
}

/// `naive` oversells within [`ROUNDS`] on the database `database_url` names (either engine),
/// and its oversell comes with lost updates.
pub(crate) async fn naive_loses_updates_and_oversells(database_url: &str) {
    let app = spawn_app(test_config(database_url)).await;
    let seen = observe(&[&app], "naive", |l| l.oversell() > 0).await;
    let truth = seen.expect("naive never oversold");
    assert!(
        truth.unaccounted() > 0,
        "an oversell without lost updates: {truth:?}"
    );
    app.stop().await;
    common::drop_database(database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unchecked_decrement_drives_stock_negative() {
    unchecked_drives_stock_negative(&fresh_database_url().await).await;
}

/// `unchecked` drives the stock below zero within [`ROUNDS`] on the database `database_url`
/// names (either engine), and loses no sale doing it.
pub(crate) async fn unchecked_drives_stock_negative(database_url: &str) {
    let app = spawn_app(test_config(database_url)).await;
    let seen = observe(&[&app], "unchecked", |l| l.stock < 0).await;
    let truth = seen.expect("unchecked never went negative");
    // Relative decrements lose nothing: the stock column counts every sale, below zero.
    assert_eq!(truth.unaccounted(), 0, "{truth:?}");
    app.stop().await;
    common::drop_database(database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_mutex_oversells_with_two_instances_but_not_with_one() {
    local_mutex_oversells_across_instances(&fresh_database_url().await).await;
}

/// `local-mutex` serialises one instance's buyers, and oversells within [`ROUNDS`] once a
/// second instance sells from the same row, on the database `database_url` names (either
/// engine).
pub(crate) async fn local_mutex_oversells_across_instances(database_url: &str) {
    let first = spawn_app(test_config(database_url)).await;

    // One instance: the in-process mutex serialises every buyer, even with the pause.
    first.reset(100, STOCK).await;
    let tally = flash_sale(
        &[&first],
        100,
        "local-mutex",
        Crowd {
            buyers: 40,
            hold_ms: Some(5),
            busy_retries: 0,
        },
    )
    .await;
    let alone = ledger(database_url, 100).await;
    assert!(tally.unexpected.is_empty(), "{:?}", tally.unexpected);
    assert_eq!(
        (alone.oversell(), alone.unaccounted(), alone.stock),
        (0, 0, 0),
        "{alone:?}"
    );

    // Two instances sharing the database: two mutexes, one row.
    let second = spawn_app(test_config(database_url)).await;
    let seen = observe(&[&first, &second], "local-mutex", |l| l.oversell() > 0).await;
    seen.expect("local-mutex never oversold with two instances");
    first.stop().await;
    second.stop().await;
    common::drop_database(database_url).await;
}
