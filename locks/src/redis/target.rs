//! Where a Redis lock client finds its server: one address, or whichever server the Sentinels
//! of a monitored group name as its primary now.
//!
//! A Sentinel address is written `redis+sentinel://host:port[,host:port…]/<master name>`: the
//! Sentinels (any of them will do; they are asked in turn) and the name the group is monitored
//! under. The client asks a Sentinel for the primary's address, checks with `ROLE` that the
//! server it reaches considers itself primary (a Sentinel may be stale), and keeps one
//! multiplexed connection to it. When that connection fails, the next request asks the
//! Sentinels again, so after a failover requests reach the promoted replica without a restart
//! — and, with it, whatever that replica has *not* received: Sentinel moves the address, it
//! does not make replication synchronous (scenario `sentinel-failover`).

use std::sync::Arc;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::sentinel::Sentinel;
use deadpool_redis::redis::{Client, RedisError};
use tokio::sync::Mutex;

use crate::LockError;

/// The scheme of a Sentinel address.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// A Redis server as a lock client names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One server at a fixed address (`redis://…`).
    Direct(String),
    /// The current primary of the group `master`, as its Sentinels (`host:port`) name it.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

impl Target {
    /// `redis://…` or `redis+sentinel://host:port[,host:port…]/<master name>`.
    pub fn parse(url: &str) -> Result<Target, LockError> {
        let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) else {
            return Ok(Target::Direct(url.to_owned()));
        };
        let malformed = || {
            LockError::Unavailable(
                format!(
                    "`{url}`: a Sentinel address is {SENTINEL_SCHEME}host:port[,host:port…]/<master name>"
                )
                .into(),
            )
        };
        let (hosts, master) = rest.split_once('/').ok_or_else(malformed)?;
        let sentinels: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        if sentinels.is_empty() || master.is_empty() || master.contains('/') {
            return Err(malformed());
        }
        Ok(Target::Sentinel {
            sentinels,
            master: master.to_owned(),
        })
    }

    /// The Sentinel address of `master` watched by `sentinels` (`host:port` each).
    pub fn sentinel_url(sentinels: &[String], master: &str) -> String {
        format!("{SENTINEL_SCHEME}{}/{master}", sentinels.join(","))
    }

    /// A client for the server: the fixed address, or the primary the Sentinels name now
    /// (checked with `ROLE`).
    pub async fn client(&self) -> Result<Client, LockError> {
        match self {
            Target::Direct(url) => Client::open(url.as_str()).map_err(LockError::unavailable),
            Target::Sentinel { sentinels, master } => {
                let urls: Vec<String> = sentinels.iter().map(|s| format!("redis://{s}")).collect();
                let mut sentinel = Sentinel::build(urls).map_err(LockError::unavailable)?;
                sentinel
                    .async_master_for(master, None)
                    .await
                    .map_err(LockError::unavailable)
            }
        }
    }
}

/// Whether `error` says the server is gone or no longer the primary, so a connection that
/// answered it is worth nothing now: an I/O error, a dropped or refused connection, a timeout,
/// or `READONLY` (a demoted primary keeps its connections open for reads and refuses every
/// write). After a failover each of these means "ask the Sentinels again", not "retry here".
pub fn primary_gone(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.code() == Some("READONLY")
}

/// One multiplexed connection to the server a [`Target`] names — for a
/// [`Target::Sentinel`], the primary the Sentinels name now — found again after it fails.
///
/// Every task of a client shares the one connection (requests are pipelined on it). A caller
/// reports each failed request with [`Following::failed`]; when the failure says the primary
/// is gone ([`primary_gone`]), the connection is forgotten and the next
/// [`Following::connection`] asks the Sentinels again and checks the new address with `ROLE`.
/// So requests fail (they are never sent elsewhere behind the caller's back) from the moment
/// the primary dies until the Sentinels name a promoted replica that answers as primary, and
/// reach that replica afterwards, without a restart. What the promoted replica never received
/// is lost with the old primary: following the address does not make replication synchronous.
#[derive(Clone)]
pub struct Following {
    target: Arc<Target>,
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl std::fmt::Debug for Following {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Following")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Following {
    /// Follows `target`; nothing is connected before the first [`Following::connection`].
    pub fn new(target: Target) -> Following {
        Following {
            target: Arc::new(target),
            current: Arc::default(),
        }
    }

    /// The connection to the current primary, asking the Sentinels if there is none. Callers
    /// wait for one another while it connects, so a dead primary is looked up once per
    /// request, not once per task at the same instant.
    pub async fn connection(&self) -> Result<MultiplexedConnection, LockError> {
        let mut current = self.current.lock().await;
        if let Some(conn) = current.as_ref() {
            return Ok(conn.clone());
        }
        let client = self.target.client().await?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(LockError::unavailable)?;
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection after `error` if it says the server is gone or no longer the
    /// primary ([`primary_gone`]), so the next request asks again.
    pub async fn failed(&self, error: &RedisError) {
        if primary_gone(error) {
            self.current.lock().await.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_address_names_its_sentinels_and_master_and_anything_else_is_direct() {
        assert_eq!(
            Target::parse("redis+sentinel://127.0.0.1:26379, 127.0.0.1:26380/seckill").unwrap(),
            Target::Sentinel {
                sentinels: vec!["127.0.0.1:26379".into(), "127.0.0.1:26380".into()],
                master: "seckill".into(),
            }
        );
        assert_eq!(
            Target::parse("redis://127.0.0.1:6379/0").unwrap(),
            Target::Direct("redis://127.0.0.1:6379/0".into())
        );
        let url = Target::sentinel_url(&["a:1".into(), "b:2".into()], "m");
        assert_eq!(
            Target::parse(&url).unwrap(),
            Target::Sentinel {
                sentinels: vec!["a:1".into(), "b:2".into()],
                master: "m".into()
            }
        );
    }

    #[test]
    fn a_sentinel_address_without_sentinels_or_master_is_refused() {
        for bad in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel:///m",
            "redis+sentinel://h:1/",
            "redis+sentinel://h:1/a/b",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
