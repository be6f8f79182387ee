//! The Lua scripts that keep Redis-held stock. Redis runs a script as one atomic step: no other
//! command of any client runs between its reads and its writes, which is what makes the check
//! and the decrement (and the request-id record, and the stream append) one decision.
//!
//! Keys of one product (see [`super::Keys`]): `stock` (the counter, absent when the product's
//! stock is not kept in Redis), `requests` (hash: request id → quantity, the ids this counter
//! has charged), `waiting` (the units of its entries in the stream: what a product read
//! reports as pending, kept here so that reading it never scans the stream). Keys shared by
//! all products: `stream` (orders accepted but not yet placed) and `pending` (hash: request
//! id → product id of every entry in the stream).

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// [`TAKE`] and [`TAKE_AND_APPEND`]: the product has no counter in Redis.
pub const NO_COUNTER: i64 = -1;
/// The request id was charged already: nothing taken again.
pub const DUPLICATE: i64 = -2;
/// Fewer units left than asked.
pub const SOLD_OUT: i64 = -3;

/// Checks and decrements the counter and records the request id, atomically.
/// KEYS: stock, requests. ARGV: request id, quantity.
/// Returns the units left, or [`NO_COUNTER`], [`DUPLICATE`], [`SOLD_OUT`].
pub static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local left = redis.call('get', KEYS[1])
if not left then return -1 end
if redis.call('hexists', KEYS[2], ARGV[1]) == 1 then return -2 end
local q = tonumber(ARGV[2])
left = tonumber(left)
if left < q then return -3 end
redis.call('hset', KEYS[2], ARGV[1], q)
return redis.call('decrby', KEYS[1], q)",
    )
});

/// Gives the units of a charged request back, once: only if its record is still there, which
/// the same step deletes. KEYS: stock, requests. ARGV: request id.
/// Returns the units given back (0 if the request had not been charged or was given back).
pub static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local q = redis.call('hget', KEYS[2], ARGV[1])
if not q then return 0 end
redis.call('hdel', KEYS[2], ARGV[1])
if redis.call('exists', KEYS[1]) == 1 then redis.call('incrby', KEYS[1], q) end
return tonumber(q)",
    )
});

/// [`TAKE`], and the order appended to the stream (and its units counted as waiting) in the
/// same step. KEYS: stock, requests, stream, pending, waiting. ARGV: request id, quantity,
/// product id, user id, strategy. Returns as [`TAKE`].
pub static TAKE_AND_APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local left = redis.call('get', KEYS[1])
if not left then return -1 end
if redis.call('hexists', KEYS[2], ARGV[1]) == 1 then return -2 end
local q = tonumber(ARGV[2])
left = tonumber(left)
if left < q then return -3 end
redis.call('hset', KEYS[2], ARGV[1], q)
redis.call('xadd', KEYS[3], '*', 'request_id', ARGV[1], 'quantity', ARGV[2],
  'product_id', ARGV[3], 'user_id', ARGV[4], 'strategy', ARGV[5])
redis.call('hset', KEYS[4], ARGV[1], ARGV[3])
redis.call('incrby', KEYS[5], q)
return redis.call('decrby', KEYS[1], q)",
    )
});

/// After the orders of some entries were committed: acknowledges and deletes each entry,
/// forgets it as pending, and takes its units off its product's waiting count — only when
/// this call deleted the entry, so an entry placed twice (claimed after a slow consumer
/// placed it) is not counted off twice, and only while the count exists (a product reset
/// meanwhile removed it). KEYS: stream, pending, then the waiting key of each entry's product.
/// ARGV: group, then triples of entry id, request id and quantity, in the order of the
/// waiting keys. Returns the number of entries deleted.
pub static PLACED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local deleted = 0
for i = 2, #ARGV, 3 do
  local waiting = KEYS[2 + (i + 1) / 3]
  redis.call('xack', KEYS[1], ARGV[1], ARGV[i])
  local gone = redis.call('xdel', KEYS[1], ARGV[i])
  redis.call('hdel', KEYS[2], ARGV[i + 1])
  if gone == 1 and redis.call('exists', waiting) == 1 then
    redis.call('decrby', waiting, ARGV[i + 2])
  end
  deleted = deleted + gone
end
return deleted",
    )
});

/// Sets the counter to a repaired value only if it still holds the value it was read with.
/// KEYS: stock. ARGV: expected (empty: no counter), new. Returns 1 if set, 0 if the counter
/// moved meanwhile.
pub static REPAIR: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if (redis.call('get', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('set', KEYS[1], ARGV[2])
return 1",
    )
});
