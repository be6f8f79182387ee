//! Admission of a purchase: what can be decided before any strategy runs, from the request and
//! from what this instance remembers of the product ([`crate::product_memory`]), at the cost of
//! a no-op.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::api::{Home, MAX_REQUEST_ID, MAX_USER_ID, SaleRules, Strategy, integer};
use crate::db::orders::{self, PurchaseKey};
use crate::error::ApiError;
use crate::product_memory::{Known, Recalled};
use crate::purchase_token::{self, Claim, Refused};
use crate::state::{AppState, Settings};
use crate::strategy::{Purchase, PurchaseStats};

/// Request header that makes the strategy pause inside its critical section (only when the
/// service runs with `--allow-fault-injection`).
pub const HOLD_HEADER: &str = "x-seckill-hold-ms";
/// Longest accepted injected pause.
const MAX_HOLD_MS: u64 = 120_000;

/// The body of a purchase as [`crate::api::OrderRequest`] documents it, its strings borrowed
/// from the body where they need no unescaping: a click refused from memory allocates none of
/// them. (Named as the documented schema, so that its errors read the same.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename = "OrderRequest")]
pub(super) struct Order<'a> {
    /// The buyer, if the body names one (see [`crate::http::identity::authenticate`]).
    #[serde(default, borrow, deserialize_with = "borrowed")]
    pub user_id: Option<Cow<'a, str>>,
    #[serde(deserialize_with = "integer")]
    pub quantity: i64,
    #[serde(borrow)]
    pub request_id: Cow<'a, str>,
    #[serde(default)]
    pub strategy: Option<Strategy>,
    #[serde(default)]
    pub purchase_token: Option<String>,
}

impl Order<'_> {
    /// Refuses an order whose quantity or ids break the rules: before the rate limiters or
    /// anything else keep a string of it, so that what a client may make the service hold is
    /// bounded by the rules, not by the body.
    pub fn check(&self, max_quantity: u32) -> Result<(), ApiError> {
        if self.quantity < 1 || self.quantity > i64::from(max_quantity) {
            return Err(ApiError::Invalid(format!(
                "quantity must be between 1 and {max_quantity}"
            )));
        }
        if let Some(user_id) = &self.user_id {
            crate::http::check_id("user_id", user_id, MAX_USER_ID)?;
        }
        crate::http::check_id("request_id", &self.request_id, MAX_REQUEST_ID)
    }
}

/// An optional string of the body, borrowed from it where it needs no unescaping: serde
/// borrows a `Cow` only when it is a field's own type, not inside an `Option`.
fn borrowed<'de: 'a, 'a, D>(deserializer: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Borrowed<'a>>::deserialize(deserializer)?.map(|b| b.0))
}

/// A purchase this instance admitted, still borrowing its body: nothing of it is copied until
/// memory has not refused it.
#[derive(Debug)]
pub(super) struct Admitted<'a> {
    product_id: u64,
    buyer: Cow<'a, str>,
    order: Order<'a>,
    pub strategy: Strategy,
    per_user_limit: i64,
    pay_within: Duration,
    redis_epoch: u64,
    redis_parts: u32,
    hold: Option<Duration>,
}

impl Admitted<'_> {
    /// The purchase its strategy runs.
    pub fn into_purchase(self) -> Purchase {
        Purchase {
            product_id: self.product_id,
            user_id: self.buyer.into_owned(),
            quantity: u32::try_from(self.order.quantity).unwrap_or(u32::MAX),
            request_id: self.order.request_id.into_owned(),
            strategy: self.strategy,
            per_user_limit: self.per_user_limit,
            pay_within: self.pay_within,
            redis_epoch: self.redis_epoch,
            redis_parts: self.redis_parts,
            hold: self.hold,
            stats: PurchaseStats::default(),
        }
    }
}

/// The purchase `request` (a [checked](Order::check) order of `buyer`, authenticated) asks
/// for, if this instance admits it: the strategy offered, the product known, its sale open,
/// its token admitting it if one is required, the quantity within the per-user limit; and the
/// product as the memory it was admitted from holds it. (Its strategy is taken only once it is not refused from memory: a
/// refusal touches no shared count.) The sale's window is judged at `arrived`, when the request came in, not when
/// the product's memory was ready.
pub(super) async fn admit<'a>(
    state: &AppState,
    headers: &HeaderMap,
    product_id: u64,
    buyer: Cow<'a, str>,
    request: Order<'a>,
    arrived: Instant,
) -> Result<(Admitted<'a>, Recalled), ApiError> {
    let settings = &state.settings;
    if let Some(name) = request.strategy
        && !settings.offers(name)
    {
        return Err(ApiError::StrategyNotOffered(format!(
            "this deployment does not offer strategy `{name}` (see GET /api/strategies)"
        )));
    }
    let hold = match settings.allow_fault_injection {
        true => hold(headers)?,
        false => None,
    };
    // A pause holds a lock or a row for up to two minutes: once there is an admin token, it
    // takes the token to ask for one.
    if hold.is_some() {
        super::super::admin::authorize(settings, headers)?;
    }
    let purchase = PurchaseKey {
        product_id,
        user_id: &buyer,
        request_id: &request.request_id,
    };
    let recalled = state.memory.product(product_id, Some(purchase)).await?;
    let known = recalled
        .known
        .ok_or_else(|| ApiError::NotFound(format!("no product {product_id}")))?;
    let name = sold_by(settings, product_id, &known.rules, request.strategy)?;
    within_sale(&known.rules, arrived)?;
    if known.rules.token_required {
        token_admits(state, product_id, &known, &buyer, &request, arrived).await?;
    }
    if request.quantity > known.rules.per_user_limit {
        return Err(ApiError::LimitReached);
    }
    let admitted = Admitted {
        product_id,
        buyer,
        order: request,
        strategy: name,
        per_user_limit: known.rules.per_user_limit,
        pay_within: Duration::from_millis(
            u64::try_from(known.rules.payment_window_ms).unwrap_or(u64::MAX),
        ),
        redis_epoch: known.redis_epoch,
        redis_parts: known.redis_parts,
        hold,
    };
    Ok((admitted, recalled))
}

/// Refuses a purchase of a product that requires a purchase token unless its token admits it:
/// issued for `buyer` in this sale, under this purchase's request id, and not expired when
/// the purchase `arrived`. An expired token is refused only once its purchase is found not to
/// have been made: sent again after the expiry — its first answer lost — the purchase is let
/// through, and its strategy answers it with its order as it answers any replay (see
/// [`crate::purchase_token`]).
async fn token_admits(
    state: &AppState,
    product_id: u64,
    known: &Known,
    buyer: &str,
    request: &Order<'_>,
    arrived: Instant,
) -> Result<(), ApiError> {
    let claim = Claim {
        product: product_id,
        user_id: buyer,
        sale_starts_ms: known.rules.starts_ms(),
        request_id: &request.request_id,
    };
    let at_ms = purchase_token::epoch_ms(OffsetDateTime::now_utc() - arrived.elapsed());
    let refused = match request.purchase_token.as_deref() {
        Some(token) => match state.settings.token_key.check(token, claim, at_ms) {
            Ok(()) => return Ok(()),
            Err(refused) => refused,
        },
        None => Refused::Forged,
    };
    match refused {
        Refused::Forged => Err(ApiError::PurchaseTokenRequired(format!(
            "product {product_id} sells only to buyers with their purchase token \
             (POST /api/products/{product_id}/tokens once the sale is open)"
        ))),
        Refused::OtherPurchase { admits } => Err(ApiError::PurchaseTokenMismatch(format!(
            "this token admits one purchase, request id `{admits}`: send it with that request \
             id, or ask for a new token (POST /api/products/{product_id}/tokens)"
        ))),
        // Boxed: the read is rare, and its future, tens of kilobytes, would otherwise make
        // every purchase's future as large, each refusal moving it whole.
        Refused::Expired { .. } if Box::pin(made(state, known.home, claim)).await? => Ok(()),
        Refused::Expired { expires_ms } => Err(ApiError::PurchaseTokenExpired(format!(
            "this token expired at {} and its purchase was not made: ask for a new one \
             (POST /api/products/{product_id}/tokens)",
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(expires_ms) * 1_000_000)
                .ok()
                .and_then(|at| at.format(&Rfc3339).ok())
                .unwrap_or_else(|| format!("{expires_ms} ms since the epoch"))
        ))),
    }
}

/// Whether the purchase `claim` names was made: its order placed, or — for stock kept in
/// Redis — accepted and waiting in the stream.
async fn made(state: &AppState, home: Home, claim: Claim<'_>) -> Result<bool, ApiError> {
    let key = PurchaseKey {
        product_id: claim.product,
        user_id: claim.user_id,
        request_id: claim.request_id,
    };
    if orders::find(&state.pool, key).await?.is_some() {
        return Ok(true);
    }
    match &state.redis {
        Some(redis) if home == Home::Redis => Ok(redis.is_waiting(key).await?),
        _ => Ok(false),
    }
}

/// The strategy that sells this purchase: the one it names, if the product may be sold by it;
/// if it names none, the deployment's default strategy if the product may be sold by it, else
/// the product's first in catalogue order. A product made without the admin API names none and
/// may be sold by any strategy offered.
fn sold_by(
    settings: &Settings,
    product_id: u64,
    rules: &SaleRules,
    named: Option<Strategy>,
) -> Result<Strategy, ApiError> {
    let allowed = |s: Strategy| rules.strategies.is_empty() || rules.strategies.contains(s);
    let name = named.unwrap_or_else(|| match allowed(settings.default_strategy) {
        true => settings.default_strategy,
        false => rules
            .strategies
            .iter()
            .next()
            .unwrap_or(settings.default_strategy),
    });
    if !settings.offers(name) {
        return Err(ApiError::StrategyNotOffered(format!(
            "this deployment does not offer strategy `{name}` (see GET /api/strategies)"
        )));
    }
    if !allowed(name) {
        return Err(ApiError::StrategyNotOffered(format!(
            "product {product_id} is sold by {} only, not `{name}`",
            rules.strategies.names().replace(',', ", ")
        )));
    }
    Ok(name)
}

/// Refuses a request that `arrived` outside the sale's window. Judged at its arrival, not now:
/// a click sent before the opening that waited — for the product's memory to be read, say, on
/// an instance that has just started — would otherwise be let in once the sale opened, and a
/// bot that fires early would be first in line for riding a slow moment. The clock is read
/// only for a product that has a window: most have none, and their refusals from memory need
/// no time of day.
pub(in crate::http) fn within_sale(rules: &SaleRules, arrived: Instant) -> Result<(), ApiError> {
    if rules.sale_starts_at.is_none() && rules.sale_ends_at.is_none() {
        return Ok(());
    }
    let at = OffsetDateTime::now_utc() - arrived.elapsed();
    if rules.sale_starts_at.is_some_and(|starts| at < starts) {
        return Err(ApiError::SaleNotStarted);
    }
    if rules.sale_ends_at.is_some_and(|ends| at >= ends) {
        return Err(ApiError::SaleEnded);
    }
    Ok(())
}

/// Parses the body; a strategy name outside the catalogue is `unknown_strategy`, anything
/// else that does not fit the schema is `bad_request` (not JSON) or `invalid_request`.
pub(super) fn parse(body: &[u8]) -> Result<Order<'_>, ApiError> {
    let not_json = |e: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!("the body is not valid JSON: {e}"))
    };
    // The body checked as UTF-8 once, whole: read from bytes, serde_json checks each key and
    // string value on its own, seven checks with their overhead for every click.
    let text = std::str::from_utf8(body).map_err(|e| not_json(&e))?;
    // One typed pass on the hot path; the untyped one only to say what was wrong.
    let invalid = match serde_json::from_str::<Order>(text) {
        Ok(request) => return Ok(request),
        Err(e) => e,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| not_json(&e))?;
    if let Some(name) = value.get("strategy").and_then(|s| s.as_str())
        && let Err(unknown) = name.parse::<Strategy>()
    {
        return Err(ApiError::UnknownStrategy(unknown.to_string()));
    }
    Err(ApiError::Invalid(format!("invalid order: {invalid}")))
}

pub(super) fn hold(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let Some(value) = headers.get(HOLD_HEADER) else {
        return Ok(None);
    };
    let ms: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&ms| ms <= MAX_HOLD_MS)
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "{HOLD_HEADER} must be whole milliseconds up to {MAX_HOLD_MS}"
            ))
        })?;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(opened_secs_ago: i64, ends_in_secs: i64) -> SaleRules {
        let now = OffsetDateTime::now_utc();
        SaleRules {
            sale_starts_at: Some(now - time::Duration::seconds(opened_secs_ago)),
            sale_ends_at: Some(now + time::Duration::seconds(ends_in_secs)),
            ..SaleRules::default()
        }
    }

    /// When a request came in `secs` ago.
    fn arrived_ago(secs: u64) -> Instant {
        Instant::now()
            .checked_sub(Duration::from_secs(secs))
            .expect("the monotonic clock has run that long")
    }

    #[test]
    fn a_click_that_came_before_the_opening_is_refused_although_judged_after_it() {
        let rules = window(5, 3600);
        assert!(within_sale(&rules, Instant::now()).is_ok(), "open now");
        assert!(matches!(
            within_sale(&rules, arrived_ago(10)),
            Err(ApiError::SaleNotStarted)
        ));
    }

    #[test]
    fn a_click_that_came_before_the_close_is_judged_open_although_judged_after_it() {
        let rules = window(3600, -5);
        assert!(matches!(
            within_sale(&rules, Instant::now()),
            Err(ApiError::SaleEnded)
        ));
        assert!(within_sale(&rules, arrived_ago(10)).is_ok());
    }
}
