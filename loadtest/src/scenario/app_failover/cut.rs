//! A failover with the buyers clicking at once after the replica is cut off: what the
//! asynchronous replica and the `AFTER_SYNC` one answer them.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use sandbox::{Relay, ReplicatedMariaDb};

use super::clicks::{AtKill, click_at_once, finish, sell_then_cut_off};
use super::{Figures, Sizes};
use crate::rig::control;
use crate::rig::fleet::{Fleet, poll};
use crate::scenario::Timeline;

/// One sale through the failover on `set`, the instances reaching its primary through `relay`.
pub(super) async fn round(
    s: &Sizes,
    fleet: &Fleet,
    set: &Arc<ReplicatedMariaDb>,
    relay: &Arc<Relay>,
    replica: SocketAddr,
    tl: &Timeline,
) -> Result<Figures> {
    let api = &fleet.api;
    let mut told = sell_then_cut_off(s, fleet, set, &[1], tl).await?;
    let clicks = click_at_once(api, 0..s.after_cut);
    // Until every click is answered, or is a commit waiting for the replica, or waits for
    // the row such a commit holds (answered `busy` when its lock wait runs out).
    let waiting = poll(|| async {
        let blocking = Arc::clone(set);
        let waiting = control(move || blocking.waiting_commits(0)).await?;
        let done = clicks.iter().filter(|c| c.is_finished()).count();
        Ok((done + usize::try_from(waiting)? >= s.after_cut).then_some(waiting))
    })
    .await
    .context("the clicks after the cut were neither answered nor waiting")?;
    let answered_before_cut = told.answered.len();
    let finished: Vec<_> = clicks.iter().map(|c| c.is_finished()).collect();
    let mut pending = Vec::new();
    for (click, done) in clicks.into_iter().zip(finished) {
        match done {
            true => {
                let (request, answer) = click.await?;
                told.settle(request, &answer);
            }
            false => pending.push(click),
        }
    }
    let answered_after_cut = told.answered.len() - answered_before_cut;
    let answered_before_kill = told.answered.len();
    let blocking = Arc::clone(set);
    control(move || {
        blocking.member(0).server().kill()?;
        blocking.promote(1)
    })
    .await?;
    relay.move_to(replica);
    tl.log(
        "primary",
        format!(
            "SIGKILLed with {waiting} commit(s) waiting for the replica; the replica promoted \
             and the address moved to it"
        ),
    );
    for click in pending {
        let (request, answer) = click.await?;
        told.settle(request, &answer);
    }
    tl.log(
        "buyers",
        format!(
            "{answered_before_kill} answered `201` before the kill, {} not",
            told.unanswered.len()
        ),
    );
    let at_kill = AtKill {
        answered_before_kill,
        answered_after_cut,
        waiting_at_kill: waiting,
        refused_while_async: 0,
    };
    finish(s, fleet, set, 1, told, at_kill, tl).await
}
