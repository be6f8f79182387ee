//! How Redis names a purchase and remembers a charge.
//!
//! A purchase is named, as in the database, by its buyer and request id within one product,
//! byte for byte. In the product's `requests` hash its field is the buyer's id prefixed by its
//! length in bytes, then the request id (`5:alicer-1`): no separator a user id could contain
//! can make two purchases one field. The stream's `pending` hash, shared by all products, puts
//! the product id in front (`7:5:alicer-1`).
//!
//! The value records what was charged: `quantity:strategy:charged-at:attempt` (milliseconds
//! of the Redis clock; the [`Attempt`] that charged it), so that a replay with other terms is
//! a conflict, so that `reconcile` can tell a purchase still in flight from one presumed lost,
//! and so that a give-back names the charge it is for; or [`CANCELLED`], a tombstone; or
//! `quantity:strategy:ended`, the mark of a purchase whose order ended ([`Afterwards`]).
//!
//! **Why an ended purchase keeps a record.** The record is what makes a replay a duplicate
//! instead of a new charge. Once an order has ended (expired, cancelled, or voided by
//! `reconcile`) and its units are back, its purchase key is taken in the database for good: no
//! order of it can ever be placed again. Were the record deleted with the give-back, a client
//! sending the same purchase again would be charged anew, and nothing could ever hold those
//! units — `redis-lua-stream`'s entry would meet the ended order and place nothing, its buyer
//! told `202`: units gone from sale for good, three requests per unit for anyone to empty a
//! product. With the mark, the take answers it as a duplicate, from the terms the mark keeps,
//! and the buyer is answered with the ended order. A purchase whose give-back leaves no order
//! behind (its insert failed, its deduction was not replicated) loses its record instead, so
//! that its retry can buy.

use crate::db::orders::PurchaseKey;

/// The field of the purchase in its product's `requests` hash.
pub fn field(user_id: &str, request_id: &str) -> String {
    format!("{}:{user_id}{request_id}", user_id.len())
}

/// The field of the purchase in the `pending` hash of all products.
pub fn pending_field(key: PurchaseKey<'_>) -> String {
    format!("{}:{}", key.product_id, field(key.user_id, key.request_id))
}

/// The buyer and request id a [`field`] names, if it is one.
pub fn parse_field(field: &str) -> Option<(&str, &str)> {
    let (length, rest) = field.split_once(':')?;
    let length: usize = length.parse().ok()?;
    (rest.is_char_boundary(length) && length <= rest.len()).then(|| rest.split_at(length))
}

/// The terms a charge is recorded with, before its time: `quantity:strategy:`. A replay of a
/// charged purchase is a duplicate when its terms are these, a conflict otherwise.
pub fn terms(quantity: u32, strategy: &str) -> String {
    format!("{quantity}:{strategy}:")
}

/// One try of a purchase at the counter, named so that what is done for it afterwards — its
/// settling, its give-back — acts on its own charge and on no later one of the same purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt(u64);

impl Attempt {
    /// A new attempt, named at random (64 bits: two attempts of one purchase never share one).
    pub fn new() -> Attempt {
        Attempt(rand::random())
    }

    /// As written in the charge record.
    pub fn name(&self) -> String {
        format!("{:x}", self.0)
    }
}

impl Default for Attempt {
    fn default() -> Attempt {
        Attempt::new()
    }
}

/// The record of a purchase whose take was settled as not made (see
/// [`super::scripts::SETTLE`]): a tombstone, holding no units.
pub const CANCELLED: &str = "cancelled";

/// Whether `record` is the mark of a purchase whose order ended (`quantity:strategy:ended`):
/// it holds no units, and no take charges its purchase again.
pub fn is_ended(record: &str) -> bool {
    record.ends_with(":ended")
}

/// What a give-back leaves of the purchase's record once its units are back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Afterwards {
    /// No order of this charge was written (its insert failed, its deduction was not
    /// replicated): the record is deleted, and the purchase may be bought by its retry.
    Open,
    /// The purchase has an order row that will never hold units again — ended, or voided —
    /// so it can never be placed anew: the record becomes the ended mark, and the purchase
    /// sent again is a duplicate answered with that order, charged nothing.
    Ended,
}

impl Afterwards {
    /// As [`super::scripts::GIVE_BACK`] takes it.
    pub fn as_arg(self) -> &'static str {
        match self {
            Afterwards::Open => "",
            Afterwards::Ended => "ended",
        }
    }
}

/// A charge as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub quantity: u32,
    pub strategy: String,
    /// When the script charged it, by the Redis clock, in milliseconds.
    pub charged_at_ms: u64,
    /// The attempt that charged it, as written (absent in a record written without one).
    pub attempt: Option<String>,
}

impl Charge {
    pub fn parse(record: &str) -> Option<Charge> {
        let mut parts = record.splitn(4, ':');
        Some(Charge {
            quantity: parts.next()?.parse().ok()?,
            strategy: parts.next()?.to_string(),
            charged_at_ms: parts.next()?.parse().ok()?,
            attempt: parts.next().map(str::to_owned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_names_one_buyer_and_request_whatever_they_contain() {
        let a = field("ab", "c:d");
        let b = field("ab:", "cd");
        assert_ne!(a, b);
        assert_eq!(parse_field(&a), Some(("ab", "c:d")));
        assert_eq!(parse_field(&b), Some(("ab:", "cd")));
        assert_eq!(
            parse_field(&field("caf\u{e9}", "x")),
            Some(("caf\u{e9}", "x"))
        );
        assert_eq!(parse_field("9:short"), None);
    }

    #[test]
    fn a_recorded_charge_reads_back_with_its_attempt_or_without_one() {
        let attempt = Attempt::new();
        let record = format!("{}1700000000123:{}", terms(2, "redis-lua"), attempt.name());
        assert_eq!(
            Charge::parse(&record),
            Some(Charge {
                quantity: 2,
                strategy: "redis-lua".into(),
                charged_at_ms: 1_700_000_000_123,
                attempt: Some(attempt.name()),
            })
        );
        let old = format!("{}1700000000123", terms(2, "redis-lua"));
        assert_eq!(Charge::parse(&old).and_then(|c| c.attempt), None);
    }

    #[test]
    fn an_ended_mark_is_told_from_a_charge_and_a_tombstone() {
        assert!(is_ended(&format!("{}ended", terms(1, "redis-lua-stream"))));
        let charge = format!(
            "{}1700000000123:{}",
            terms(1, "redis-lua"),
            Attempt::new().name()
        );
        assert!(!is_ended(&charge));
        assert!(!is_ended(CANCELLED));
    }
}
