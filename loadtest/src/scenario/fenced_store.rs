//! The protected resource of the lock-level scenarios: one register in the scenario's own
//! Redis that remembers the highest fencing token that wrote it.
//!
//! A *fenced* write carries the writer's token and is refused unless it is higher than every
//! token seen so far (`fence < token`, checked and set in one script); an *unfenced* write is
//! always accepted, as a plain `SET` or `UPDATE` would be. That difference is the whole point of
//! fencing: the lock cannot stop a holder that lost it without knowing, the resource can.

use std::sync::LazyLock;

use anyhow::{Context, Result};
use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{Client, Script};

/// KEYS: register. ARGV: token, value, fenced (1/0). Returns 1 if written, 0 if refused.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local fence = tonumber(redis.call('hget', KEYS[1], 'fence') or '0')
local token = tonumber(ARGV[1])
if ARGV[3] == '1' and token <= fence then
  return 0
end
if token > fence then redis.call('hset', KEYS[1], 'fence', token) end
redis.call('hset', KEYS[1], 'value', ARGV[2])
return 1",
    )
});

/// A register in Redis written with or without a fencing check.
#[derive(Clone)]
pub struct FencedRegister {
    conn: MultiplexedConnection,
    key: String,
}

impl FencedRegister {
    pub async fn open(redis_url: &str, key: &str) -> Result<FencedRegister> {
        let conn = Client::open(redis_url)?
            .get_multiplexed_async_connection()
            .await
            .context("connecting to the resource's Redis")?;
        Ok(FencedRegister {
            conn,
            key: key.to_owned(),
        })
    }

    /// Writes `value` as the holder of `token`; `fenced` refuses tokens not above the fence.
    /// Returns whether the write was accepted.
    pub async fn write(&self, token: u64, value: &str, fenced: bool) -> Result<bool> {
        let written: i64 = WRITE
            .key(&self.key)
            .arg(token)
            .arg(value)
            .arg(if fenced { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(written == 1)
    }

    /// The value last written.
    pub async fn value(&self) -> Result<Option<String>> {
        let v: Option<String> = deadpool_redis::redis::cmd("HGET")
            .arg(&self.key)
            .arg("value")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(v)
    }
}
