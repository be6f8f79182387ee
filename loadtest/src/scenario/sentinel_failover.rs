//! `sentinel-failover`: a `redis-watchdog` lock granted by a primary that dies before its
//! replicas receive the grant; Sentinel promotes one of them, and B asks for the same lock.
//!
//! Sentinel moves the primary's address; it does not make replication synchronous. The
//! promoted replica has never heard of A's grant, so it grants B the lock while A still acts
//! on it — a second holder, which the lock-history checker shows as an overlap — and its
//! fencing counter, replicated the same way, lost A's increment too: B is handed A's token
//! again, so a store fenced on that counter cannot tell A's late write from B's. A fencing
//! counter on an asynchronous replica is not monotonic across a failover.
//!
//! "The replicas never got the grant" is made certain rather than lucky, without a relay (the
//! Sentinels rewrite the replicas' primary address on every failover): both replicas are
//! frozen (SIGSTOP), a 16 MB filler is written on the primary — its first ≈ 4 MB fill the socket
//! buffers, the rest waits in the primary's own output buffer for each replica, under the
//! 64 MB soft limit — and A's grant queues behind it. The primary is SIGKILLed with the grant
//! still in its memory, and the replicas are thawed at once, well inside Sentinel's
//! `down-after-milliseconds` (1000 ms; a replica silent for longer is not promotable).
//!
//! The fix shown in the second run: A's client requires one replica to confirm each grant
//! (`RedisWatchdogLock::connect_replicated`, `WAIT 1` after the grant). With both replicas
//! frozen none confirms, so A's acquire fails with `Unreplicated`, the grant is given back,
//! and A never acts: B's grant after the failover is then the only holding, and the history is
//! clean. `WAIT` narrows the window; it is not consensus.
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use deadpool_redis::redis::cmd;
use locks::history::History;
use locks::recorded::FencedStore;
use locks::redis::{RedisWatchdogLock, Replication, Target};
use locks::{AcquireOptions, DistributedLock, Guard, LockError};
use serde::{Deserialize, Serialize};

use super::{Checked, Judgement, Scenario, Stage};
use crate::rig::replication::{connection, held_back_bytes, replicas_with_everything};
use crate::rig::{control, start};

pub struct SentinelFailover;

/// `sentinel-failover`, one row per run: without and with a replication requirement on A.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Replicas that had to confirm each of A's grants (`WAIT`); 0: none.
    pub wait_replicas: u32,
    /// Bytes the primary still held for a replica when it was killed (the filler, then A's
    /// grant): what the frozen replicas never received.
    pub held_back_bytes: u64,
    /// How long both replicas were frozen (Sentinel's `down-after-milliseconds` is 1000).
    pub replicas_frozen_ms: f64,
    /// A's token, when A was granted the lock and acted on it.
    pub token_a: Option<u64>,
    /// A's acquire failed: only this many replicas confirmed the grant.
    pub a_unreplicated_acks: Option<u32>,
    /// The promoted replica had A's lock when it became primary.
    pub promoted_had_grant: bool,
    /// The promoted replica's fencing counter then.
    pub promoted_fence: u64,
    pub promoted_after_kill_ms: f64,
    pub b_granted_after_kill_ms: Option<f64>,
    pub token_b: Option<u64>,
    /// The fenced store's verdict on A's write after B's (`None`: A never acted).
    pub a_late_write_accepted: Option<bool>,
    /// When A's `lost()` fired (full form only).
    pub a_lost_after_kill_ms: Option<f64>,
    /// What the lock-history checker found, by rule.
    #[serde(flatten)]
    pub checked: Checked,
}

/// Long, so A's watchdog does not renew (and so learn of the loss) before B asks.
const LEASE: Duration = Duration::from_secs(30);
/// Written on the primary while the replicas are frozen, ahead of A's grant.
const FILLER_BYTES: usize = 16 << 20;
/// How long A's `WAIT` waits for a confirmation: short, because the replicas stay frozen
/// meanwhile, and a replica silent past Sentinel's `down-after-milliseconds` (1000) is not
/// promotable.
const WAIT_TIMEOUT: Duration = Duration::from_millis(100);
/// A bound on anything the scenario waits for.
const PATIENCE: Duration = Duration::from_secs(60);

/// One run: how many replicas must confirm A's grants (0: none).
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    wait_replicas: u32,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.wait_replicas {
            0 => f.write_str("redis-watchdog via Sentinel, no WAIT"),
            n => write!(f, "redis-watchdog via Sentinel + WAIT {n}"),
        }
    }
}

const MODES: [Mode; 2] = [Mode { wait_replicas: 0 }, Mode { wait_replicas: 1 }];

impl Scenario for SentinelFailover {
    /// Whether A waits for its watchdog to learn of the loss (a lease long: the full form).
    type Sizes = bool;
    const QUICK: bool = false;
    const FULL: bool = true;
    type Subject = Mode;
    type Figures = Figures;

    fn fault(_: &bool) -> String {
        format!(
            "Redis primary + 2 async replicas + 3 Sentinels; A takes a `redis-watchdog` lock \
             through the Sentinels once, then both replicas are frozen (SIGSTOP), a {} MB filler \
             is written on the primary, A is granted the lock again (queued behind the filler), \
             the primary is SIGKILLed and the replicas thawed; Sentinel promotes one and B asks \
             for the lock through the Sentinels",
            FILLER_BYTES >> 20
        )
    }

    async fn play(watch_loss: bool, stage: &Stage) -> Result<Vec<(Mode, Figures)>> {
        // One cluster per run, started together: replica syncs and Sentinel discovery take
        // seconds.
        let clusters = futures::future::try_join_all(
            MODES
                .iter()
                .map(|_| start(sandbox::RedisSentinelCluster::start)),
        )
        .await?;
        let mut rows = Vec::new();
        for (mode, cluster) in MODES.into_iter().zip(clusters) {
            let figures = one(mode, Arc::new(cluster), watch_loss, stage)
                .await
                .with_context(|| mode.to_string())?;
            rows.push((mode, figures));
        }
        Ok(rows)
    }

    fn judge(_: &bool, mode: &Mode, f: &Figures) -> Judgement {
        let b = match (f.token_b, f.b_granted_after_kill_ms) {
            (Some(token), Some(ms)) => format!("B granted token {token} {ms:.0} ms after the kill"),
            _ => "B refused: the promoted replica had the lock".to_string(),
        };
        let a = match (f.token_a, f.a_unreplicated_acks) {
            (Some(token), _) => format!("A granted token {token} and acts on it"),
            (None, Some(acks)) => {
                format!(
                    "A told its grant reached {acks} replica(s) of {}: A does not act",
                    f.wait_replicas
                )
            }
            (None, None) => "A not granted".to_string(),
        };
        let late = match f.a_late_write_accepted {
            Some(true) => "; the fenced store ACCEPTED A's late write",
            Some(false) => "; the fenced store refused A's late write",
            None => "",
        };
        let observed = format!(
            "{a}; the promoted replica {} A's grant (fencing counter {}); {b}{late}; history: {} \
             overlap(s), {} token(s) not increasing, {} stale write(s) accepted",
            if f.promoted_had_grant {
                "had"
            } else {
                "never got"
            },
            f.promoted_fence,
            f.checked.overlaps,
            f.checked.tokens_not_increasing,
            f.checked.stale_writes_accepted
        );
        let granted_twice = f.token_a.is_some() && f.token_b.is_some();
        let (expected, ok) = match mode.wait_replicas {
            0 => (
                "the promoted replica never got A's grant and grants B the same lock: two holders \
                 (the checker's overlap); A's late write judged by the fenced store as it happens",
                granted_twice && !f.promoted_had_grant && f.checked.overlaps > 0,
            ),
            _ => (
                "A is told no replica confirmed its grant and does not act; B granted after the \
                 failover; a clean history",
                f.a_unreplicated_acks
                    .is_some_and(|acks| acks < f.wait_replicas)
                    && f.token_a.is_none()
                    && f.token_b.is_some()
                    && f.checked.overlaps
                        + f.checked.tokens_not_increasing
                        + f.checked.stale_writes_accepted
                        == 0,
            ),
        };
        Judgement::new(expected, observed, ok)
    }

    /// What each run showed, in words chosen by the figures.
    fn why(_: &bool, rows: &[(Mode, Figures)]) -> String {
        let mut text = String::from(
            "Sentinel moves the primary's address; replication stays asynchronous, so a grant the \
             replicas had not received when the primary died does not exist on the promoted one.",
        );
        for (mode, f) in rows {
            text.push_str(&format!(
                " {mode}: the primary died with {:.1} MB still queued for each replica (replicas \
                 frozen {:.0} ms); the promoted replica {} A's grant and its fencing counter read {}",
                f.held_back_bytes as f64 / f64::from(1 << 20),
                f.replicas_frozen_ms,
                if f.promoted_had_grant {
                    "had"
                } else {
                    "lacked"
                },
                f.promoted_fence
            ));
            match (f.token_a, f.token_b) {
                (Some(a), Some(b)) => {
                    text.push_str(&format!(
                        "; B was granted token {b} while A held token {a}: two holders"
                    ));
                    if b <= a {
                        text.push_str(
                            ", and B's token is not above A's — the counter lost A's increment, so \
                             fencing on it cannot tell the two apart",
                        );
                    }
                    match f.a_late_write_accepted {
                        Some(true) if b <= a && f.checked.stale_writes_accepted == 0 => text.push_str(
                            "; the fenced store accepted A's late write, and even the checker's \
                             stale-write rule let it pass: its token was as new as any granted",
                        ),
                        Some(true) => text.push_str("; the fenced store accepted A's late write"),
                        Some(false) => text.push_str("; the fenced store refused A's late write"),
                        None => {}
                    }
                }
                (None, Some(b)) => text.push_str(&format!(
                    "; A's acquire reported that {} of {} required replica(s) confirmed its grant, \
                     so A gave it back and never acted; B's token {b} was the only holding",
                    f.a_unreplicated_acks.unwrap_or(0),
                    f.wait_replicas
                )),
                (_, None) => text.push_str("; B was refused: the lock survived the failover"),
            }
            if let Some(ms) = f.a_lost_after_kill_ms {
                text.push_str(&format!(
                    "; A's watchdog learned of the loss {ms:.0} ms after the kill, at its next renewal"
                ));
            }
            text.push('.');
        }
        text.push_str(
            " `WAIT` after the grant turns the silent loss into an error the holder sees; it is \
             not consensus. For exclusion that survives a failover, use a consensus store \
             (ZooKeeper, etcd) and fence on its counter.",
        );
        text
    }
}

async fn one(
    mode: Mode,
    cluster: Arc<sandbox::RedisSentinelCluster>,
    watch_loss: bool,
    stage: &Stage,
) -> Result<Figures> {
    let history = Arc::new(History::new());
    let tl = stage.round(mode.to_string());
    let store = FencedStore::new(history.clone());
    let url = Target::sentinel_url(&cluster.sentinel_addrs(), cluster.master_name());
    let a = match mode.wait_replicas {
        0 => RedisWatchdogLock::connect(&url)?,
        n => RedisWatchdogLock::connect_replicated(&url, Replication::new(n, WAIT_TIMEOUT))?,
    };
    let b = RedisWatchdogLock::connect(&url)?;
    let key = format!("scenario:sentinel-failover:{}", locks::new_owner_id());
    let c = cluster.clone();
    let primary = tokio::task::spawn_blocking(move || c.await_leader(PATIENCE)).await??;
    let replicas: Vec<usize> = (0..cluster.servers().len())
        .filter(|&i| i != primary)
        .collect();
    let mut direct = connection(&cluster.server(primary).url(), PATIENCE).await?;

    // All is well: A takes the lock once (its connections are made; the fencing counter
    // exists on every server), and both replicas catch up.
    let warm_token = hold_once(&a, "A", &key, &store).await?;
    let synced = replicas_with_everything(&mut direct, replicas.len(), PATIENCE).await?;
    tl.log(
        "primary",
        format!("{synced} replica(s) have every write so far, A's token {warm_token} included"),
    );

    let filler = vec![b'x'; FILLER_BYTES];
    history.fault("nemesis", "SIGSTOP both replicas");
    let frozen_at = Instant::now();
    let (c, frozen) = (cluster.clone(), replicas.clone());
    control(move || {
        frozen
            .iter()
            .try_for_each(|&i| c.server(i).server().pause())
    })
    .await?;
    let () = cmd("SET")
        .arg("scenario:sentinel-failover:filler")
        .arg(filler)
        .query_async(&mut direct)
        .await?;
    history.attempt("A");
    let (guard_a, token_a, a_unreplicated) = match a.acquire(&key, AcquireOptions::new(LEASE)).await
    {
        Ok(guard) => {
            let token = guard.fencing_token();
            history.grant("A", token);
            store.write("A", token);
            (Some(guard), Some(token), None)
        }
        Err(e @ LockError::Unreplicated { acked, .. }) => {
            history.failed("A", &e);
            (None, None, Some(acked))
        }
        Err(e) => return Err(e).context("A's acquire"),
    };
    let held_back = held_back_bytes(&mut direct).await?;
    tl.log(
        "primary",
        format!(
            "{:.1} MB wait in its output buffer for each replica (filler, then A's grant)",
            held_back as f64 / f64::from(1 << 20)
        ),
    );
    history.fault("nemesis", "SIGKILL the primary");
    let p = cluster.clone();
    control(move || p.server(primary).server().kill()).await?;
    let killed_at = Instant::now();
    let (c, frozen) = (cluster.clone(), replicas.clone());
    control(move || {
        frozen
            .iter()
            .try_for_each(|&i| c.server(i).server().resume())
    })
    .await?;
    let frozen = frozen_at.elapsed();
    history.fault(
        "nemesis",
        format!(
            "SIGCONT both replicas, {:.0} ms after the SIGSTOP",
            frozen.as_secs_f64() * 1000.0
        ),
    );

    let promoted = await_promotion(&cluster, &replicas, &key).await?;
    let promoted_after = killed_at.elapsed();
    tl.log(
        format!("server {}", promoted.server + 1),
        format!(
            "promoted by the Sentinels {:.0} ms after the kill; A's lock key {}, fencing \
             counter {}",
            promoted_after.as_secs_f64() * 1000.0,
            if promoted.has_grant {
                "present"
            } else {
                "absent"
            },
            promoted.fence
        ),
    );

    history.attempt("B");
    let (guard_b, refusals) = acquire_when_back(&b, &key).await?;
    let b_granted_after = guard_b.as_ref().map(|_| killed_at.elapsed());
    if refusals > 0 {
        tl.log(
            "B",
            format!(
                "{refusals} attempt(s) failed while the Sentinels still named the dead primary"
            ),
        );
    }
    let token_b = guard_b.as_ref().map(Guard::fencing_token);
    match token_b {
        Some(token) => {
            history.grant("B", token);
            store.write("B", token);
        }
        None => history.failed("B", "the promoted replica has A's lock"),
    }
    // A, still acting on its grant, writes late.
    let a_late_write_accepted = token_a.map(|token| store.write("A", token));

    let a_lost_after = match (&guard_a, watch_loss) {
        (Some(guard), true) => {
            let fired = tokio::time::timeout(LEASE, guard.lost()).await.is_ok();
            if let (true, Some(token)) = (fired, token_a) {
                history.lost("A", token);
            }
            fired.then(|| killed_at.elapsed())
        }
        _ => None,
    };
    if let (Some(guard), Some(token)) = (guard_b, token_b) {
        history.release("B", token);
        let _ = guard.release().await;
    }
    drop(guard_a);

    let events = history.events();
    tl.history(&events);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok(Figures {
        wait_replicas: mode.wait_replicas,
        held_back_bytes: held_back,
        replicas_frozen_ms: ms(frozen),
        token_a,
        a_unreplicated_acks: a_unreplicated,
        promoted_had_grant: promoted.has_grant,
        promoted_fence: promoted.fence,
        promoted_after_kill_ms: ms(promoted_after),
        b_granted_after_kill_ms: b_granted_after.map(ms),
        token_b,
        a_late_write_accepted,
        a_lost_after_kill_ms: a_lost_after.map(ms),
        checked: Checked::of(&events),
    })
}
/// `client` takes the lock, writes once, releases — recorded.
async fn hold_once(
    lock: &RedisWatchdogLock,
    client: &str,
    key: &str,
    store: &FencedStore,
) -> Result<u64> {
    let history = store.history();
    history.attempt(client);
    let guard = lock
        .acquire(key, AcquireOptions::new(LEASE).wait(PATIENCE))
        .await?;
    let token = guard.fencing_token();
    history.grant(client, token);
    store.write(client, token);
    history.release(client, token);
    guard.release().await?;
    Ok(token)
}

/// The replica the Sentinels promoted, and what it held when it became primary.
struct Promoted {
    server: usize,
    has_grant: bool,
    fence: u64,
}

/// Waits until one of `replicas` answers `ROLE` as primary, then reads A's lock key and its
/// fencing counter there (before B asks, so what is found is what the replica received).
async fn await_promotion(
    cluster: &Arc<sandbox::RedisSentinelCluster>,
    replicas: &[usize],
    key: &str,
) -> Result<Promoted> {
    let (c, replicas, key) = (cluster.clone(), replicas.to_vec(), key.to_owned());
    tokio::task::spawn_blocking(move || -> Result<Promoted> {
        let server = sandbox::wait_for(PATIENCE, || {
            replicas.iter().copied().find(|&i| {
                c.server(i)
                    .command(&["ROLE"])
                    .is_ok_and(|role| role.starts_with("master"))
            })
        })
        .context("no replica was promoted")?;
        let redis = c.server(server);
        let has_grant = redis.command(&["EXISTS", key.as_str()])? == "1";
        let fence = redis
            .command(&["GET", locks::redis::fence_key(&key).as_str()])?
            .parse()
            .unwrap_or(0);
        Ok(Promoted {
            server,
            has_grant,
            fence,
        })
    })
    .await?
}

/// B's acquire, retried while the Sentinels still name the dead primary; `None` if the lock
/// is held (the promoted replica had A's grant). Also returns the failed attempts.
async fn acquire_when_back(lock: &RedisWatchdogLock, key: &str) -> Result<(Option<Guard>, usize)> {
    let deadline = Instant::now() + PATIENCE;
    let mut failed = 0;
    loop {
        let options = AcquireOptions::new(LEASE).wait(Duration::from_secs(1));
        match lock.acquire(key, options).await {
            Ok(guard) => return Ok((Some(guard), failed)),
            Err(LockError::Timeout { .. }) => return Ok((None, failed)),
            Err(e) if Instant::now() > deadline => {
                return Err(e).context("B: no primary answered within the patience");
            }
            Err(_) => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
