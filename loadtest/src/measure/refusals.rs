//! What the machine answers at most: sold-out refusals in a closed loop, each request built
//! once. A refusal from memory is the least an answer to a purchase costs, so no door answers
//! a crowd faster; the phases that judge refusals set theirs beside it.

use std::sync::Arc;

use anyhow::Result;
use app::api::{OrderRequest, Strategy};
use testkit::{Api, PreparedOrder, order_request};

use crate::drive::load::{Window, closed_loop_feeding};
use crate::live::Feed;
use crate::schema::LoadResult;

/// What the machine answers at most: sold-out refusals of `product` (emptied here, in the
/// strategy's home) per second, in a closed loop of `connections` late buyers, each request
/// built once, for `window` — a refusal from memory is the least an answer to a purchase
/// costs, so no door answers a crowd faster than this.
pub async fn ceiling(
    api: &Api,
    product: u64,
    strategy: Strategy,
    id_prefix: &str,
    connections: usize,
    window: Window,
) -> Result<f64> {
    api.reset_product(product, 0, strategy.home()).await?;
    let run = refused(api, product, strategy, id_prefix, connections, window).await?;
    Ok(run.attempts_per_sec)
}

/// Purchases of the sold-out `product` in a closed loop of `connections` for `window`: one
/// late buyer per connection, each request built once — the loop repeats it as `wrk` repeats
/// its script's, so the generator spends on a refusal no more than it must.
pub async fn refused(
    api: &Api,
    product: u64,
    strategy: Strategy,
    prefix: &str,
    connections: usize,
    window: Window,
) -> Result<LoadResult> {
    let orders: Arc<[PreparedOrder]> = (0..connections)
        .map(|c| api.prepare_order(product, &late_buyer(prefix, strategy, c)))
        .collect::<Result<_>>()?;
    let a = api.clone();
    let op = move |worker: usize, i: u64| {
        let (a, orders) = (a.clone(), orders.clone());
        async move { a.send_prepared(i as usize, &orders[worker]).await }
    };
    Ok(closed_loop_feeding(connections, window, &Feed::off(), op).await)
}

/// A purchase of the sold-out product by a late buyer, whom the sale refuses.
fn late_buyer(prefix: &str, strategy: Strategy, c: usize) -> OrderRequest {
    order_request(format!("late-{c}"), strategy, format!("{prefix}-{c}"), 1)
}

/// How long the refusals of a sold-out product are timed: after a sale, and for the machine's
/// ceiling.
pub fn window(quick: bool) -> Window {
    match quick {
        true => Window::from_secs(0.1, 0.3),
        false => Window::from_secs(0.5, 1.0),
    }
}
