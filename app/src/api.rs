//! The wire types of the HTTP API, defined once: the server answers with them, every client in
//! the workspace (the benchmark, the scenarios, the tests) reads and writes them, and the
//! OpenAPI document is generated from them — ranges and lengths included, so the document says
//! what the server enforces.

use std::fmt;

use axum::http::StatusCode;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

pub use crate::catalogue::{Home, Safety, Service, Strategy, UnknownStrategy};

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
    /// 1 to 64 characters, no white space at either end. The pattern spells out what Rust's
    /// `char::is_whitespace` (the server's check) counts, because ECMA's `\s` differs from it.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]([\s\S]*[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub user_id: String,
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
    /// requires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub purchase_token: Option<String>,
}

/// Body of `POST /api/products/{id}/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The buyer the token is for (the rules of `OrderRequest.user_id`).
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]([\s\S]*[^\t\n\x0B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub user_id: String,
}

/// A purchase token: good for one buyer, for one sale of one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PurchaseToken {
    pub product_id: u64,
    pub user_id: String,
    pub token: String,
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
}

/// Body of `PUT /api/products/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetProduct {
    /// Units one buyer may hold of this product, over all their purchases (default 1: one per
    /// customer). Every safe strategy enforces it atomically with its deduction.
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
}

/// An integer field of a request body. JSON has one number type and JSON Schema counts `12.0`
/// as an integer, so this accepts it too; `12.5`, and numbers beyond `i64`, are refused.
fn integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
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

/// A product as `GET /api/products/{id}` shows it.
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
    /// Sum of ordered quantities.
    pub sold: i64,
    /// Number of orders.
    pub orders: i64,
    /// Units accepted and not yet placed in the database (orders waiting in the Redis Stream
    /// of `redis-lua-stream`); taken from `stock`, not yet in `sold`.
    #[serde(default)]
    pub pending: i64,
    /// Units taken from the home that no order holds and no queued entry is bringing:
    /// `initial_stock − stock − sold − pending` when positive. Briefly above 0 while a
    /// `redis-lua` purchase sits between its deduction and its order insert; a lasting value is
    /// undersell (a purchase that died there), which `reconcile` repairs.
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
    /// Recorded in the database.
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
    /// Whether the counter was changed.
    pub repaired: bool,
    /// Purchases charged by the counter with neither an order nor a waiting entry, older than
    /// the reconcile grace: presumed lost, fenced out (voided) and their units put back.
    pub released_requests: u64,
    /// Purchases charged without an order yet, younger than the grace: in flight between the
    /// deduction and the order insert, left alone.
    #[serde(default)]
    pub in_flight: u64,
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

/// Every error code the API answers, in the `error` field of [`ErrorBody`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: malformed JSON, a path that is not a product id, a malformed header.
    BadRequest,
    /// 422: well-formed input that breaks a rule (quantity, id lengths).
    InvalidRequest,
    /// 422: no strategy of that name.
    UnknownStrategy,
    /// 409: a buyer's request id reused for the same product with another quantity or
    /// strategy. A conflict with what the server holds, not a malformed request: 422 is kept
    /// for input no state of the server would accept, which is what the contract test can
    /// check.
    IdempotencyConflict,
    /// 409: the purchase of this request id was presumed lost by a reconciliation and fenced
    /// out: nothing was bought; buy with a new request id.
    PurchaseVoided,
    /// 403: this deployment does not offer the strategy named (`--strategies`).
    StrategyNotOffered,
    /// 409: the buyer would hold more of this product than its per-user limit.
    LimitReached,
    /// 409: the sale has not opened yet.
    SaleNotStarted,
    /// 409: the sale has closed.
    SaleEnded,
    /// 403: the product requires a purchase token and the purchase carries none, or one that
    /// is not this buyer's for this product's sale.
    PurchaseTokenRequired,
    /// 429: this buyer or address sent more than its rate allows; retry after `Retry-After`.
    RateLimited,
    /// 503: the service is at capacity and refused the request at once; retry after
    /// `Retry-After`.
    Overloaded,
    /// 401: missing or wrong admin token.
    Unauthorized,
    /// 404: no such product.
    NotFound,
    /// 409: not enough stock left.
    SoldOut,
    /// 409: a fenced write was refused: a newer lock holder claimed the product.
    LockLost,
    /// 503: the lock or row lock was not obtained within the wait budget; retry.
    Busy,
    /// 503: a backend the request needs is unreachable or not configured.
    BackendUnavailable,
    /// 500: a bug; the cause is logged, never sent.
    Internal,
}

impl ErrorCode {
    /// Every code, for listings and exhaustive tests.
    pub const ALL: &[ErrorCode] = &[
        ErrorCode::BadRequest,
        ErrorCode::InvalidRequest,
        ErrorCode::UnknownStrategy,
        ErrorCode::IdempotencyConflict,
        ErrorCode::PurchaseVoided,
        ErrorCode::StrategyNotOffered,
        ErrorCode::LimitReached,
        ErrorCode::SaleNotStarted,
        ErrorCode::SaleEnded,
        ErrorCode::PurchaseTokenRequired,
        ErrorCode::RateLimited,
        ErrorCode::Overloaded,
        ErrorCode::Unauthorized,
        ErrorCode::NotFound,
        ErrorCode::SoldOut,
        ErrorCode::LockLost,
        ErrorCode::Busy,
        ErrorCode::BackendUnavailable,
        ErrorCode::Internal,
    ];

    /// The HTTP status that carries this code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest | ErrorCode::UnknownStrategy => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::StrategyNotOffered | ErrorCode::PurchaseTokenRequired => {
                StatusCode::FORBIDDEN
            }
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::SoldOut
            | ErrorCode::LockLost
            | ErrorCode::IdempotencyConflict
            | ErrorCode::PurchaseVoided
            | ErrorCode::LimitReached
            | ErrorCode::SaleNotStarted
            | ErrorCode::SaleEnded => StatusCode::CONFLICT,
            ErrorCode::Busy | ErrorCode::BackendUnavailable | ErrorCode::Overloaded => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The wire name (`"sold_out"`); also the `outcome` label of the metrics.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnknownStrategy => "unknown_strategy",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::PurchaseVoided => "purchase_voided",
            ErrorCode::StrategyNotOffered => "strategy_not_offered",
            ErrorCode::LimitReached => "limit_reached",
            ErrorCode::SaleNotStarted => "sale_not_started",
            ErrorCode::SaleEnded => "sale_ended",
            ErrorCode::PurchaseTokenRequired => "purchase_token_required",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::SoldOut => "sold_out",
            ErrorCode::LockLost => "lock_lost",
            ErrorCode::Busy => "busy",
            ErrorCode::BackendUnavailable => "backend_unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The JSON body of every error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorCode,
    pub message: String,
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

    #[test]
    fn every_error_code_serializes_as_its_wire_name() {
        for &code in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(code).ok(),
                Some(serde_json::json!(code.name()))
            );
        }
    }
}
