//! One lock type for the single-instance Redis locks — the correct `redis` lock and the three
//! broken variants — so that each of their files holds only what differs: the correct acquire
//! and release are the defaults of [`Variant`], and each broken variant overrides the one it
//! breaks (how one attempt takes the lock, or how it is given back), with the explanation.
//!
//! Written once here: the connection, the request count, the local line and polling with
//! backoff, the local lease clock behind [`crate::Guard::lost`], and the compare-and-delete
//! release. A variant is a [`Variant`]; the public lock types are aliases of
//! [`SingleInstanceLock`] over one.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_redis::Pool;
use deadpool_redis::redis::{Cmd, FromRedisValue};
use futures::future::BoxFuture;

use super::{ACQUIRE, Conn, EXTEND, LeaseClocks, RELEASE, Requests, fence_key, millis, poll};
use crate::line::Lines;
use crate::{
    AcquireOptions, Acquiring, Backend, DistributedLock, Guard, Held, LockError, new_owner_id,
};

/// What one single-instance lock does differently from the others. Not nameable outside this
/// crate: the variants are the crate's own.
pub trait Variant: Send + Sync + 'static {
    /// The backend this variant is connected as.
    const BACKEND: Backend;

    /// Whether one client's waiters stand in a local line and only the first polls
    /// (`line.rs`). The broken variants wait without one: their races and stray releases
    /// show among the waiters of one process as among those of several.
    const IN_LINE: bool = true;

    /// One attempt to take `key` for `owner` with a lease of `lease`: the fencing token, or
    /// `None` if someone else holds it. Counts every request it sends. By default `SET NX PX`
    /// and the fence `INCR` in one script, which is correct.
    fn try_acquire(
        &self,
        client: &LockClient,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send {
        client.set_nx_px(key, owner, lease)
    }

    /// Gives `owner`'s lock back; whether it was still `owner`'s. By default compare-and-delete,
    /// which never removes another holder's lock.
    fn release(
        client: &LockClient,
        key: &str,
        owner: &str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send {
        client.compare_and_delete(key, owner)
    }
}

/// A lock on one Redis, behaving as its variant `V` says. Use the aliases:
/// [`super::RedisLock`], [`super::SetnxNoTtlLock`], [`super::GetThenSetLock`],
/// [`super::UnsafeReleaseLock`].
pub struct SingleInstanceLock<V> {
    pub(super) client: Arc<LockClient>,
    pub(super) variant: V,
}

impl<V: Variant + Default> SingleInstanceLock<V> {
    /// A lock client for the Redis at `url`. Connects lazily: an unreachable server shows up as
    /// [`LockError::Unavailable`] on the first acquire.
    pub fn connect(url: &str) -> Result<SingleInstanceLock<V>, LockError> {
        Ok(SingleInstanceLock::with(Conn::open(url)?))
    }

    /// A lock client over an existing pool.
    pub fn from_pool(pool: Pool) -> SingleInstanceLock<V> {
        SingleInstanceLock::with(Conn::Pool(pool))
    }

    fn with(conn: Conn) -> SingleInstanceLock<V> {
        SingleInstanceLock {
            client: Arc::new(LockClient {
                conn,
                requests: Requests::default(),
                clocks: LeaseClocks::default(),
                lines: Lines::new(super::POLLING.oldest),
            }),
            variant: V::default(),
        }
    }
}

impl<V: Variant> SingleInstanceLock<V> {
    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<Option<Guard>, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        let granted = (self.variant)
            .try_acquire(&self.client, key, &owner, lease)
            .await?;
        let Some(token) = granted else {
            return Ok(None);
        };
        // The server started the lease no earlier than the request was sent.
        let lost = self.client.clocks.start(&owner, sent + lease);
        let held = Grant::<V> {
            client: Arc::clone(&self.client),
            key: key.to_owned(),
            owner: owner.clone(),
            variant: PhantomData,
        };
        Ok(Some(Guard::new(key, owner, token, lost, Box::new(held))))
    }
}

impl<V: Variant> DistributedLock for SingleInstanceLock<V> {
    fn backend(&self) -> &'static str {
        V::BACKEND.name()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        let polled = move |since| {
            poll(key, since, options.wait, move || {
                self.try_acquire(key, options.lease)
            })
        };
        match V::IN_LINE {
            true => Box::pin(self.client.lines.in_line(key, options.wait, polled)),
            false => Box::pin(polled(Instant::now())),
        }
    }

    fn backend_requests(&self) -> u64 {
        self.client.requests.get()
    }
}

/// What the guards of one lock client share with it: the connection, the request counter, and
/// the lease clocks.
pub struct LockClient {
    conn: Conn,
    requests: Requests,
    pub(super) clocks: LeaseClocks,
    lines: Lines,
}

impl LockClient {
    /// Runs one command, counting it.
    pub(super) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, LockError> {
        self.requests.add(1);
        self.conn.query(cmd).await
    }

    /// `SET key owner NX PX lease` and `INCR <key>:fence` in one script: the fencing token, or
    /// `None` when someone else holds the lock.
    async fn set_nx_px(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        self.requests.add(1);
        let token: u64 = (self.conn)
            .invoke(
                ACQUIRE
                    .key(key)
                    .key(fence_key(key))
                    .arg(owner)
                    .arg(millis(lease)),
            )
            .await?;
        Ok(Some(token).filter(|&t| t != 0))
    }

    /// `PEXPIRE key lease` if `owner` still holds `key`; whether it did.
    pub(super) async fn extend(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<bool, LockError> {
        self.requests.add(1);
        let extended: i64 = (self.conn)
            .invoke(EXTEND.key(key).arg(owner).arg(millis(lease)))
            .await?;
        Ok(extended == 1)
    }

    /// `DEL key` if `owner` still holds it (the `RELEASE` script); whether it did.
    async fn compare_and_delete(&self, key: &str, owner: &str) -> Result<bool, LockError> {
        self.requests.add(1);
        let deleted: i64 = self.conn.invoke(RELEASE.key(key).arg(owner)).await?;
        Ok(deleted == 1)
    }
}

/// A held lock of variant `V`: its lease clock stops and `V` releases it.
struct Grant<V> {
    client: Arc<LockClient>,
    key: String,
    owner: String,
    variant: PhantomData<fn() -> V>,
}

impl<V: Variant> Held for Grant<V> {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            self.client.clocks.stop(&self.owner);
            V::release(&self.client, &self.key, &self.owner).await
        })
    }
}
