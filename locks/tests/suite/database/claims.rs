//! What the articles claim of a lock held by an open transaction, measured for the row-lock lock
//! and the blocking insert alike (`claims!` instantiates every property for one of them): a
//! history-checked contention run, a killed holder freed by the database, a silent one by its
//! lease, waiters served in arrival order, one waiter woken per release, re-entry, tokens a
//! killed holder drew never drawn again, and the price — a connection per holder and waiter.
//! Figures the tests measure are printed (`--no-capture`), never asserted.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use locks::database::{DbInsertLock, DbRowLock, Waits, session_of};
use locks::{AcquireOptions, Backend, DistributedLock, Guard, LockError, conformance};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::{OwnDatabase, kill};
use crate::contention;
use crate::relay::Relay;

/// A lock held by a transaction, as these tests use it.
pub trait HeldByTransaction: DistributedLock + Sized + 'static {
    const BACKEND: Backend;
    fn open(pool: MySqlPool) -> Self;
    fn waits(&self) -> Waits;
    fn reenter(&self, guard: &Guard) -> impl Future<Output = Result<Option<Guard>, LockError>>;
}

impl HeldByTransaction for DbRowLock {
    const BACKEND: Backend = Backend::DbRowLock;
    fn open(pool: MySqlPool) -> Self {
        DbRowLock::new(pool)
    }
    fn waits(&self) -> Waits {
        DbRowLock::waits(self)
    }
    fn reenter(&self, guard: &Guard) -> impl Future<Output = Result<Option<Guard>, LockError>> {
        DbRowLock::reenter(self, guard)
    }
}

impl HeldByTransaction for DbInsertLock {
    const BACKEND: Backend = Backend::DbBlockingInsert;
    fn open(pool: MySqlPool) -> Self {
        DbInsertLock::new(pool)
    }
    fn waits(&self) -> Waits {
        DbInsertLock::waits(self)
    }
    fn reenter(&self, guard: &Guard) -> impl Future<Output = Result<Option<Guard>, LockError>> {
        DbInsertLock::reenter(self, guard)
    }
}

/// One `#[tokio::test]` per property below for lock type `$lock`.
macro_rules! claims {
    ($lock:ty) => {
        $crate::database::claims::claims!(@tests $lock;
            a_history_checked_contention_run_shows_no_violation,
            a_killed_holders_lock_is_freed_by_the_database_not_by_its_lease,
            a_holder_gone_silent_keeps_the_lock_until_its_lease_then_hears_it_lost,
            every_queued_waiter_is_granted_exactly_once,
            a_release_wakes_one_waiter_not_all,
            a_reentered_lock_is_held_until_its_last_guard_is_released,
            a_killed_holders_token_is_never_drawn_again,
            every_holder_and_every_waiter_keeps_a_connection_of_the_pool,
        );
    };
    (@tests $lock:ty; $($name:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::database::claims::$name::<$lock>().await;
            }
        )*
    };
}
pub(crate) use claims;

const LONG_LEASE: Duration = Duration::from_secs(600);
const LONG_WAIT: Duration = Duration::from_secs(60);

/// A client of its own, with a pool of `connections`.
fn client<L: HeldByTransaction>(url: &str, connections: u32) -> Arc<L> {
    let pool = MySqlPoolOptions::new()
        .max_connections(connections)
        .connect_lazy(url)
        .expect("database url");
    Arc::new(L::open(pool))
}

fn try_once() -> AcquireOptions {
    AcquireOptions::new(LONG_LEASE)
}

fn waiting() -> AcquireOptions {
    AcquireOptions::new(LONG_LEASE).wait(LONG_WAIT)
}

/// Six clients take the lock 20 times each, writing to a fenced store inside; the history
/// checker finds no overlap, no token out of order, no stale write accepted.
pub async fn a_history_checked_contention_run_shows_no_violation<L: HeldByTransaction>() {
    contention_history_shows_no_violation(|pool| Arc::new(L::open(pool)) as Arc<_>).await;
}

/// [`a_history_checked_contention_run_shows_no_violation`] for any database lock `open` makes
/// from a pool (each client with a pool of two connections).
pub async fn contention_history_shows_no_violation(
    open: impl Fn(MySqlPool) -> Arc<dyn DistributedLock>,
) {
    const CLIENTS: usize = 6;
    let db = OwnDatabase::new().await;
    let clients = (0..CLIENTS)
        .map(|_| {
            open(
                MySqlPoolOptions::new()
                    .max_connections(2)
                    .connect_lazy(&db.url)
                    .expect("database url"),
            )
        })
        .collect();
    contention::history_shows_no_violation(clients, waiting()).await;
    db.remove().await;
}

/// The database's address in `url` (`host:port`).
pub fn server_of(url: &str) -> &str {
    let authority = url.split_once('@').map_or(url, |(_, rest)| rest);
    authority.split('/').next().unwrap_or(authority)
}

/// `url` with its server replaced by `relay`'s address.
pub fn through(relay: &Relay, url: &str) -> String {
    url.replacen(server_of(url), &relay.address(), 1)
}

/// The holder is a process of its own (the `hold` example), SIGKILLed holding the lock: its
/// kernel closes its connection, the server rolls its transaction back, and another client is
/// granted the lock at once, though the holder's lease had ten minutes to run.
pub async fn a_killed_holders_lock_is_freed_by_the_database_not_by_its_lease<
    L: HeldByTransaction,
>() {
    let db = OwnDatabase::new().await;
    let other = client::<L>(&db.url, 1);
    let key = conformance::unique_key("killed-process");
    let mut holder = tokio::process::Command::new(example("hold"))
        .args([&db.url, L::BACKEND.name(), &key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the holder process");
    let stdout = holder.stdout.take().expect("the holder's stdout");
    let said = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .expect("the holder's output")
        .expect("the holder exited before it was granted");
    let token: u64 = said
        .strip_prefix("granted ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the holder said {said:?}"));
    let refused = other.acquire(&key, try_once()).await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    holder.start_kill().expect("SIGKILL");
    holder.wait().await.expect("the holder's end");
    let killed = Instant::now();
    let next = other
        .acquire(&key, waiting())
        .await
        .expect("the lock of a killed holder was not freed");
    eprintln!(
        "freed {:?} after the holder's SIGKILL (lease {LONG_LEASE:?})",
        killed.elapsed()
    );
    assert!(next.fencing_token() > token);
    assert!(next.release().await.expect("release"));
    db.remove().await;
}

/// An example program of this crate, built beside the test binary (`target/<profile>/examples`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo builds the examples with the tests",
        path.display()
    );
    path
}

/// The holder goes silent with its connection open (a partition: the relay black-holes it): the
/// database keeps its lock until the session's idle timeout, the lease, ends it; the holder's
/// `lost()` fires, and another client is granted the lock.
pub async fn a_holder_gone_silent_keeps_the_lock_until_its_lease_then_hears_it_lost<
    L: HeldByTransaction,
>() {
    let lease = Duration::from_secs(2);
    let db = OwnDatabase::new().await;
    let url = db.url.clone();
    let relay = Relay::start(server_of(&url)).await;
    let holder = client::<L>(&through(&relay, &url), 1);
    let other = client::<L>(&url, 1);
    let key = conformance::unique_key("silent");
    let guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    relay.black_hole();
    let silent = Instant::now();
    let early = other.acquire(&key, AcquireOptions::new(lease)).await;
    assert!(
        matches!(early, Err(LockError::Timeout { .. })),
        "the silent holder's lock was free at once: {early:?}"
    );
    let next = other
        .acquire(&key, AcquireOptions::new(lease).wait(LONG_WAIT))
        .await
        .expect("the silent holder's lock was not freed");
    eprintln!(
        "a silent holder's lock (lease {lease:?}) freed after {:?}",
        silent.elapsed()
    );
    tokio::time::timeout(LONG_WAIT, guard.lost())
        .await
        .expect("the silent holder never heard that it lost the lock");
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(next.release().await.expect("release"));
    assert!(!guard.release().await.expect("release"));
    db.remove().await;
}

/// Six waiters arrive one after another (each queued at the server before the next starts);
/// each is granted exactly once, one at a time. InnoDB queues them in arrival order, and on an
/// idle machine that is the grant order; on a loaded one a waiter whose statement waited out
/// its slice of the wait budget asks again and queues behind later arrivals (grant order
/// `[0, 1, 2, 5, 4, 3]` was seen), so first come, first served is printed, not promised.
pub async fn every_queued_waiter_is_granted_exactly_once<L: HeldByTransaction>() {
    const WAITERS: usize = 6;
    let db = OwnDatabase::new().await;
    let url = db.url.clone();
    let key = conformance::unique_key("arrival");
    let holder = client::<L>(&url, 1);
    // The row exists from a first grant, as in any but a name's first use.
    let first = holder.acquire(&key, try_once()).await.expect("grant");
    assert!(first.release().await.expect("release"));
    let guard = holder.acquire(&key, try_once()).await.expect("grant");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = tokio::task::JoinSet::new();
    for arrived in 0..WAITERS {
        let (lock, name, order) = (client::<L>(&url, 1), key.clone(), Arc::clone(&order));
        waiters.spawn(async move {
            let guard = lock.acquire(&name, waiting()).await.expect("acquire");
            order.lock().unwrap().push(arrived);
            assert!(guard.release().await.expect("release"));
        });
        db.until_waiting(arrived + 1).await;
    }
    assert!(guard.release().await.expect("release"));
    waiters.join_all().await;
    let order = order.lock().unwrap().clone();
    eprintln!("arrival order 0..{WAITERS}, grant order {order:?}");
    let mut granted = order.clone();
    granted.sort_unstable();
    assert_eq!(
        granted,
        (0..WAITERS).collect::<Vec<_>>(),
        "every waiter granted exactly once: {order:?}"
    );
    db.remove().await;
}

/// Five waiters of one client block on a held lock. Each release answers exactly one of their
/// blocked statements — with the lock — and the others stay queued at the server: no herd.
pub async fn a_release_wakes_one_waiter_not_all<L: HeldByTransaction>() {
    const WAITERS: usize = 5;
    let db = OwnDatabase::new().await;
    let url = db.url.clone();
    let key = conformance::unique_key("wake");
    let holder = client::<L>(&url, 1);
    let first = holder.acquire(&key, try_once()).await.expect("grant");
    assert!(first.release().await.expect("release"));
    let mut guard = holder.acquire(&key, try_once()).await.expect("grant");
    let lock = client::<L>(&url, WAITERS as u32);
    let (granted, mut grants) = mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let (lock, key, granted) = (Arc::clone(&lock), key.clone(), granted.clone());
        tokio::spawn(async move {
            let guard = lock.acquire(&key, waiting()).await.expect("acquire");
            granted.send(guard).expect("the test listens");
        });
    }
    db.until_waiting(WAITERS).await;
    for released in 1..=WAITERS {
        let before = lock.waits();
        assert!(guard.release().await.expect("release"));
        guard = grants.recv().await.expect("a waiter's grant");
        db.until_waiting(WAITERS - released).await;
        let after = lock.waits();
        assert_eq!(
            (
                after.granted - before.granted,
                after.refused,
                after.deadlocks
            ),
            (1, before.refused, before.deadlocks),
            "release {released} answered other than one waiter: {before:?} → {after:?}"
        );
    }
    eprintln!(
        "{WAITERS} releases, each answered one blocked waiter: {:?}",
        lock.waits()
    );
    assert!(guard.release().await.expect("release"));
    db.remove().await;
}

/// The holder enters again through its guard (its statement run again in its transaction):
/// the same token, at once; the lock stays held after the inner release and is free after the
/// outer one, and a released guard cannot re-enter.
pub async fn a_reentered_lock_is_held_until_its_last_guard_is_released<L: HeldByTransaction>() {
    let db = OwnDatabase::new().await;
    let url = db.url.clone();
    let (lock, other) = (client::<L>(&url, 1), client::<L>(&url, 1));
    let key = conformance::unique_key("reentry");
    let outer = lock.acquire(&key, try_once()).await.expect("grant");
    let inner = lock
        .reenter(&outer)
        .await
        .expect("reenter")
        .expect("the holder re-entered");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert!(inner.release().await.expect("inner release"));
    let held = other.acquire(&key, try_once()).await;
    assert!(
        matches!(held, Err(LockError::Timeout { .. })),
        "the inner release freed the lock: {held:?}"
    );
    assert!(outer.release().await.expect("outer release"));
    let free = other
        .acquire(&key, try_once())
        .await
        .expect("free after the outer release");
    assert!(lock.reenter(&free).await.expect("reenter").is_none());
    assert!(free.release().await.expect("release"));
    db.remove().await;
}

/// A holder's session is killed (its transaction rolled back, as a dead client's is): the next
/// holder's token is larger. A token kept in the locked row and bumped in the holding
/// transaction would have been rolled back with it and drawn again.
pub async fn a_killed_holders_token_is_never_drawn_again<L: HeldByTransaction>() {
    let db = OwnDatabase::new().await;
    let url = db.url.clone();
    let (a, b) = (client::<L>(&url, 1), client::<L>(&url, 1));
    let key = conformance::unique_key("killed");
    let dead = a.acquire(&key, try_once()).await.expect("grant");
    kill(&db.admin, session_of(&dead).expect("session")).await;
    let next = b
        .acquire(&key, waiting())
        .await
        .expect("grant after the kill");
    assert!(
        next.fencing_token() > dead.fencing_token(),
        "token {} after the killed holder's {}",
        next.fencing_token(),
        dead.fencing_token()
    );
    assert!(!dead.release().await.expect("release"));
    assert!(next.release().await.expect("release"));
    db.remove().await;
}

/// A client with a pool of two: one connection holds a lock, the other waits for it, and an
/// acquire of a *free* name fails for want of a connection — while another client takes that
/// name at once.
pub async fn every_holder_and_every_waiter_keeps_a_connection_of_the_pool<L: HeldByTransaction>() {
    let db = OwnDatabase::new().await;
    let url = db.url.clone();
    let lock = client::<L>(&url, 2);
    let (held, free) = (
        conformance::unique_key("pool-held"),
        conformance::unique_key("pool-free"),
    );
    let guard = lock.acquire(&held, try_once()).await.expect("grant");
    let waiter = {
        let (lock, held) = (Arc::clone(&lock), held.clone());
        tokio::spawn(async move { lock.acquire(&held, waiting()).await })
    };
    db.until_waiting(1).await;
    let starved = lock
        .acquire(
            &free,
            AcquireOptions::new(LONG_LEASE).wait(Duration::from_millis(500)),
        )
        .await;
    match &starved {
        Err(LockError::Unavailable(e)) => {
            assert!(e.to_string().contains("no database connection"), "{e}");
        }
        other => panic!("a free name was acquired with every connection taken: {other:?}"),
    }
    let elsewhere = client::<L>(&url, 1)
        .acquire(&free, try_once())
        .await
        .expect("the name was free all along");
    assert!(elsewhere.release().await.expect("release"));
    assert!(guard.release().await.expect("release"));
    let next = waiter.await.expect("waiter").expect("the waiter's grant");
    assert!(next.release().await.expect("release"));
    db.remove().await;
}
