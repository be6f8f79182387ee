//! What the two hash-lock clients, `redis-watchdog` and `redis-fair`, are built from: one
//! multiplexed command connection, the count of requests sent, the watchdog (`renewal.rs`) and
//! the subscriber (`wakeups.rs`), with the two background tasks that run them.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::renewal::Renewals;
use super::wakeups::Wakeups;
use super::{Conn, Requests, Target};
use crate::{Guard, Held, LockError};

pub(super) struct HashClient {
    pub(super) conn: Conn,
    /// Set once the command connection has answered: see [`HashClient::connected`].
    connected: tokio::sync::OnceCell<()>,
    pub(super) requests: Arc<Requests>,
    pub(super) renewals: Renewals,
    pub(super) wakeups: Arc<Wakeups>,
}

/// A client's background tasks. Dropping them stops its watchdog and its subscriber: locks it
/// still holds then lapse within their lease (their guards' `lost()` fires then).
pub(super) struct Background {
    tasks: [JoinHandle<()>; 2],
    client: Arc<HashClient>,
}

impl HashClient {
    /// A client of the Redis at `url`, its wake-ups made by `wakeups` (which also returns the
    /// subscriber task); both connections connect lazily. Must be called inside a Tokio runtime.
    pub(super) fn start<F>(
        url: &str,
        wakeups: impl FnOnce(Target, Arc<Requests>) -> (Arc<Wakeups>, F),
    ) -> Result<(Arc<HashClient>, Background), LockError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(LockError::unavailable)?;
        let redis = Target::parse(url)?;
        let requests = Arc::new(Requests::default());
        let (wakeups, subscriber) = wakeups(redis, Arc::clone(&requests));
        let client = Arc::new(HashClient {
            conn: Conn::open(url)?,
            connected: tokio::sync::OnceCell::new(),
            requests,
            renewals: Renewals::default(),
            wakeups,
        });
        let watchdog = {
            let client = Arc::clone(&client);
            runtime.spawn(async move { client.renewals.run(&client.conn, &client.requests).await })
        };
        let background = Background {
            tasks: [watchdog, runtime.spawn(subscriber)],
            client: Arc::clone(&client),
        };
        Ok((client, background))
    }

    /// Waits until the command connection has answered once (a `PING`, the first time). A
    /// grant's lease is counted from when its request was sent; the connection opens lazily, and
    /// its opening — the connect, and the client's own set-up commands — would be counted in
    /// the first grant's lease: far from Redis, a round trip or two of it, which the first
    /// renewal then came too late to save.
    pub(super) async fn connected(&self) -> Result<(), LockError> {
        let ping = || async {
            let _: String = self.conn.query(&redis::cmd("PING")).await?;
            Ok::<(), LockError>(())
        };
        self.connected.get_or_try_init(ping).await.map(|_| ())
    }

    /// Enters the lock `guard` holds once more through this client (same owner, same fencing
    /// token): a new guard, released through what `held` makes of the lease. `None` if this
    /// client does not hold the lock (any more).
    pub(super) async fn reenter(
        &self,
        guard: &Guard,
        held: impl FnOnce(Duration) -> Box<dyn Held>,
    ) -> Result<Option<Guard>, LockError> {
        let (key, owner) = (guard.key(), guard.owner());
        let reentered = (self.renewals)
            .reenter_held(&self.conn, &self.requests, key, owner)
            .await?;
        Ok(reentered
            .map(|(lost, lease)| Guard::new(key, owner, guard.fencing_token(), lost, held(lease))))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.client.renewals.abandon();
    }
}
