//! Cancelling an order: its units go back once, the buyer's quota with them, and they sell
//! again; a cancellation racing the expiry of the same order ends it once, for every home.

use crate::common;

use common::life::{act, buy, expire, product, wait_until_all_due};
use common::{drop_database, fresh_database_url, spawn_app, test_config};
use serde_json::json;

#[tokio::test]
async fn a_cancelled_order_gives_its_unit_back_once_and_it_sells_again() {
    cancelled_unit_sells_again(&fresh_database_url().await).await;
}

/// A cancelled order gives its unit and its buyer's quota back once, and the unit sells again,
/// on the database `database_url` names (either engine).
pub(crate) async fn cancelled_unit_sells_again(database_url: &str) {
    let app = spawn_app(test_config(database_url)).await;
    app.reset_with(3, &json!({ "stock": 1, "per_user_limit": 1 }))
        .await;
    let (status, _) = buy(&app, 3, "alice", "a-1", "conditional").await;
    assert_eq!(status, 201);

    let (status, cancelled) = act(&app, 3, "alice", "a-1", "cancel", &[]).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["stage"], "cancelled");
    let (status, again) = act(&app, 3, "alice", "a-1", "cancel", &[]).await;
    assert_eq!(
        (status.as_u16(), again["error"].as_str()),
        (409, Some("order_cancelled"))
    );
    let (status, late) = act(&app, 3, "alice", "a-1", "pay", &[]).await;
    assert_eq!(
        (status.as_u16(), late["error"].as_str()),
        (409, Some("order_cancelled"))
    );
    let view = product(&app, 3).await;
    assert_eq!(
        (
            view["stock"].as_i64(),
            view["sold"].as_i64(),
            view["cancelled"].as_i64()
        ),
        (Some(1), Some(0), Some(1)),
        "{view}"
    );

    // The unit and Alice's quota (one per customer) are back: she buys again, and then the
    // product is sold out for Bob.
    let (status, rebought) = buy(&app, 3, "alice", "a-2", "conditional").await;
    assert_eq!(status, 201, "{rebought}");
    let (status, refused) = buy(&app, 3, "bob", "b-1", "conditional").await;
    assert_eq!(
        (status.as_u16(), refused["error"].as_str()),
        (409, Some("sold_out"))
    );
    app.stop().await;
    drop_database(database_url).await;
}

/// `rounds` times: `buyers` orders past their deadline, each cancelled by its buyer while
/// sweeps of the product run beside the cancellations; every order ends once, every unit comes
/// back once, and every buyer may buy again; on the database `database_url` names (either
/// engine).
pub(crate) async fn cancellation_races_expiry(
    database_url: &str,
    home: &str,
    strategy: &str,
    rounds: usize,
    buyers: usize,
) {
    let mut config = test_config(database_url);
    config.expiry_interval_ms = 0;
    if home == "redis" {
        common::with_every_service(&mut config).await;
    }
    let app = spawn_app(config).await;
    let stock = buyers as i64;
    for round in 0..rounds {
        let body =
            json!({ "stock": stock, "home": home, "per_user_limit": 1, "payment_window_ms": 1 });
        app.reset_with(5, &body).await;
        for b in 0..buyers {
            let (status, order) =
                buy(&app, 5, &format!("u{b}"), &format!("r{round}"), strategy).await;
            assert_eq!(status, 201, "{home}: {order}");
        }
        wait_until_all_due(database_url).await;

        let cancels = (0..buyers).map(|b| {
            let app = &app;
            async move {
                act(
                    app,
                    5,
                    &format!("u{b}"),
                    &format!("r{round}"),
                    "cancel",
                    &[],
                )
                .await
            }
        });
        let sweeps = (0..3).map(|_| expire(&app, 5, &[]));
        let (cancelled, swept) = tokio::join!(
            futures::future::join_all(cancels),
            futures::future::join_all(sweeps)
        );
        let mut ended = 0;
        for (status, answer) in &cancelled {
            match status.as_u16() {
                200 => ended += 1,
                409 => assert_eq!(answer["error"], "order_expired", "{home}: {answer}"),
                other => panic!("{home}: cancel answered {other}: {answer}"),
            }
        }
        for (status, round) in &swept {
            assert_eq!(status.as_u16(), 200, "{home}: {round}");
            ended += round["expired"].as_u64().unwrap_or(0) as usize;
        }
        assert_eq!(ended, buyers, "{home}: every order ends exactly once");
        let view = product(&app, 5).await;
        assert_eq!(
            (
                view["stock"].as_i64(),
                view["sold"].as_i64(),
                view["returning"].as_i64(),
                view["stranded"].as_i64()
            ),
            (Some(stock), Some(0), Some(0), Some(0)),
            "{home}: every unit back once: {view}"
        );
        let (expired, cancelled) = (view["expired"].as_i64(), view["cancelled"].as_i64());
        assert_eq!(
            expired.unwrap_or(0) + cancelled.unwrap_or(0),
            stock,
            "{home}: {view}"
        );
        // Each buyer's quota came back with the unit: all of them buy again, to the last unit.
        for b in 0..buyers {
            let (status, order) = buy(
                &app,
                5,
                &format!("u{b}"),
                &format!("again{round}"),
                strategy,
            )
            .await;
            assert_eq!(status, 201, "{home}: {order}");
        }
        assert_eq!(product(&app, 5).await["stock"], 0, "{home}");
    }
    app.stop().await;
    drop_database(database_url).await;
}

#[tokio::test]
async fn cancellation_racing_expiry_gives_a_row_held_unit_back_once() {
    cancellation_races_expiry(&fresh_database_url().await, "row", "conditional", 5, 10).await;
}

#[tokio::test]
async fn cancellation_racing_expiry_gives_a_bucket_held_unit_back_once() {
    cancellation_races_expiry(&fresh_database_url().await, "buckets", "sharded", 5, 10).await;
}

#[tokio::test]
async fn cancellation_racing_expiry_gives_a_redis_held_unit_back_once() {
    cancellation_races_expiry(&fresh_database_url().await, "redis", "redis-lua", 5, 10).await;
}
