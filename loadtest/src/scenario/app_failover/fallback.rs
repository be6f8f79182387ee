//! A failover after the primary fell back to asynchronous replication: the semi-synchronous
//! replicas cut off, one commit waits out the timeout, and the buyers who click after it are
//! answered by a primary that waits for no one — unless the instances read its status
//! (`--require-semi-sync`) and refuse them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use sandbox::{Relay, ReplicatedMariaDb};

use super::clicks::{Told, click, created, finish};
use super::{Figures, Sizes};
use crate::rig::control;
use crate::rig::fleet::{Fleet, poll};
use crate::rig::order_life::metric;
use crate::scenario::Timeline;

/// The replicas of the set: both acknowledge, either is enough for a commit.
const REPLICAS: [usize; 2] = [1, 2];

/// What each instance last read of the primary (`--require-semi-sync` only).
const GAUGE: &str = "seckill_semi_sync_acknowledged";

/// One sale through the fallback and the failover on `set` (a primary and two replicas), the
/// instances reaching the primary through `relay`; `refusing` when they run with
/// `--require-semi-sync`.
pub(super) async fn round(
    s: &Sizes,
    fleet: &Fleet,
    set: &Arc<ReplicatedMariaDb>,
    relay: &Arc<Relay>,
    promoted: SocketAddr,
    refusing: bool,
    tl: &Timeline,
) -> Result<Figures> {
    fleet.reset(super::PRODUCT, s.stock).await?;
    let api = &fleet.api;
    let mut told = Told::default();
    for k in 0..s.before_cut {
        let request = format!("before-{k}");
        if created(&click(api, k % 2, &format!("b{k}"), &request).await) {
            told.answered.insert(request);
        }
    }
    let blocking = Arc::clone(set);
    control(move || {
        for i in REPLICAS {
            blocking.wait_caught_up(i, 0, Duration::from_secs(60))?;
        }
        REPLICAS
            .into_iter()
            .try_for_each(|i| blocking.disconnect(i))
    })
    .await?;
    tl.log(
        "replicas",
        format!(
            "both cut off from the primary after {} units",
            told.answered.len()
        ),
    );
    let answered_before_cut = told.answered.len();
    let first = click(api, 0, "a0", "after-0").await;
    let blocking = Arc::clone(set);
    let (on, _) = control(move || blocking.semi_sync_status(0)).await?;
    ensure!(
        !on,
        "the primary still waits for a replica after the timeout"
    );
    let first_told = match created(&first) {
        true => "`201`".to_string(),
        false => format!("{first:?}"),
    };
    tl.log(
        "primary",
        format!(
            "the first click after the cut answered {first_told} once its commit waited out \
             the timeout; Rpl_semi_sync_master_status OFF: asynchronous from now on"
        ),
    );
    told.settle("after-0".into(), &first);
    if refusing {
        poll(|| async {
            let mut read = 0;
            for n in 0..fleet.apps.instances.len() {
                read += usize::from(metric(fleet, n, GAUGE).await? == Some(0));
            }
            Ok((read == fleet.apps.instances.len()).then_some(()))
        })
        .await?;
        tl.log(
            "instances",
            "both read the fallback in the primary's status",
        );
    }
    let clicks: Vec<_> = (1..s.after_cut)
        .map(|k| {
            let api = api.clone();
            tokio::spawn(async move {
                let request = format!("after-{k}");
                let answer = click(&api, k % 2, &format!("a{k}"), &request).await;
                (request, answer)
            })
        })
        .collect();
    for click in clicks {
        let (request, answer) = click.await?;
        told.settle(request, &answer);
    }
    let answered_after_cut = told.answered.len() - answered_before_cut;
    let refused_while_async = s.after_cut - answered_after_cut;
    tl.log(
        "buyers",
        format!(
            "{} more clicked at once: {} answered `201`, {refused_while_async} refused",
            s.after_cut - 1,
            answered_after_cut - usize::from(created(&first)),
        ),
    );
    let answered_before_kill = told.answered.len();
    let blocking = Arc::clone(set);
    let waiting = control(move || {
        let waiting = blocking.waiting_commits(0)?;
        blocking.member(0).server().kill()?;
        blocking.promote(1)?;
        blocking.repoint(2, 1)?;
        blocking.wait_for_replicas(1)?;
        Ok(waiting)
    })
    .await?;
    relay.move_to(promoted);
    tl.log(
        "primary",
        "SIGKILLed; replica 1 promoted, waiting for replica 2, which follows it; the address \
         moved to it",
    );
    let clicked_again = told.unanswered.len();
    let end = finish(s.stock, fleet, set, 1, told, tl).await?;
    Ok(Figures {
        stock: s.stock,
        answered_before_kill,
        answered_after_cut,
        waiting_at_kill: waiting,
        refused_while_async,
        clicked_again,
        placed_on_retry: end.placed_on_retry,
        sold_after_failover: end.sold_after_failover,
        lost_orders: end.lost_orders,
        oversold: end.oversold,
        oversell_in_database: end.oversell_in_database,
    })
}
