//! `redis-failover`: a lock granted on a primary that dies before replicating it.
//!
//! Redis replicates asynchronously: the primary answers the `SET NX PX` first and ships it to
//! the replica afterwards. If the primary dies in between and the replica is promoted, the new
//! primary has never heard of the lock, and the next client is granted it while the first still
//! believes it holds it: a double grant, and the fencing counter (replicated the same way) may
//! even hand out the same token again. To make "dies before replicating" certain rather than
//! lucky, the replica replicates through a relay, and the relay is cut before the grant (pausing
//! the replica is not enough: the grant would wait in its socket buffer and arrive on resume).
//!
//! `WAIT 1 <ms>` after acquiring blocks until one replica acknowledged every write made before
//! it on that connection, and returns how many did. A holder that trusts its grant only when
//! the answer is ≥ 1 never acts on a grant that can vanish in a failover: with the replica
//! stalled it gets 0 and backs off; with a healthy replica it gets 1, and the promoted replica
//! still refuses the second client. (The `WAIT` is issued on a separate connection, after a
//! write of its own: replication is one ordered stream, so a replica that acked that write has
//! the grant too.) `WAIT` narrows the window; it is not consensus — a replica that acked may
//! still lose the key if it restarts without persistence.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use locks::{AcquireOptions, LockError};
use sandbox::Relay;
use serde::{Deserialize, Serialize};

use super::{Judgement, Scenario, Stage};
use crate::rig::replication::{connection, replicas_with_everything, replicate_through};
use crate::rig::{control, start};

pub struct RedisFailover;

/// How long a healthy replica may take to acknowledge a write.
const PATIENCE_MS: u64 = 30_000;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// How long `WAIT 1` waits for a replica; with the link cut, how long A waits in vain.
    wait_ms: u64,
}

/// A is granted a lock on a primary that dies before replicating it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// A acts on its grant (no `WAIT`, or `WAIT` saw a replica acknowledge it).
    pub a_trusts: bool,
    /// B was granted the lock by the promoted replica.
    pub b_granted: bool,
    /// Both of the above: two clients believe they hold the lock.
    pub double_grant: bool,
    /// Replicas that acknowledged A's grant (`WAIT 1`), when asked.
    pub replicas_acked: Option<i64>,
    pub token_a: u64,
    pub token_b: Option<u64>,
    /// B's token is not above A's: the fencing counter lost its increment too.
    pub fencing_token_reused: bool,
}

/// One run: whether A waits for a replica, and whether the replication link is cut first.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    wait: bool,
    link_cut: bool,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wait = if self.wait {
            "redis + WAIT 1"
        } else {
            "redis, no WAIT"
        };
        let link = if self.link_cut {
            "link cut"
        } else {
            "link intact"
        };
        write!(f, "{wait}, {link}")
    }
}

const MODES: [Mode; 3] = [
    Mode {
        wait: false,
        link_cut: true,
    },
    Mode {
        wait: true,
        link_cut: true,
    },
    Mode {
        wait: true,
        link_cut: false,
    },
];

impl Scenario for RedisFailover {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes { wait_ms: 200 };
    const FULL: Sizes = Sizes { wait_ms: 1000 };
    type Subject = Mode;
    type Figures = Figures;

    fn fault(_: &Sizes) -> String {
        "primary + async replica (linked through a relay); the link is cut, A is granted the \
         lock on the primary, the primary is SIGKILLed before the grant replicates, the replica \
         is promoted, B asks for the lock (third run: link intact)"
            .into()
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Mode, Figures)>> {
        // One pair per run, started together: a replica's first sync takes seconds.
        let pairs =
            futures::future::try_join_all(MODES.iter().map(|_| start(sandbox::RedisPair::start)))
                .await?;
        let mut rows = Vec::new();
        for (mode, pair) in MODES.into_iter().zip(pairs) {
            let figures = one(mode, Arc::new(pair), s.wait_ms, stage).await?;
            rows.push((mode, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, mode: &Mode, f: &Figures) -> Judgement {
        let (expected, holds) = match (mode.wait, mode.link_cut) {
            (false, _) => ("double grant: B is granted while A holds", f.double_grant),
            (true, true) => (
                "no double grant: WAIT finds no replica ack, A does not act on its grant",
                !f.double_grant && !f.a_trusts,
            ),
            (true, false) => (
                "no double grant: the acked grant survives the failover, B is refused",
                !f.double_grant && f.a_trusts && !f.b_granted,
            ),
        };
        let observed = format!(
            "A {}; B {}{}",
            if f.a_trusts {
                "trusts its grant"
            } else {
                "backs off"
            },
            if f.b_granted { "granted" } else { "refused" },
            if f.double_grant { ": two holders" } else { "" }
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(_: &Sizes, rows: &[(Mode, Figures)]) -> String {
        let mut text = String::from(
            "Replication is asynchronous: a grant the replica has not received when the primary \
             dies does not exist on the promoted replica.",
        );
        for (mode, f) in rows {
            let a = match (f.replicas_acked, f.a_trusts) {
                (None, _) => "A acted on its grant unchecked".to_string(),
                (Some(n), true) => {
                    format!("`WAIT 1` saw {n} replica(s) acknowledge and A trusted its grant")
                }
                (Some(n), false) => {
                    format!("`WAIT 1` saw {n} replica(s) acknowledge and A backed off")
                }
            };
            let b = match (f.b_granted, f.double_grant) {
                (true, true) => "the promoted replica granted B the same lock: two holders",
                (true, false) => "the promoted replica granted B the lock A had given up",
                (false, _) => "the promoted replica refused B: it had A's grant",
            };
            let reused = if f.fencing_token_reused {
                "; B's fencing token was not above A's, so the counter lost its increment too \
                 and fencing on it could not tell them apart"
            } else {
                ""
            };
            text.push_str(&format!(" {mode}: {a}; {b}{reused}."));
        }
        text.push_str(
            " `WAIT` narrows the window; it is not consensus. For safety without this caveat, \
             use a consensus store (ZooKeeper, etcd), or Redlock over independent instances, \
             plus fencing.",
        );
        text
    }
}

async fn one(
    mode: Mode,
    pair: Arc<sandbox::RedisPair>,
    wait_ms: u64,
    stage: &Stage,
) -> Result<Figures> {
    let tl = stage.round(mode.to_string());
    let key = "scenario:failover:product:1";
    let lease = Duration::from_secs(30);
    let on = |url: String| locks::Endpoints {
        redis: Some(url),
        ..Default::default()
    };

    let relay = Relay::start(format!("127.0.0.1:{}", pair.primary.port()).parse()?)?;
    let p = pair.clone();
    let relay_port = relay.addr().port();
    control(move || replicate_through(&p.replica, relay_port)).await?;
    if mode.link_cut {
        relay.cut();
        tl.log(
            "network",
            "replication link cut: the primary's writes no longer reach the replica",
        );
    }
    let lock_a = locks::connect(locks::Backend::Redis, &on(pair.primary.url())).await?;
    let a = lock_a.acquire(key, AcquireOptions::new(lease)).await?;
    let token_a = a.fencing_token();
    tl.log("A", format!("granted token {token_a} by the primary"));

    let mut acked = None;
    let a_trusts = if mode.wait {
        // With the link cut, A waits `wait_ms` in vain; with it intact, the acknowledgement
        // comes as soon as the replica has the grant, however loaded the machine.
        let wait_ms = if mode.link_cut { wait_ms } else { PATIENCE_MS };
        let wait = Duration::from_millis(wait_ms);
        let mut primary = connection(&pair.primary.url(), wait).await?;
        let n = replicas_with_everything(&mut primary, 1, wait).await?;
        acked = Some(n);
        let trust = if n >= 1 {
            "grant trusted"
        } else {
            "grant not trusted, A backs off"
        };
        tl.log(
            "A",
            format!("WAIT 1 {wait_ms} → {n} replica(s) acknowledged: {trust}"),
        );
        n >= 1
    } else {
        true
    };

    let p = pair.clone();
    control(move || p.primary.server().kill()).await?;
    tl.log("primary", "killed (SIGKILL)");
    let p = pair.clone();
    control(move || p.promote_replica()).await?;
    tl.log("replica", "promoted to primary (REPLICAOF NO ONE)");

    let lock_b = locks::connect(locks::Backend::Redis, &on(pair.replica.url())).await?;
    let b = lock_b
        .acquire(
            key,
            AcquireOptions::new(lease).wait(Duration::from_millis(wait_ms)),
        )
        .await;
    let (b_granted, token_b) = match b {
        Ok(g) => {
            let token = g.fencing_token();
            tl.log(
                "B",
                format!("granted token {token} by the promoted replica"),
            );
            (true, Some(token))
        }
        Err(LockError::Timeout { .. }) => {
            tl.log("B", "refused: the promoted replica has A's lock");
            (false, None)
        }
        Err(e) => return Err(e.into()),
    };
    drop(a);
    Ok(Figures {
        a_trusts,
        b_granted,
        double_grant: a_trusts && b_granted,
        replicas_acked: acked,
        token_a,
        token_b,
        fencing_token_reused: token_b.is_some_and(|b| b <= token_a),
    })
}
