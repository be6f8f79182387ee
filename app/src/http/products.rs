//! `PUT /api/products/{id}` (admin: create or reset), `GET /api/products/{id}` (the public
//! page), `GET /api/products/{id}/accounting` (admin) and `reconcile` (admin).

use std::time::Instant;

use crate::api::{
    DEFAULT_BUCKETS, DEFAULT_PER_USER_LIMIT, ErrorBody, Home, MAX_BUCKETS, MAX_PAYMENT_WINDOW_MS,
    MAX_STOCK, ProductPage, ProductView, Reconciliation, ResetProduct, SaleRules, Strategies,
};
use crate::db::products;
use crate::error::ApiError;
use crate::inventory;
use crate::redis_stock::{self, News, RedisStockError};
use crate::state::{AppState, Settings};
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};

/// Creates the product or resets it to `stock` units kept in `home` (split evenly over
/// `buckets` buckets for the `buckets` home) and deletes its orders (admin). For `redis`, the
/// Redis counter is set (and its request-id records and waiting stream entries forgotten); for
/// any other home, the counter is deleted.
#[utoipa::path(put, path = "/api/products/{id}", tag = "products",
    params(("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0)),
    request_body = ResetProduct,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The product after the reset", body = ProductView),
        (status = 400, description = "`bad_request`: malformed JSON or id", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = ErrorBody),
        (status = 403, description = "`strategy_not_offered`: a strategy named that this deployment does not offer, or that sells stock kept in another home", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body had not all come by its deadline (`--body-read-timeout-ms`); the connection is closed", body = ErrorBody),
        (status = 415, description = "`bad_request`: the body is not `application/json`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: stock outside 0 to 1,000,000,000, buckets outside 1 to 1,024, a per-user limit outside 1 to 1,000,000,000, a payment window outside 1 ms to a week, a sale that ends before it starts, an empty list of strategies, `first_come` on a server without Redis, or unknown fields", body = ErrorBody),
        (status = 503, description = "`busy` (a row lock not obtained in time) or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn reset(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
    body: Result<Json<ResetProduct>, JsonRejection>,
) -> Result<(StatusCode, Json<ProductView>), ApiError> {
    super::admin::authorize(&state.settings, &headers)?;
    let id = super::product_id(path)?;
    let Json(body) = body?;
    if !(0..=MAX_STOCK).contains(&body.stock) {
        return Err(ApiError::Invalid(format!(
            "stock must be between 0 and {MAX_STOCK}"
        )));
    }
    let buckets = body.buckets.unwrap_or(i64::from(DEFAULT_BUCKETS));
    if !(1..=MAX_BUCKETS).contains(&buckets) {
        return Err(ApiError::Invalid(format!(
            "buckets must be between 1 and {MAX_BUCKETS}"
        )));
    }
    let buckets = u32::try_from(buckets).unwrap_or(DEFAULT_BUCKETS);
    let rules = rules_of(&body, &state.settings)?;
    if rules.first_come && state.first_come.is_none() {
        return Err(ApiError::Invalid(
            "first_come needs Redis, where the product's queue is kept (--redis-url)".into(),
        ));
    }
    let epoch =
        products::reset_with(&state.pool, id, body.stock, body.home, buckets, &rules).await?;
    // The stock's one home: the counter holds it for `redis`, and no counter is left otherwise.
    match (&state.redis, body.home) {
        (Some(redis), Home::Redis) => redis.seed(id, epoch, body.stock, &rules).await?,
        (Some(redis), Home::RedisSplit) => {
            (redis.seed_split(id, epoch, body.stock, buckets, &rules)).await?
        }
        (None, Home::Redis | Home::RedisSplit) => {
            return Err(RedisStockError::NotConfigured.into());
        }
        (Some(redis), _) => redis.remove(id).await?,
        (None, _) => {}
    }
    // A fresh queue, or none: a reset forgets every place.
    if let Some(queue) = &state.first_come {
        match rules.first_come {
            true => queue.open(id, body.stock).await?,
            false => queue.close(id).await?,
        }
    }
    stock_back(&state, id).await;
    let view = inventory::view(&state.pool, state.redis.as_ref(), id)
        .await?
        .ok_or_else(|| ApiError::Internal("product vanished right after its reset".into()))?;
    Ok((StatusCode::OK, Json(view)))
}

/// The product's public page: its rules and the units left, read from its home alone, at most
/// once per `--page-ttl-ms` by this instance (see [`crate::pages`]); served at most
/// `--page-views-per-second`, each view waiting for its turn (see [`crate::overload::Pacer`]).
#[utoipa::path(get, path = "/api/products/{id}", tag = "products",
    params(("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0)),
    responses(
        (status = 200, body = ProductPage),
        (status = 400, description = "`bad_request`: the id is not a number in range", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown product", body = ErrorBody),
        (status = 503, description = "`backend_unavailable`, or `busy`: the instance serves \
            this many page views a second, and this one's turn was further off than \
            `--page-max-wait-ms`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn show(
    State(state): State<AppState>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<ProductPage>, ApiError> {
    let id = super::product_id(path)?;
    if let Some(pacer) = &state.page_pacer {
        match pacer.turn(Instant::now()) {
            Ok(wait) if wait.is_zero() => {}
            Ok(wait) => tokio::time::sleep(wait).await,
            Err(_) => {
                return Err(ApiError::Busy(
                    "this instance serves products' pages at a set rate, and this view's turn \
                     was further off than it may wait"
                        .into(),
                ));
            }
        }
    }
    state
        .pages
        .page(id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no product {id}")))
}

/// The product's stock beside its orders' units by state (admin): what a sale really did, read
/// now through the readers' pool.
#[utoipa::path(get, path = "/api/products/{id}/accounting", tag = "products",
    params(("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0)),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = ProductView),
        (status = 400, description = "`bad_request`: the id is not a number in range", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown product", body = ErrorBody),
        (status = 503, description = "`backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn accounting(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<ProductView>, ApiError> {
    super::admin::authorize(&state.settings, &headers)?;
    let id = super::product_id(path)?;
    inventory::view(&state.readers, state.redis.as_ref(), id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no product {id}")))
}

/// Compares the product's Redis counter with its orders and waiting entries: rebuilds the
/// product's keys from its orders if Redis lost them, fences out and gives back purchases
/// charged without an order for longer than the reconcile grace, and repairs a counter that is
/// gone or above what the database accounts for (admin). Safe during a sale.
#[utoipa::path(post, path = "/api/products/{id}/reconcile", tag = "products",
    params(("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0)),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "What was found and what was changed", body = Reconciliation),
        (status = 400, description = "`bad_request`: the id is not a number in range", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown product, or its stock is not kept in Redis", body = ErrorBody),
        (status = 503, description = "`busy` (the counter moved meanwhile) or `backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn reconcile(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<Reconciliation>, ApiError> {
    super::admin::authorize(&state.settings, &headers)?;
    let id = super::product_id(path)?;
    let redis = state.redis.as_ref().ok_or(RedisStockError::NotConfigured)?;
    let found =
        redis_stock::reconcile(&state.pool, redis, id, state.settings.reconcile_grace).await?;
    if found.repaired || found.released_requests > 0 {
        tracing::warn!(?found, "reconciled a Redis stock counter");
        stock_back(&state, id).await;
    }
    Ok(Json(found))
}

/// The sale rules a reset asks for, checked against what the deployment offers.
fn rules_of(body: &ResetProduct, settings: &Settings) -> Result<SaleRules, ApiError> {
    let payment_window_ms = body.payment_window_ms.unwrap_or(settings.payment_window_ms);
    if !(1..=MAX_PAYMENT_WINDOW_MS).contains(&payment_window_ms) {
        return Err(ApiError::Invalid(format!(
            "payment_window_ms must be between 1 and {MAX_PAYMENT_WINDOW_MS}"
        )));
    }
    let per_user_limit = body.per_user_limit.unwrap_or(DEFAULT_PER_USER_LIMIT);
    if !(1..=MAX_STOCK).contains(&per_user_limit) {
        return Err(ApiError::Invalid(format!(
            "per_user_limit must be between 1 and {MAX_STOCK}"
        )));
    }
    Ok(SaleRules {
        per_user_limit,
        sale_starts_at: body.sale_starts_at,
        sale_ends_at: body.sale_ends_at,
        token_required: body.token_required,
        first_come: body.first_come,
        payment_window_ms,
        strategies: strategies_of(body, settings)?,
    })
}

/// The strategies that may sell the product: those the reset names, each offered and of its
/// home; by default one, the deployment's default strategy if it sells from this home, else
/// the first it offers that does.
fn strategies_of(body: &ResetProduct, settings: &Settings) -> Result<Strategies, ApiError> {
    let Some(named) = body.strategies else {
        let fitting = std::iter::once(settings.default_strategy)
            .chain(settings.offered.iter().copied())
            .find(|s| s.home() == body.home && settings.offers(*s));
        return fitting.map(|s| Strategies::of([s])).ok_or_else(|| {
            ApiError::StrategyNotOffered(format!(
                "this deployment offers no strategy that sells stock kept in `{}`",
                body.home.name()
            ))
        });
    };
    if named.is_empty() {
        return Err(ApiError::Invalid(
            "strategies must name at least one strategy".into(),
        ));
    }
    if let Some(unoffered) = named.iter().find(|s| !settings.offers(*s)) {
        return Err(ApiError::StrategyNotOffered(format!(
            "this deployment does not offer strategy `{unoffered}` (see GET /api/strategies)"
        )));
    }
    if let Some(elsewhere) = named.iter().find(|s| s.home() != body.home) {
        return Err(ApiError::StrategyNotOffered(format!(
            "strategy `{elsewhere}` sells stock kept in `{}`, not `{}`",
            elsewhere.home().name(),
            body.home.name()
        )));
    }
    Ok(named)
}

/// The product's stock may have come back, or its rules changed: this instance forgets what it
/// remembered of it, and tells the others (see [`crate::product_memory`]).
async fn stock_back(state: &AppState, id: u64) {
    state.memory.forget(id);
    if let Some(redis) = &state.redis
        && let Err(e) = redis.announce(id, News::Changed).await
    {
        tracing::warn!(product = id, error = %e,
            "could not announce it; other instances forget it within their memory's lifetime");
    }
}
