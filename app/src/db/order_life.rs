//! The statements of an order's life after its insert: paying, ending (expiry or cancellation)
//! and giving the units back to a home in this database (the sweep's look-ups are in
//! [`super::due`]).
//!
//! **Each transition is one conditional `UPDATE`.** The row's current state is in its `WHERE`
//! (`state = 'reserved'`, and for a payment `pay_by > NOW(6)`), so of two transitions racing
//! on one order — a payment and an expiry, a cancellation and an expiry, two cancellations —
//! InnoDB's row lock lets one change the row and the other find 0 rows to change, whatever the
//! timing: the second learns it lost and changes nothing. The clock is the database's
//! (`NOW(6)`), one clock for every instance.
//!
//! The checked-then-written variants ([`read_state`] then [`force_state`]) exist for the fault
//! scenarios only: a read and a write with time between them, which two racers both pass.

use std::collections::BTreeMap;

use super::engine::{Conn, Db, Engines, Pooled, Sql, Tx, Whole, each_engine, execute, signed, sql};

use super::orders::{OrderState, PurchaseKey};
use super::quota;
use crate::api::Home;

/// `reserved` → `paid`, if the order is reserved and its deadline has not passed: whether it
/// changed.
pub async fn pay(db: &Db, order_id: u64) -> Result<bool, sqlx::Error> {
    const PAY: Sql = sql!(
        mysql: "UPDATE orders SET state = 'paid', ended_at = NOW(6) \
                WHERE id = ? AND state = 'reserved' AND pay_by > NOW(6)",
        postgres: "UPDATE orders SET state = 'paid', ended_at = clock_timestamp() \
                   WHERE id = ? AND state = 'reserved' AND pay_by > clock_timestamp()",
    );
    let paid = execute!(db.pool(), PAY, signed(order_id))?;
    Ok(paid == 1)
}

/// `reserved` → `to`, in `conn`'s transaction; `due_only`: only if its deadline has passed
/// (an expiry). Whether it changed.
pub async fn end(
    conn: Conn<'_>,
    order_id: u64,
    to: OrderState,
    due_only: bool,
) -> Result<bool, sqlx::Error> {
    let ended = each_engine!(conn, |c, e| {
        let now = e.now();
        let returned = returned_at(e.now(), to);
        let due = match due_only {
            true => format!(" AND pay_by <= {now}"),
            false => String::new(),
        };
        let sql = format!(
            "UPDATE orders SET state = ?, ended_at = {now}, returned_at = {returned} \
             WHERE id = ? AND state = 'reserved'{due}"
        );
        sqlx::query(e.text(sql))
            .bind(to.name())
            .bind(signed(order_id))
            .execute(c)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(ended == 1)
}

/// The order's state, read without a lock (the unchecked variants' "check").
pub async fn read_state(conn: Conn<'_>, order_id: u64) -> Result<Option<OrderState>, sqlx::Error> {
    const STATE: Sql = sql!("SELECT state FROM orders WHERE id = ?");
    let state: Option<String> = each_engine!(conn, |c, e| sqlx::query_scalar(e.sql(STATE))
        .bind(signed(order_id))
        .fetch_optional(c)
        .await)?;
    Ok(state.map(|s| OrderState::of(&s)))
}

/// Writes the order's state whatever it is now (the unchecked variants' "act").
pub async fn force_state(conn: Conn<'_>, order_id: u64, to: OrderState) -> Result<(), sqlx::Error> {
    const FORCE: Sql = sql!(
        mysql: "UPDATE orders SET state = ?, ended_at = NOW(6) WHERE id = ?",
        postgres: "UPDATE orders SET state = ?, ended_at = clock_timestamp() WHERE id = ?",
    );
    execute!(conn, FORCE, to.name(), signed(order_id)).map(|_| ())
}

/// Gives `units` back to the buyer's per-user count of the product (homes in this database:
/// the count the purchases claim against, see [`super::quota`]).
pub async fn give_back_quota(
    conn: Conn<'_>,
    key: PurchaseKey<'_>,
    units: u32,
) -> Result<(), sqlx::Error> {
    const BACK: Sql = sql!(
        "UPDATE purchase_quota SET units = GREATEST(units - ?, 0) \
         WHERE product_id = ? AND user_id = ?"
    );
    execute!(
        conn,
        BACK,
        i64::from(units),
        signed(key.product_id),
        key.user_id
    )
    .map(|_| ())
}

/// Puts `units` back in the product row, bumping its version like every stock write (so an
/// `optimistic` or fenced buyer who read before it reads again).
pub async fn give_back_to_row(
    conn: Conn<'_>,
    product_id: u64,
    units: i64,
) -> Result<(), sqlx::Error> {
    const BACK: Sql =
        sql!("UPDATE products SET stock = stock + ?, version = version + 1 WHERE id = ?");
    execute!(conn, BACK, units, signed(product_id)).map(|_| ())
}

/// Puts `units` back in one of the product's buckets, chosen by the order id (returns spread
/// over the buckets as purchases do; one row locked).
pub async fn give_back_to_bucket(
    conn: Conn<'_>,
    product_id: u64,
    order_id: u64,
    units: u32,
) -> Result<(), sqlx::Error> {
    give_back_to_buckets(conn, product_id, &[(order_id, units)]).await
}

/// Gives each of `orders` (ids and quantities, of product `product_id`, whose stock is in
/// buckets) back to its bucket (its id modulo the product's buckets), in `conn`'s transaction:
/// one write per bucket, in the buckets' order, so that two such writers never wait on each
/// other in a cycle. Then bumps the product row's version, last, so that its lock is held only
/// to the commit: the version tells a sold-out product's memory that units came back and may
/// have sold again (see [`crate::inventory::left_and_mark`]).
async fn give_back_to_buckets(
    mut conn: Conn<'_>,
    product_id: u64,
    orders: &[(u64, u32)],
) -> Result<(), sqlx::Error> {
    const COUNT: Sql = sql!("SELECT COUNT(*) FROM stock_buckets WHERE product_id = ?");
    const BACK: Sql =
        sql!("UPDATE stock_buckets SET stock = stock + ? WHERE product_id = ? AND bucket = ?");
    const BUMP: Sql = sql!("UPDATE products SET version = version + 1 WHERE id = ?");
    let buckets: i64 = each_engine!(conn.reborrow(), |c, e| sqlx::query_scalar(e.sql(COUNT))
        .bind(signed(product_id))
        .fetch_one(c)
        .await)?;
    let buckets = u64::try_from(buckets.max(1)).unwrap_or(1);
    let mut units: BTreeMap<u64, i64> = BTreeMap::new();
    for (order_id, quantity) in orders {
        *units.entry(order_id % buckets).or_default() += i64::from(*quantity);
    }
    for (bucket, units) in units {
        execute!(
            conn.reborrow(),
            BACK,
            units,
            signed(product_id),
            signed(bucket)
        )?;
    }
    execute!(conn, BUMP, signed(product_id)).map(|_| ())
}

/// Begins on `conn` the transaction of a batch of expiries ([`expire`],
/// [`start_expiring`]), at `READ COMMITTED`: its locking reads lock the rows they find and no
/// gap. At InnoDB's default, `REPEATABLE READ`, the read that locks a batch of a few hundred
/// orders by their ids scans the primary key with next-key locks, up to the end of the table
/// where every purchase inserts its order: every purchase of every product would wait for the
/// batch to commit. The batch decides nothing on rows it has not locked, so the weaker level
/// changes no outcome.
///
/// PostgreSQL's default is `READ COMMITTED` already, and it locks no gaps at any level.
pub async fn begin_batch(conn: &mut Pooled) -> Result<Tx<'_>, sqlx::Error> {
    if let Engines::MySql(c) = conn {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut **c)
            .await?;
    }
    conn.begin().await
}

/// Expires, in `conn`'s transaction (see [`begin_batch`]), those of `orders` (all of product
/// `product_id`, whose stock is in this database, at `home`: its row, or its buckets) that are
/// still reserved and due, and gives their units back to their buyers' counts and to the stock:
/// how many orders it expired.
///
/// The stock is written last, just before the commit. A row is the one every purchase of the
/// product queues on: the batch gives it back its units in one write and holds it for one
/// statement, not for the five it takes to lock, end and count its orders (held from the first,
/// as a purchase holds it, the batch stalled the product's whole queue for as long as it
/// worked). Buckets get one write each that the batch gives units to. No wait can close a
/// cycle: the buyers' count rows come first, by their keys ([`quota::lock_buyers`]), as a
/// purchase's and a cancellation's do, so a purchase, cancellation or other batch that ends one
/// of these orders, or buys for one of these buyers, queues there before either holds anything
/// the other wants; the orders' locks are by primary key at `READ COMMITTED`, record locks
/// only, which a purchase's insert of its own order does not wait on. The orders' locks decide
/// which are still due, so a payment that got to one first leaves it out, and one that comes
/// later finds it expired.
pub async fn expire(
    mut conn: Conn<'_>,
    product_id: u64,
    orders: &[(u64, &str)],
    home: Home,
) -> Result<u64, sqlx::Error> {
    let expired =
        end_due_with_quota(conn.reborrow(), product_id, orders, OrderState::Expired).await?;
    if expired.is_empty() {
        return Ok(0);
    }
    match home {
        Home::Buckets => give_back_to_buckets(conn, product_id, &expired).await?,
        _ => {
            let units: i64 = expired.iter().map(|(_, q)| i64::from(*q)).sum();
            give_back_to_row(conn, product_id, units).await?
        }
    }
    Ok(expired.len() as u64)
}

/// The first step of a return in two (see [`arrive`]): moves those of `orders` (all
/// of product `product_id`, whose stock is its row) that are still reserved and due to
/// `expiring` and gives their buyers' counts back, in `conn`'s transaction (see
/// [`begin_batch`]), locked as [`expire`] locks them; the row is not touched. Their
/// ids and quantities.
pub async fn start_expiring_in_row(
    conn: Conn<'_>,
    product_id: u64,
    orders: &[(u64, &str)],
) -> Result<Vec<(u64, u32)>, sqlx::Error> {
    end_due_with_quota(conn, product_id, orders, OrderState::Expiring).await
}

/// Ends those of `orders` still reserved and due in `to`, and gives their buyers' counts back:
/// their ids and quantities.
async fn end_due_with_quota(
    mut conn: Conn<'_>,
    product_id: u64,
    orders: &[(u64, &str)],
    to: OrderState,
) -> Result<Vec<(u64, u32)>, sqlx::Error> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    let users: Vec<&str> = orders.iter().map(|(_, user)| *user).collect();
    quota::lock_buyers(conn.reborrow(), product_id, &users).await?;
    let due = lock_still_due(conn.reborrow(), orders.iter().map(|(id, _)| *id)).await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    end_all(conn.reborrow(), due.iter().map(|(id, _, _)| *id), to).await?;
    let mut per_user: BTreeMap<&str, i64> = BTreeMap::new();
    for (_, user, quantity) in &due {
        *per_user.entry(user).or_default() += i64::from(*quantity);
    }
    quota::give_back(conn, product_id, &per_user).await?;
    Ok(due.into_iter().map(|(id, _, q)| (id, q)).collect())
}

/// The orders' half of a return's last step: those of `orders` (ids and quantities) still
/// `on_the_way` move to where it ends (`expiring` to `expired`, `cancelling` to `cancelled`),
/// on `conn` (in its
/// transaction, if it is in one: see [`begin_batch`]). How many orders arrived, and their
/// units: fewer than `orders` when another sweep finished some first. A home in this database
/// (the row) is given those units in the same transaction before it commits
/// ([`give_back_to_row`]); a home outside it (the Redis counter) has them back already, and
/// this records that they arrived.
///
/// The `state = on_the_way` in each `UPDATE` is the once-only token: of two finishers, the row
/// locks let one move an order and the other find it moved, and each gives back only the units
/// of the orders it moved, counted per quantity from the rows each statement changed.
pub async fn arrive(
    mut conn: Conn<'_>,
    orders: &[(u64, u32)],
    on_the_way: OrderState,
) -> Result<(u64, i64), sqlx::Error> {
    let mut by_quantity: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (id, quantity) in orders {
        by_quantity.entry(*quantity).or_default().push(*id);
    }
    let (mut arrived, mut units) = (0, 0);
    for (quantity, ids) in by_quantity {
        let changed = each_engine!(conn.reborrow(), |c, e| {
            let mut moved = e.builder("UPDATE orders SET state = ");
            moved
                .push_bind(arrival(on_the_way).name())
                .push(", returned_at = ")
                .push(e.now())
                .push(" WHERE state = ")
                .push_bind(on_the_way.name())
                .push(" AND quantity = ")
                .push_bind(i64::from(quantity))
                .push(" AND id IN (");
            let mut list = moved.separated(", ");
            for id in &ids {
                list.push_bind(signed(*id));
            }
            moved.push(")");
            moved
                .build()
                .execute(c)
                .await
                .map(|done| done.rows_affected())
        })?;
        arrived += changed;
        units += i64::try_from(changed).unwrap_or(i64::MAX) * i64::from(quantity);
    }
    Ok((arrived, units))
}

/// The state an order on its way (`expiring`, `cancelling`) ends in once its units are home.
fn arrival(on_the_way: OrderState) -> OrderState {
    match on_the_way {
        OrderState::Cancelling => OrderState::Cancelled,
        _ => OrderState::Expired,
    }
}

/// Moves those of `orders` that are still reserved and due to `expiring`, in `conn`'s
/// transaction (see [`begin_batch`]), and says which: the first step of a batch of expiries
/// whose units go back to a home outside this database (the Redis counter). The orders' locks
/// decide, as for [`expire`]: a payment or cancellation that got to one first leaves
/// it out, one that comes later finds it `expiring`.
pub async fn start_expiring(mut conn: Conn<'_>, orders: &[u64]) -> Result<Vec<u64>, sqlx::Error> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    let due: Vec<u64> = (lock_still_due(conn.reborrow(), orders.iter().copied())
        .await?
        .into_iter())
    .map(|(id, _, _)| id)
    .collect();
    if !due.is_empty() {
        end_all(conn, due.iter().copied(), OrderState::Expiring).await?;
    }
    Ok(due)
}

/// Locks those of `orders` that are still reserved and due, in `conn`'s transaction: their
/// ids, buyers and quantities. By the primary key: the orders' other indexes are where
/// purchases insert theirs (MariaDB is told so; PostgreSQL takes the key for ids by itself).
async fn lock_still_due(
    conn: Conn<'_>,
    orders: impl IntoIterator<Item = u64>,
) -> Result<Vec<(u64, String, u32)>, sqlx::Error> {
    const STILL_DUE: Sql = Sql {
        mysql: "SELECT id, user_id, quantity FROM orders FORCE INDEX (PRIMARY) \
                WHERE state = 'reserved' AND pay_by <= NOW(6) AND id IN (",
        postgres: "SELECT id, user_id, quantity FROM orders \
                   WHERE state = 'reserved' AND pay_by <= clock_timestamp() AND id IN (",
    };
    let rows: Vec<(Whole, String, Whole)> = each_engine!(conn, |c, e| {
        let mut still_due = e.builder(e.sql(STILL_DUE));
        let mut list = still_due.separated(", ");
        for id in orders {
            list.push_bind(signed(id));
        }
        still_due.push(") FOR UPDATE");
        still_due.build_query_as().fetch_all(c).await
    })?;
    rows.into_iter()
        .map(|(id, user, quantity)| Ok((id.get()?, user, quantity.get()?)))
        .collect()
}

/// `orders` (locked by this transaction, reserved) → `to`, as [`end`] moves one.
async fn end_all(
    conn: Conn<'_>,
    orders: impl IntoIterator<Item = u64>,
    to: OrderState,
) -> Result<(), sqlx::Error> {
    each_engine!(conn, |c, e| {
        let mut end = e.builder("UPDATE orders SET state = ");
        end.push_bind(to.name())
            .push(", ended_at = ")
            .push(e.now())
            .push(", returned_at = ")
            .push(returned_at(e.now(), to))
            .push(" WHERE id IN (");
        let mut list = end.separated(", ");
        for id in orders {
            list.push_bind(signed(id));
        }
        end.push(")");
        end.build().execute(c).await.map(|_| ())
    })
}

/// What an order's `returned_at` becomes when it ends in `to`: `now` if its units are home with
/// the change, else not yet.
fn returned_at(now: &'static str, to: OrderState) -> &'static str {
    match to {
        OrderState::Expired | OrderState::Cancelled => now,
        _ => "NULL",
    }
}
