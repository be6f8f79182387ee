//! `GET /api/products/{id}/orders/{request_id}[?user_id=…]`: where a buyer's purchase stands.

use std::borrow::Cow;
use std::net::SocketAddr;

use crate::db::Db;
use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;

use crate::api::{ErrorBody, Home, MAX_REQUEST_ID, MAX_USER_ID, OrderState, OrderStatus};
use crate::db::orders::{self, OrderState as Stored, PurchaseKey};
use crate::db::products;
use crate::error::ApiError;
use crate::redis_stock::RedisStock;
use crate::state::AppState;

/// Who asks for a purchase's status, pays or cancels it: its buyer.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Buyer {
    /// The buyer whose purchase this is: a purchase is shown to its buyer only. With a buyer
    /// key the buyer is the buyer token's, and this may be left out (given, it must be the
    /// token's); without one it is required.
    pub user_id: Option<String>,
}

/// Where a buyer's purchase of a product stands: waiting in the stream, placed, or voided.
#[utoipa::path(get, path = "/api/products/{id}/orders/{request_id}", tag = "orders",
    params(
        ("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0),
        ("request_id" = String, Path, description = "The request id of the purchase"),
        Buyer),
    responses(
        (status = 200, description = "`pending` (accepted, not yet in the database), `placed` (with the order) or `voided`", body = OrderStatus),
        (status = 400, description = "`bad_request`: a malformed id, path or query", body = ErrorBody),
        (status = 401, description = "`unauthenticated`: no valid buyer token (when the server has a buyer key)", body = ErrorBody),
        (status = 403, description = "`not_your_order`: the buyer token names another buyer than the query's `user_id`", body = ErrorBody),
        (status = 404, description = "`not_found`: this buyer has no order and nothing waiting under this request id for this product", body = ErrorBody),
        (status = 422, description = "`invalid_request`: a user id or request id out of its rules (its length, white space at an end), or no `user_id` on a server without a buyer key", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this buyer or address is past its rate (the purchases' rate: a status request counts as one); retry after Retry-After", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait"))),
        (status = 503, description = "`backend_unavailable`; also when neither is found and Redis lost the product's stock and the orders it was placing (until a reconcile)", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn status(
    State(state): State<AppState>,
    purchase: BuyersPurchase,
) -> Result<Json<OrderStatus>, ApiError> {
    let (key, product_id) = (purchase.key(), purchase.product_id);
    let state_of = |state, order, pay_by_ms: Option<i64>| OrderStatus {
        request_id: purchase.request_id.clone(),
        product_id,
        user_id: purchase.user_id.clone(),
        state,
        order,
        pay_by: pay_by_ms.and_then(|ms| {
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
        }),
    };
    let placed = |order: orders::Order| -> Result<OrderStatus, ApiError> {
        Ok(match order.state() {
            Stored::Voided => state_of(OrderState::Voided, None, None),
            _ => {
                let pay_by = order.pay_by_ms;
                state_of(OrderState::Placed, Some(order.try_into()?), pay_by)
            }
        })
    };
    if let Some(order) = orders::find(&state.pool, key).await? {
        return Ok(Json(placed(order)?));
    }
    // Only stock kept in Redis has orders waiting in the stream: a purchase of any other is
    // answered from the database alone, whether Redis answers or not.
    let recalled = state.memory.product(product_id, None).await?;
    let redis_held = recalled
        .known
        .is_some_and(|known| known.home == Home::Redis);
    let waiting = match (&state.redis, redis_held) {
        (Some(redis), true) => redis.is_waiting(key).await?,
        _ => false,
    };
    if waiting {
        return Ok(Json(state_of(OrderState::Pending, None, None)));
    }
    // A consumer commits the order before it forgets the entry as waiting: one placed between
    // the two reads above is in the database now.
    if let Some(order) = orders::find(&state.pool, key).await? {
        return Ok(Json(placed(order)?));
    }
    if redis_held
        && let Some(redis) = &state.redis
        && lost(&state.pool, redis, product_id).await?
    {
        // An accepted order the stream lost is in neither: absent it may not be called.
        return Err(ApiError::StockLost);
    }
    Err(ApiError::NotFound(format!(
        "no order and nothing waiting under request id `{}` of this buyer for product \
         {product_id}",
        purchase.request_id
    )))
}

/// A buyer's purchase, as the path and query of its status, payment or cancellation name it:
/// its ids checked against their rules before the rate limiters or anything else keep a string
/// of them (as a purchase's are), its buyer the one
/// [`authenticate`](super::super::identity::authenticate) says, and the request counted against
/// that buyer's and the address's rates.
pub struct BuyersPurchase {
    pub product_id: u64,
    pub request_id: String,
    pub user_id: String,
}

impl BuyersPurchase {
    /// The purchase's key in the orders table.
    pub fn key(&self) -> PurchaseKey<'_> {
        PurchaseKey {
            product_id: self.product_id,
            user_id: &self.user_id,
            request_id: &self.request_id,
        }
    }
}

impl FromRequestParts<AppState> for BuyersPurchase {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let path = Path::<(u64, String)>::from_request_parts(parts, state).await;
        let Path((product_id, request_id)) = path?;
        super::super::check_product_id(product_id)?;
        let buyer = Query::<Buyer>::from_request_parts(parts, state).await;
        let Query(Buyer { user_id }) = buyer.map_err(|e| ApiError::BadRequest(e.body_text()))?;
        if let Some(user_id) = &user_id {
            super::super::check_id("user_id", user_id, MAX_USER_ID)?;
        }
        super::super::check_id("request_id", &request_id, MAX_REQUEST_ID)?;
        let named = user_id.map(Cow::Owned);
        let user_id = super::super::identity::authenticate(&state.settings, &parts.headers, named)?;
        let user_id = user_id.into_owned();
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>();
        super::super::rates::count(state, &user_id, peer)?;
        Ok(BuyersPurchase {
            product_id,
            request_id,
            user_id,
        })
    }
}

/// Whether Redis lost the stock of the product, which the database says it holds (see
/// [`crate::redis_stock::epoch`]).
async fn lost(pool: &Db, redis: &RedisStock, product: u64) -> Result<bool, ApiError> {
    let Some(rules) = products::rules(pool, product).await? else {
        return Ok(false);
    };
    if !rules.home.in_redis() {
        return Ok(false);
    }
    Ok(redis.marker(product).await?.unwrap_or(0) < rules.redis_epoch)
}
