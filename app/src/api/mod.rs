//! The wire types of the HTTP API, defined once: the server answers with them, every client in
//! the workspace (the benchmark, the scenarios, the tests) reads and writes them, and the
//! OpenAPI document is generated from them — ranges and lengths included, so the document says
//! what the server enforces.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

mod errors;
mod products;
mod strategies;

pub use crate::catalogue::{Home, Safety, Service, Strategy, UnknownStrategy};
pub use errors::{ErrorBody, ErrorCode};
pub(crate) use products::integer;
pub use products::{
    DEFAULT_PAYMENT_WINDOW_MS, DEFAULT_PER_USER_LIMIT, MAX_PAYMENT_WINDOW_MS, ProductPage,
    ProductView, ResetProduct, SaleRules,
};
pub use strategies::Strategies;

/// Longest `user_id`, in characters.
pub const MAX_USER_ID: usize = 64;
/// Longest `request_id`, in characters.
pub const MAX_REQUEST_ID: usize = 128;
/// Largest stock a product can be reset to.
pub const MAX_STOCK: i64 = 1_000_000_000;
/// Buckets a product's stock is split over when its home is `buckets` and the reset names
/// no number.
pub const DEFAULT_BUCKETS: u32 = 8;
/// Most buckets one product's stock can be split over.
pub const MAX_BUCKETS: i64 = 1024;
/// Largest product id (ids are stored as signed 64-bit values by the clients we serve).
pub const MAX_PRODUCT_ID: u64 = i64::MAX as u64;

/// Body of `POST /api/products/{id}/orders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderRequest {
    /// The buyer. With a buyer key the server takes the buyer from the buyer token, and this
    /// may be left out (given, it must be the token's); without one it is required.
    /// 1 to 64 characters, no white space at either end. The pattern spells out what Rust's
    /// `char::is_whitespace` (the server's check) counts, because ECMA's `\s` differs from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]([\s\S]*[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub user_id: Option<String>,
    /// Units to buy: 1 up to the server's `--max-quantity` (default 5), answered 422 otherwise.
    /// The document's maximum is that setting (see `openapi::document`).
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "integer")]
    pub quantity: i64,
    /// Client-chosen idempotency key of this buyer's purchase of this product: the same buyer
    /// sending the same key for the same product again gets the first order back, and with
    /// another quantity or strategy is refused (`409 idempotency_conflict`). Keys compare byte
    /// for byte (no case or accent folding), and are scoped to one buyer and one product: the
    /// same key from another buyer, or for another product, is another purchase.
    /// 1 to 128 characters, no white space at either end (the pattern of `user_id`).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]([\s\S]*[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub request_id: String,
    /// The server's default strategy when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// The buyer's purchase token (`POST /api/products/{id}/tokens`), for a product that
    /// requires one. It admits one purchase: the one under the `request_id` it was issued
    /// with, until its `expires_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 128)]
    pub purchase_token: Option<String>,
}

/// Body of `POST /api/products/{id}/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The buyer the token is for (the rules of `OrderRequest.user_id`): with a buyer key, the
    /// buyer token's, and this may be left out; without one it is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]([\s\S]*[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub user_id: Option<String>,
}

/// A purchase token: good for one purchase of one buyer, in one sale of one product, until it
/// expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PurchaseToken {
    pub product_id: u64,
    pub user_id: String,
    /// The `purchase_token` of the purchase.
    pub token: String,
    /// The `request_id` the purchase must carry: the token admits this purchase only
    /// (`403 purchase_token_mismatch` for any other). Minted by the service.
    pub request_id: String,
    /// When the token stops admitting its purchase, if it was not made by then (RFC 3339, to
    /// the millisecond; `403 purchase_token_expired`). The purchase it made, sent again, is
    /// still answered with its order.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: time::OffsetDateTime,
}

/// An order as answered by `201` (created) and `200` (replayed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderResponse {
    pub order_id: u64,
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub strategy: Strategy,
    pub request_id: String,
    /// The fencing token of the lock the purchase was made under (lock-based strategies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Where the order stands: reserved until paid, cancelled or expired (its deadline:
    /// `GET /api/products/{id}/orders/{request_id}`).
    #[serde(default)]
    pub stage: OrderStage,
}

/// Where an order stands in its life. A `reserved` order holds its units until its buyer pays
/// (`paid`, for good) or cancels it (`cancelled`), or until its payment deadline passes
/// (`expired`); the units of an expired or cancelled order go back on sale, once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderStage {
    #[default]
    Reserved,
    Paid,
    Expired,
    Cancelled,
}

impl OrderStage {
    pub fn name(self) -> &'static str {
        match self {
            OrderStage::Reserved => "reserved",
            OrderStage::Paid => "paid",
            OrderStage::Expired => "expired",
            OrderStage::Cancelled => "cancelled",
        }
    }
}

/// State of a purchase in `GET /api/products/{id}/orders/{request_id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderState {
    /// Accepted (`202`): its units are taken and it waits in the stream.
    Pending,
    /// Recorded in the database (its order says where it stands: `stage`).
    Placed,
    /// Presumed lost by a reconciliation and fenced out: nothing was bought, its units went
    /// back on sale. The request id cannot buy again; use a new one.
    Voided,
}

/// Body of `202 Accepted` and of `GET /api/products/{id}/orders/{request_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderStatus {
    pub request_id: String,
    pub product_id: u64,
    pub user_id: String,
    pub state: OrderState,
    /// The order, once placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderResponse>,
    /// The payment deadline of a placed order (RFC 3339, by the database's clock).
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub pay_by: Option<time::OffsetDateTime>,
}

/// Body of `POST /api/products/{id}/reconcile`: what was found and what was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Reconciliation {
    pub product_id: u64,
    pub initial_stock: i64,
    /// Units in the product's orders in the database.
    pub ordered: i64,
    /// Units accepted and waiting in the stream.
    pub pending: i64,
    /// The Redis counter as found (`null`: there was none).
    pub counter_found: Option<i64>,
    /// The counter now.
    pub counter_after: i64,
    /// Whether Redis had lost the product's stock (its marker gone or behind the database's
    /// epoch) and it was rebuilt from the orders: the counter, the charge records, the buyers'
    /// counts and the rules.
    #[serde(default)]
    pub rebuilt: bool,
    /// Whether the counter was changed.
    pub repaired: bool,
    /// Purchases charged by the counter with neither an order nor a waiting entry, older than
    /// the reconcile grace: presumed lost, fenced out (voided) and their units put back; and
    /// returns left half-way (expired or cancelled orders whose units had not reached the
    /// counter), finished.
    pub released_requests: u64,
    /// Purchases charged without an order yet, younger than the grace: in flight between the
    /// deduction and the order insert, left alone.
    #[serde(default)]
    pub in_flight: u64,
}

/// Body of `POST /api/products/{id}/expire`: what one round of the expiry sweep did there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExpiryRound {
    /// Reserved orders past their deadline this round expired (their units given back).
    pub expired: u64,
    /// Due orders another transition (a payment, a cancellation, another sweep) got first.
    pub lost_races: u64,
    /// Returns to the Redis counter left half-way (by a dead instance) that it finished.
    pub returns_finished: u64,
}

/// Body of `PUT /api/expiry`: pause or resume this instance's expiry sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepSwitch {
    pub paused: bool,
}

/// Answer of `PUT /api/expiry`: this instance's expiry sweep, once no round of it is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SweepState {
    pub paused: bool,
    /// Whether it expires due orders now: not paused, and the instance sweeps at all
    /// (`--expiry-interval-ms` above 0).
    pub sweeping: bool,
}

/// What `GET /api/strategies` shows about a strategy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StrategyInfo {
    pub name: Strategy,
    /// One line: what it does.
    pub description: String,
    /// What it needs to run.
    pub service: Service,
    /// Whether it keeps `sold ≤ initial stock` under concurrency across instances.
    pub safety: Safety,
}

impl StrategyInfo {
    /// The catalogue's line for `strategy`.
    pub fn of(strategy: Strategy) -> StrategyInfo {
        StrategyInfo {
            name: strategy,
            description: strategy.description().to_string(),
            service: strategy.service(),
            safety: strategy.safety(),
        }
    }
}

/// Body of `GET /api/strategies`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StrategyList {
    pub default: Strategy,
    pub strategies: Vec<StrategyInfo>,
}

/// Body of a healthy `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub database: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integral_float_is_an_integer_and_a_fraction_is_not() {
        let stock = |body: &str| serde_json::from_str::<ResetProduct>(body).map(|r| r.stock);
        assert_eq!(stock(r#"{"stock": 12.0}"#).ok(), Some(12));
        assert_eq!(stock(r#"{"stock": 12}"#).ok(), Some(12));
        assert!(stock(r#"{"stock": 12.5}"#).is_err());
        assert!(stock(r#"{"stock": 1e19}"#).is_err());
        assert!(stock(r#"{"stock": 18446744073709551615}"#).is_err());
        assert!(stock(r#"{"stock": "12"}"#).is_err());
    }
}
