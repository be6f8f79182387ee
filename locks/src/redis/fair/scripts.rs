//! The fair lock's Lua scripts. Each runs atomically in Redis, reads the time from Redis itself
//! (`TIME`: one clock for every client, so clock skew between clients cannot prune a live
//! waiter), and starts by pruning the waiters whose timeout has passed.
//!
//! Every script takes the same first three keys — the lock hash, the wait queue (a list of
//! owners, oldest first) and the waiters' timeouts (a sorted set, owner → the Redis time in ms
//! after which the waiter is taken for dead) — and the turn-channel prefix as its first
//! argument. A waiter's owner is `<client>.<id>`, so a script can name the channel of the
//! client that waits: `<prefix><client>:<key>`.
//!
//! They are sent whole (`EVAL`, see [`Whole`]): a grant far from Redis is one round trip even
//! on a client's first, so its lease is not half spent before the holder hears of it.

use std::sync::LazyLock;

use crate::redis::Whole;

/// A script of the fair lock: the prelude and `body`, made once and kept for the process.
fn whole(body: &str) -> Whole {
    Whole(String::leak(format!("{PRELUDE}{body}")))
}

/// Shared by every script: the Redis time, pruning, and telling the first waiter its turn.
const PRELUDE: &str = r"
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Removes every waiter whose timeout has passed; returns how many.
local function prune(now)
  local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)
  for _, owner in ipairs(dead) do
    redis.call('lrem', KEYS[2], 1, owner)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
  end
  return #dead
end
-- Publishes the first waiter's name on its client's channel: its turn has come.
local function wake_head()
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    local client = string.match(head, '^[^.]*')
    redis.call('publish', ARGV[1] .. client .. ':' .. KEYS[1], head)
  end
end
";

/// Grants the lock to `owner` if it is free and nobody waits before it; else (if asked) queues
/// `owner` or refreshes its timeout.
/// KEYS: lock, queue, timeouts, fence. ARGV: prefix, owner, lease (ms), join (1 or 0), grace (ms).
/// Returns `{1, token}`, or `{0, ms}`: when to try again at the latest. The waiter's timeout is
/// set to that moment plus the grace.
pub(super) static ACQUIRE: LazyLock<Whole> = LazyLock::new(|| {
    whole(
        r"
local now = now_ms()
local pruned = prune(now)
local owner = ARGV[2]
local head = redis.call('lindex', KEYS[2], 0)
local free = redis.call('exists', KEYS[1]) == 0
if free and (not head or head == owner) then
  if head then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
  end
  local token = redis.call('incr', KEYS[4])
  redis.call('hset', KEYS[1], owner, 1)
  redis.call('pexpire', KEYS[1], ARGV[3])
  return {1, token}
end
local retry = redis.call('pttl', KEYS[1])
if free then
  -- Another waiter's turn: try again when it must have shown up.
  local deadline = redis.call('zscore', KEYS[3], head)
  retry = deadline and (tonumber(deadline) - now) or 10
  if pruned > 0 then
    wake_head()
  end
elseif retry < 0 then
  retry = 10
end
retry = math.max(retry, 1)
if ARGV[4] == '1' then
  if redis.call('zadd', KEYS[3], now + retry + tonumber(ARGV[5]), owner) == 1 then
    redis.call('rpush', KEYS[2], owner)
  end
end
return {0, retry}",
    )
});

/// Leaves the lock once. KEYS: lock, queue, timeouts. ARGV: prefix, owner, lease (ms).
/// Returns -1 if the owner does not hold it, else the holds left; at 0 deletes the lock and
/// tells the first waiter.
pub(super) static UNLOCK: LazyLock<Whole> = LazyLock::new(|| {
    whole(
        r"
prune(now_ms())
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return left
end
redis.call('del', KEYS[1])
wake_head()
return 0",
    )
});

/// A waiter gives up: leaves the queue, and gives back a grant it never heard of (its acquire
/// was dropped while the granting script ran). KEYS: lock, queue, timeouts. ARGV: prefix,
/// owner. If the lock is free afterwards, tells the first waiter.
pub(super) static LEAVE: LazyLock<Whole> = LazyLock::new(|| {
    whole(
        r"
prune(now_ms())
redis.call('lrem', KEYS[2], 1, ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('del', KEYS[1])
end
if redis.call('exists', KEYS[1]) == 0 then
  wake_head()
end
return 0",
    )
});
