//! `zk-session-expiry`: the lock holder's ZooKeeper session expires while it holds the lock.
//!
//! A ZooKeeper lock is an ephemeral node: it lives as long as its creator's *session*, and the
//! session lives as long as the server hears from the client within the session timeout. Here
//! A holds the lock and is then cut off from the server (a relay between them closes every
//! connection and refuses new ones). The server expires A's session after the timeout and
//! deletes A's node; B, next in the queue, is granted the lock and writes the protected
//! resource. A learns of the loss only when its own client gives the session up (or,
//! reconnecting, is told it expired): `lost()` fires, but A may already be past its last
//! check, about to write. A's late write with its token (the node's `czxid`) lands after B's:
//! an unfenced store accepts it and B's write is lost; a fenced store, having seen B's higher
//! token, rejects it.
//!
//! The protected resource is a register in the scenario's own Redis that remembers the highest
//! fencing token that wrote it: a fenced write is refused unless its token is higher (checked
//! and set in one script), an unfenced one always accepted, as a plain `SET` or `UPDATE` would
//! be. That difference is the whole point of fencing: the lock cannot stop a holder that lost
//! it without knowing, the resource can.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app::api::Strategy;
use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{Client, Script};
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock};
use sandbox::Relay;
use serde::{Deserialize, Serialize};

use super::{Judgement, Scenario, Stage};
use crate::rig::start;

pub struct ZkSessionExpiry;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    session: Duration,
}

/// A is cut off from ZooKeeper until its session expires; B acquires and writes, then A
/// writes late. One row per store: unfenced and fenced.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// A's `lost()` fired.
    pub lost_fired: bool,
    pub b_granted_after_cut_ms: f64,
    pub lost_after_cut_ms: f64,
    pub token_a: u64,
    pub token_b: u64,
    /// This store accepted A's late write.
    pub stale_write_accepted: bool,
    /// Whose write the store holds in the end (`A` or `B`).
    pub final_writer: char,
}

/// A bound on anything the scenario waits for.
const PATIENCE: Duration = Duration::from_secs(60);

impl Scenario for ZkSessionExpiry {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        session: Duration::from_millis(800),
    };
    const FULL: Sizes = Sizes {
        session: Duration::from_millis(4000),
    };
    type Subject = Strategy;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "the holder is partitioned from ZooKeeper until its {:?} session expires",
            s.session
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Strategy, Figures)>> {
        let zk = start(sandbox::ZooKeeper::start).await?;
        let redis = start(sandbox::Redis::start).await?;
        let tl = stage.timeline();
        let relay = Relay::start(zk.connect_string().parse()?)?;
        let key = "scenario-zk-expiry-product-1";
        let options = AcquireOptions::new(s.session).wait(PATIENCE);

        let lock_a = ZooKeeperLock::connect(&relay.addr().to_string(), s.session).await?;
        let lock_b = ZooKeeperLock::connect(&zk.connect_string(), s.session).await?;
        let unfenced = FencedRegister::open(&redis.url(), "resource:unfenced").await?;
        let fenced = FencedRegister::open(&redis.url(), "resource:fenced").await?;

        let a = lock_a.acquire(key, options).await?;
        let token_a = a.fencing_token();
        tl.log("A", format!("acquired, token {token_a} (czxid)"));

        relay.cut();
        let cut_at = Instant::now();
        tl.log(
            "network",
            format!("A cut off from ZooKeeper (session timeout {:?})", s.session),
        );

        let b = lock_b.acquire(key, options).await.context("B's acquire")?;
        let token_b = b.fencing_token();
        let b_after = cut_at.elapsed();
        tl.log(
            "B",
            format!(
                "acquired, token {token_b}: the server expired A's session and deleted its node"
            ),
        );
        for register in [&unfenced, &fenced] {
            register.write(token_b, "B", true).await?;
        }
        tl.log("B", format!("wrote the resource with token {token_b}"));

        // A learns by itself when its client gives the session up; healing lets it reconnect
        // and be told, should its own clock be slower.
        let lost = match tokio::time::timeout(s.session * 4, a.lost()).await {
            Ok(()) => true,
            Err(_) => {
                relay.heal();
                tl.log("network", "healed: A reconnects");
                tokio::time::timeout(PATIENCE, a.lost()).await.is_ok()
            }
        };
        let lost_after = cut_at.elapsed();
        tl.log(
            "A",
            match lost {
                true => "lost() fired: the library knows the lock is gone",
                false => "lost() did not fire",
            },
        );

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

        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let figures = |stale_write_accepted: bool, final_writer: &str| Figures {
            lost_fired: lost,
            b_granted_after_cut_ms: ms(b_after),
            lost_after_cut_ms: ms(lost_after),
            token_a,
            token_b,
            stale_write_accepted,
            final_writer: final_writer.chars().next().unwrap_or('-'),
        };
        Ok(vec![
            (
                Strategy::Zookeeper,
                figures(stale_accepted, &final_unfenced),
            ),
            (
                Strategy::ZookeeperFenced,
                figures(fenced_accepted, &final_fenced),
            ),
        ])
    }

    fn judge(_: &Sizes, strategy: &Strategy, f: &Figures) -> Judgement {
        let fired = if f.lost_fired { "fired" } else { "silent" };
        let ends = f.final_writer;
        match strategy {
            Strategy::ZookeeperFenced => Judgement::new(
                "lost() fires; B acquires; A's late write is rejected by the fence",
                format!(
                    "lost() {fired}; B granted; A's write {}; resource ends as {ends}'s write",
                    if f.stale_write_accepted {
                        "accepted"
                    } else {
                        "rejected"
                    }
                ),
                f.lost_fired && !f.stale_write_accepted && ends == 'B',
            ),
            _ => Judgement::new(
                "lost() fires; B acquires; A's late write overwrites B's (lost update)",
                format!("lost() {fired}; B granted; resource ends as {ends}'s write"),
                f.lost_fired && f.stale_write_accepted && ends == 'A',
            ),
        }
    }

    fn why(_: &Sizes, rows: &[(Strategy, Figures)]) -> String {
        let Some((_, f)) = rows.first() else {
            return String::new();
        };
        let lost = if f.lost_fired {
            format!(
                "A's `lost()` fired {:.0} ms after the cut — {:.0} ms after B's grant, the gap \
                 in which A can still act on a lock it no longer has",
                f.lost_after_cut_ms,
                f.lost_after_cut_ms - f.b_granted_after_cut_ms
            )
        } else {
            "A's `lost()` never fired: A was never told".to_string()
        };
        let stores: Vec<String> = rows
            .iter()
            .map(|(strategy, f)| {
                let what = if *strategy == Strategy::ZookeeperFenced {
                    "fenced"
                } else {
                    "unfenced"
                };
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
            })
            .collect();
        format!(
            "The lock is only as alive as the session. Cut off, A kept believing it held the \
             lock while the server expired its session; B was granted the lock {:.0} ms after \
             the cut; {lost}. Then {}.",
            f.b_granted_after_cut_ms,
            stores.join(", and ")
        )
    }
}

/// KEYS: register. ARGV: token, value, fenced (1/0). Returns 1 if written, 0 if refused.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local fence = tonumber(redis.call('hget', KEYS[1], 'fence') or '0')
local token = tonumber(ARGV[1])
if ARGV[3] == '1' and token <= fence then
  return 0
end
if token > fence then redis.call('hset', KEYS[1], 'fence', token) end
redis.call('hset', KEYS[1], 'value', ARGV[2])
return 1",
    )
});

/// A register in Redis written with or without a fencing check.
struct FencedRegister {
    conn: MultiplexedConnection,
    key: String,
}

impl FencedRegister {
    async fn open(redis_url: &str, key: &str) -> Result<FencedRegister> {
        let conn = Client::open(redis_url)?
            .get_multiplexed_async_connection()
            .await
            .context("connecting to the resource's Redis")?;
        Ok(FencedRegister {
            conn,
            key: key.to_owned(),
        })
    }

    /// Writes `value` as the holder of `token`; `fenced` refuses tokens not above the fence.
    /// Returns whether the write was accepted.
    async fn write(&self, token: u64, value: &str, fenced: bool) -> Result<bool> {
        let written: i64 = WRITE
            .key(&self.key)
            .arg(token)
            .arg(value)
            .arg(if fenced { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(written == 1)
    }

    /// The value last written.
    async fn value(&self) -> Result<Option<String>> {
        let v: Option<String> = deadpool_redis::redis::cmd("HGET")
            .arg(&self.key)
            .arg("value")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(v)
    }
}
