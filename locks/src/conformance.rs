//! The conformance suite (feature `conformance`): the contract of [`DistributedLock`],
//! written once against the trait, so that any backend — this crate's or anyone's — runs all
//! of it with one macro call, the way `object_store` publishes its integration suite.
//!
//! A backend's test file says how to open a client and how to make the backend forget a
//! grant, and gets one `#[tokio::test]` per property:
//!
//! ```ignore
//! use locks::conformance;
//!
//! async fn subject() -> conformance::Subject {
//!     let url = my_server_url();
//!     conformance::Subject::new(
//!         move || { let url = url.clone(); Box::pin(async move { /* Arc<dyn DistributedLock> */ }) },
//!         |guard| { /* make the backend forget this grant, as an expired lease would */ },
//!     )
//! }
//!
//! conformance::suite!(subject);
//! ```
//!
//! The test crate needs `tokio` (with `macros` and `rt-multi-thread`) and this crate with the
//! `conformance` feature as dev-dependencies. Each property uses fresh random lock names, so
//! the suite runs in parallel with itself and leaves nothing behind but spent fence counters.
//!
//! **The probe is in-process.** Mutual exclusion is checked by what two overlapping holders
//! would break: inside the lock, each task reads a shared counter, yields to the scheduler for
//! a millisecond (as long as a network round trip would keep it away), and writes the value
//! plus one; every overlap loses an increment. All contenders are tasks of the one test
//! process, spread over several worker threads, so an in-memory counter sees every holder, and
//! the suite needs no server of its own besides the backend under test (it used to keep the
//! counter in Redis, which tied every backend's tests to a Redis). A second, direct check
//! counts the tasks inside the critical section at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::{AcquireOptions, DistributedLock, Guard, LockError};

type Connect = Box<dyn Fn() -> BoxFuture<'static, Arc<dyn DistributedLock>> + Send + Sync>;
type Expire = Box<dyn Fn(&Guard) -> BoxFuture<'static, ()> + Send + Sync>;

/// A backend under test.
pub struct Subject {
    /// Opens a new, independent client (own connections, own background tasks). Dropping the
    /// last `Arc` of a client is how a test makes a holder vanish.
    connect: Connect,
    /// Makes the backend forget `guard`'s grant behind its holder's back, as an expired lease or
    /// session would (e.g. `DEL` the key, delete the znode, revoke the etcd lease).
    expire: Expire,
    /// The lease the suite's short-lease tests use; the time a vanished holder may block others.
    lease: Duration,
}

impl Subject {
    /// A subject with a 1 s test lease. `connect` opens a new, independent client (its own
    /// connections and background tasks: dropping the last `Arc` of it is how the suite makes
    /// a holder vanish); `expire` makes the backend forget a guard's grant behind its holder's
    /// back, as an expired lease or session would (`DEL` the key, delete the znode, revoke the
    /// etcd lease, …).
    pub fn new(
        connect: impl Fn() -> BoxFuture<'static, Arc<dyn DistributedLock>> + Send + Sync + 'static,
        expire: impl Fn(&Guard) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Subject {
        Subject {
            connect: Box::new(connect),
            expire: Box::new(expire),
            lease: Duration::from_secs(1),
        }
    }

    /// Uses `lease` as the short test lease (backends whose leases are coarse, e.g. sessions).
    pub fn lease(mut self, lease: Duration) -> Subject {
        self.lease = lease;
        self
    }

    async fn client(&self) -> Arc<dyn DistributedLock> {
        (self.connect)().await
    }
}

/// Runs every property of the suite as its own `#[tokio::test]`; `$subject` is an async fn
/// returning a [`Subject`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_suite {
    ($subject:path) => {
        $crate::conformance::suite!(@tests $subject;
            mutual_exclusion_holds_among_32_contending_tasks,
            fencing_tokens_strictly_increase_with_every_grant,
            a_non_owner_cannot_release_the_current_holders_lock,
            a_lease_expires_when_its_holder_vanishes,
            a_cancelled_waiter_does_not_block_the_next_acquirer,
            a_waiter_whose_budget_passed_does_not_block_the_next_acquirer,
            timeout_is_returned_after_the_wait_budget,
        );
    };
    (@tests $subject:path; $($name:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::conformance::$name($subject().await).await;
            }
        )*
    };
}
#[doc(inline)]
pub use crate::__conformance_suite as suite;

/// A fresh lock name for one test.
pub fn unique_key(test: &str) -> String {
    format!("conformance:{test}:{}", crate::new_owner_id())
}

const LONG_LEASE: Duration = Duration::from_secs(20);
const LONG_WAIT: Duration = Duration::from_secs(60);

/// How long a holder keeps the probe counter's value before writing it back plus one.
const PROBE_GAP: Duration = Duration::from_millis(1);

/// 4 clients × 8 tasks × 4 grants. Inside the lock, each task reads the probe counter, waits
/// a millisecond, and writes it back plus one: any overlap loses an increment. Also checks that
/// no two tasks are ever inside at once, and that tokens rise in the order of entry.
pub async fn mutual_exclusion_holds_among_32_contending_tasks(subject: Subject) {
    const CLIENTS: usize = 4;
    const TASKS_PER_CLIENT: usize = 8;
    const GRANTS_PER_TASK: usize = 4;
    let key = unique_key("mutex");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let lock = subject.client().await;
        for _ in 0..TASKS_PER_CLIENT {
            let (lock, key, counter) = (Arc::clone(&lock), key.clone(), counter.clone());
            let (inside, overlaps, tokens) = (inside.clone(), overlaps.clone(), tokens.clone());
            tasks.spawn(async move {
                for _ in 0..GRANTS_PER_TASK {
                    let options = AcquireOptions::new(LONG_LEASE).wait(LONG_WAIT);
                    let guard = lock.acquire(&key, options).await.expect("acquire");
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().unwrap().push(guard.fencing_token());
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(PROBE_GAP).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    if !guard.release().await.expect("release") {
                        overlaps.fetch_add(1, Ordering::SeqCst); // someone took it over meanwhile
                    }
                }
            });
        }
    }
    tasks.join_all().await;
    let count = counter.load(Ordering::SeqCst);
    let grants = CLIENTS * TASKS_PER_CLIENT * GRANTS_PER_TASK;
    assert_eq!(
        count, grants as u64,
        "increments were lost to overlapping holders"
    );
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once, or a release found the lock taken over"
    );
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), grants);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens did not rise in grant order: {tokens:?}"
    );
}

/// Grants from two clients in turn, and a grant after a forced expiry, each carry a larger token
/// than the one before.
pub async fn fencing_tokens_strictly_increase_with_every_grant(subject: Subject) {
    let key = unique_key("tokens");
    let clients = [subject.client().await, subject.client().await];
    let mut tokens = Vec::new();
    for round in 0..10 {
        let guard = clients[round % 2]
            .acquire(&key, AcquireOptions::new(LONG_LEASE).wait(LONG_WAIT))
            .await
            .expect("acquire");
        tokens.push(guard.fencing_token());
        if round == 5 {
            (subject.expire)(&guard).await;
            std::mem::forget(guard);
        } else {
            assert!(guard.release().await.expect("release"));
        }
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens did not strictly increase: {tokens:?}"
    );
}

/// A holder whose grant was forgotten (as by lease expiry) and re-granted to someone else gets
/// `Ok(false)` from release, and the new holder's lock survives it.
pub async fn a_non_owner_cannot_release_the_current_holders_lock(subject: Subject) {
    let key = unique_key("non-owner");
    let (a, b, c) = (
        subject.client().await,
        subject.client().await,
        subject.client().await,
    );
    let stale = a
        .acquire(&key, AcquireOptions::new(LONG_LEASE))
        .await
        .expect("first grant");
    (subject.expire)(&stale).await;
    let current = b
        .acquire(&key, AcquireOptions::new(LONG_LEASE).wait(LONG_WAIT))
        .await
        .expect("grant after expiry");
    assert!(current.fencing_token() > stale.fencing_token());
    assert!(
        !stale.release().await.expect("stale release"),
        "a stale guard claimed it still owned the lock"
    );
    let third = c.acquire(&key, AcquireOptions::new(LONG_LEASE)).await;
    assert!(
        matches!(third, Err(LockError::Timeout { .. })),
        "the stale release removed the current holder's lock: {third:?}"
    );
    assert!(current.release().await.expect("current release"));
}

/// A holder that vanishes without releasing (its guard leaked, its client dropped, as a crashed
/// process would) blocks others for about one lease, then the lock is granted again.
pub async fn a_lease_expires_when_its_holder_vanishes(subject: Subject) {
    let key = unique_key("vanish");
    let lease = subject.lease;
    let holder = subject.client().await;
    let guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    let token = guard.fencing_token();
    std::mem::forget(guard);
    drop(holder);
    let other = subject.client().await;
    let early = other.acquire(&key, AcquireOptions::new(lease)).await;
    assert!(
        matches!(early, Err(LockError::Timeout { .. })),
        "the vanished holder's lock was gone at once: {early:?}"
    );
    let next = other
        .acquire(
            &key,
            AcquireOptions::new(lease).wait(lease * 3 + Duration::from_secs(2)),
        )
        .await
        .expect("the lock was not granted again after the holder's lease");
    assert!(next.fencing_token() > token);
    assert!(next.release().await.expect("release"));
}

/// A waiter dropped while waiting (its acquire future cancelled) leaves nothing that delays the
/// grant once the holder releases.
pub async fn a_cancelled_waiter_does_not_block_the_next_acquirer(subject: Subject) {
    let lease = subject.lease;
    let held = Held::new(&subject, "cancelled").await;
    let (key, waiter) = (&held.key, &held.waiter);
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        waiter.acquire(key, AcquireOptions::new(lease).wait(LONG_WAIT)),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the waiter was granted a held lock: {cancelled:?}"
    );
    hand_over(
        held.guard,
        held.next.as_ref(),
        key,
        lease,
        "a cancelled waiter",
    )
    .await;
    let again = waiter
        .acquire(key, AcquireOptions::new(lease).wait(lease))
        .await
        .expect("the cancelled waiter's own client could not acquire");
    assert!(again.release().await.expect("release"));
}

/// A waiter whose wait budget runs out gets `Timeout` and leaves nothing that delays the grant
/// once the holder releases.
pub async fn a_waiter_whose_budget_passed_does_not_block_the_next_acquirer(subject: Subject) {
    let lease = subject.lease;
    let held = Held::new(&subject, "gave-up").await;
    let (key, waiter) = (&held.key, &held.waiter);
    let mut waiting = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (waiter, key) = (Arc::clone(waiter), key.clone());
        waiting.spawn(async move {
            let options = AcquireOptions::new(lease).wait(Duration::from_millis(300));
            waiter.acquire(&key, options).await.map(drop)
        });
    }
    for outcome in waiting.join_all().await {
        assert!(
            matches!(outcome, Err(LockError::Timeout { .. })),
            "{outcome:?}"
        );
    }
    hand_over(
        held.guard,
        held.next.as_ref(),
        key,
        lease,
        "a waiter that gave up",
    )
    .await;
}

/// A lock held with a long lease by one client, and two more clients to wait for it.
struct Held {
    /// Kept alive: dropping a client may end its session, and with it the lock.
    _holder: Arc<dyn DistributedLock>,
    key: String,
    guard: Guard,
    waiter: Arc<dyn DistributedLock>,
    next: Arc<dyn DistributedLock>,
}

impl Held {
    async fn new(subject: &Subject, test: &str) -> Held {
        let key = unique_key(test);
        let holder = subject.client().await;
        let guard = holder
            .acquire(&key, AcquireOptions::new(LONG_LEASE))
            .await
            .expect("grant");
        Held {
            _holder: holder,
            key,
            guard,
            waiter: subject.client().await,
            next: subject.client().await,
        }
    }
}

/// Releases `guard` and expects `next` to be granted `key` within one lease, in spite of
/// `suspect`.
async fn hand_over(
    guard: Guard,
    next: &dyn DistributedLock,
    key: &str,
    lease: Duration,
    suspect: &str,
) {
    assert!(guard.release().await.expect("release"));
    let granted = next
        .acquire(key, AcquireOptions::new(lease).wait(lease))
        .await
        .unwrap_or_else(|e| panic!("{suspect} blocked the next acquirer: {e}"));
    assert!(granted.release().await.expect("release"));
}

/// Trying once on a held lock, or waiting a budget out, ends in `Timeout`, not earlier.
pub async fn timeout_is_returned_after_the_wait_budget(subject: Subject) {
    let key = unique_key("timeout");
    let (holder, waiter) = (subject.client().await, subject.client().await);
    let guard = holder
        .acquire(&key, AcquireOptions::new(LONG_LEASE))
        .await
        .expect("grant");
    let once = waiter
        .acquire(&key, AcquireOptions::new(subject.lease))
        .await;
    assert!(matches!(once, Err(LockError::Timeout { .. })), "{once:?}");
    let budget = Duration::from_millis(500);
    let started = std::time::Instant::now();
    let waited = waiter
        .acquire(&key, AcquireOptions::new(subject.lease).wait(budget))
        .await;
    match waited {
        Err(LockError::Timeout { waited, .. }) => {
            assert!(
                waited >= budget,
                "gave up after {waited:?} of a {budget:?} budget"
            );
            assert!(started.elapsed() >= budget);
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(
        !guard.is_lost(),
        "the holder's lock reported lost while held"
    );
    assert!(guard.release().await.expect("release"));
}
