//! Once a product is sold out, an instance refuses from memory: the refusal reaches no
//! strategy, no database and no Redis. A click that did buy still gets its order back, a
//! refusal for more units than are left teaches nothing, and stock that comes back makes every
//! instance forget — at once, by the announcement every instance listens for. A memory that ages
//! is renewed, winners and all, while the shelf stays empty: the winners are read again only
//! once someone may have bought since, and then a new winner is among them.

use crate::common;

use app::api::Strategy;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn click(user: &str, strategy: Strategy) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": format!("r-{user}"), "strategy": strategy })
}

/// Reads of a product's rules into memory so far.
async fn reads(app: &TestApp) -> u64 {
    app.metric("seckill_product_reads_total")
        .await
        .expect("the product reads counter")
}

/// Waits until a click on the sold-out `product` is refused without reaching a strategy.
async fn until_refused_from_memory(app: &TestApp, product: u64, strategy: Strategy) {
    common::wait_until("a refusal from memory", || async {
        let mark = app.purchases_started().await;
        let (status, _) = app.order(product, &click("probe", strategy), None).await;
        status == StatusCode::CONFLICT && app.purchases_started().await == mark
    })
    .await;
}

/// Clicks on the sold-out `product`, each refused `sold_out`, until the instance has read
/// products `reads` times in all: its memory aged and was renewed.
async fn refused_until_renewed(app: &TestApp, product: u64, strategy: Strategy, reads: u64) {
    let mut n = 0;
    common::wait_until("the memory renewed", || {
        n += 1;
        async move {
            let (status, answer) = app
                .order(product, &click(&format!("late-{n}"), strategy), None)
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
            assert_eq!(answer["error"], "sold_out", "{strategy}: {answer}");
            self::reads(app).await >= reads
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_sell_out_refusals_come_from_memory_and_a_winners_retry_still_gets_its_order() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    config.product_memory_ms = 3_600_000;
    let app = spawn_app(config).await;
    for (product, strategy) in (1..).zip([
        Strategy::Conditional,
        Strategy::RedisLua,
        Strategy::RedisLuaStream,
        Strategy::Batched,
        Strategy::Sharded,
    ]) {
        app.reset_in(product, 3, strategy.home()).await;
        for buyer in ["a", "b", "c"] {
            let (status, answer) = app.order(product, &click(buyer, strategy), None).await;
            assert!(status.is_success(), "{strategy}: {status} {answer}");
        }
        let (status, _) = app.order(product, &click("late", strategy), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{strategy}");
        // Learning is done beside the answer; wait until the memory refuses.
        let before = app.purchases_started().await;
        until_refused_from_memory(&app, product, strategy).await;
        let mark = app.purchases_started().await;
        for n in 0..20 {
            let (status, answer) = app
                .order(product, &click(&format!("late-{n}"), strategy), None)
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
            assert_eq!(answer["error"], "sold_out");
        }
        assert_eq!(
            app.purchases_started().await,
            mark,
            "{strategy}: a refusal reached a strategy"
        );
        assert!(mark >= before);
        // A winner's retry reaches its strategy and gets its order (or, queued, its 202).
        app.drained(product).await;
        let (status, answer) = app.order(product, &click("a", strategy), None).await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
        assert_eq!(answer["request_id"], "r-a", "{strategy}: {answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sold_out_memory_that_ages_is_renewed_with_its_winners_so_refusals_stay_in_memory() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    // Short enough that the memory ages out several times while the refusals go on.
    config.product_memory_ms = 100;
    let app = spawn_app(config).await;
    for (product, strategy) in (1..).zip([Strategy::Conditional, Strategy::RedisLua]) {
        app.reset_in(product, 1, strategy.home()).await;
        let (status, _) = app.order(product, &click("a", strategy), None).await;
        assert!(status.is_success(), "{strategy}: {status}");
        until_refused_from_memory(&app, product, strategy).await;
        let mark = app.purchases_started().await;
        let reads = reads(&app).await;
        // Until the product was read again three times: the memory aged and was renewed.
        refused_until_renewed(&app, product, strategy, reads + 3).await;
        assert_eq!(
            app.purchases_started().await,
            mark,
            "{strategy}: once the memory aged, a refusal reached a strategy"
        );
        let (status, answer) = app.order(product, &click("a", strategy), None).await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
        assert_eq!(answer["request_id"], "r-a", "{strategy}: {answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_that_comes_back_makes_every_instance_forget_the_sell_out() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    // Nothing is forgotten by age: only the announcement can make B sell again.
    config.product_memory_ms = 3_600_000;
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    for (product, strategy) in (1..).zip([Strategy::Conditional, Strategy::RedisLua]) {
        a.reset_in(product, 1, strategy.home()).await;
        let (status, _) = b.order(product, &click("first", strategy), None).await;
        assert!(status.is_success());
        common::wait_until("B refuses from memory", || async {
            let mark = b.purchases_started().await;
            let (status, _) = b.order(product, &click("probe", strategy), None).await;
            status == StatusCode::CONFLICT && b.purchases_started().await == mark
        })
        .await;
        a.reset_in(product, 1, strategy.home()).await;
        common::wait_until("B sells the unit that came back", || async {
            b.order(product, &click("second", strategy), None).await.0 != StatusCode::CONFLICT
        })
        .await;
        let view = b.drained(product).await;
        assert_eq!((view.stock, view.sold), (0, 1), "{strategy}: {view:?}");
    }
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}

/// Instances A and B remember the sell-out of one unit for an hour; the unit's buyer cancels
/// on A. Returns B's answers to a click once the unit is back.
async fn a_unit_returned_on_another_instance(strategy: Strategy, keep_sold_out: bool) -> bool {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    config.product_memory_ms = 3_600_000;
    config.keep_sold_out_on_return = keep_sold_out;
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    a.reset_in(1, 1, strategy.home()).await;
    let (status, _) = a.order(1, &click("first", strategy), None).await;
    assert!(status.is_success());
    for app in [&a, &b] {
        common::wait_until("the instance refuses from memory", || async {
            let mark = app.purchases_started().await;
            let (status, _) = app.order(1, &click("probe", strategy), None).await;
            status == StatusCode::CONFLICT && app.purchases_started().await == mark
        })
        .await;
    }
    let reads_before = reads(&b).await;
    let (status, cancelled) = common::life::act(&a, 1, "first", "r-first", "cancel", &[]).await;
    assert_eq!(status, StatusCode::OK, "{strategy}: {cancelled}");
    let sells = match keep_sold_out {
        false => {
            common::wait_until("B sells the unit that came back", || async {
                b.order(1, &click("second", strategy), None).await.0 != StatusCode::CONFLICT
            })
            .await;
            let view = b.drained(1).await;
            assert_eq!((view.stock, view.sold), (0, 1), "{strategy}: {view:?}");
            // Units came back, the rules did not change: B forgot the sell-out only.
            assert_eq!(
                reads(&b).await,
                reads_before,
                "{strategy}: B read the product's rules again"
            );
            true
        }
        true => {
            // Nothing tells B: it refuses from memory while the unit is on the shelf.
            let mark = b.purchases_started().await;
            let (status, answer) = b.order(1, &click("second", strategy), None).await;
            assert_eq!(answer["error"], "sold_out", "{strategy}: {answer}");
            assert_eq!(
                b.purchases_started().await,
                mark,
                "{strategy}: B asked its strategy"
            );
            assert_eq!(common::life::product(&a, 1).await["stock"], 1, "{strategy}");
            status != StatusCode::CONFLICT
        }
    };
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
    sells
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sold_out_product_whose_unit_came_back_sells_it_on_every_instance_that_keeps_its_rules() {
    for strategy in [Strategy::Conditional, Strategy::RedisLua] {
        assert!(a_unit_returned_on_another_instance(strategy, false).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_invalidation_an_instance_refuses_a_returned_unit_from_memory() {
    for strategy in [Strategy::Conditional, Strategy::RedisLua] {
        assert!(!a_unit_returned_on_another_instance(strategy, true).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_memory_past_half_its_life_is_renewed_behind_the_refusals_it_keeps_answering() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.db_pool_size = 2;
    // Long enough that the probes below come before the memory's end on a slow machine: the
    // renewal starts at half of it.
    config.product_memory_ms = 8_000;
    let app = spawn_app(config).await;
    app.reset(1, 1).await;
    app.reset(2, 10).await;
    let (status, _) = app.order(1, &click("a", Strategy::Pessimistic), None).await;
    assert!(status.is_success());
    until_refused_from_memory(&app, 1, Strategy::Pessimistic).await;
    // Both connections held by purchases of another product for longer than the memory lives:
    // a read of product 1 now waits for one of them.
    let held: Vec<_> = (0..2)
        .map(|i| {
            let body = click(&format!("holder-{i}"), Strategy::Pessimistic);
            let request = app.purchase(2, &body);
            tokio::spawn(async move {
                let _ = request.header("x-seckill-hold-ms", "30000").send().await;
            })
        })
        .collect();
    common::wait_until("both connections held", || async {
        app.metric("seckill_purchases_in_flight").await == Some(2)
    })
    .await;
    let reads_before = reads(&app).await;
    let mut n = 0;
    common::wait_until("the memory's renewal under way", || {
        n += 1;
        let app = &app;
        async move {
            let (status, answer) = app
                .order(1, &click(&format!("late-{n}"), Strategy::Pessimistic), None)
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{answer}");
            assert_eq!(answer["error"], "sold_out");
            reads(app).await > reads_before
        }
    })
    .await;
    // The renewal waits for a connection; the refusals do not wait for it.
    for n in 0..20 {
        let (status, answer) = app
            .order(
                1,
                &click(&format!("later-{n}"), Strategy::Pessimistic),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    }
    assert_eq!(
        app.metric("seckill_purchases_in_flight").await,
        Some(2),
        "the refusals were answered only once the held purchases ended"
    );
    for task in held {
        task.abort();
    }
    app.stop().await;
    drop_database(&database_url).await;
}

/// Purchases read so far to learn or renew sold-out products' winners.
async fn winners_read(app: &TestApp) -> u64 {
    app.metric("seckill_winners_read_total")
        .await
        .expect("the winners read counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sold_out_memory_renewed_while_nothing_changed_reads_no_winner_again() {
    const WINNERS: u64 = 40;
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    // Short enough that the memory ages out several times while the refusals go on.
    config.product_memory_ms = 100;
    let app = spawn_app(config).await;
    for (product, strategy) in
        (1..).zip([Strategy::Conditional, Strategy::Sharded, Strategy::RedisLua])
    {
        app.reset_in(product, WINNERS as i64, strategy.home()).await;
        for n in 0..WINNERS {
            let (status, answer) = app
                .order(product, &click(&format!("w-{n}"), strategy), None)
                .await;
            assert!(status.is_success(), "{strategy}: {status} {answer}");
        }
        let before = winners_read(&app).await;
        until_refused_from_memory(&app, product, strategy).await;
        let learnt = winners_read(&app).await;
        assert_eq!(learnt - before, WINNERS, "{strategy}: the winners learnt");
        let reads = reads(&app).await;
        refused_until_renewed(&app, product, strategy, reads + 3).await;
        assert_eq!(
            winners_read(&app).await,
            learnt,
            "{strategy}: renewals of a sold-out product nobody returned read its winners again"
        );
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unit_that_came_back_and_sold_again_is_in_the_renewed_memory_of_an_instance_not_told() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    config.product_memory_ms = 200;
    let a = spawn_app(config.clone()).await;
    // B hears of no return: only its renewals can tell it that the shelf changed.
    config.keep_sold_out_on_return = true;
    let b = spawn_app(config).await;
    for (product, strategy) in
        (1..).zip([Strategy::Conditional, Strategy::Sharded, Strategy::RedisLua])
    {
        a.reset_in(product, 1, strategy.home()).await;
        let (status, answer) = a.order(product, &click("first", strategy), None).await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
        common::wait_until("B refuses from memory", || async {
            let mark = b.purchases_started().await;
            let (status, _) = b.order(product, &click("probe", strategy), None).await;
            status == StatusCode::CONFLICT && b.purchases_started().await == mark
        })
        .await;
        // While B is asked nothing, the unit comes back and sells again on A.
        let (status, answer) =
            common::life::act(&a, product, "first", "r-first", "cancel", &[]).await;
        assert_eq!(status, StatusCode::OK, "{strategy}: {answer}");
        let (status, answer) = a.order(product, &click("second", strategy), None).await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
        // Reads of one product follow one another: the second to start began after the first
        // was in memory.
        let reads_before = reads(&b).await;
        let mut n = 0;
        common::wait_until("B renewed its memory", || {
            n += 1;
            let b = &b;
            async move {
                let (status, answer) = b
                    .order(product, &click(&format!("late-{n}"), strategy), None)
                    .await;
                assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
                reads(b).await >= reads_before + 2
            }
        })
        .await;
        // The new winner's retry on B is not refused from memory: it gets its order.
        let (status, answer) = b.order(product, &click("second", strategy), None).await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
        assert_eq!(answer["request_id"], "r-second", "{strategy}: {answer}");
    }
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}
