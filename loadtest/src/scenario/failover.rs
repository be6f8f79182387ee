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
//! still refuses the second client. (The write barrier is issued on a separate connection, so it
//! first writes a key of its own: replication is one ordered stream, so a replica that acked
//! the barrier has the grant too.) `WAIT` narrows the window; it is not consensus — a replica
//! that acked may still lose the key if it restarts without persistence.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use deadpool_redis::redis::{Client, cmd};
use locks::{AcquireOptions, LockError};

use super::figures::RedisFailover;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline, control, start};
use sandbox::Relay;

struct Mode {
    subject: &'static str,
    wait: bool,
    replica_stalled: bool,
}

const MODES: [Mode; 3] = [
    Mode {
        subject: "redis, no WAIT, link cut",
        wait: false,
        replica_stalled: true,
    },
    Mode {
        subject: "redis + WAIT 1, link cut",
        wait: true,
        replica_stalled: true,
    },
    Mode {
        subject: "redis + WAIT 1, link intact",
        wait: true,
        replica_stalled: false,
    },
];

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let wait_ms: u64 = if opts.quick { 200 } else { 1000 };
    let mut measured = Vec::new();
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    // One pair per run, started together: a replica's first sync takes seconds.
    let pairs =
        futures::future::try_join_all(MODES.iter().map(|_| start(sandbox::RedisPair::start)))
            .await?;
    for (mode, pair) in MODES.iter().zip(pairs) {
        let (f, events) = one(mode, Arc::new(pair), wait_ms).await?;
        rows.push(row(mode, f));
        measured.push((mode, f));
        timeline.extend(events);
    }
    Ok(ScenarioReport {
        scenario: Scenario::RedisFailover,
        fault: "primary + async replica (linked through a relay); the link is cut, A is granted \
                the lock on the primary, the primary is SIGKILLed before the grant replicates, the \
                replica is promoted, B asks for the lock (third run: link intact)"
            .into(),
        rows,
        timeline,
        why: why(&measured),
    })
}

async fn one(
    mode: &Mode,
    pair: Arc<sandbox::RedisPair>,
    wait_ms: u64,
) -> Result<(RedisFailover, Vec<super::Event>)> {
    let tl = Timeline::new();
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
    if mode.replica_stalled {
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
        let n = wait_for_replica(&pair.primary.url(), wait_ms).await?;
        acked = Some(n);
        tl.log(
            "A",
            format!(
                "WAIT 1 {wait_ms} → {n} replica(s) acknowledged: {}",
                if n >= 1 {
                    "grant trusted"
                } else {
                    "grant not trusted, A backs off"
                }
            ),
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
            tl.log(
                "B",
                format!(
                    "granted token {} by the promoted replica",
                    g.fencing_token()
                ),
            );
            (true, Some(g.fencing_token()))
        }
        Err(LockError::Timeout { .. }) => {
            tl.log("B", "refused: the promoted replica has A's lock");
            (false, None)
        }
        Err(e) => return Err(e.into()),
    };
    drop(a);

    let f = RedisFailover {
        a_trusts,
        b_granted,
        double_grant: a_trusts && b_granted,
        replicas_acked: acked,
        token_a,
        token_b,
        fencing_token_reused: token_b.is_some_and(|b| b <= token_a),
    };
    Ok((f, tl.events(Some(mode.subject))))
}

fn row(mode: &Mode, f: RedisFailover) -> Row {
    let (expected, ok) = match (mode.wait, mode.replica_stalled) {
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
    Row::new(mode.subject, expected, observed, ok, f)
}

/// Points `replica` at the primary through the relay on `port`, and waits until the link is up.
pub(super) fn replicate_through(replica: &sandbox::Redis, port: u16) -> sandbox::Result<()> {
    replica.command(&["REPLICAOF", "127.0.0.1", &port.to_string()])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let info = replica.command(&["INFO", "replication"])?;
        if info.contains("master_link_status:up") && info.contains(&format!("master_port:{port}")) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(sandbox::Error::Control {
                server: "redis replica".into(),
                action: "replicate",
                reason: format!("link through the relay not up after 30 s:\n{info}"),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A write barrier on a connection of its own, then `WAIT 1 <ms>`: how many replicas hold
/// every write the primary applied before the barrier (the grant included).
pub(super) async fn wait_for_replica(primary_url: &str, wait_ms: u64) -> Result<i64> {
    let mut conn = Client::open(primary_url)?
        .get_multiplexed_async_connection()
        .await?;
    // WAIT blocks for up to `wait_ms`; the client's default reply timeout is 500 ms.
    conn.set_response_timeout(Duration::from_millis(wait_ms + 2000));
    let () = cmd("SET")
        .arg("scenario:failover:barrier")
        .arg(1)
        .query_async(&mut conn)
        .await?;
    let acked: i64 = cmd("WAIT")
        .arg(1)
        .arg(wait_ms)
        .query_async(&mut conn)
        .await?;
    Ok(acked)
}

/// What each run showed, in words chosen by the figures.
fn why(measured: &[(&Mode, RedisFailover)]) -> String {
    let mut text = String::from(
        "Replication is asynchronous: a grant the replica has not received when the primary \
         dies does not exist on the promoted replica.",
    );
    for (mode, f) in measured {
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
            "; B's fencing token was not above A's, so the counter lost its increment too and \
             fencing on it could not tell them apart"
        } else {
            ""
        };
        text.push_str(&format!(" {}: {a}; {b}{reused}.", mode.subject));
    }
    text.push_str(
        " `WAIT` narrows the window; it is not consensus. For safety without this caveat, use \
         a consensus store (ZooKeeper, etcd), or Redlock over independent instances, plus \
         fencing.",
    );
    text
}
