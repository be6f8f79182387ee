//! The Lua scripts that keep Redis-held stock. Redis runs a script as one atomic step: no other
//! command of any client runs between its reads and its writes, which is what makes the check
//! and the decrement (and the request-id record, and the stream append) one decision.
//!
//! Keys of one product (see [`super::Keys`]): `stock` (the counter, absent when the product's
//! stock is not kept in Redis), `requests` (hash: purchase field → charge record, see
//! [`super::charge`]: the purchases this counter has charged, and those whose order ended),
//! `charges` (how many charges it has made, ever), `buyers` (hash: user id → units charged to
//! that buyer) and `limit` (the per-user limit), `waiting` (the units of its entries in the
//! stream: what a product read reports as pending, kept here so that reading it never scans
//! the stream), `epoch` (the marker: the epoch its keys were written at, see
//! [`super::epoch`]). Keys shared by all products: `stream` (orders accepted but not yet
//! placed) and `pending` (hash: product and purchase field → product id of every entry in the
//! stream).

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// [`TAKE`] and [`TAKE_AND_APPEND`]: the product has no counter in Redis.
pub const NO_COUNTER: i64 = -1;
/// The purchase was charged already, with the same terms (its order may have ended since):
/// nothing taken again.
pub const DUPLICATE: i64 = -2;
/// Fewer units left than asked.
pub const SOLD_OUT: i64 = -3;
/// The purchase was charged already with other terms (quantity or strategy).
pub const CONFLICT: i64 = -4;
/// The buyer would hold more units of the product than its per-user limit.
pub const LIMIT_REACHED: i64 = -5;
/// [`TAKE_AND_APPEND`]: the stream holds as many unplaced orders as it may; nothing taken.
pub const STREAM_FULL: i64 = -6;
/// Redis lost the product's stock: its marker is gone or behind the epoch the purchase knows
/// it by, or its counter has no marker (see [`super::epoch`]); nothing taken.
pub const LOST: i64 = -7;

/// `buyer(field)`: the buyer of a purchase field (`<length>:<user><request>`).
const BUYER: &str = r"
local function buyer(field)
  local length, rest = string.match(field, '^(%d+):(.*)$')
  return string.sub(rest, 1, tonumber(length))
end
";

/// The start both take scripts share: refuse (the stock lost, a duplicate, a conflict, sold
/// out, the limit), or go on with `q` set to the quantity. The product's marker (key `marker`,
/// set by the script) must be at the epoch the purchase knows the product by (`expected`: 0
/// for a product the instance does not know as Redis-held), and a counter must have one. A
/// purchase with a record — a charge, or the ended mark of a purchase whose order gave its
/// units back — is a duplicate or a conflict by the terms the record begins with; only no
/// record, or the tombstone of a take settled as not made, lets it be charged. `KEYS[1]` stock,
/// `KEYS[2]` requests, `KEYS[3]` buyers, `KEYS[4]` limit; `ARGV[1]` purchase field,
/// `ARGV[2]` quantity, `ARGV[3]` terms (`quantity:strategy:`).
const CHECK: &str = r"
local left = redis.call('get', KEYS[1])
local mark = tonumber(redis.call('get', marker) or '0')
if mark < tonumber(expected) or (left and mark == 0) then return -7 end
if not left then return -1 end
local charged = redis.call('hget', KEYS[2], ARGV[1])
if charged and charged ~= 'cancelled' then
  if string.sub(charged, 1, #ARGV[3]) == ARGV[3] then return -2 end
  return -4
end
local q = tonumber(ARGV[2])
if tonumber(left) < q then return -3 end
local limit = tonumber(redis.call('get', KEYS[4]) or '1')
local held = tonumber(redis.call('hget', KEYS[3], user) or '0')
if held + q > limit then return -5 end
";

/// After [`CHECK`]: charges the purchase — records it with its terms, the Redis clock and the
/// attempt that charged it (set in `attempt` by the script) — adds its units to the buyer's,
/// and counts the charge in the key named `charges` by the script (so that a sold-out
/// product's winners are known unchanged while it stays, see
/// [`crate::inventory::left_and_mark`]).
const CHARGE: &str = r"
local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
redis.call('hset', KEYS[2], ARGV[1], ARGV[3] .. now .. ':' .. attempt)
redis.call('hincrby', KEYS[3], user, q)
redis.call('incr', charges)
";

/// Checks and decrements the counter, records the purchase and counts its units against the
/// buyer's limit, atomically.
/// KEYS: stock, requests, buyers, limit, epoch, charges. ARGV: purchase field, quantity,
/// terms, attempt, expected epoch. Returns the units left, or [`LOST`], [`NO_COUNTER`],
/// [`DUPLICATE`], [`SOLD_OUT`], [`CONFLICT`], [`LIMIT_REACHED`].
pub static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BUYER}local user, attempt, charges = buyer(ARGV[1]), ARGV[4], KEYS[6]
local marker, expected = KEYS[5], ARGV[5]
{CHECK}{CHARGE}
return redis.call('decrby', KEYS[1], q)"
    ))
});

/// `give_back(field, attempt, ended)`: gives the units of the charged purchase `field` back,
/// to the counter and to the buyer's limit, once: only if its record is a charge, which the
/// same step replaces — by the ended mark of its terms when `ended` (the purchase has an order
/// row that will never hold units again: see [`super::charge::Afterwards`]), else by nothing —
/// and, when an attempt is named (not `''`), only if that attempt made the charge. The units
/// given back (0 if the purchase had not been charged, was given back, or was charged by
/// another attempt). `KEYS[1]` stock, `KEYS[2]` requests, `KEYS[3]` buyers.
const RETURN: &str = r"
local function give_back(field, attempt, ended)
  local charged = redis.call('hget', KEYS[2], field)
  if not charged or charged == 'cancelled' or string.match(charged, ':ended$') then return 0 end
  if attempt ~= '' and string.match(charged, '^%d+:[^:]*:%d+:(.*)$') ~= attempt then return 0 end
  if ended then
    redis.call('hset', KEYS[2], field, string.match(charged, '^%d+:[^:]*:') .. 'ended')
  else
    redis.call('hdel', KEYS[2], field)
  end
  local q = tonumber(string.match(charged, '^(%d+):'))
  if redis.call('exists', KEYS[1]) == 1 then redis.call('incrby', KEYS[1], q) end
  local user = buyer(field)
  if redis.call('hincrby', KEYS[3], user, -q) <= 0 then redis.call('hdel', KEYS[3], user) end
  return q
end
";

/// Gives the units of a charged purchase back, to the counter and to the buyer's limit, once:
/// only if its record is a charge, which the same step marks ended or deletes — and, when an
/// attempt is named, only if that attempt made the charge: a give-back sent again after its
/// answer was lost, or arriving late, must not give back the charge a retry of the same
/// purchase made since (its order would then name units that are on sale again). Announces
/// that the product's stock came back. KEYS: stock, requests, buyers. ARGV: purchase field, the
/// announcement channel, product id, attempt (empty: whichever charged it), `ended` (the
/// record becomes the ended mark) or empty (it is deleted). Returns the units given back (0 if
/// the purchase had not been charged, was given back, or was charged by another attempt).
pub static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BUYER}{RETURN}
local q = give_back(ARGV[1], ARGV[4], ARGV[5] == 'ended')
if q > 0 then redis.call('publish', ARGV[2], ARGV[3]) end
return q"
    ))
});

/// [`GIVE_BACK`] for several purchases of one product in one step, each by its own charge
/// (whichever attempt made it) and each once, by its own record, which it marks ended: the
/// returns of ended orders (the sweep's batch of expired ones), one round trip instead of one
/// per order. Announces once that the product's stock came back, if any did. KEYS: stock,
/// requests, buyers. ARGV: the announcement channel, product id, then the purchase fields.
/// Returns the units given back in all.
pub static GIVE_BACK_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BUYER}{RETURN}
local given = 0
for i = 3, #ARGV do given = given + give_back(ARGV[i], '', true) end
if given > 0 then redis.call('publish', ARGV[1], ARGV[2]) end
return given"
    ))
});

/// Settles a take whose answer was lost (a timeout, a broken connection): returns
/// [`SETTLED_MINE`] if this attempt charged the purchase (the script ran), [`SETTLED_OTHER`]
/// if another attempt of the same purchase did (a concurrent copy or a retry), or its order
/// ended (its record is the ended mark) — either way the lost script, should it still arrive,
/// finds that record and charges nothing — else writes the tombstone
/// `cancelled` as its record and returns [`SETTLED_NOT_MADE`] — so that the lost script finds
/// a record and charges nothing. A tombstone counts as no record for a new take of the
/// purchase: its retry can buy. KEYS: requests. ARGV: purchase field, attempt.
pub static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local charged = redis.call('hget', KEYS[1], ARGV[1])
if charged and charged ~= 'cancelled' then
  if string.match(charged, '^%d+:[^:]*:%d+:(.*)$') == ARGV[2] then return 1 end
  return 2
end
redis.call('hset', KEYS[1], ARGV[1], 'cancelled')
return 0",
    )
});

/// [`SETTLE`]: the lost take was not made, and never will be.
pub const SETTLED_NOT_MADE: i64 = 0;
/// [`SETTLE`]: the lost take charged the purchase.
pub const SETTLED_MINE: i64 = 1;
/// [`SETTLE`]: another attempt of the purchase charged it.
pub const SETTLED_OTHER: i64 = 2;

/// [`TAKE`], and the order appended to the stream (and its units counted as waiting) in the
/// same step — unless the stream already holds `ARGV[10]` entries (orders accepted and not yet
/// placed): then the purchase is refused with [`STREAM_FULL`] and takes nothing, so an
/// accepted order is one the consumers will place soon, not one behind a backlog that grows as
/// long as buyers arrive faster than the database takes their orders. A duplicate or a sold-out
/// product is still answered as such. KEYS: stock, requests, buyers, limit, stream, pending,
/// waiting, epoch, charges. ARGV: purchase field, quantity, terms, request id, product id,
/// user id, strategy, pending field, attempt, most entries, expected epoch. Returns as
/// [`TAKE`], or [`STREAM_FULL`].
pub static TAKE_AND_APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BUYER}local user, attempt, charges = buyer(ARGV[1]), ARGV[9], KEYS[9]
local marker, expected = KEYS[8], ARGV[11]
{CHECK}
if redis.call('xlen', KEYS[5]) >= tonumber(ARGV[10]) then return -6 end
{CHARGE}
redis.call('xadd', KEYS[5], '*', 'request_id', ARGV[4], 'quantity', ARGV[2],
  'product_id', ARGV[5], 'user_id', ARGV[6], 'strategy', ARGV[7], 'attempt', attempt)
redis.call('hset', KEYS[6], ARGV[8], ARGV[5])
redis.call('incrby', KEYS[7], q)
return redis.call('decrby', KEYS[1], q)"
    ))
});

/// After the orders of some entries were committed: acknowledges and deletes each entry,
/// forgets it as pending, and takes its units off its product's waiting count — only when
/// this call deleted the entry, so an entry placed twice (claimed after a slow consumer
/// placed it) is not counted off twice, and only while the count exists (a product reset
/// meanwhile removed it). KEYS: stream, pending, then the waiting key of each entry's product.
/// ARGV: group, then triples of entry id, pending field and quantity, in the order of the
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
