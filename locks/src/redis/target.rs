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

/// One multiplexed connection to the primary a [`Target::Sentinel`] names, found again through
/// the Sentinels after it fails.
#[derive(Clone)]
pub(crate) struct Following {
    target: Arc<Target>,
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl Following {
    pub(crate) fn new(target: Target) -> Following {
        Following {
            target: Arc::new(target),
            current: Arc::default(),
        }
    }

    /// The connection to the current primary, asking the Sentinels if there is none.
    pub(crate) async fn connection(&self) -> Result<MultiplexedConnection, LockError> {
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
    /// primary (`READONLY`: a demoted primary refuses writes), so the next request asks again.
    pub(crate) async fn failed(&self, error: &RedisError) {
        let gone = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || error.code() == Some("READONLY");
        if gone {
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
