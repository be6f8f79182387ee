//! `MemcachedLock`: the conformance suite, extend and lease loss, and the two hazards its docs
//! name — a restart frees every lock, an eviction frees a held one — with the fencing token
//! still refusing the stale holder.

use crate::leases;

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use async_memcached::{AsciiProtocol, Client};
use futures::FutureExt;
use locks::memcached::MemcachedLock;
use locks::{AcquireOptions, DistributedLock, Guard, LockError};

async fn subject() -> conformance::Subject {
    let addr = sandbox::shared::memcached();
    let expire_addr = addr.clone();
    conformance::Subject::new(
        move || {
            let addr = addr.clone();
            async move { Arc::new(MemcachedLock::connect(&addr)) as Arc<dyn DistributedLock> }
                .boxed()
        },
        move |guard| {
            let (addr, key) = (expire_addr.clone(), guard.key().to_owned());
            async move {
                let mut client = Client::new(format!("tcp://{addr}")).await.expect("connect");
                client.delete(&key).await.expect("delete");
            }
            .boxed()
        },
    )
}

conformance::suite!(subject);

const LONG_LEASE: Duration = Duration::from_secs(60);

/// A resource that remembers the highest fencing token it has accepted and refuses lower ones.
#[derive(Default)]
struct FencedResource {
    highest: u64,
}

impl FencedResource {
    fn write(&mut self, guard: &Guard) -> bool {
        if guard.fencing_token() < self.highest {
            return false;
        }
        self.highest = guard.fencing_token();
        true
    }
}

#[tokio::test]
async fn lost_fires_when_the_lease_passes_unless_extended() {
    let lock = MemcachedLock::connect(&sandbox::shared::memcached());
    leases::lost_fires_when_the_lease_passes_unless_extended(
        &lock,
        async |guard, lease| lock.extend(guard, lease).await,
        &conformance::unique_key("memcached-lost"),
        Duration::from_secs(10),
    )
    .await;
}

/// The server keeps an extended lock past the expiry its `add` gave it (`⌈lease⌉ + 2` s), and
/// forgets a released one at once.
#[tokio::test]
async fn extend_moves_the_servers_expiry_and_release_frees_the_lock_at_once() {
    let addr = sandbox::shared::memcached();
    let (holder, other) = (MemcachedLock::connect(&addr), MemcachedLock::connect(&addr));
    let key = conformance::unique_key("memcached-extend");
    let lease = Duration::from_millis(100);
    let guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    assert!(
        holder
            .extend(&guard, Duration::from_secs(30))
            .await
            .expect("extend")
    );
    // The item of a 100 ms lease lives 3 s at most; past that only the extension keeps it.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let blocked = other.acquire(&key, AcquireOptions::new(lease)).await;
    assert!(
        matches!(blocked, Err(LockError::Timeout { .. })),
        "the extension did not reach the server: {blocked:?}"
    );
    assert!(guard.release().await.expect("release"));
    let next = other
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("a released lock was not free at once");
    assert!(next.release().await.expect("release"));
}

/// Memory pressure evicts a held lock: memcached is a cache, and the lock item is just the
/// least recently used item of its size class. Both holders then believe they hold the lock;
/// only the fence tells them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_lock_is_granted_to_a_second_client_while_the_first_still_holds_it() {
    sandbox::require_faults!();
    let server = sandbox::Memcached::with_memory_limit(2).expect("memcached");
    let (first_client, second_client) = (
        MemcachedLock::connect(&server.addr()),
        MemcachedLock::connect(&server.addr()),
    );
    let key = conformance::unique_key("evicted");
    let first = first_client
        .acquire(&key, AcquireOptions::new(LONG_LEASE))
        .await
        .expect("first grant");

    // Items of the lock's own size (same key length, same value length) compete with it for
    // the same slab class; fill it until the second client's try-once acquire succeeds.
    let mut filler = Client::new(format!("tcp://{}", server.addr()))
        .await
        .expect("connect");
    let mut second = None;
    let mut stored = 0usize;
    'fill: for _ in 0..100 {
        for _ in 0..2_000 {
            let filler_key = format!("filler:{stored:0width$}", width = key.len() - 7);
            filler
                .set(&filler_key, first.owner(), None, None)
                .await
                .expect("set");
            stored += 1;
        }
        match second_client
            .acquire(&key, AcquireOptions::new(LONG_LEASE))
            .await
        {
            Ok(guard) => {
                second = Some(guard);
                break 'fill;
            }
            Err(LockError::Timeout { .. }) => {}
            Err(e) => panic!("second acquire failed: {e}"),
        }
    }
    let second = second.unwrap_or_else(|| {
        panic!("the held lock was never evicted ({stored} items of its size stored)")
    });

    assert!(
        !first.is_lost(),
        "the first holder cannot know its lock was evicted; its lease still runs"
    );
    assert!(
        second.fencing_token() > first.fencing_token(),
        "{} after {}",
        second.fencing_token(),
        first.fencing_token()
    );
    let mut resource = FencedResource::default();
    assert!(resource.write(&second), "the current holder's write");
    assert!(
        !resource.write(&first),
        "the fence let the holder whose lock was evicted write"
    );
    assert!(
        !first.release().await.expect("release"),
        "the evicted holder's release removed the second holder's lock"
    );
    assert!(second.release().await.expect("release"));
}

/// memcached keeps nothing across a restart: a held lock is free at once. The fencing counter is
/// re-created at a floor from the wall clock, so the next token is still larger than every token
/// handed out before the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_frees_a_held_lock_and_tokens_keep_increasing() {
    sandbox::require_faults!();
    let server = sandbox::Memcached::start().expect("memcached");
    let (first_client, second_client) = (
        MemcachedLock::connect(&server.addr()),
        MemcachedLock::connect(&server.addr()),
    );
    let key = conformance::unique_key("restarted");
    let first = first_client
        .acquire(&key, AcquireOptions::new(LONG_LEASE))
        .await
        .expect("first grant");
    let blocked = second_client
        .acquire(&key, AcquireOptions::new(LONG_LEASE))
        .await;
    assert!(
        matches!(blocked, Err(LockError::Timeout { .. })),
        "{blocked:?}"
    );

    tokio::task::block_in_place(|| server.server().restart()).expect("restart");

    let second = second_client
        .acquire(&key, AcquireOptions::new(LONG_LEASE))
        .await
        .expect("the restart did not free the lock");
    assert!(
        second.fencing_token() > first.fencing_token(),
        "the fencing counter went back: {} after {}",
        second.fencing_token(),
        first.fencing_token()
    );
    let mut resource = FencedResource::default();
    assert!(resource.write(&second));
    assert!(
        !resource.write(&first),
        "the fence let the old holder write"
    );
    assert!(
        !first
            .release()
            .await
            .expect("release over a reconnected pool"),
        "the old holder's release removed the new holder's lock"
    );
    assert!(second.release().await.expect("release"));
}
