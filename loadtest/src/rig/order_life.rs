//! What the scenarios of an order's life share on a fleet: a product sold with a payment
//! window, the moment its orders are past their deadline (by the database clock), one
//! instance's counter, and one buyer's purchase.

use std::time::Duration;

use anyhow::{Context, Result};

use app::api::{Home, ResetProduct, Strategy};
use testkit::metrics::series_values;
use testkit::{Answer, order_request};

use super::fleet::{Fleet, poll};

/// Creates or resets product `id` to `stock` units in `home`, one per customer, each order to
/// be paid within `window`.
pub async fn sell(fleet: &Fleet, id: u64, stock: i64, home: Home, window: Duration) -> Result<()> {
    let product = ResetProduct {
        per_user_limit: Some(1),
        payment_window_ms: Some(i64::try_from(window.as_millis()).unwrap_or(i64::MAX).max(1)),
        ..ResetProduct::new(stock, home)
    };
    fleet.api.put_product(id, &product).await
}

/// Waits until no reserved order of the fleet's database is within its deadline, by the
/// database's clock: the state a late payment or an expiry acts on.
pub async fn await_all_due(fleet: &Fleet) -> Result<()> {
    let pool = sqlx::MySqlPool::connect(&fleet.database_url)
        .await
        .context("connecting to watch the deadlines")?;
    let due = poll(|| {
        let pool = pool.clone();
        async move {
            let within: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM orders WHERE state = 'reserved' AND pay_by > NOW(6)",
            )
            .fetch_one(&pool)
            .await?;
            Ok((within == 0).then_some(()))
        }
    })
    .await
    .context("orders never passed their deadline");
    pool.close().await;
    due
}

/// One unit of `product` for `user` (request id `request`) through instance `n`.
pub async fn buy(
    fleet: &Fleet,
    n: usize,
    product: u64,
    strategy: Strategy,
    user: &str,
    request: &str,
) -> Answer {
    let body = order_request(user.to_owned(), strategy, request.to_owned(), 1);
    fleet.api.order(n, product, &body).await
}

/// One unlabelled value of instance `n`'s `/metrics` (`None`: not there).
pub async fn metric(fleet: &Fleet, n: usize, name: &str) -> Result<Option<u64>> {
    let text = reqwest::get(format!("{}/metrics", fleet.api.base(n)))
        .await?
        .text()
        .await?;
    Ok(series_values(&text, name).next().map(|value| value as u64))
}
