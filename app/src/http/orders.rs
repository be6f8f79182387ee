//! `POST /api/products/{id}/orders`: validate, run the chosen strategy in a task of its own
//! (so that a buyer who hangs up never cancels a purchase half-way), answer or replay; and
//! `GET /api/products/{id}/orders/{request_id}?user_id=…`: where a buyer's purchase stands.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::api::{
    ErrorBody, MAX_REQUEST_ID, MAX_USER_ID, OrderRequest, OrderResponse, OrderState, OrderStatus,
    Strategy,
};
use crate::db::orders::{self, Order, OrderState as Stored, PurchaseKey};
use crate::error::ApiError;
use crate::metrics::Observation;
use crate::redis_stock::RedisStock;
use crate::state::AppState;
use crate::strategy::{Purchase, PurchaseError, PurchaseStats, Purchased, StockStrategy};

/// Request header that makes the strategy pause inside its critical section (only when the
/// service runs with `--allow-fault-injection`).
pub const HOLD_HEADER: &str = "x-seckill-hold-ms";
/// Longest accepted injected pause.
const MAX_HOLD_MS: u64 = 120_000;

impl TryFrom<Order> for OrderResponse {
    type Error = ApiError;

    fn try_from(o: Order) -> Result<OrderResponse, ApiError> {
        let strategy = o
            .strategy
            .parse::<Strategy>()
            .map_err(|e| ApiError::Internal(format!("order {} names {e}", o.order_id).into()))?;
        Ok(OrderResponse {
            order_id: o.order_id,
            product_id: o.product_id,
            user_id: o.user_id,
            quantity: o.quantity,
            strategy,
            request_id: o.request_id,
            fencing_token: o.fencing_token,
        })
    }
}

/// A successful answer to a purchase.
#[derive(Debug)]
pub enum Success {
    /// `201`: the order is recorded.
    Created(OrderResponse),
    /// `200`: the original order of this request id.
    Replayed(OrderResponse),
    /// `202`: the units are taken and the order is queued; `Location` tells where to ask.
    Accepted(OrderStatus),
}

impl IntoResponse for Success {
    fn into_response(self) -> Response {
        match self {
            Success::Created(order) => (StatusCode::CREATED, Json(order)).into_response(),
            Success::Replayed(order) => (StatusCode::OK, Json(order)).into_response(),
            Success::Accepted(status) => {
                let location = format!(
                    "/api/products/{}/orders/{}?user_id={}",
                    status.product_id,
                    encode_segment(&status.request_id),
                    encode_segment(&status.user_id)
                );
                let mut response = (StatusCode::ACCEPTED, Json(status)).into_response();
                if let Ok(value) = HeaderValue::from_str(&location) {
                    response.headers_mut().insert(header::LOCATION, value);
                }
                response
            }
        }
    }
}

type Answer = Result<Success, ApiError>;

/// Buys `quantity` units through a strategy; idempotent per `request_id`.
#[utoipa::path(post, path = "/api/products/{id}/orders", tag = "orders",
    params(
        ("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0),
        ("X-Seckill-Hold-Ms" = Option<u64>, Header, minimum = 0, maximum = 120_000,
            description = "Milliseconds to pause inside the critical section (listed only when \
                           the server runs with --allow-fault-injection; ignored otherwise)")),
    request_body = OrderRequest,
    responses(
        (status = 201, description = "Order created", body = OrderResponse),
        (status = 200, description = "Replay: the original order of this request_id", body = OrderResponse),
        (status = 202, description = "Accepted, not yet placed (`redis-lua-stream`): the units are taken and the order is queued; `GET` the `Location` for its state", body = OrderStatus,
            headers(("Location" = String, description = "`/api/products/{id}/orders/{request_id}?user_id={user_id}`"))),
        (status = 400, description = "`bad_request`: malformed JSON, id or header", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the fault-injection header without the admin token (when one is set)", body = ErrorBody),
        (status = 403, description = "`strategy_not_offered`: this deployment does not offer the strategy", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown product", body = ErrorBody),
        (status = 409, description = "`sold_out`, `lock_lost` (a fenced write was refused), `idempotency_conflict` (this buyer used the request id for this product with another quantity or strategy), or `purchase_voided` (a reconciliation fenced this purchase out; nothing was bought)", body = ErrorBody),
        (status = 422, description = "`invalid_request` (the body breaks the schema: a missing field, an unknown one, a value out of range), or `unknown_strategy`", body = ErrorBody),
        (status = 503, description = "`busy` (retry after Retry-After) or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
    body: Bytes,
) -> Answer {
    let product_id = super::product_id(path)?;
    let request = parse(&body)?;
    let (purchase, strategy) = validate(&state, &headers, product_id, request)?;
    // The purchase runs to its end whatever happens to this request: hyper drops the handler
    // when the buyer hangs up, and units taken outside a transaction (Redis) would stay taken
    // without an order. A task of its own is not dropped with the handler.
    let work = tokio::spawn(async move {
        let _in_flight = state.metrics.purchase_started();
        let started = Instant::now();
        let answer = run(&state, &strategy, &purchase).await;
        let outcome = match &answer {
            Ok(Success::Created(_)) => "created",
            Ok(Success::Replayed(_)) => "replayed",
            Ok(Success::Accepted(_)) => "accepted",
            Err(e) => e.code().name(),
        };
        state.metrics.observe(Observation {
            strategy: purchase.strategy.name(),
            outcome,
            latency: started.elapsed(),
            lock_wait: purchase.stats.lock_wait(),
            retries: purchase.stats.retries(),
        });
        answer
    });
    work.await.unwrap_or_else(|e| {
        Err(ApiError::Internal(
            format!("the purchase task failed: {e}").into(),
        ))
    })
}

async fn run(state: &AppState, strategy: &Arc<dyn StockStrategy>, purchase: &Purchase) -> Answer {
    match strategy.purchase(purchase).await {
        Ok(Purchased::Placed(placed)) => Ok(Success::Created(OrderResponse {
            order_id: placed.order_id,
            product_id: purchase.product_id,
            user_id: purchase.user_id.clone(),
            quantity: purchase.quantity,
            strategy: purchase.strategy,
            request_id: purchase.request_id.clone(),
            fencing_token: placed.fencing_token,
        })),
        Ok(Purchased::Accepted) => Ok(Success::Accepted(OrderStatus {
            request_id: purchase.request_id.clone(),
            product_id: purchase.product_id,
            user_id: purchase.user_id.clone(),
            state: OrderState::Pending,
            order: None,
        })),
        Err(PurchaseError::Duplicate) => replay(state, purchase).await?.ok_or_else(|| {
            ApiError::Internal(
                "duplicate purchase, but its order is gone (product reset meanwhile?)".into(),
            )
        }),
        // Any refusal may answer the retry of a click that did buy — its first answer lost, or
        // a 503 after a commit whose outcome the server could not know — and the strategy gave
        // up before reaching the order insert. Look the order up before refusing.
        Err(e) => match replay(state, purchase).await {
            Ok(Some(original)) => Ok(original),
            Err(definite @ (ApiError::IdempotencyConflict(_) | ApiError::PurchaseVoided)) => {
                Err(definite)
            }
            Ok(None) | Err(_) => Err(e.into()),
        },
    }
}

/// The original order of this purchase (`200`), if there is one. The same buyer's request id
/// used for this product with another quantity or strategy is a conflict; a purchase a
/// reconciliation voided is refused as such.
async fn replay(state: &AppState, purchase: &Purchase) -> Result<Option<Success>, ApiError> {
    let Some(original) = orders::find(&state.pool, purchase.key()).await? else {
        return Ok(None);
    };
    if original.state() == Stored::Voided {
        return Err(ApiError::PurchaseVoided);
    }
    let same =
        original.quantity == purchase.quantity && original.strategy == purchase.strategy.name();
    if !same {
        return Err(ApiError::IdempotencyConflict(format!(
            "request id `{}` was already used by this buyer for product {} with quantity {} \
             through strategy `{}`; use a new request id",
            purchase.request_id, original.product_id, original.quantity, original.strategy
        )));
    }
    Ok(Some(Success::Replayed(original.try_into()?)))
}

/// Who asks for a purchase's status: its buyer.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Buyer {
    /// The buyer whose purchase this is; a purchase is shown to its buyer only.
    pub user_id: String,
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
        (status = 404, description = "`not_found`: this buyer has no order and nothing waiting under this request id for this product", body = ErrorBody),
        (status = 503, description = "`backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn status(
    State(state): State<AppState>,
    path: Result<Path<(u64, String)>, PathRejection>,
    buyer: Result<Query<Buyer>, QueryRejection>,
) -> Result<Json<OrderStatus>, ApiError> {
    let Path((product_id, request_id)) = path?;
    super::check_product_id(product_id)?;
    let Query(Buyer { user_id }) = buyer.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let key = PurchaseKey {
        product_id,
        user_id: &user_id,
        request_id: &request_id,
    };
    let state_of = |state, order| OrderStatus {
        request_id: request_id.clone(),
        product_id,
        user_id: user_id.clone(),
        state,
        order,
    };
    // The stream first, the database second: an order placed in between is then found in the
    // database, where the other order would miss it in both.
    let waiting = match &state.redis {
        Some(redis) => waiting(redis, key).await?,
        None => false,
    };
    if let Some(order) = orders::find(&state.pool, key).await? {
        return Ok(Json(match order.state() {
            Stored::Voided => state_of(OrderState::Voided, None),
            Stored::Placed => state_of(OrderState::Placed, Some(order.try_into()?)),
        }));
    }
    match waiting {
        true => Ok(Json(state_of(OrderState::Pending, None))),
        false => Err(ApiError::NotFound(format!(
            "no order and nothing waiting under request id `{request_id}` of this buyer for \
             product {product_id}"
        ))),
    }
}

async fn waiting(redis: &RedisStock, key: PurchaseKey<'_>) -> Result<bool, ApiError> {
    Ok(redis.is_waiting(key).await?)
}

/// `value` as one URL path segment: unreserved characters as they are, every other byte
/// percent-encoded.
fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

fn validate(
    state: &AppState,
    headers: &HeaderMap,
    product_id: u64,
    request: OrderRequest,
) -> Result<(Arc<Purchase>, Arc<dyn StockStrategy>), ApiError> {
    let settings = &state.settings;
    let name = request.strategy.unwrap_or(settings.default_strategy);
    if !settings.offers(name) {
        return Err(ApiError::StrategyNotOffered(format!(
            "this deployment does not offer strategy `{name}` (see GET /api/strategies)"
        )));
    }
    let strategy = state.registry.get(name).clone();
    if request.quantity < 1 || request.quantity > i64::from(settings.max_quantity) {
        return Err(ApiError::Invalid(format!(
            "quantity must be between 1 and {}",
            settings.max_quantity
        )));
    }
    check_id("user_id", &request.user_id, MAX_USER_ID)?;
    check_id("request_id", &request.request_id, MAX_REQUEST_ID)?;
    let hold = match settings.allow_fault_injection {
        true => hold(headers)?,
        false => None,
    };
    // A pause holds a lock or a row for up to two minutes: once there is an admin token, it
    // takes the token to ask for one.
    if hold.is_some() {
        super::admin::authorize(settings, headers)?;
    }
    let purchase = Arc::new(Purchase {
        product_id,
        user_id: request.user_id,
        quantity: u32::try_from(request.quantity).unwrap_or(u32::MAX),
        request_id: request.request_id,
        strategy: name,
        hold,
        stats: PurchaseStats::default(),
    });
    Ok((purchase, strategy))
}

/// Parses the body; a strategy name outside the catalogue is `unknown_strategy`, anything
/// else that does not fit the schema is `bad_request` (not JSON) or `invalid_request`.
fn parse(body: &[u8]) -> Result<OrderRequest, ApiError> {
    // One typed pass on the hot path; the untyped one only to say what was wrong.
    let invalid = match serde_json::from_slice::<OrderRequest>(body) {
        Ok(request) => return Ok(request),
        Err(e) => e,
    };
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?;
    if let Some(name) = value.get("strategy").and_then(|s| s.as_str())
        && let Err(unknown) = name.parse::<Strategy>()
    {
        return Err(ApiError::UnknownStrategy(unknown.to_string()));
    }
    Err(ApiError::Invalid(format!("invalid order: {invalid}")))
}

fn check_id(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    let len = value.chars().count();
    if len == 0 || len > max || value.trim() != value {
        return Err(ApiError::Invalid(format!(
            "{field} must be 1 to {max} characters without surrounding spaces"
        )));
    }
    Ok(())
}

fn hold(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
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
