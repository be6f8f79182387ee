//! `zk-partition`: the ZooKeeper member holding A's session is cut off from the other two
//! while A holds the lock; B, connected to the majority, asks for it.
//!
//! The cut-off member loses its quorum and stops serving, so A's session cannot be renewed;
//! the majority expires it after the session timeout, deletes A's node, and grants B. A learns
//! only from its own clock (or on reconnecting), so for a moment both believe they hold the
//! lock — the window ZooKeeper documents and no session-based lock closes. The lock-history
//! checker shows that overlap; what must hold is everything fencing promises: B's token is
//! larger, A's late write is refused, and A's `lost()` fires.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use locks::history::History;
use locks::recorded::FencedStore;
use locks::{AcquireOptions, Backend};
use serde::{Deserialize, Serialize};

use super::{Checked, Judgement, Scenario, Stage};
use crate::rig::start;

pub struct ZkPartition;

/// A held the lock on the member that was cut off; B asked on the majority side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub session_ms: f64,
    pub token_a: u64,
    pub token_b: u64,
    pub b_granted_after_cut_ms: f64,
    /// When A's `lost()` fired, after the cut (`None`: it never did).
    pub a_lost_after_cut_ms: Option<f64>,
    pub stale_write_refused: bool,
    /// What the lock-history checker found, by rule.
    #[serde(flatten)]
    pub checked: Checked,
}

/// A bound on anything the scenario waits for.
const PATIENCE: Duration = Duration::from_secs(60);
const SUBJECT: &str = "zookeeper-fenced, holder's member cut off";

impl Scenario for ZkPartition {
    /// A's session timeout.
    type Sizes = Duration;
    const QUICK: Duration = Duration::from_secs(4);
    const FULL: Duration = Duration::from_secs(8);
    type Subject = &'static str;
    type Figures = Figures;

    fn fault(session: &Duration) -> String {
        format!(
            "a three-member ZooKeeper ensemble; A (session {} s, connected to one follower) \
             holds the lock; that follower is cut off from the other two; B (connected to them) \
             asks for the lock",
            session.as_secs()
        )
    }

    async fn play(session: Duration, stage: &Stage) -> Result<Vec<(&'static str, Figures)>> {
        let zk = Arc::new(start(sandbox::ZooKeeperEnsemble::start).await?);
        let z = zk.clone();
        let leader = tokio::task::spawn_blocking(move || z.await_leader(PATIENCE)).await??;
        // A's member is a follower: cut off, it loses its quorum while the others keep theirs.
        let cut = (0..3).find(|&i| i != leader).context("a follower")?;
        let majority: Vec<String> = (0..3)
            .filter(|&i| i != cut)
            .map(|i| zk.member(i).connect_string())
            .collect();
        let on = |connect: String| locks::Endpoints {
            zookeeper: Some(connect),
            zookeeper_session_timeout: session,
            ..Default::default()
        };
        let a = locks::connect(Backend::ZooKeeper, &on(zk.member(cut).connect_string())).await?;
        let b = locks::connect(Backend::ZooKeeper, &on(majority.join(","))).await?;

        let history = Arc::new(History::new());
        let store = FencedStore::new(history.clone());
        let key = format!("scenario:zk-partition:{}", locks::new_owner_id());
        let lease = AcquireOptions::new(session);
        history.attempt("A");
        let guard_a = a.acquire(&key, lease).await?;
        let token_a = guard_a.fencing_token();
        history.grant("A", token_a);
        store.write("A", token_a);

        let cut_at = Instant::now();
        history.fault(
            "nemesis",
            format!("cut member {} (A's) off from the others", cut + 1),
        );
        zk.partition(cut);
        let lost = {
            let (history, guard) = (history.clone(), guard_a);
            tokio::spawn(async move {
                let fired = tokio::time::timeout(PATIENCE, guard.lost()).await.is_ok();
                if fired {
                    history.lost("A", token_a);
                }
                (fired, guard)
            })
        };

        history.attempt("B");
        let guard_b = b.acquire(&key, lease.wait(PATIENCE)).await?;
        let token_b = guard_b.fencing_token();
        history.grant("B", token_b);
        let b_granted_ms = cut_at.elapsed().as_secs_f64() * 1000.0;
        store.write("B", token_b);
        // A, still acting on its grant, writes late.
        let stale_write_refused = !store.write("A", token_a);

        let (lost_fired, guard_a) = lost.await?;
        let lost_after_ms = lost_fired.then(|| cut_at.elapsed().as_secs_f64() * 1000.0);
        history.release("B", token_b);
        let _ = guard_b.release().await;
        zk.heal(cut);
        history.fault("nemesis", format!("healed member {}", cut + 1));
        drop(guard_a);

        let events = history.events();
        let tl = stage.round(SUBJECT);
        tl.history(&events);
        let figures = Figures {
            session_ms: session.as_secs_f64() * 1000.0,
            token_a,
            token_b,
            b_granted_after_cut_ms: b_granted_ms,
            a_lost_after_cut_ms: lost_after_ms,
            stale_write_refused,
            checked: Checked::of(&events),
        };
        Ok(vec![(SUBJECT, figures)])
    }

    fn judge(_: &Duration, _: &&'static str, f: &Figures) -> Judgement {
        let holds = f.token_b > f.token_a
            && f.stale_write_refused
            && f.a_lost_after_cut_ms.is_some()
            && f.checked.tokens_not_increasing == 0
            && f.checked.stale_writes_accepted == 0;
        let observed = format!(
            "B granted {:.0} ms after the cut, token {} > {}; A's late write {}; A's lost() {}; \
             history: {} overlap(s), {} token(s) backwards, {} stale write(s) accepted",
            f.b_granted_after_cut_ms,
            f.token_b,
            f.token_a,
            if f.stale_write_refused {
                "refused"
            } else {
                "ACCEPTED"
            },
            f.a_lost_after_cut_ms.map_or_else(
                || "never fired".to_string(),
                |ms| format!("fired {ms:.0} ms after the cut")
            ),
            f.checked.overlaps,
            f.checked.tokens_not_increasing,
            f.checked.stale_writes_accepted
        );
        Judgement::new(
            "B granted after A's session expires, with a larger token; A's late write refused; \
             A's lost() fires; no token backwards, no stale write accepted",
            observed,
            holds,
        )
    }

    fn why(_: &Duration, rows: &[(&'static str, Figures)]) -> String {
        let Some((_, f)) = rows.first() else {
            return String::new();
        };
        let overlap = match f.checked.overlaps {
            0 => "A's lost() fired before B's grant, so the two holdings did not even overlap as \
                  the clients saw them"
                .to_string(),
            n => format!(
                "The history checker shows {n} overlap: B was granted before A's lost() fired, \
                 because A learns of its expired session only from its own clock — the window every \
                 session- or lease-based lock has"
            ),
        };
        format!(
            "The cut-off follower lost its quorum and stopped serving, so A's session could not be \
             renewed; the majority expired it and granted B {:.0} ms after the cut (session {:.0} \
             ms). {overlap}. Fencing closed the window: B's token {} is larger than A's {}, and \
             the store {} A's late write.",
            f.b_granted_after_cut_ms,
            f.session_ms,
            f.token_b,
            f.token_a,
            if f.stale_write_refused {
                "refused"
            } else {
                "accepted"
            }
        )
    }
}
