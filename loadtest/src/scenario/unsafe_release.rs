//! `unsafe-release`: a holder outlives its lease, someone else acquires, and *then* the old
//! holder releases.
//!
//! With `redis-unsafe-release` the release is a plain `DEL`: it deletes B's lock, reports
//! success to A (who never learns it was late), and a third client C is granted the lock while
//! B is still inside its critical section. The correct `redis` lock releases by
//! compare-and-delete: A's release finds B's owner id, deletes nothing, answers "not yours",
//! and C is refused for as long as B holds.

use std::time::Duration;

use anyhow::{Context, Result};
use locks::{AcquireOptions, Backend, LockError};
use serde::{Deserialize, Serialize};

use super::{Judgement, Scenario, Stage};
use crate::rig::start;

pub struct UnsafeRelease;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    lease: Duration,
}

/// A outlives its lease, B acquires, then A releases late, and C asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Clients holding the lock at once after A's late release (B and maybe C).
    pub holders_at_once: u8,
    /// A's late release deleted a lock — B's — and reported it as A's own.
    pub late_release_deleted_lock: bool,
    pub token_a: u64,
    pub token_b: u64,
}

/// How long A may wait for its `lost()` (which fires one lease after the grant).
const PATIENCE: Duration = Duration::from_secs(60);

impl Scenario for UnsafeRelease {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        lease: Duration::from_millis(200),
    };
    const FULL: Sizes = Sizes {
        lease: Duration::from_millis(1000),
    };
    type Subject = Backend;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "A holds a {:?} lease and stalls past it; B acquires; then A releases, late",
            s.lease
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Backend, Figures)>> {
        let redis = start(sandbox::Redis::start).await?;
        let endpoints = locks::Endpoints {
            redis: Some(redis.url()),
            ..Default::default()
        };
        let lease = s.lease;
        let mut rows = Vec::new();
        for backend in [Backend::RedisUnsafeRelease, Backend::Redis] {
            let tl = stage.round(backend.name());
            let lock = locks::connect(backend, &endpoints).await?;
            let key = format!("scenario:unsafe-release:{backend}");

            let a = lock.acquire(&key, AcquireOptions::new(lease)).await?;
            let token_a = a.fencing_token();
            tl.log("A", format!("acquired token {token_a}, lease {lease:?}"));
            tokio::time::timeout(PATIENCE, a.lost())
                .await
                .context("A's lost() did not fire")?;
            tl.log(
                "A",
                "lease expired (lost() fired); A's critical section is still running",
            );

            // B's lease is long, so B certainly still holds when C tries.
            let b = lock
                .acquire(&key, AcquireOptions::new(PATIENCE).wait(PATIENCE))
                .await?;
            let token_b = b.fencing_token();
            tl.log("B", format!("acquired token {token_b}"));

            let a_claimed = a.release().await?;
            tl.log(
                "A",
                match a_claimed {
                    true => "released with plain DEL: B's lock deleted, reported as A's own",
                    false => "release refused: the key holds B's owner id (compare-and-delete)",
                },
            );

            let c = lock.acquire(&key, AcquireOptions::new(lease)).await;
            let third_holder = match &c {
                Ok(c) => {
                    tl.log(
                        "C",
                        format!(
                            "acquired token {} while B (token {token_b}) still holds: two holders",
                            c.fencing_token()
                        ),
                    );
                    true
                }
                Err(LockError::Timeout { .. }) => {
                    tl.log("C", "refused: B still holds the lock");
                    false
                }
                Err(e) => anyhow::bail!("C's acquire failed: {e}"),
            };
            let b_owned = b.release().await?;
            tl.log(
                "B",
                match (b_owned, third_holder) {
                    (true, true) => "released: DEL removed C's lock in turn (the failure cascades)",
                    (true, false) => "released its own lock",
                    (false, _) => "release found the lock no longer B's",
                },
            );
            if let Ok(c) = c {
                c.release().await?;
            }
            let figures = Figures {
                holders_at_once: if third_holder { 2 } else { 1 },
                late_release_deleted_lock: a_claimed,
                token_a,
                token_b,
            };
            rows.push((backend, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, backend: &Backend, f: &Figures) -> Judgement {
        let two_holders = f.holders_at_once > 1;
        let (expected, holds) = match backend {
            Backend::RedisUnsafeRelease => (
                "A's late DEL frees B's lock; C is granted while B holds (two holders)",
                f.late_release_deleted_lock && two_holders,
            ),
            _ => (
                "A's late release is refused; C waits while B holds (one holder)",
                !f.late_release_deleted_lock && !two_holders,
            ),
        };
        let observed = format!(
            "A's release {}; C {}",
            if f.late_release_deleted_lock {
                "deleted a lock"
            } else {
                "was refused"
            },
            if two_holders {
                "granted while B held"
            } else {
                "refused"
            }
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(_: &Sizes, rows: &[(Backend, Figures)]) -> String {
        let mut text = String::from(
            "A release that does not check ownership acts on whoever holds the key *now*.",
        );
        for (backend, f) in rows {
            let how = match backend {
                Backend::RedisUnsafeRelease => "a plain `DEL`",
                _ => {
                    "compare-and-delete: a Lua script deleting only if the value is still A's \
                     owner id"
                }
            };
            let what = if f.late_release_deleted_lock {
                format!(
                    "A's late release deleted B's lock and reported success to A, who never \
                     learned it was late; {} client(s) then held the lock at once",
                    f.holders_at_once
                )
            } else {
                format!(
                    "A's late release found B's owner id and deleted nothing; {} client(s) held \
                     the lock at once",
                    f.holders_at_once
                )
            };
            text.push_str(&format!(" With `{backend}` ({how}), {what}."));
        }
        text
    }
}
