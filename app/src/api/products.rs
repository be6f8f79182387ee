//! The wire types of a product: the body that resets it, its rules, and the two ways it is read
//! (the buyers' page and the accountants' view).

use serde::{Deserialize, Deserializer, Serialize};
use time::serde::rfc3339;
use utoipa::ToSchema;

use super::{Home, Strategies, Strategy};

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
        with = "rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub sale_starts_at: Option<time::OffsetDateTime>,
    /// When the sale closes (RFC 3339); from then on purchases are refused (`sale_ended`).
    /// Absent: never. A window that closes no later than it opens never opens: every
    /// purchase is refused, and the product's rules show why.
    #[serde(
        default,
        with = "rfc3339::option",
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
    /// (default 8); with `"home": "redis-split"`, the number of Redis counters (parts). Ignored
    /// for the other homes.
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
        with = "rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub sale_starts_at: Option<time::OffsetDateTime>,
    #[serde(
        default,
        with = "rfc3339::option",
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
