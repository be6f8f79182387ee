//! `POST /api/products/{id}/orders/{request_id}/pay` and `…/cancel` (the buyer's), and `POST
//! /api/products/{id}/expire` (admin: one round of the expiry sweep on the product, now).

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;

use super::status::{Buyer, BuyersPurchase};
use crate::api::{ErrorBody, ExpiryRound, OrderResponse};
use crate::error::ApiError;
use crate::lifecycle::{Check, sweep};
use crate::state::AppState;

/// Request header that makes a transition read the order's state and write it apart (only with
/// `--allow-fault-injection`, and the admin token when one is set).
pub const UNCHECKED_HEADER: &str = "x-seckill-unchecked-transition";

/// Pays the buyer's reserved order, before its payment deadline.
#[utoipa::path(post, path = "/api/products/{id}/orders/{request_id}/pay", tag = "orders",
    params(
        ("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0),
        ("request_id" = String, Path, description = "The request id of the purchase"),
        Buyer),
    responses(
        (status = 200, description = "The order, now `paid`", body = OrderResponse),
        (status = 400, description = "`bad_request`: a malformed id, path, query or header", body = ErrorBody),
        (status = 401, description = "`unauthenticated`: no valid buyer token (when the server has a buyer key), or `unauthorized`: the unchecked-transition header without the admin token (when one is set)", body = ErrorBody),
        (status = 403, description = "`not_your_order`: the buyer token names another buyer than the query's `user_id`", body = ErrorBody),
        (status = 404, description = "`not_found`: this buyer has no order under this request id for this product", body = ErrorBody),
        (status = 409, description = "`order_expired` (the deadline passed: nothing is paid, the units go back on sale), `order_cancelled`, `order_paid` (paid already), `order_pending` (accepted, not placed yet) or `purchase_voided`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: a user id or request id out of its rules (its length, white space at an end), or no `user_id` on a server without a buyer key", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this buyer or address is past its rate (the purchases' rate: a payment counts as one); retry after Retry-After", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait"))),
        (status = 503, description = "`busy` or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn pay(
    State(state): State<AppState>,
    headers: HeaderMap,
    purchase: BuyersPurchase,
) -> Result<Json<OrderResponse>, ApiError> {
    let check = check(&state, &headers)?;
    let order = state.life.pay(purchase.key(), check).await?;
    Ok(Json(order.try_into()?))
}

/// Cancels the buyer's reserved order: its units go back on sale, and the buyer may buy again.
#[utoipa::path(post, path = "/api/products/{id}/orders/{request_id}/cancel", tag = "orders",
    params(
        ("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0),
        ("request_id" = String, Path, description = "The request id of the purchase"),
        Buyer),
    responses(
        (status = 200, description = "The order, now `cancelled`", body = OrderResponse),
        (status = 400, description = "`bad_request`: a malformed id, path, query or header", body = ErrorBody),
        (status = 401, description = "`unauthenticated`: no valid buyer token (when the server has a buyer key), or `unauthorized`: a fault-injection header without the admin token (when one is set)", body = ErrorBody),
        (status = 403, description = "`not_your_order`: the buyer token names another buyer than the query's `user_id`", body = ErrorBody),
        (status = 404, description = "`not_found`: this buyer has no order under this request id for this product", body = ErrorBody),
        (status = 409, description = "`order_cancelled` (cancelled already: nothing changes), `order_expired`, `order_paid`, `order_pending` or `purchase_voided`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: a user id or request id out of its rules (its length, white space at an end), or no `user_id` on a server without a buyer key", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this buyer or address is past its rate (the purchases' rate: a cancellation counts as one); retry after Retry-After", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait"))),
        (status = 503, description = "`busy` or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    purchase: BuyersPurchase,
) -> Result<Json<OrderResponse>, ApiError> {
    let check = check(&state, &headers)?;
    let hold = hold(&state, &headers)?;
    let order = state.life.cancel(purchase.key(), check, hold).await?;
    Ok(Json(order.try_into()?))
}

/// Runs one round of the expiry sweep on the product now (admin): what every instance's sweep
/// does on its own every `--expiry-interval-ms`, for every product.
#[utoipa::path(post, path = "/api/products/{id}/expire", tag = "products",
    params(("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0)),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "What the round did", body = ExpiryRound),
        (status = 400, description = "`bad_request`: the id is not a number in range, or a malformed header", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = ErrorBody),
        (status = 503, description = "`busy` or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn expire(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<ExpiryRound>, ApiError> {
    super::super::admin::authorize(&state.settings, &headers)?;
    let id = super::super::product_id(path)?;
    let check = check(&state, &headers)?;
    let hold = hold(&state, &headers)?;
    let round = sweep::round(&state.life, Some(id), state.settings.sweep, check, hold).await?;
    Ok(Json(round))
}

/// The unchecked variant when asked for and allowed; the conditional one otherwise.
fn check(state: &AppState, headers: &HeaderMap) -> Result<Check, ApiError> {
    if !state.settings.allow_fault_injection || !headers.contains_key(UNCHECKED_HEADER) {
        return Ok(Check::Conditional);
    }
    super::super::admin::authorize(&state.settings, headers)?;
    Ok(Check::Unchecked)
}

/// The injected pause inside the transition, when allowed.
fn hold(state: &AppState, headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    if !state.settings.allow_fault_injection {
        return Ok(None);
    }
    let hold = super::admit::hold(headers)?;
    if hold.is_some() {
        super::super::admin::authorize(&state.settings, headers)?;
    }
    Ok(hold)
}
