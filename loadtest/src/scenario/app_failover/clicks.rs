//! The buyers' side of a failover: clicks, what each was told, and the sale finished on the
//! promoted replica, judged against those answers.

use std::collections::HashSet;

use anyhow::{Context, Result};
use app::api::Strategy;
use sandbox::ReplicatedMariaDb;
use testkit::{Answer, Api, order_request};

use super::PRODUCT;
use crate::rig::fleet::{Fleet, accounting, poll};
use crate::scenario::Timeline;

/// One click: instance `n`, buyer `user`, request id `request`.
pub(super) async fn click(api: &Api, n: usize, user: &str, request: &str) -> Answer {
    let body = order_request(user.into(), Strategy::Conditional, request.into(), 1);
    api.order(n, PRODUCT, &body).await
}

/// [`click`] again with the same request id until the buyer is told bought or sold out (a
/// `503` or `busy` while the instances find the new primary is clicked again).
async fn click_until_answered(api: &Api, n: usize, user: &str, request: &str) -> Result<Answer> {
    poll(|| async {
        let answer = click(api, n, user, request).await;
        Ok((created(&answer) || answer == Answer::SOLD_OUT).then_some(answer))
    })
    .await
}

pub(super) fn created(answer: &Answer) -> bool {
    matches!(answer, Answer::Created { .. } | Answer::Replayed { .. })
}

/// What the buyers were told, by request id: `after-k` is buyer `ak`'s click after the cut.
#[derive(Default)]
pub(super) struct Told {
    /// Answered `201`, over the whole sale.
    pub answered: HashSet<String>,
    /// Answered anything else, or nothing: to be clicked again once the replica is promoted.
    pub unanswered: Vec<String>,
}

impl Told {
    /// Files `request` under the answered, or the ones to click again.
    pub fn settle(&mut self, request: String, answer: &Answer) {
        if created(answer) {
            self.answered.insert(request);
        } else {
            self.unanswered.push(request);
        }
    }
}

/// The sale after the failover, and the answers held against the promoted replica's rows.
pub(super) struct Finished {
    pub placed_on_retry: usize,
    pub sold_after_failover: usize,
    pub lost_orders: usize,
    pub oversold: i64,
    pub oversell_in_database: i64,
}

/// Finishes the sale on member `promoted`: the unanswered click again with their request ids,
/// new buyers buy until sold out; then every answered request id is looked for there.
pub(super) async fn finish(
    stock: i64,
    fleet: &Fleet,
    set: &ReplicatedMariaDb,
    promoted: usize,
    mut told: Told,
    tl: &Timeline,
) -> Result<Finished> {
    let api = &fleet.api;
    let mut placed_on_retry = 0;
    for request in &told.unanswered {
        let k: usize = request.trim_start_matches("after-").parse()?;
        let user = format!("a{k}");
        let answer = click_until_answered(api, k % 2, &user, request)
            .await
            .with_context(|| {
                format!("{request} was never answered once the replica was promoted")
            })?;
        if created(&answer) {
            placed_on_retry += 1;
            told.answered.insert(request.clone());
        }
    }
    tl.log(
        "buyers",
        format!("{placed_on_retry} of the unanswered placed when clicked again"),
    );
    let mut sold_after = 0;
    for k in 0.. {
        let request = format!("new-{k}");
        let answer = click_until_answered(api, k % 2, &format!("n{k}"), &request).await?;
        if !created(&answer) {
            break;
        }
        sold_after += 1;
        told.answered.insert(request);
    }
    tl.log(
        "buyers",
        format!("{sold_after} more units sold on the promoted replica until sold out"),
    );
    let kept = kept_orders(set, promoted).await?;
    let product = fleet.product(PRODUCT).await?;
    Ok(Finished {
        placed_on_retry,
        sold_after_failover: sold_after,
        lost_orders: (told.answered.iter())
            .filter(|r| !kept.contains(*r))
            .count(),
        oversold: (told.answered.len() as i64 - stock).max(0),
        oversell_in_database: accounting(&product).oversell,
    })
}

/// The request ids of the product's orders on member `i`.
async fn kept_orders(set: &ReplicatedMariaDb, i: usize) -> Result<HashSet<String>> {
    let url = format!("{}/scenario", set.member(i).url());
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let ids: Vec<String> = sqlx::query_scalar("SELECT request_id FROM orders WHERE product_id = ?")
        .bind(PRODUCT)
        .fetch_all(&pool)
        .await?;
    pool.close().await;
    Ok(ids.into_iter().collect())
}
