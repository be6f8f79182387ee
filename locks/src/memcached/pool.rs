//! Connections to one memcached.
//!
//! `async-memcached` maps one `Client` to one connection and takes `&mut self` per command, so a
//! lock client shared by many tasks needs several. `deadpool-memcached` would pool them, but it
//! pins the older `async-memcached` 0.7 (without 0.9's cancellation safety: a request dropped
//! half-way there leaves its reply unread on the connection, and the next user reads it) and
//! sends a `version` round trip on every checkout. This pool is the small remainder: idle
//! connections in a stack, a connection goes back only if the crate says it is still usable
//! (`Client::is_closed`: an operation cut short by cancellation or an I/O error closes it).
//!
//! A connection that sat idle may be dead without knowing it (the server restarted). An
//! operation that fails with an I/O error on such a reused connection is run once more on a
//! new one, after dropping every idle connection: a dead server's old sockets cannot have
//! processed the request, so the repeat does not apply anything twice.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use async_memcached::{Client, Error};

use crate::LockError;
use crate::redis::Requests;

/// Idle connections kept for reuse; more are opened when needed and closed when returned.
const MAX_IDLE: usize = 64;

/// The connections of one lock client, and its request count.
pub(super) struct Pool {
    addr: String,
    idle: Mutex<Vec<Client>>,
    pub(super) requests: Requests,
}

/// A connection taken from the pool; it goes back when dropped, if still usable.
pub(super) struct Pooled<'a> {
    client: Option<Client>,
    pool: &'a Pool,
}

impl Pool {
    /// A pool for the memcached at `addr` (`host:port`, or a `tcp://` or `unix://` URL);
    /// connects on first use.
    pub(super) fn new(addr: &str) -> Pool {
        Pool {
            // The crate parses a URL: a bare `127.0.0.1:11211` would not be one.
            addr: if addr.contains("://") {
                addr.to_owned()
            } else {
                format!("tcp://{addr}")
            },
            idle: Mutex::new(Vec::new()),
            requests: Requests::default(),
        }
    }

    /// Runs `op` on a connection; once more on a new connection if it failed with an I/O error
    /// on a reused one (see the module docs). `op` counts the requests it sends.
    pub(super) async fn run<'a, T, F, Fut>(&'a self, mut op: F) -> Result<T, LockError>
    where
        F: FnMut(Pooled<'a>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let reused = self.take_idle();
        let was_reused = reused.is_some();
        let conn = match reused {
            Some(client) => self.wrap(client),
            None => self.connect().await?,
        };
        match op(conn).await {
            Err(Error::Io(_) | Error::ConnectionClosed) if was_reused => {
                self.lock_idle().clear();
                op(self.connect().await?)
                    .await
                    .map_err(LockError::unavailable)
            }
            outcome => outcome.map_err(LockError::unavailable),
        }
    }

    /// Counts one request about to be sent.
    pub(super) fn count(&self) {
        self.requests.add(1);
    }

    async fn connect(&self) -> Result<Pooled<'_>, LockError> {
        let client = Client::new(&self.addr)
            .await
            .map_err(LockError::unavailable)?;
        Ok(self.wrap(client))
    }

    fn wrap(&self, client: Client) -> Pooled<'_> {
        Pooled {
            client: Some(client),
            pool: self,
        }
    }

    fn take_idle(&self) -> Option<Client> {
        self.lock_idle().pop()
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Client>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Deref for Pooled<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && !client.is_closed()
        {
            let mut idle = self.pool.lock_idle();
            if idle.len() < MAX_IDLE {
                idle.push(client);
            }
        }
    }
}
