//! Paying an order: within its deadline it becomes `paid` and keeps its units; after the
//! deadline the payment is refused — swept or not yet — and no unit changes hands.

use crate::common;

use common::life::{act, buy, expire, product, wait_until_all_due};
use common::{drop_database, fresh_database_url, spawn_app, test_config};
use serde_json::json;

#[tokio::test]
async fn an_order_paid_within_its_deadline_is_paid_and_keeps_its_unit() {
    paid_within_its_deadline(&fresh_database_url().await).await;
}

/// An order paid within its deadline is paid once, keeps its unit and cannot be cancelled, on
/// the database `database_url` names (either engine).
pub(crate) async fn paid_within_its_deadline(database_url: &str) {
    let app = spawn_app(test_config(database_url)).await;
    app.reset_with(7, &json!({ "stock": 3, "payment_window_ms": 600_000 }))
        .await;
    let (status, order) = buy(&app, 7, "alice", "r-1", "conditional").await;
    assert_eq!(status, 201, "{order}");
    assert_eq!(order["stage"], "reserved");
    let status_url = format!("{}/api/products/7/orders/r-1?user_id=alice", app.url);
    let status: serde_json::Value = app
        .as_buyer(app.client.get(status_url), "alice")
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status body");
    assert!(
        status["pay_by"].is_string(),
        "the deadline is shown: {status}"
    );

    let (status, paid) = act(&app, 7, "alice", "r-1", "pay", &[]).await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(paid["stage"], "paid");
    // Paying again changes nothing and says so; a paid order cannot be cancelled.
    let (status, again) = act(&app, 7, "alice", "r-1", "pay", &[]).await;
    assert_eq!(
        (status.as_u16(), again["error"].as_str()),
        (409, Some("order_paid"))
    );
    let (status, cancel) = act(&app, 7, "alice", "r-1", "cancel", &[]).await;
    assert_eq!(
        (status.as_u16(), cancel["error"].as_str()),
        (409, Some("order_paid"))
    );
    // Another buyer's payment of it, or of a purchase that does not exist, finds nothing.
    let (status, _) = act(&app, 7, "mallory", "r-1", "pay", &[]).await;
    assert_eq!(status, 404);

    let view = product(&app, 7).await;
    assert_eq!(
        (
            view["stock"].as_i64(),
            view["paid"].as_i64(),
            view["reserved"].as_i64()
        ),
        (Some(2), Some(1), Some(0)),
        "{view}"
    );
    app.stop().await;
    drop_database(database_url).await;
}

#[tokio::test]
async fn a_payment_after_the_deadline_is_refused_before_and_after_the_sweep_and_no_unit_changes_hands()
 {
    late_payment_refused(&fresh_database_url().await).await;
}

/// A payment after the deadline is refused before and after the sweep, and the swept unit
/// sells to another buyer, on the database `database_url` names (either engine).
pub(crate) async fn late_payment_refused(database_url: &str) {
    let mut config = test_config(database_url);
    // No sweep of its own: the deadline alone must refuse the late payment.
    config.expiry_interval_ms = 0;
    let app = spawn_app(config).await;
    app.reset_with(8, &json!({ "stock": 1, "payment_window_ms": 1 }))
        .await;
    let (status, order) = buy(&app, 8, "alice", "late", "conditional").await;
    assert_eq!(status, 201, "{order}");
    wait_until_all_due(database_url).await;

    // Past the deadline, not yet swept: refused, and the order still holds its unit.
    let (status, refused) = act(&app, 8, "alice", "late", "pay", &[]).await;
    assert_eq!(
        (status.as_u16(), refused["error"].as_str()),
        (409, Some("order_expired"))
    );
    assert_eq!(product(&app, 8).await["reserved"], 1);

    // Swept: the unit is back and sells to another buyer.
    let (status, round) = expire(&app, 8, &[]).await;
    assert_eq!(
        (status.as_u16(), round["expired"].as_u64()),
        (200, Some(1)),
        "{round}"
    );
    let (status, resold) = buy(&app, 8, "bob", "b-1", "conditional").await;
    assert_eq!(status, 201, "{resold}");

    // Alice pays again: still refused; Bob's unit stays Bob's.
    let (status, refused) = act(&app, 8, "alice", "late", "pay", &[]).await;
    assert_eq!(
        (status.as_u16(), refused["error"].as_str()),
        (409, Some("order_expired"))
    );
    let view = product(&app, 8).await;
    assert_eq!(
        (
            view["stock"].as_i64(),
            view["sold"].as_i64(),
            view["paid"].as_i64(),
            view["expired"].as_i64()
        ),
        (Some(0), Some(1), Some(0), Some(1)),
        "{view}"
    );
    let truth = common::ledger(database_url, 8).await;
    assert_eq!((truth.oversell(), truth.unaccounted()), (0, 0), "{truth:?}");
    app.stop().await;
    drop_database(database_url).await;
}
