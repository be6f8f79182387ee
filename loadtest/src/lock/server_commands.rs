//! Commands per grant as the lock's *server* counts them, where it offers a cheap counter.
//!
//! Redis does: `INFO stats` → `total_commands_processed`. Redis 7 counts every command it
//! executes there, those a Lua script calls included (an `EVAL` calling ten commands counts
//! eleven; checked by hand on 7.0), so the figure is the server's work per grant, not its round
//! trips: a script-heavy lock (`redis-fair` prunes and keeps its queue in every script) shows
//! more commands per round trip. The round trips are the clients' own count. The benchmark reads it
//! before and after a run on every Redis the backend uses, and takes off what is not the
//! lock's: the `INFO` read itself, and on the Redis that also holds the probe counter, the
//! probe's own commands. ZooKeeper, etcd, memcached and the database have no counter this cheap and
//! this precise (memcached's `stats` counts commands by kind, not the meta commands the lock
//! sends as one figure) (ZooKeeper's four-letter words are off by default, etcd's metrics count gRPC calls
//! of every client): their figure is left empty, and the client-side count stands alone.

use anyhow::{Context, Result};
use app::api::Service;
use deadpool_redis::redis;
use locks::Backend;
use sandbox::Endpoints;

/// The Redis servers whose commands are `backend`'s, and whether the first also serves the probe.
pub fn servers(backend: Backend, endpoints: &Endpoints) -> Option<(Vec<String>, bool)> {
    match Service::of(backend) {
        Service::Redis => Some((vec![endpoints.redis_url.clone()], true)),
        Service::Redlock => Some((endpoints.redlock_urls.clone(), false)),
        _ => None,
    }
}

/// Reads `total_commands_processed` of some Redis servers, over connections opened once (so
/// that connecting is not counted between two reads).
pub struct Counter {
    conns: Vec<redis::aio::MultiplexedConnection>,
}

impl Counter {
    pub async fn open(urls: &[String]) -> Result<Counter> {
        let mut conns = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            conns.push(client.get_multiplexed_async_connection().await?);
        }
        Ok(Counter { conns })
    }

    /// The sum over the servers. Each read is itself one command per server, counted by the
    /// next read: [`Counter::since`] takes it off.
    pub async fn read(&mut self) -> Result<u64> {
        let mut sum = 0;
        for conn in &mut self.conns {
            let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
            sum += info
                .lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .context("INFO stats without total_commands_processed")?
                .trim()
                .parse::<u64>()?;
        }
        Ok(sum)
    }

    /// Commands processed since the read that returned `before`, not counting that read.
    pub async fn since(&mut self, before: u64) -> Result<u64> {
        let after = self.read().await?;
        Ok(after.saturating_sub(before + self.conns.len() as u64))
    }
}
