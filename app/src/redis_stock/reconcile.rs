//! Reconciliation of a Redis-held stock counter with the database (`POST
//! /api/products/{id}/reconcile`), safe at any moment of a sale.
//!
//! The counter should equal `initial − ordered − pending − in flight`: units in orders, units
//! accepted and waiting in the stream, units of `redis-lua` purchases between their deduction
//! and their order insert, and the rest on sale. A process killed in that window leaves a
//! charge that nothing will ever place: units sold to nobody (undersell).
//!
//! **Why not just set the counter to what the database says.** A purchase in that window looks
//! exactly like a lost one: its units are taken and no order names them yet. Putting them back
//! while it is alive lets its order commit *and* the units sell again: oversell. So reconcile
//!
//! 0. first rebuilds the product's keys from its orders if Redis lost them — its marker gone
//!    or behind the database's epoch — while every purchase of the product is refused (see
//!    [`super::epoch`]), then goes on as with any counter;
//! 1. leaves alone every charge younger than the grace (`--reconcile-grace-ms`): it is in
//!    flight;
//! 2. fences out every older charge before touching the counter: it writes the purchase as a
//!    *voided* order (`orders_purchase` is unique, so exactly one of the void and the late
//!    purchase's own insert wins). If the void wins, the purchase can never place its order —
//!    its insert fails and it answers `purchase_voided` — and only then are its units given
//!    back (once: the give-back marks ended the charge record it gives back by, see
//!    [`charge::Afterwards`]). If the purchase's insert won, it was not lost, and nothing
//!    changes;
//! 3. never raises the counter otherwise, except to recreate one that is gone: it only lowers
//!    one found above what the orders and the stream account for (a failover that lost
//!    decrements), with a compare-and-set, so a purchase that moves the counter meanwhile makes
//!    it answer `busy` instead of writing a stale value.
//!
//! Before all of this, it finishes the returns left half-way: orders that left `reserved`
//! (`expiring`, `cancelling`) whose units never reached the counter because the instance
//! returning them died in between. The give-back script returns them once, by the purchase's
//! charge record, however often it runs (see [`crate::lifecycle`]). And it gives back, whatever
//! their age, the charges of purchases whose order already holds no units for good — voided,
//! or expired or cancelled with its units home — and whose entry no longer waits in the
//! stream: the purchase's key is taken in the database, so nothing can ever place such a charge
//! (a purchase sent again after its order ended, charged while an ended purchase's record was
//! deleted rather than marked). Giving it back cannot oversell; a `redis-lua` retry still
//! between such a charge and its insert fails its insert, and its own give-back finds the
//! record marked and gives nothing.
//!
//! The reads that decide step 3 are ordered so that every race between them either makes the
//! expected value come out high, never low, or moves the counter, which the compare-and-set
//! then refuses: the counter first, then the orders, then the stream, then the charges. A
//! purchase or a return that changes the counter after it was read makes the set fail (`busy`,
//! retry); one made before it is in every later read. An entry placed from the stream between
//! the reads of the orders and of the stream is counted in neither (high); a charge placed as
//! an order after the orders were read is counted as in flight. A high expectation can only
//! leave a counter alone, never lower it below the truth. (Reading the counter last instead
//! would let a return made between the reads count twice: its order still `reserved` in the
//! orders read, its units already in the counter.) What reconcile cannot tell apart: with the
//! counter *and* its charge records lost (a Redis restart without persistence), the purchases
//! that were in flight at that moment; rebuilt before they land, the counter can oversell by
//! their units. Reconcile once they have ended, and run Redis with an append-only file (see
//! `docker-compose.yml`).

use std::collections::HashSet;
use std::time::Duration;

use crate::db::Db;

use super::charge::{self, Charge};
use super::epoch::{REBUILT, Rebuild, rebuilt_charge};
use super::scripts::REPAIR;
use super::split::home_part;
use super::{CounterKeys, RedisStock, RedisStockError};
use crate::api::{Home, Reconciliation};
use crate::db::order_life;
use crate::db::orders::{self, NewOrder, OrderState};
use crate::db::products;

/// Why a product could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("no product {0}")]
    UnknownProduct(u64),
    #[error("product {0} keeps its stock in `{1}`; only Redis-held stock is reconciled")]
    NotInRedis(u64, Home),
    #[error("the counter moved while it was being reconciled; retry")]
    Moved,
    #[error("Redis lost part {1} of product {0}'s split stock; reset the product")]
    PartLost(u64, u32),
    #[error(transparent)]
    Redis(#[from] RedisStockError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What the reads of one pass found.
struct Found {
    initial: i64,
    ordered: i64,
    pending: i64,
    counter: Option<i64>,
    /// Charges with neither an order nor a waiting entry, older than the grace.
    presumed_lost: Vec<(String, Charge)>,
    /// Charges whose purchase has an order that holds no units and never will (voided by a
    /// reconcile that could not give their units back, or ended and home), and no waiting
    /// entry: no order can ever hold them; given back now.
    unplaceable: Vec<(String, Option<String>)>,
    /// Orders whose units are on their way back (order id, quantity, charge field, state).
    returning: Vec<(u64, u32, String, OrderState)>,
    /// Units of the charges with neither, younger than the grace.
    in_flight_units: i64,
    in_flight: u64,
}

/// Rebuilds the counter's keys if Redis lost them, fences out and gives back the product's
/// lost charges, then repairs a counter that is gone or above what the database accounts for.
/// `rules`: the product's, its stock kept in one counter (`Home::Redis`).
pub(super) async fn reconcile_counter(
    pool: &Db,
    redis: &RedisStock,
    product: u64,
    rules: &products::Rules,
    grace: Duration,
) -> Result<Reconciliation, ReconcileError> {
    let found = redis.counter(product).await?;
    let rebuilt = rebuild_if_lost(pool, redis, product, rules).await?;
    let scope = Scope::whole(redis, product);
    let (reconciled, counter_found) = reconcile_in(pool, redis, &scope, grace).await?;
    Ok(Reconciliation {
        counter_found: if rebuilt { found } else { counter_found },
        rebuilt,
        repaired: rebuilt || reconciled.repaired,
        ..reconciled
    })
}

/// Which counter a pass reconciles: a product's one counter, or one part of a split product
/// with the orders of the buyers whose home it is.
pub(super) struct Scope {
    pub product: u64,
    pub keys: CounterKeys,
    /// `(part, parts)` for a part of a split product.
    pub part: Option<(u32, u32)>,
}

impl Scope {
    /// The product's one counter.
    pub fn whole(redis: &RedisStock, product: u64) -> Scope {
        Scope {
            product,
            keys: redis.keys().counter(product),
            part: None,
        }
    }

    /// Whether the purchases of `user` are charged in this counter.
    fn holds(&self, user: &str) -> bool {
        self.part
            .is_none_or(|(part, parts)| home_part(user, parts) == part)
    }
}

/// Fences out and gives back the lost charges of one counter, then repairs it if it is gone
/// or above what the orders account for; the reconciliation, and the counter as first found.
pub(super) async fn reconcile_in(
    pool: &Db,
    redis: &RedisStock,
    scope: &Scope,
    grace: Duration,
) -> Result<(Reconciliation, Option<i64>), ReconcileError> {
    let product = scope.product;
    let before = read(pool, redis, scope, grace).await?;
    let mut released = 0;
    for (order_id, quantity, field, on_the_way) in &before.returning {
        // The order's own charge: its purchase key is taken, so no retry charges it anew.
        give_back(redis, scope, field, None).await?;
        let mut conn = pool.acquire().await?;
        order_life::arrive(conn.conn(), &[(*order_id, *quantity)], *on_the_way).await?;
        released += 1;
    }
    for (field, attempt) in &before.unplaceable {
        give_back(redis, scope, field, attempt.as_deref()).await?;
        released += 1;
    }
    for (field, charged) in &before.presumed_lost {
        let Some((user_id, request_id)) = charge::parse_field(field) else {
            tracing::error!(
                product,
                field,
                "a charge record of no purchase; left as it is"
            );
            continue;
        };
        let voided = orders::void(
            pool,
            &NewOrder {
                product_id: product,
                user_id,
                quantity: charged.quantity,
                strategy: &charged.strategy,
                request_id,
                fencing_token: None,
                pay_within: Duration::ZERO,
            },
        )
        .await?;
        if voided {
            give_back(redis, scope, field, charged.attempt.as_deref()).await?;
            released += 1;
        }
    }

    let after = read(pool, redis, scope, grace).await?;
    let expected = (after.initial - after.ordered - after.pending - after.in_flight_units).max(0);
    let repair = match after.counter {
        None => true,
        Some(counter) => counter > expected,
    };
    if repair {
        let found = after.counter.map(|c| c.to_string()).unwrap_or_default();
        let set: i64 = redis
            .invoke(REPAIR.key(&scope.keys.stock).arg(found).arg(expected))
            .await?;
        if set == 0 {
            return Err(ReconcileError::Moved);
        }
    }
    let counter_after = match repair {
        true => expected,
        false => after.counter.unwrap_or(0),
    };
    let reconciled = Reconciliation {
        product_id: product,
        initial_stock: after.initial,
        ordered: after.ordered,
        pending: after.pending,
        counter_found: before.counter,
        counter_after,
        rebuilt: false,
        repaired: repair || released > 0,
        released_requests: released,
        in_flight: after.in_flight,
    };
    Ok((reconciled, before.counter))
}

/// Rebuilds the product's keys from its orders and the stream if Redis lost them: its marker
/// gone or behind the database's epoch ([`super::epoch`]). Whether it did.
///
/// While the marker is missing every purchase of the product is refused, so the counter and
/// the records can only be raced by returns (an order ended meanwhile: its record is rebuilt
/// as a charge, which the pass after the rebuild finds on an ended order and gives back) and by
/// purchases in flight at the loss (see the module docs).
async fn rebuild_if_lost(
    pool: &Db,
    redis: &RedisStock,
    product: u64,
    rules: &products::Rules,
) -> Result<bool, ReconcileError> {
    if redis.marker(product).await?.unwrap_or(0) >= rules.redis_epoch {
        return Ok(false);
    }
    let view = products::view(pool, product)
        .await?
        .ok_or(ReconcileError::UnknownProduct(product))?;
    let now = redis.now_ms().await?;
    let mut rebuild = Rebuild {
        epoch: rules.redis_epoch,
        counter: view.initial_stock,
        rules: rules.sale,
        ..Rebuild::default()
    };
    let mut recorded = HashSet::new();
    let count_held = |rebuild: &mut Rebuild, user: &str, quantity: u32| {
        rebuild.counter -= i64::from(quantity);
        *rebuild.buyers.entry(user.to_string()).or_default() += i64::from(quantity);
    };
    for order in orders::states_of(pool, product).await? {
        let (field, record, holds) = rebuilt_charge(&order, now);
        if holds {
            count_held(&mut rebuild, &order.user_id, order.quantity);
        }
        recorded.insert(field.clone());
        rebuild.records.push((field, record));
    }
    // Entries the stream still holds (none after a restart; a stale replica's, say): their
    // units are waiting, and taken unless their order is placed already.
    for entry in redis.waiting(Some(product)).await? {
        rebuild.waiting += i64::from(entry.quantity);
        let field = charge::field(&entry.user_id, &entry.request_id);
        if recorded.insert(field.clone()) {
            count_held(&mut rebuild, &entry.user_id, entry.quantity);
            let attempt = entry.attempt.as_deref().unwrap_or(REBUILT);
            let terms = charge::terms(entry.quantity, &entry.strategy);
            rebuild
                .records
                .push((field, format!("{terms}{now}:{attempt}")));
        }
    }
    if rebuild.counter < 0 {
        tracing::error!(
            product,
            counter = rebuild.counter,
            "orders beyond the stock: oversold"
        );
        rebuild.counter = 0;
    }
    let wrote = redis.rebuild(product, &rebuild).await?;
    if wrote {
        tracing::warn!(
            product,
            epoch = rules.redis_epoch,
            counter = rebuild.counter,
            "Redis had lost the product's stock: rebuilt from its orders"
        );
    }
    Ok(wrote)
}

/// One pass of reads, in the order that makes every race between them safe (see the module
/// docs): counter, orders, stream, charges.
async fn read(
    pool: &Db,
    redis: &RedisStock,
    scope: &Scope,
    grace: Duration,
) -> Result<Found, ReconcileError> {
    let product = scope.product;
    // A part's counter and allotment change together (a move changes both in one step), so
    // one read of the two is what the part's orders must account for.
    let (counter, allotted) = match scope.part {
        None => (redis.counter(product).await?, None),
        Some((part, _)) => {
            let state = redis.part_state(product, part).await?;
            (state.counter, Some(state.allotted))
        }
    };
    let view = products::view(pool, product)
        .await?
        .ok_or(ReconcileError::UnknownProduct(product))?;
    let (mut placed, mut unplaceable) = (HashSet::new(), HashSet::new());
    let mut returning = Vec::new();
    let mut held = 0;
    for order in orders::states_of(pool, product).await? {
        if !scope.holds(&order.user_id) {
            continue;
        }
        let field = charge::field(&order.user_id, &order.request_id);
        match order.state {
            OrderState::Reserved | OrderState::Paid => {
                held += i64::from(order.quantity);
                placed.insert(field);
            }
            OrderState::Expiring | OrderState::Cancelling => {
                returning.push((order.order_id, order.quantity, field.clone(), order.state));
                placed.insert(field);
            }
            // Holds nothing, for good: its own charge was given back (its record is marked
            // ended), so a charge of it is a later one, which no order can ever hold.
            OrderState::Voided | OrderState::Expired | OrderState::Cancelled => {
                unplaceable.insert(field);
            }
        }
    }
    // A split product's purchases wait in no stream.
    let waiting = match scope.part {
        None => redis.waiting(Some(product)).await?,
        Some(_) => Vec::new(),
    };
    let pending: i64 = waiting.iter().map(|o| i64::from(o.quantity)).sum();
    let waiting: HashSet<String> = waiting
        .iter()
        .map(|o| charge::field(&o.user_id, &o.request_id))
        .collect();
    let charged = redis.charged_at(&scope.keys.requests).await?;
    let now = redis.now_ms().await?;

    let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    let mut found = Found {
        initial: allotted.unwrap_or(view.initial_stock),
        ordered: match scope.part {
            None => view.sold,
            Some(_) => held,
        },
        pending,
        counter,
        presumed_lost: Vec::new(),
        unplaceable: Vec::new(),
        returning,
        in_flight_units: 0,
        in_flight: 0,
    };
    for (field, record) in charged {
        if placed.contains(&field) || waiting.contains(&field) {
            continue;
        }
        if record == charge::CANCELLED || charge::is_ended(&record) {
            continue;
        }
        if unplaceable.contains(&field) {
            let attempt = Charge::parse(&record).and_then(|c| c.attempt);
            found.unplaceable.push((field, attempt));
            continue;
        }
        let Some(charged) = Charge::parse(&record) else {
            tracing::error!(
                product,
                field,
                record,
                "an unreadable charge record; left as it is"
            );
            continue;
        };
        if now.saturating_sub(charged.charged_at_ms) < grace_ms {
            found.in_flight += 1;
            found.in_flight_units += i64::from(charged.quantity);
        } else {
            found.presumed_lost.push((field, charged));
        }
    }
    Ok(found)
}

/// Gives the units of a purchase whose order holds none (fenced out, or ended) back, once and
/// only the charge read (see [`super::scripts::GIVE_BACK`]), its record marked ended: the
/// purchase's order row stays, so it is never charged again.
async fn give_back(
    redis: &RedisStock,
    scope: &Scope,
    field: &str,
    attempt: Option<&str>,
) -> Result<(), RedisStockError> {
    let afterwards = charge::Afterwards::Ended;
    let script = redis.give_back_at(&scope.keys, scope.product, field, attempt, afterwards);
    redis.invoke::<i64>(&script).await?;
    Ok(())
}
