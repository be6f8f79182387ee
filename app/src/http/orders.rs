//! `POST /api/products/{id}/orders`: validate, run the chosen strategy, answer or replay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use crate::db::orders::{self, Order};
use crate::error::{ApiError, ErrorBody};
use crate::metrics::Observation;
use crate::state::AppState;
use crate::strategy::{Purchase, PurchaseError, PurchaseStats, StockStrategy};

/// Request header that makes the strategy pause inside its critical section (only when the
/// service runs with `--allow-fault-injection`).
pub const HOLD_HEADER: &str = "x-seckill-hold-ms";
/// Longest accepted injected pause.
const MAX_HOLD_MS: u64 = 120_000;
const MAX_USER_ID: usize = 64;
const MAX_REQUEST_ID: usize = 128;

/// Body of `POST /api/products/{id}/orders`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderRequest {
    pub user_id: String,
    pub quantity: i64,
    /// Client-chosen idempotency key: the same key again returns the first order.
    pub request_id: String,
    /// Strategy name; the server's default when absent.
    pub strategy: Option<String>,
}

/// An order as answered by `201` (created) and `200` (replayed).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OrderResponse {
    pub order_id: u64,
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub strategy: String,
    pub request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

impl From<Order> for OrderResponse {
    fn from(o: Order) -> OrderResponse {
        OrderResponse {
            order_id: o.order_id,
            product_id: o.product_id,
            user_id: o.user_id,
            quantity: o.quantity,
            strategy: o.strategy,
            request_id: o.request_id,
            fencing_token: o.fencing_token,
        }
    }
}

type Answer = Result<(StatusCode, Json<OrderResponse>), ApiError>;

/// Buys `quantity` units through a strategy; idempotent per `request_id`.
#[utoipa::path(post, path = "/api/products/{id}/orders", tag = "orders",
    params(
        ("id" = u64, Path, description = "Product id"),
        ("X-Seckill-Hold-Ms" = Option<u64>, Header,
            description = "Pause inside the critical section (only with --allow-fault-injection)")),
    request_body = OrderRequest,
    responses(
        (status = 201, description = "Order created", body = OrderResponse),
        (status = 200, description = "Replay: the original order of this request_id", body = OrderResponse),
        (status = 400, description = "Malformed JSON, id or header", body = ErrorBody),
        (status = 404, description = "Unknown product", body = ErrorBody),
        (status = 409, description = "`sold_out`, or `lock_lost` (a fenced write was refused)", body = ErrorBody),
        (status = 422, description = "Invalid quantity, ids or strategy", body = ErrorBody),
        (status = 503, description = "`busy` (retry after Retry-After) or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
    body: Result<Json<OrderRequest>, JsonRejection>,
) -> Answer {
    let Path(product_id) = path?;
    let Json(request) = body?;
    let (purchase, strategy) = validate(&state, &headers, product_id, request)?;
    let started = Instant::now();
    let answer = run(&state, &strategy, &purchase).await;
    let outcome = match &answer {
        Ok((StatusCode::CREATED, _)) => "created",
        Ok(_) => "replayed",
        Err(e) => e.code(),
    };
    state.metrics.observe(Observation {
        strategy: &purchase.strategy,
        outcome,
        latency: started.elapsed(),
        lock_wait: purchase.stats.lock_wait(),
        retries: purchase.stats.retries(),
    });
    answer
}

async fn run(state: &AppState, strategy: &Arc<dyn StockStrategy>, purchase: &Purchase) -> Answer {
    match strategy.purchase(purchase).await {
        Ok(placed) => Ok((
            StatusCode::CREATED,
            Json(OrderResponse {
                order_id: placed.order_id,
                product_id: purchase.product_id,
                user_id: purchase.user_id.clone(),
                quantity: purchase.quantity,
                strategy: purchase.strategy.clone(),
                request_id: purchase.request_id.clone(),
                fencing_token: placed.fencing_token,
            }),
        )),
        Err(PurchaseError::Duplicate) => {
            match orders::by_request_id(&state.pool, &purchase.request_id).await? {
                Some(original) => Ok((StatusCode::OK, Json(original.into()))),
                None => Err(ApiError::Internal(
                    "duplicate request id, but its order is gone (product reset meanwhile?)".into(),
                )),
            }
        }
        // A retry of a click that already bought must not be told "sold out" or "busy": the
        // strategy gave up before reaching the order insert, so look the order up.
        Err(e @ (PurchaseError::SoldOut | PurchaseError::Busy(_))) => {
            match orders::by_request_id(&state.pool, &purchase.request_id).await {
                Ok(Some(original)) => Ok((StatusCode::OK, Json(original.into()))),
                _ => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

fn validate(
    state: &AppState,
    headers: &HeaderMap,
    product_id: u64,
    request: OrderRequest,
) -> Result<(Purchase, Arc<dyn StockStrategy>), ApiError> {
    let settings = &state.settings;
    let name = request
        .strategy
        .unwrap_or_else(|| settings.default_strategy.clone());
    let strategy = state.registry.get(&name).cloned().ok_or_else(|| {
        let known: Vec<_> = state.registry.infos().map(|i| i.name.as_str()).collect();
        ApiError::UnknownStrategy(format!(
            "unknown strategy `{name}`; known: {}",
            known.join(", ")
        ))
    })?;
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
    let purchase = Purchase {
        product_id,
        user_id: request.user_id,
        quantity: u32::try_from(request.quantity).unwrap_or(u32::MAX),
        request_id: request.request_id,
        strategy: name,
        hold,
        stats: PurchaseStats::default(),
    };
    Ok((purchase, strategy))
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
