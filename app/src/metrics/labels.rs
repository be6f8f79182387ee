//! The labels the counters are kept by: how a purchase ended (`outcome`) and the parts of its
//! time (`stage`).

use crate::api::ErrorCode;

/// A part of a purchase's time the service times: the `stage` label of
/// `seckill_purchase_stage_seconds`. Each purchase that went through a stage adds its time
/// there; a stage's mean is over those purchases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From the request's headers to a place among the purchases in flight: the body, the
    /// buyer's token, the product's memory, a first-come place and its wait for room, the
    /// admission limiter.
    Admission,
    /// Inside the strategy, all of it (the stages below are parts of it).
    Strategy,
    /// Waiting for the strategy's lock.
    LockWait,
    /// Waiting in `batched`'s line for its batch to start committing.
    Queued,
    /// `batched`: the batch's transaction, from its start to its answer.
    Batch,
    /// `batched`: the batch's look-up of its purchases that already have an order, a part of
    /// [`Stage::Batch`].
    Lookup,
    /// `batched`: the batch's conditional `UPDATE` of the stock (and the `SELECT … FOR UPDATE`
    /// before a second one, when not everything fitted), a part of [`Stage::Batch`]: it waits
    /// for the product's row while another instance's batch holds it, until that one commits.
    StockUpdate,
    /// `batched`: the batch's multi-row `INSERT` of its orders, a part of [`Stage::Batch`].
    OrderInsert,
    /// `batched`: the batch's `COMMIT` alone, a part of [`Stage::Batch`] — its round trip, in
    /// which the database flushes its log, and which every purchase of the batch waits for
    /// together.
    Commit,
    /// The Redis script's round trip (`redis-lua`, `redis-lua-stream`).
    Script,
    /// `redis-lua`: writing the order to the database after the Redis deduction.
    OrderWrite,
}

impl Stage {
    pub const ALL: [Stage; 11] = [
        Stage::Admission,
        Stage::Strategy,
        Stage::LockWait,
        Stage::Queued,
        Stage::Batch,
        Stage::Lookup,
        Stage::StockUpdate,
        Stage::OrderInsert,
        Stage::Commit,
        Stage::Script,
        Stage::OrderWrite,
    ];
    pub const COUNT: usize = Stage::ALL.len();

    /// The stage this one is a part of, if any: its time is counted in both.
    pub fn part_of(self) -> Option<Stage> {
        match self {
            Stage::Lookup | Stage::StockUpdate | Stage::OrderInsert | Stage::Commit => {
                Some(Stage::Batch)
            }
            _ => None,
        }
    }

    /// The stage the service names `name`.
    pub fn named(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Stage::Admission => "admission",
            Stage::Strategy => "strategy",
            Stage::LockWait => "lock_wait",
            Stage::Queued => "queued",
            Stage::Batch => "batch",
            Stage::Lookup => "lookup",
            Stage::StockUpdate => "stock_update",
            Stage::OrderInsert => "order_insert",
            Stage::Commit => "commit",
            Stage::Script => "script",
            Stage::OrderWrite => "order_write",
        }
    }
}

/// How a purchase request ended: the `outcome` label of `seckill_purchases_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Replayed,
    /// `202`: taken, its order queued (`redis-lua-stream`).
    Accepted,
    Refused(ErrorCode),
}

impl Outcome {
    pub(super) const SUCCESSES: usize = 3;
    pub(super) const COUNT: usize = Outcome::SUCCESSES + ErrorCode::ALL.len();

    /// The label's value: `created`, `replayed`, `accepted`, or the error code.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Replayed => "replayed",
            Outcome::Accepted => "accepted",
            Outcome::Refused(code) => code.name(),
        }
    }

    /// Its slot among a strategy's counts ([`ErrorCode::ALL`] lists the codes in their order).
    pub(super) fn index(self) -> usize {
        match self {
            Outcome::Created => 0,
            Outcome::Replayed => 1,
            Outcome::Accepted => 2,
            Outcome::Refused(code) => Outcome::SUCCESSES + code as usize,
        }
    }

    pub(super) fn all() -> impl Iterator<Item = Outcome> {
        [Outcome::Created, Outcome::Replayed, Outcome::Accepted]
            .into_iter()
            .chain(ErrorCode::ALL.iter().map(|&code| Outcome::Refused(code)))
    }
}

impl From<ErrorCode> for Outcome {
    fn from(code: ErrorCode) -> Outcome {
        Outcome::Refused(code)
    }
}
