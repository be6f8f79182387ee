//! A failover after the primary fell back to asynchronous replication: the semi-synchronous
//! replicas cut off, one commit waits out the timeout, and the buyers who click after it are
//! answered by a primary that waits for no one — unless the instances read its status
//! (`--require-semi-sync`) and refuse them.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Result, ensure};
use sandbox::{Relay, ReplicatedMariaDb};

use super::clicks::{AtKill, click, click_at_once, created, finish, sell_then_cut_off};
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
    let api = &fleet.api;
    let mut told = sell_then_cut_off(s, fleet, set, &REPLICAS, tl).await?;
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
    let clicks = click_at_once(api, 1..s.after_cut);
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
    let at_kill = AtKill {
        answered_before_kill,
        answered_after_cut,
        waiting_at_kill: waiting,
        refused_while_async,
    };
    finish(s, fleet, set, 1, told, at_kill, tl).await
}
