//! The Lua scripts of a first-come queue. Redis runs a script as one atomic step, so a click's
//! place — whether a unit is left for it after every click before it — is decided against every
//! other click of every instance at once.
//!
//! Keys of one product: `arrivals` (hash: `stock` the units at its reset, `promised` the units
//! given to clicks with a place, `back` the units back home since the reset (what the caller
//! last counted), `places` the places given, ever; `b:<user>` the units of a buyer's clicks
//! being served; `c:<field>` the units and buyer of a click being served, as
//! `<units>:<user>`) and `serving` (sorted set: the field of each click being served, by the
//! Redis time in ms after which its place is given up if its instance never settles it). A
//! click's field is `<length of user>:<user><request id>`, as the Redis stock's.

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// [`TAKE`]: the click has a place: a unit is kept for it.
pub const YOURS: i64 = 1;
/// Every unit is promised to earlier clicks, some still being served.
pub const BEHIND: i64 = 0;
/// Every unit is promised and no click is being served.
pub const SETTLED: i64 = 5;
/// This very click (buyer and request id) is being served.
pub const PENDING: i64 = 2;
/// The product has no queue in Redis.
pub const NOT_OPENED: i64 = 3;
/// The buyer's clicks being served already hold the per-user limit.
pub const OVER_LIMIT: i64 = 4;

/// `settle(field, kept)`: the click of `field` is no longer served; its units stay promised if
/// `kept` (they were sold to it), or are given back to the clicks after it. Whether it was
/// being served. `KEYS[1]` arrivals, `KEYS[2]` serving.
const SETTLE_FN: &str = r"
local function settle(field, kept)
  local held = redis.call('hget', KEYS[1], 'c:' .. field)
  redis.call('zrem', KEYS[2], field)
  if not held then return 0 end
  redis.call('hdel', KEYS[1], 'c:' .. field)
  local q, user = string.match(held, '^(%d+):(.*)$')
  q = tonumber(q)
  if redis.call('hincrby', KEYS[1], 'b:' .. user, -q) <= 0 then
    redis.call('hdel', KEYS[1], 'b:' .. user)
  end
  if not kept then redis.call('hincrby', KEYS[1], 'promised', -q) end
  return 1
end
";

/// Gives a click its place. `KEYS[1]` arrivals, `KEYS[2]` serving; `ARGV[1]` the click's field,
/// `ARGV[2]` its buyer, `ARGV[3]` its units, `ARGV[4]` the per-user limit, `ARGV[5]` the units back
/// home as the caller counted them (−1: not counted), `ARGV[6]` how long a place is kept for a
/// click its instance never settles, in ms. Answers `{code, place}`.
///
/// A click finds every unit promised only after the places of clicks whose deadline passed —
/// their instance died serving them — are given back (up to 16 at a time): a click that did
/// buy before its instance died is then counted twice, and a click later in the queue is let
/// through to a stock that no longer has its unit, which the strategy refuses `sold_out`.
/// Given back, a unit nobody served would be a unit never sold.
pub static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{SETTLE_FN}{}",
        r"
if redis.call('exists', KEYS[1]) == 0 then return {3, 0} end
local field, user = ARGV[1], ARGV[2]
if redis.call('zscore', KEYS[2], field) then return {2, 0} end
local q = tonumber(ARGV[3])
local held = tonumber(redis.call('hget', KEYS[1], 'b:' .. user) or '0')
if held + q > tonumber(ARGV[4]) then return {4, 0} end
local back = tonumber(redis.call('hget', KEYS[1], 'back') or '0')
if tonumber(ARGV[5]) > back then
  back = tonumber(ARGV[5])
  redis.call('hset', KEYS[1], 'back', back)
end
local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local window = tonumber(redis.call('hget', KEYS[1], 'stock') or '0') + back
local promised = tonumber(redis.call('hget', KEYS[1], 'promised') or '0')
if promised + q > window then
  for _, stale in ipairs(redis.call('zrangebyscore', KEYS[2], '-inf', now, 'LIMIT', 0, 16)) do
    settle(stale, false)
  end
  promised = tonumber(redis.call('hget', KEYS[1], 'promised') or '0')
  if promised + q > window then
    if redis.call('zcard', KEYS[2]) > 0 then return {0, 0} end
    return {5, 0}
  end
end
redis.call('hincrby', KEYS[1], 'promised', q)
redis.call('hincrby', KEYS[1], 'b:' .. user, q)
redis.call('hset', KEYS[1], 'c:' .. field, q .. ':' .. user)
redis.call('zadd', KEYS[2], now + tonumber(ARGV[6]), field)
return {1, redis.call('hincrby', KEYS[1], 'places', 1)}
"
    ))
});

/// The click of `ARGV[1]` was served: its units stay promised if `ARGV[2]` is `1` (sold to it),
/// or go to the clicks after it. `KEYS[1]` arrivals, `KEYS[2]` serving. 1 if it was being served.
pub static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{SETTLE_FN}{}",
        r"
return settle(ARGV[1], ARGV[2] == '1')
"
    ))
});

/// Opens the product's queue afresh with `ARGV[1]` units: a reset forgets every place.
/// `KEYS[1]` arrivals, `KEYS[2]` serving.
pub static OPEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('del', KEYS[1], KEYS[2])
redis.call('hset', KEYS[1], 'stock', ARGV[1], 'promised', 0, 'back', 0, 'places', 0)
return 1
",
    )
});
