//! The wire types of the HTTP API, defined once: the server answers with them, every client in
//! the workspace (the benchmark, the scenarios, the tests) reads and writes them, and the
//! OpenAPI document is generated from them — ranges and lengths included, so the document says
//! what the server enforces.

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

mod errors;
mod strategies;

pub use crate::catalogue::{Home, Safety, Service, Strategy, UnknownStrategy};
pub use errors::{ErrorBody, ErrorCode};
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

/// How long a buyer has to pay a reserved order when the product's reset names no window.
pub const DEFAULT_PAYMENT_WINDOW_MS: i64 = 15 * 60 * 1000;
/// The longest payment window a product may have (one week).
pub const MAX_PAYMENT_WINDOW_MS: i64 = 7 * 24 * 3600 * 1000;

/// Body of `PUT /api/products/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetProduct {
    /// Units one buyer may hold of this product, over all their purchases (default 1: one per
    /// customer). Every safe strategy enforces it atomically with its deduction. The largest,
    /// 1,000,000,000 (no product holds more), limits no one: the database strategies then keep
    /// no count of what each buyer holds, and lock no buyer's row.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    #[serde(
        default,
        deserialize_with = "optional_integer",
        skip_serializing_if = "Option::is_none"
    )]
    pub per_user_limit: Option<i64>,
    /// When the sale opens (RFC 3339); before it, purchases are refused (`sale_not_started`)
    /// and take nothing. Absent: open now.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub sale_starts_at: Option<time::OffsetDateTime>,
    /// When the sale closes (RFC 3339); from then on purchases are refused (`sale_ended`).
    /// Absent: never. A window that closes no later than it opens never opens: every
    /// purchase is refused, and the product's rules show why.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub sale_ends_at: Option<time::OffsetDateTime>,
    /// Whether a purchase must carry a purchase token (`POST /api/products/{id}/tokens`,
    /// issued only once the sale is open): a bot that skips it, or fires before the start, is
    /// refused without touching stock.
    #[serde(default)]
    pub token_required: bool,
    /// Whether the product is sold first come, first served (needs Redis): each click takes
    /// its place in one queue across every instance when it comes in, and only as many clicks
    /// as there are units are let through to buy — each to be served however loaded its
    /// instance is —, the rest refused `sold_out` at once. Without it, a crowd past what an
    /// instance works on at once is refused `overloaded` at random, early clicks as well as
    /// late ones. See [`crate::first_come`].
    #[serde(default)]
    pub first_come: bool,
    /// Milliseconds a buyer has to pay an order of this product before it expires and its
    /// units go back on sale (default: the server's `--payment-window-ms`, 15 minutes).
    #[schema(minimum = 1, maximum = 604_800_000)]
    #[serde(
        default,
        deserialize_with = "optional_integer",
        skip_serializing_if = "Option::is_none"
    )]
    pub payment_window_ms: Option<i64>,
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    #[serde(deserialize_with = "integer")]
    pub stock: i64,
    /// Where the stock is kept (default `row`); every other home holds none of it, so only the
    /// strategies of this home can sell it.
    #[serde(default)]
    pub home: Home,
    /// With `"home": "buckets"`: the number of buckets the stock is split over, evenly
    /// (default 8). Ignored for the other homes.
    #[schema(minimum = 1, maximum = 1024)]
    #[serde(
        default,
        deserialize_with = "optional_integer",
        skip_serializing_if = "Option::is_none"
    )]
    pub buckets: Option<i64>,
    /// The strategies that may sell it, each offered by the deployment and of the product's
    /// home (default: the deployment's default strategy, or the first it offers of this home).
    /// A purchase naming none is sold by the default strategy if it is among them, else by the
    /// first of them in catalogue order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Strategy>>, min_items = 1)]
    pub strategies: Option<Strategies>,
}

impl ResetProduct {
    /// `stock` units kept in `home`, every rule at its default: what a body naming only these
    /// two fields means.
    pub fn new(stock: i64, home: Home) -> ResetProduct {
        ResetProduct {
            per_user_limit: None,
            sale_starts_at: None,
            sale_ends_at: None,
            token_required: false,
            first_come: false,
            payment_window_ms: None,
            stock,
            home,
            buckets: None,
            strategies: None,
        }
    }
}

/// An integer field of a request body. JSON has one number type and JSON Schema counts `12.0`
/// as an integer, so this accepts it too; `12.5`, and numbers beyond `i64`, are refused.
pub(crate) fn integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(deserializer)?;
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    // 2^63 is exactly representable; anything at or above it does not fit.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) => Ok(f as i64),
        _ => Err(serde::de::Error::custom(format!(
            "expected an integer, found {n}"
        ))),
    }
}

/// An optional [`integer`]: absent or `null` is `None`.
fn optional_integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    struct Integer(#[serde(deserialize_with = "integer")] i64);
    Ok(Option::<Integer>::deserialize(deserializer)?.map(|Integer(i)| i))
}

/// A product's public page, `GET /api/products/{id}`: what a buyer refreshing it during a sale
/// sees. It is read from the product row (or its home) alone — never from its orders — and an
/// instance reads it at most once per `--page-ttl-ms` per product however many buyers refresh,
/// so a crowd at the page costs what a crowd refused from memory costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProductPage {
    pub id: u64,
    /// Where the stock is kept.
    pub home: Home,
    /// The sale's rules.
    pub rules: SaleRules,
    /// Units left, read from the home; up to `age_ms` old.
    pub stock: i64,
    pub initial_stock: i64,
    /// How long ago the figures were read, in milliseconds.
    pub age_ms: u64,
}

/// A product as its accountant sees it, `GET /api/products/{id}/accounting` (admin): the stock
/// beside every order's units, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProductView {
    pub id: u64,
    /// Where the stock is kept.
    pub home: Home,
    /// The sale's rules.
    #[serde(default)]
    pub rules: SaleRules,
    /// Units left, read from the home.
    pub stock: i64,
    pub initial_stock: i64,
    /// Units the orders hold: reserved and paid (`reserved + paid`).
    pub sold: i64,
    /// Number of orders that hold units.
    pub orders: i64,
    /// Units of orders waiting for their payment.
    #[serde(default)]
    pub reserved: i64,
    /// Units of paid orders.
    #[serde(default)]
    pub paid: i64,
    /// Units of expired orders (back on sale, or on their way: see `returning`).
    #[serde(default)]
    pub expired: i64,
    /// Units of cancelled orders (back on sale, or on their way: see `returning`).
    #[serde(default)]
    pub cancelled: i64,
    /// Units of expired or cancelled orders not yet back in the home (the Redis counter):
    /// counted in `stranded` until they arrive.
    #[serde(default)]
    pub returning: i64,
    /// Units accepted and not yet placed in the database (orders waiting in the Redis Stream
    /// of `redis-lua-stream`); taken from `stock`, not yet in `sold`.
    #[serde(default)]
    pub pending: i64,
    /// Units taken from the home that no order holds and no queued entry is bringing:
    /// `initial_stock − stock − sold − pending` when positive. Briefly above 0 while a
    /// `redis-lua` purchase sits between its deduction and its order insert, or an expired or
    /// cancelled order's units between its state change and the counter (`returning`); a
    /// lasting value is undersell (a process that died there), which `reconcile` repairs.
    #[serde(default)]
    pub stranded: i64,
}

impl ProductView {
    /// Fills in [`ProductView::stranded`] from the other figures.
    pub fn with_stranded(mut self) -> ProductView {
        self.stranded = (self.initial_stock - self.stock - self.sold - self.pending).max(0);
        self
    }
}

/// The rules of a product's sale, as set by its last reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SaleRules {
    /// Units one buyer may hold of the product.
    pub per_user_limit: i64,
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub sale_starts_at: Option<time::OffsetDateTime>,
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub sale_ends_at: Option<time::OffsetDateTime>,
    #[serde(default)]
    pub token_required: bool,
    /// Clicks are served in the order they came, across every instance
    /// ([`crate::first_come`]).
    #[serde(default)]
    pub first_come: bool,
    /// Milliseconds a buyer has to pay an order.
    #[serde(default = "default_payment_window_ms")]
    pub payment_window_ms: i64,
    /// The strategies that may sell the product; a purchase naming another is refused
    /// (`strategy_not_offered`). Empty: any the deployment offers (a product made without the
    /// admin API).
    #[serde(default, skip_serializing_if = "Strategies::is_empty")]
    #[schema(value_type = Vec<Strategy>)]
    pub strategies: Strategies,
}

fn default_payment_window_ms() -> i64 {
    DEFAULT_PAYMENT_WINDOW_MS
}

impl SaleRules {
    /// When the sale starts, in milliseconds since the Unix epoch.
    pub fn starts_ms(&self) -> Option<i64> {
        self.sale_starts_at
            .map(|at| i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX))
    }
}

impl Default for SaleRules {
    fn default() -> SaleRules {
        SaleRules {
            per_user_limit: DEFAULT_PER_USER_LIMIT,
            sale_starts_at: None,
            sale_ends_at: None,
            token_required: false,
            first_come: false,
            payment_window_ms: DEFAULT_PAYMENT_WINDOW_MS,
            strategies: Strategies::NONE,
        }
    }
}

/// A buyer's units of one product, when the reset names no limit: one per customer.
pub const DEFAULT_PER_USER_LIMIT: i64 = 1;

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
