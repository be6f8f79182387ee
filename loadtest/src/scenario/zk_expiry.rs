//! `zk-session-expiry`: the lock holder's ZooKeeper session expires while it holds the lock.
//!
//! A ZooKeeper lock is an ephemeral node: it lives as long as its creator's *session*, and the
//! session lives as long as the server hears from the client within the session timeout. Here
//! A holds the lock and is then cut off from the server (a relay between them drops every
//! packet). The server expires A's session after the timeout and deletes A's node; B, next in
//! the queue, is granted the lock and writes the protected resource. A learns of the loss only
//! when its own client gives the session up (or, reconnecting, is told it expired): `lost()`
//! fires, but A may already be past its last check, about to write. A's late write with its
//! token (the node's `czxid`) lands after B's: an unfenced store accepts it and B's write is
//! lost; a fenced store, having seen B's higher token, rejects it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock};

use super::fenced_store::FencedRegister;
use super::figures::ZkSessionExpiry;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline, start};
use app::api::Strategy;
use sandbox::Relay;

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let zk = start(sandbox::ZooKeeper::start).await?;
    let redis = start(sandbox::Redis::start).await?;
    let session = Duration::from_millis(if opts.quick { 800 } else { 4000 });
    let tl = Timeline::new();
    let relay = Relay::start(zk.connect_string().parse()?)?;
    let key = "scenario-zk-expiry-product-1";
    let options = AcquireOptions::new(session).wait(session * 10);

    let lock_a = ZooKeeperLock::connect(&relay.addr().to_string(), session).await?;
    let lock_b = ZooKeeperLock::connect(&zk.connect_string(), session).await?;
    let unfenced = FencedRegister::open(&redis.url(), "resource:unfenced").await?;
    let fenced = FencedRegister::open(&redis.url(), "resource:fenced").await?;

    let a = lock_a.acquire(key, options).await?;
    let token_a = a.fencing_token();
    tl.log("A", format!("acquired, token {token_a} (czxid)"));

    relay.cut();
    let cut_at = Instant::now();
    tl.log(
        "network",
        format!("A cut off from ZooKeeper (session timeout {session:?})"),
    );

    let b = lock_b.acquire(key, options).await.context("B's acquire")?;
    let token_b = b.fencing_token();
    let b_after = cut_at.elapsed();
    tl.log(
        "B",
        format!("acquired, token {token_b}: the server expired A's session and deleted its node"),
    );
    for register in [&unfenced, &fenced] {
        register.write(token_b, "B", true).await?;
    }
    tl.log("B", format!("wrote the resource with token {token_b}"));

    // A learns by itself when its client gives the session up; healing lets it reconnect and
    // be told, should its own clock be slower.
    let lost = match tokio::time::timeout(session * 4, a.lost()).await {
        Ok(()) => true,
        Err(_) => {
            relay.heal();
            tl.log("network", "healed: A reconnects");
            tokio::time::timeout(session * 6, a.lost()).await.is_ok()
        }
    };
    let lost_after = cut_at.elapsed();
    if lost {
        tl.log("A", "lost() fired: the library knows the lock is gone");
    } else {
        tl.log("A", "lost() did not fire");
    }

    // A was already past its last check and writes anyway, with its old token.
    let stale_accepted = unfenced.write(token_a, "A", false).await?;
    tl.log(
        "A",
        format!(
            "late unfenced write: {}",
            if stale_accepted {
                "accepted, B's write is lost"
            } else {
                "refused"
            }
        ),
    );
    let fenced_accepted = fenced.write(token_a, "A", true).await?;
    tl.log(
        "A",
        format!(
            "late fenced write: {} (token {token_a} vs fence {token_b})",
            if fenced_accepted {
                "accepted"
            } else {
                "rejected"
            }
        ),
    );
    let final_unfenced = unfenced.value().await?.unwrap_or_default();
    let final_fenced = fenced.value().await?.unwrap_or_default();
    b.release().await?;

    let figures = |stale_write_accepted: bool, final_writer: &str| ZkSessionExpiry {
        lost_fired: lost,
        b_granted_after_cut_ms: ms(b_after),
        lost_after_cut_ms: ms(lost_after),
        token_a,
        token_b,
        stale_write_accepted,
        final_writer: final_writer.chars().next().unwrap_or('-'),
    };
    let (plain, with_fence) = (
        figures(stale_accepted, &final_unfenced),
        figures(fenced_accepted, &final_fenced),
    );
    let fired = if lost { "fired" } else { "silent" };
    let rows = vec![
        Row::new(
            Strategy::Zookeeper.name(),
            "lost() fires; B acquires; A's late write overwrites B's (lost update)",
            format!("lost() {fired}; B granted; resource ends as {final_unfenced}'s write"),
            lost && stale_accepted && plain.final_writer == 'A',
            plain,
        ),
        Row::new(
            Strategy::ZookeeperFenced.name(),
            "lost() fires; B acquires; A's late write is rejected by the fence",
            format!(
                "lost() {fired}; B granted; A's write {}; resource ends as {final_fenced}'s write",
                if fenced_accepted {
                    "accepted"
                } else {
                    "rejected"
                }
            ),
            lost && !fenced_accepted && with_fence.final_writer == 'B',
            with_fence,
        ),
    ];
    Ok(ScenarioReport {
        scenario: Scenario::ZkSessionExpiry,
        fault: format!(
            "the holder is partitioned from ZooKeeper until its {session:?} session expires"
        ),
        rows,
        timeline: tl.events(None),
        why: why(&plain, &with_fence),
    })
}

/// What the session's expiry let happen, in words chosen by the figures.
fn why(plain: &ZkSessionExpiry, fenced: &ZkSessionExpiry) -> String {
    let f = plain;
    let lost = if f.lost_fired {
        format!(
            "A's `lost()` fired {:.0} ms after the cut — {:.0} ms after B's grant, the gap in \
             which A can still act on a lock it no longer has",
            f.lost_after_cut_ms,
            f.lost_after_cut_ms - f.b_granted_after_cut_ms
        )
    } else {
        "A's `lost()` never fired: A was never told".to_string()
    };
    let store = |f: &ZkSessionExpiry, what: &str| {
        if f.stale_write_accepted {
            format!(
                "the {what} store accepted A's late write (token {}) over B's",
                f.token_a
            )
        } else {
            format!(
                "the {what} store refused A's late write (token {}, having seen B's {})",
                f.token_a, f.token_b
            )
        }
    };
    format!(
        "The lock is only as alive as the session. Cut off, A kept believing it held the lock \
         while the server expired its session; B was granted the lock {:.0} ms after the cut; \
         {lost}. Then {}, and {}.",
        f.b_granted_after_cut_ms,
        store(plain, "unfenced"),
        store(fenced, "fenced"),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
