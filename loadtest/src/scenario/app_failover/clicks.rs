//! The buyers' side of a failover: clicks, what each was told, and the sale finished on the
//! promoted replica, judged against those answers.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::Strategy;
use sandbox::ReplicatedMariaDb;
use testkit::{Answer, Api, order_request};
use tokio::task::JoinHandle;

use super::{Figures, PRODUCT, Sizes};
use crate::rig::control;
use crate::rig::fleet::{Fleet, accounting, poll};
use crate::scenario::Timeline;

/// One click: instance `n`, buyer `user`, request id `request`.
pub(super) async fn click(api: &Api, n: usize, user: &str, request: &str) -> Answer {
    let body = order_request(user.into(), Strategy::Conditional, request.into(), 1);
    api.order(n, PRODUCT, &body).await
}

/// Clicks `after-k` for every `k` of `ks`, all at once, each buyer `ak` on instance `k % 2`.
pub(super) fn click_at_once(api: &Api, ks: Range<usize>) -> Vec<JoinHandle<(String, Answer)>> {
    ks.map(|k| {
        let api = api.clone();
        tokio::spawn(async move {
            let request = format!("after-{k}");
            let answer = click(&api, k % 2, &format!("a{k}"), &request).await;
            (request, answer)
        })
    })
    .collect()
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

/// What the buyers had been told when the primary died.
pub(super) struct AtKill {
    /// Answered `201` before the primary died (before the cut and after it).
    pub answered_before_kill: usize,
    /// Of those, answered after the replicas were cut off.
    pub answered_after_cut: usize,
    /// Commits waiting for a replica's acknowledgement when the primary died.
    pub waiting_at_kill: u64,
    /// Clicks after a fallback to asynchronous replication not answered `201`.
    pub refused_while_async: usize,
}

/// Sells `s.before_cut` units of a product of `s.stock`, waits until `replicas` have applied
/// them, and cuts them off from the primary.
pub(super) async fn sell_then_cut_off(
    s: &Sizes,
    fleet: &Fleet,
    set: &Arc<ReplicatedMariaDb>,
    replicas: &'static [usize],
    tl: &Timeline,
) -> Result<Told> {
    fleet.reset(PRODUCT, s.stock).await?;
    let mut told = Told::default();
    for k in 0..s.before_cut {
        let request = format!("before-{k}");
        if created(&click(&fleet.api, k % 2, &format!("b{k}"), &request).await) {
            told.answered.insert(request);
        }
    }
    let blocking = Arc::clone(set);
    control(move || {
        for &i in replicas {
            blocking.wait_caught_up(i, 0, Duration::from_secs(60))?;
        }
        replicas.iter().try_for_each(|&i| blocking.disconnect(i))
    })
    .await?;
    let (who, what) = match replicas {
        [_] => ("replica", "cut off"),
        _ => ("replicas", "all cut off"),
    };
    tl.log(
        who,
        format!(
            "{what} from the primary after {} units",
            told.answered.len()
        ),
    );
    Ok(told)
}

/// Finishes the sale on member `promoted`: the unanswered click again with their request ids,
/// new buyers buy until sold out; then every answered request id is looked for there.
pub(super) async fn finish(
    s: &Sizes,
    fleet: &Fleet,
    set: &ReplicatedMariaDb,
    promoted: usize,
    mut told: Told,
    at_kill: AtKill,
    tl: &Timeline,
) -> Result<Figures> {
    let api = &fleet.api;
    let clicked_again = told.unanswered.len();
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
    Ok(Figures {
        stock: s.stock,
        answered_before_kill: at_kill.answered_before_kill,
        answered_after_cut: at_kill.answered_after_cut,
        waiting_at_kill: at_kill.waiting_at_kill,
        refused_while_async: at_kill.refused_while_async,
        clicked_again,
        placed_on_retry,
        sold_after_failover: sold_after,
        lost_orders: (told.answered.iter())
            .filter(|r| !kept.contains(*r))
            .count(),
        oversold: (told.answered.len() as i64 - s.stock).max(0),
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
