//! Ending one order and giving its units back to its product's home (see the module above for
//! why each home gets them exactly once).

use std::time::Duration;

use crate::db::engine::Tx;

use super::{Check, End, HeldForReturn, LifeError, Lifecycle};
use crate::api::{Home, Strategy};
use crate::db::due::Due;
use crate::db::order_life;
use crate::db::orders::{Order, OrderState, PurchaseKey};
use crate::redis_stock::{RedisStockError, charge};

/// An order to end, with what giving its units back needs.
#[derive(Debug, Clone)]
pub struct Target {
    pub order_id: u64,
    pub product_id: u64,
    pub user_id: String,
    pub request_id: String,
    pub quantity: u32,
    pub home: Home,
    /// The strategy that sold it (`None`: one this build does not know, which holds no lock
    /// a return could need).
    pub strategy: Option<Strategy>,
}

impl Target {
    pub fn of(order: &Order, home: Home) -> Target {
        Target {
            order_id: order.order_id,
            product_id: order.product_id,
            user_id: order.user_id.clone(),
            request_id: order.request_id.clone(),
            quantity: order.quantity,
            home,
            strategy: order.strategy.parse().ok(),
        }
    }

    /// The target of a row the sweep found (`None`: a home this build does not know).
    pub fn of_due(due: &Due) -> Option<Target> {
        Some(Target {
            order_id: due.order_id,
            product_id: due.product_id,
            user_id: due.user_id.clone(),
            request_id: due.request_id.clone(),
            quantity: due.quantity,
            home: due.home.parse().ok()?,
            strategy: due.strategy.parse().ok(),
        })
    }

    /// The strategy that sold it if its stock is the product's row: the one whose lock a
    /// return to the row may have to hold.
    pub fn row_seller(&self) -> Option<Strategy> {
        (self.home == Home::Row).then_some(self.strategy).flatten()
    }

    /// Whether its units go back to the row in two steps, the second under the lock of the
    /// strategy that sold it (see [`super`]).
    fn returns_in_two_steps(&self) -> bool {
        self.row_seller()
            .is_some_and(Strategy::lock_alone_guards_stock)
    }

    fn key(&self) -> PurchaseKey<'_> {
        PurchaseKey {
            product_id: self.product_id,
            user_id: &self.user_id,
            request_id: &self.request_id,
        }
    }
}

/// Ends `target` as `end` says and gives its units back; whether this call made the
/// transition.
pub(super) async fn end(
    life: &Lifecycle,
    target: &Target,
    end: End,
    check: Check,
    hold: Option<Duration>,
) -> Result<bool, LifeError> {
    match target.home {
        Home::Row if check == Check::Conditional && target.returns_in_two_steps() => {
            end_in_two_steps(life, target, end, hold).await
        }
        Home::Row | Home::Buckets => end_in_database(life, target, end, check, hold).await,
        Home::Redis | Home::RedisSplit => end_in_redis(life, target, end, check, hold).await,
    }
}

/// The quota, the stock and the state change in one transaction, locked in the order every
/// purchase locks them (the buyer's quota row, then the stock, then the order), so that a
/// return and a purchase never wait on each other in a cycle. The conditional state change
/// comes last and decides: if it changes nothing, the transaction rolls back with the rest.
async fn end_in_database(
    life: &Lifecycle,
    target: &Target,
    end: End,
    check: Check,
    hold: Option<Duration>,
) -> Result<bool, LifeError> {
    if check == Check::Unchecked {
        // The check, apart from the write that acts on it.
        let mut conn = life.pool.acquire().await?;
        let state = order_life::read_state(conn.conn(), target.order_id).await?;
        drop(conn);
        if state != Some(OrderState::Reserved) {
            return Ok(false);
        }
        pause(hold).await;
    }
    // Taken before the transaction, as a purchase takes it: no holder waits on a row of ours.
    let lock = match target.home {
        Home::Row => {
            life.lock_for_return(target.product_id, target.strategy)
                .await?
        }
        _ => None,
    };
    let mut tx = life.pool.begin().await?;
    order_life::give_back_quota(tx.conn(), target.key(), target.quantity).await?;
    match target.home {
        Home::Buckets => {
            order_life::give_back_to_bucket(
                tx.conn(),
                target.product_id,
                target.order_id,
                target.quantity,
            )
            .await?
        }
        _ => {
            let units = i64::from(target.quantity);
            order_life::give_back_to_row(tx.conn(), target.product_id, units).await?
        }
    }
    let changed = match check {
        Check::Conditional => {
            let changed =
                order_life::end(tx.conn(), target.order_id, end.done(), end == End::Expire).await?;
            if changed {
                // Everything changed and nothing committed: a crash here rolls it all back.
                pause(hold).await;
            }
            changed
        }
        Check::Unchecked => {
            order_life::force_state(tx.conn(), target.order_id, end.done()).await?;
            true
        }
    };
    if !changed {
        tx.rollback().await?;
        if let Some(lock) = lock {
            lock.release(&life.metrics).await;
        }
        return Ok(false);
    }
    commit(life, tx, lock).await?;
    life.stock_back(target.product_id);
    Ok(true)
}

/// The order to `expiring` / `cancelling` and the buyer's count given back, committed, without
/// the seller's lock; then the units back to the row under it ([`finish_in_row`]).
async fn end_in_two_steps(
    life: &Lifecycle,
    target: &Target,
    end: End,
    hold: Option<Duration>,
) -> Result<bool, LifeError> {
    let mut tx = life.pool.begin().await?;
    order_life::give_back_quota(tx.conn(), target.key(), target.quantity).await?;
    let on_the_way = end.on_the_way();
    if !order_life::end(tx.conn(), target.order_id, on_the_way, end == End::Expire).await? {
        tx.rollback().await?;
        return Ok(false);
    }
    tx.commit().await?;
    // The window a crash leaves the order on its way, for a sweep to finish after the grace.
    pause(hold).await;
    let order = [(target.order_id, target.quantity)];
    finish_in_row(life, target.product_id, target.strategy, &order, on_the_way).await?;
    Ok(true)
}

/// Expires those of `targets` (due orders of `product`, whose stock is in this database — its
/// row, all sold through `strategy`, or its buckets) still reserved and due, in one
/// transaction: one write of the hot row for the whole batch instead of one per order, so the
/// purchases queued on that row wait behind one return, not a batch of them; for buckets, one
/// write of each bucket it gives units to ([`order_life::expire`]). How many it
/// expired.
///
/// Units an unfenced locked strategy sold go back under its lock (see [`super`]), in two
/// steps so that the lock covers only the write that needs it: the orders to `expiring` and
/// the buyers' counts back first, without the lock; then the orders' arrival, and under the
/// lock the row's write ([`finish_in_row`]). Purchases waiting for the lock wait behind one
/// write and a commit, not the batch's ten round trips and hundreds of rows. A crash between
/// the steps leaves the orders `expiring`, for any sweep to finish after the return grace, as
/// the Redis counter's are.
pub(super) async fn expire_in_database(
    life: &Lifecycle,
    product: u64,
    strategy: Option<Strategy>,
    targets: &[Target],
) -> Result<u64, LifeError> {
    let orders: Vec<(u64, &str)> = (targets.iter())
        .map(|t| (t.order_id, t.user_id.as_str()))
        .collect();
    let two_steps = targets.first().is_some_and(Target::returns_in_two_steps);
    let mut conn = life.pool.acquire().await?;
    let mut tx = order_life::begin_batch(&mut conn).await?;
    if !two_steps {
        let home = targets.first().map_or(Home::Row, |t| t.home);
        let expired = order_life::expire(tx.conn(), product, &orders, home).await?;
        tx.commit().await?;
        drop(conn);
        life.metrics.orders_expired(expired);
        if expired > 0 {
            life.stock_back(product);
        }
        return Ok(expired);
    }
    let leaving = order_life::start_expiring_in_row(tx.conn(), product, &orders).await?;
    tx.commit().await?;
    drop(conn);
    let expired = leaving.len() as u64;
    life.metrics.orders_expired(expired);
    match finish_in_row(life, product, strategy, &leaving, OrderState::Expiring).await {
        Err(LifeError::Lock(e)) => {
            tracing::warn!(product, error = %e,
                "could not take the lock these returns hold; a sweep finishes them after the grace");
        }
        finished => finished?,
    }
    Ok(expired)
}

/// Brings home the units of those of `orders` (ids and quantities; of `product`, whose stock
/// is its row, sold through `strategy`) still `on_the_way`: the second step of a return in
/// two. Safe to run again, by anyone, at any time.
///
/// The orders arrive first, in the transaction, and only then is the strategy's lock taken, for
/// the row's write and the commit alone: every purchase queued for the lock waits for as long
/// as a return holds it, and moving a batch's orders (a hundred rows and their index entries)
/// under it was most of that hold. The lock still covers all that needs it, since a holder's
/// read and absolute write concern the row, not the orders, and the orders' move and the row's
/// write commit together. While it waits for the lock, the transaction holds the batch's order
/// rows, which no holder of the lock writes: a purchase inserts its own order, and a retry of
/// one of these orders' request ids finds its key unchanged (a change of state does not lock
/// the purchase key's entry). One chain of waits remains, rare and bounded: another
/// instance's sweep that read the same orders as still due before this one moved them waits
/// for them holding their buyers' counts, and a new purchase by one of those buyers, holding
/// the lock, waits for that count; the lock's wait budget ends it (InnoDB's deadlock check,
/// at once, for the locks that are rows of this database), the return rolling back to be
/// finished by a later round. A batch that finds every order already arrived (another sweep
/// finished them) takes no lock at all.
pub(super) async fn finish_in_row(
    life: &Lifecycle,
    product: u64,
    strategy: Option<Strategy>,
    orders: &[(u64, u32)],
    on_the_way: OrderState,
) -> Result<(), LifeError> {
    if orders.is_empty() {
        return Ok(());
    }
    let mut conn = life.pool.acquire().await?;
    let mut tx = order_life::begin_batch(&mut conn).await?;
    let (arrived, units) = order_life::arrive(tx.conn(), orders, on_the_way).await?;
    if arrived == 0 {
        tx.commit().await?;
        return Ok(());
    }
    let lock = match life.lock_for_return(product, strategy).await {
        Ok(lock) => lock,
        Err(e) => {
            // Not granted: the orders stay on their way, for a later round; their rows are
            // let go now, not when the connection is next used.
            tx.rollback().await?;
            return Err(e);
        }
    };
    order_life::give_back_to_row(tx.conn(), product, units).await?;
    commit(life, tx, lock).await?;
    drop(conn);
    life.stock_back(product);
    Ok(())
}

/// The state change to `expiring` / `cancelling`, committed; then the give-back script; then
/// the final state.
async fn end_in_redis(
    life: &Lifecycle,
    target: &Target,
    end: End,
    check: Check,
    hold: Option<Duration>,
) -> Result<bool, LifeError> {
    let mut conn = life.pool.acquire().await?;
    let changed = match check {
        Check::Conditional => {
            order_life::end(
                conn.conn(),
                target.order_id,
                end.on_the_way(),
                end == End::Expire,
            )
            .await?
        }
        Check::Unchecked => {
            let state = order_life::read_state(conn.conn(), target.order_id).await?;
            if state != Some(OrderState::Reserved) {
                return Ok(false);
            }
            order_life::force_state(conn.conn(), target.order_id, end.on_the_way()).await?;
            true
        }
    };
    drop(conn);
    if !changed {
        return Ok(false);
    }
    // The order left `reserved` and its units are not home yet: the window a crash turns into
    // stranded units, which the sweep or `reconcile` finishes.
    pause(hold).await;
    finish_return(life, target, end.on_the_way()).await?;
    Ok(true)
}

/// Expires those of `targets` (due orders of `product`, whose stock is in Redis) still
/// reserved and due, as [`end_in_redis`] ends one but a batch at each step: one transaction
/// moves them all to `expiring`, one script gives back each one's charge (once, by its own
/// record), one update records their arrival. How many it expired.
pub(super) async fn expire_from_redis(
    life: &Lifecycle,
    product: u64,
    targets: &[Target],
) -> Result<u64, LifeError> {
    let ids: Vec<u64> = targets.iter().map(|t| t.order_id).collect();
    let mut conn = life.pool.acquire().await?;
    let mut tx = order_life::begin_batch(&mut conn).await?;
    let leaving = order_life::start_expiring(tx.conn(), &ids).await?;
    tx.commit().await?;
    drop(conn);
    let leaving: Vec<&Target> = (targets.iter())
        .filter(|t| leaving.contains(&t.order_id))
        .collect();
    // Left `reserved` with their units not home yet: a crash from here on leaves them
    // `expiring`, for a sweep to finish after the return grace.
    finish_returns(life, product, &leaving, OrderState::Expiring).await?;
    let expired = leaving.len() as u64;
    life.metrics.orders_expired(expired);
    Ok(expired)
}

/// Gives the units of an order in `expiring` / `cancelling` back to the Redis counter (once,
/// by its charge record) and records their arrival. Safe to run again, by anyone, at any time.
pub(super) async fn finish_return(
    life: &Lifecycle,
    target: &Target,
    on_the_way: OrderState,
) -> Result<(), LifeError> {
    finish_returns(life, target.product_id, &[target], on_the_way).await
}

/// [`finish_return`] for several orders of `product`, all in `on_the_way`: one script, one
/// update.
pub(super) async fn finish_returns(
    life: &Lifecycle,
    product: u64,
    targets: &[&Target],
    on_the_way: OrderState,
) -> Result<(), LifeError> {
    if targets.is_empty() {
        return Ok(());
    }
    let redis = life.redis.as_ref().ok_or(RedisStockError::NotConfigured)?;
    let fields: Vec<String> = (targets.iter())
        .map(|t| charge::field(&t.user_id, &t.request_id))
        .collect();
    // Each order's own charge (whichever attempt made it): its purchase key is the order's, so
    // no retry charges the purchase anew. A split product's in each buyer's home part.
    let given: i64 = match targets[0].home {
        Home::RedisSplit => redis.give_back_all_split(product, &fields).await?,
        _ => {
            (redis.invoke(&redis.give_back_all(product, fields.iter().map(String::as_str)))).await?
        }
    };
    let orders: Vec<(u64, u32)> = (targets.iter()).map(|t| (t.order_id, t.quantity)).collect();
    let mut conn = life.pool.acquire().await?;
    order_life::arrive(conn.conn(), &orders, on_the_way).await?;
    if given > 0 && life.forget_on_return {
        // The script announced it to every instance; this one forgets without waiting for it.
        life.memory.restocked(product);
    }
    Ok(())
}

/// Commits a return's transaction, under `lock` if it holds one.
async fn commit(
    life: &Lifecycle,
    tx: Tx<'_>,
    lock: Option<HeldForReturn>,
) -> Result<(), sqlx::Error> {
    match lock {
        Some(lock) => lock.commit(tx, &life.metrics).await,
        None => tx.commit().await,
    }
}

async fn pause(hold: Option<Duration>) {
    if let Some(pause) = hold {
        tokio::time::sleep(pause).await;
    }
}
