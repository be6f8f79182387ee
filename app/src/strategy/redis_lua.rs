//! `redis-lua`: the live stock counter is in Redis; one Lua script checks it, decrements it and
//! records the request id, then the order is inserted in MariaDB.
//!
//! **Safe** (never oversells). Redis runs a script atomically, so "is there stock?" and "take
//! it" are one step, as in `conditional`, but on a counter that is not a database row: no row
//! lock, no transaction, tens of thousands of decisions per second on one core. What it gives
//! up is the single transaction: the deduction and the order are two writes in two systems.
//!
//! * The insert fails (database down, timeout, a request id already used elsewhere): a
//!   compensating script gives the units back — once, keyed by the request id record it
//!   deletes — and the answer is `503`. Nothing is lost, nothing is sold twice.
//! * The process dies between the script and the insert (the `X-Seckill-Hold-Ms` pause sits
//!   exactly there): the units are gone from the counter and no order names them. That is
//!   **undersell** ("less-sell"), the failure this design trades for its speed; `POST
//!   /api/products/{id}/reconcile` finds and repairs it.
//! * The `COMMIT`'s answer is lost: the order may exist, so the units are *not* given back
//!   (giving them back could oversell); at worst it is undersell, repaired the same way.
//! * A replayed click finds its purchase recorded and is not charged again; it is answered
//!   with the original order once that order is in the database. The record names the
//!   purchase as the database does (product, buyer, request id, byte for byte) and keeps its
//!   terms, so a reuse with another quantity or strategy is a conflict. An order that expired
//!   or was cancelled leaves its record marked ended when its units go back, so the click sent
//!   again after that is answered with the ended order too, and takes nothing (see
//!   [`charge::Afterwards`]).
//! * The script's answer is lost (a timeout, a broken connection): it may have run, or may
//!   still run (sent, stuck in a socket buffer). A second script settles it: if the purchase
//!   is charged its units are given back, else a tombstone record makes the lost script charge
//!   nothing should it arrive. `503`, nothing taken.
//! * `reconcile` while the purchase sits between the script and the insert: a charge younger
//!   than the grace is left alone; an older one is fenced out (its purchase voided in the
//!   database) before its units go back, so this purchase's insert then fails and it answers
//!   `purchase_voided` instead of selling units that are on sale again.
//! * A Redis failover to a replica that missed the last decrements **oversells**: the promoted
//!   replica sells those units again (scenario `redis-failover-stock`). With
//!   `--redis-wait-replicas 1` every deduction is followed by `WAIT 1`; one no replica
//!   acknowledged in time is given back and answered `503`, so no order rests on a deduction
//!   a failover can lose. The price: a round trip to the replica per purchase, and no sales at
//!   all while every replica is unreachable. `WAIT` is not consensus: a replica that
//!   acknowledged and then restarts without persistence still loses it.
//! * Redis restarts without its data: the counter, the charge records and the buyers' counts
//!   are gone, and read as they stand would make a buyer at her limit buy again. The take finds
//!   the product's marker gone and refuses the purchase `503`, taking nothing, until
//!   `reconcile` rebuilds them from the orders ([`crate::redis_stock::epoch`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Db;

use super::outcome::place;
use super::{Deps, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};
use crate::db::{orders, products};
use crate::metrics::Stage;
use crate::redis_stock::charge;
use crate::redis_stock::scripts::{
    CONFLICT, DUPLICATE, LIMIT_REACHED, LOST, NO_COUNTER, SOLD_OUT, STREAM_FULL, TAKE,
};
use crate::redis_stock::{Attempt, CounterKeys, RedisStock, RedisStockError, Replicated, Settled};

/// Attempts to give units back, and the pause between them.
const GIVE_BACK_TRIES: usize = 5;
const GIVE_BACK_PAUSE: Duration = Duration::from_millis(100);

/// How often a replayed click looks for its original order while that is being placed: first
/// after this pause, then twice as long each time, up to the second.
const REPLAY_POLL: Duration = Duration::from_millis(10);
const REPLAY_POLL_MAX: Duration = Duration::from_millis(200);

pub struct RedisLua {
    pub(super) pool: Db,
    pub(super) redis: Option<RedisStock>,
    /// How long a replayed click waits for its original order before answering `busy`.
    replay_wait: Duration,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(RedisLua::new(deps))
}

impl RedisLua {
    pub(super) fn new(deps: &Deps) -> RedisLua {
        RedisLua {
            pool: deps.pool.clone(),
            redis: deps.redis.clone(),
            replay_wait: deps.lock_wait,
        }
    }
}

impl StockStrategy for RedisLua {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let redis = configured(&self.redis)?;
            let counter = redis.keys().counter(purchase.product_id);
            let taken = take_at(redis, purchase, &counter).await?;
            refused(&self.pool, purchase, taken.left).await?;
            self.place_taken(redis, purchase, &counter, taken).await
        })
    }
}

/// What a take script answered on a counter, its answer not lost.
pub(crate) struct Taken {
    /// The units left, or a refusal ([`refused`]).
    pub left: i64,
    attempt: Attempt,
    replicated: Replicated,
}

/// Runs [`TAKE`] for `purchase` on the counter `keys`. A script whose answer was lost is
/// settled, and what it took given back: that is an error, with nothing taken.
pub(crate) async fn take_at(
    redis: &RedisStock,
    purchase: &Purchase,
    keys: &CounterKeys,
) -> Result<Taken, PurchaseError> {
    let field = charge::field(&purchase.user_id, &purchase.request_id);
    let attempt = Attempt::new();
    let script = Instant::now();
    let taken = redis
        .take(
            &keys.stock,
            TAKE.key(&keys.stock)
                .key(&keys.requests)
                .key(&keys.buyers)
                .key(&keys.limit)
                .key(&keys.epoch)
                .key(&keys.charges)
                .arg(&field)
                .arg(purchase.quantity)
                .arg(charge::terms(purchase.quantity, purchase.strategy.name()))
                .arg(attempt.name())
                .arg(purchase.redis_epoch),
        )
        .await;
    purchase.stats.time(Stage::Script, script.elapsed());
    match taken {
        Ok((left, replicated)) => Ok(Taken {
            left,
            attempt,
            replicated,
        }),
        // The script may have run and its answer been lost (a timeout, a broken
        // connection): settle it, and give back what it took, if it ran.
        Err(e) => {
            let why = unavailable(e);
            Err(
                match redis.settle_at(&keys.requests, &field, attempt).await {
                    Ok(Settled::Mine) => give_back(redis, purchase, keys, attempt, why).await,
                    // Another attempt's charge is that attempt's to keep or give back.
                    Ok(Settled::Other | Settled::NotMade) => why,
                    Err(unsettled) => {
                        tracing::warn!(request_id = %purchase.request_id, error = %unsettled,
                            "a lost deduction could not be settled: undersell until reconciled, if it was made");
                        why
                    }
                },
            )
        }
    }
}

impl RedisLua {
    /// After a take that was not refused: answers a duplicate with its original order, or
    /// places the order of the units taken from the counter `keys`, giving them back if it
    /// cannot be written.
    pub(crate) async fn place_taken(
        &self,
        redis: &RedisStock,
        purchase: &Purchase,
        keys: &CounterKeys,
        taken: Taken,
    ) -> Result<Purchased, PurchaseError> {
        let Taken {
            left,
            attempt,
            replicated,
        } = taken;
        if left == DUPLICATE {
            return Err(self.original_order(purchase).await);
        }
        if let Replicated::Short { acked, wanted } = replicated {
            // A failover now would lose the deduction: no order may rest on it.
            let why = unavailable(RedisStockError::NotReplicated { acked, wanted });
            return Err(give_back(redis, purchase, keys, attempt, why).await);
        }
        // The units are taken and no order names them yet: the window a crash turns into
        // undersell.
        purchase.hold().await;
        let write = Instant::now();
        let tx = match self.pool.begin().await {
            Ok(tx) => tx,
            Err(e) => return Err(give_back(redis, purchase, keys, attempt, e.into()).await),
        };
        let placed = place(tx, purchase, None).await;
        purchase.stats.time(Stage::OrderWrite, write.elapsed());
        match placed {
            Ok(placed) => Ok(placed.into()),
            // The commit may have happened: keeping the units is undersell at worst.
            Err(unknown @ PurchaseError::OutcomeUnknown(_)) => Err(unknown),
            // A duplicate here is a purchase a reconciliation fenced out (voided): its
            // units go back once, by whichever of the two gets to its record first.
            Err(e) => Err(give_back(redis, purchase, keys, attempt, e).await),
        }
    }
}

impl RedisLua {
    /// Waits for the order of a purchase the counter already charged, then hands it to the
    /// caller's replay ([`PurchaseError::Duplicate`]); `busy` if it is still not placed.
    async fn original_order(&self, purchase: &Purchase) -> PurchaseError {
        let deadline = Instant::now() + self.replay_wait;
        let mut pause = REPLAY_POLL;
        loop {
            match orders::find(&self.pool, purchase.key()).await {
                Ok(Some(_)) => return PurchaseError::Duplicate,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(REPLAY_POLL_MAX);
                }
                Ok(None) => {
                    return PurchaseError::Busy(format!(
                        "request id `{}` was charged and its order is not placed yet",
                        purchase.request_id
                    ));
                }
                Err(e) => return e.into(),
            }
        }
    }
}

/// The Redis of Redis-held stock, or `backend_unavailable`.
pub(crate) fn configured(redis: &Option<RedisStock>) -> Result<&RedisStock, PurchaseError> {
    redis
        .as_ref()
        .ok_or_else(|| unavailable(RedisStockError::NotConfigured))
}

/// A failed Redis operation as a purchase error.
pub(crate) fn unavailable(e: RedisStockError) -> PurchaseError {
    match e.is_unavailable() {
        true => PurchaseError::Unavailable(Box::new(e)),
        false => PurchaseError::Internal(Box::new(e)),
    }
}

/// The refusals of the take scripts: the stock lost with Redis's data (refused until
/// `reconcile` rebuilds it), no counter (the product is unknown, or its stock lives in another
/// home: sold out here), too few units, the purchase charged with other terms, or (the
/// stream's script) too many orders waiting to be placed.
pub(crate) async fn refused(
    pool: &Db,
    purchase: &Purchase,
    taken: i64,
) -> Result<(), PurchaseError> {
    match taken {
        LOST => Err(PurchaseError::StockLost),
        SOLD_OUT => Err(PurchaseError::SoldOut),
        LIMIT_REACHED => Err(PurchaseError::LimitReached),
        // As many accepted orders as the service allows wait to be placed: the stream's bound
        // refuses the rest at once.
        STREAM_FULL => Err(PurchaseError::Overloaded),
        CONFLICT => Err(PurchaseError::Conflict(format!(
            "request id `{}` was already used by this buyer for a purchase of this product \
             with another quantity or strategy; use a new request id",
            purchase.request_id
        ))),
        NO_COUNTER => {
            let mut conn = pool.acquire().await?;
            Err(
                match products::exists(conn.conn(), purchase.product_id).await? {
                    true => PurchaseError::SoldOut,
                    false => PurchaseError::UnknownProduct,
                },
            )
        }
        _ => Ok(()),
    }
}

/// Gives back the units `attempt` charged after its order could not be written, and returns
/// `why` (a duplicate request id stays a duplicate, so the caller replays the original order).
async fn give_back(
    redis: &RedisStock,
    purchase: &Purchase,
    keys: &CounterKeys,
    attempt: Attempt,
    why: PurchaseError,
) -> PurchaseError {
    let field = charge::field(&purchase.user_id, &purchase.request_id);
    let name = attempt.name();
    // An insert refused as a duplicate met the purchase's order row (voided, or ended), which
    // no later attempt can replace: the record is marked ended. Otherwise no order of the
    // purchase was written, and its retry may buy.
    let afterwards = match why {
        PurchaseError::Duplicate => charge::Afterwards::Ended,
        _ => charge::Afterwards::Open,
    };
    let script = redis.give_back_at(keys, purchase.product_id, &field, Some(&name), afterwards);
    // The script gives back once (it replaces the charge it gives back by) and only this
    // attempt's charge, so it may be sent again — a connection that just broke (a failover)
    // reconnects meanwhile — and a copy that arrives late, after the buyer's retry charged
    // the purchase anew, gives nothing back.
    let mut given = redis.invoke::<i64>(&script).await;
    for _ in 1..GIVE_BACK_TRIES {
        match &given {
            Err(e) if e.is_unavailable() => {
                tokio::time::sleep(GIVE_BACK_PAUSE).await;
                given = redis.invoke::<i64>(&script).await;
            }
            _ => break,
        }
    }
    if let Err(e) = given {
        tracing::warn!(request_id = %purchase.request_id, error = %e,
            "units taken in Redis not given back: undersell until reconciled");
    }
    why
}
