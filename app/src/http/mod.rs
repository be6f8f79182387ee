//! Routes and handlers.

pub(crate) mod admin;
pub(crate) mod expiry;
pub(crate) mod identity;
pub(crate) mod meta;
pub mod openapi;
pub(crate) mod orders;
pub(crate) mod products;
pub(crate) mod rates;
pub(crate) mod tokens;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path};
use axum::routing::{get, post, put};

use crate::api::MAX_PRODUCT_ID;
use crate::error::ApiError;
use crate::state::{AppState, Settings};

/// The largest request body read, of any route: an order is a few dozen bytes, and the
/// largest body a route accepts — a product's reset with every rule — well under a kilobyte.
/// Ids at their longest with every character escaped stay under 4 KiB.
pub const MAX_BODY: usize = 16 << 10;

/// The service's routes over `state`.
pub fn router(state: AppState) -> Router {
    buyers()
        .merge(operators(&state.settings))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// The operators' routes only — health, metrics, the admin routes and a product's state —
/// over `state`, any other answered `503 overloaded`: what a connection past the buyers' share
/// is served ([`crate::overload::connections`]).
pub fn operator_router(state: AppState) -> Router {
    operators(&state.settings)
        .fallback(|| async { ApiError::Overloaded })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// What the metrics listener serves (`--metrics-listen`): health and metrics, nothing else.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(meta::healthz))
        .route("/metrics", get(meta::metrics))
        .with_state(state)
}

/// What buyers ask for: purchases, their orders, tokens, and what the service offers.
fn buyers() -> Router<AppState> {
    Router::new()
        .route("/api/products/{id}/orders", post(orders::create))
        .route("/api/products/{id}/tokens", post(tokens::issue))
        .route(
            "/api/products/{id}/orders/{request_id}",
            get(orders::status),
        )
        .route(
            "/api/products/{id}/orders/{request_id}/pay",
            post(orders::pay),
        )
        .route(
            "/api/products/{id}/orders/{request_id}/cancel",
            post(orders::cancel),
        )
        .route("/api/strategies", get(meta::strategies))
        .route("/api/noop", get(meta::noop))
        .route("/api/openapi.json", get(openapi::serve))
}

/// What operators ask for: health, metrics (unless a listener of their own serves them), a
/// product's state, and the admin routes.
fn operators(settings: &Settings) -> Router<AppState> {
    let routes = Router::new()
        .route(
            "/api/products/{id}",
            put(products::reset).get(products::show),
        )
        .route("/api/products/{id}/accounting", get(products::accounting))
        .route("/api/products/{id}/reconcile", post(products::reconcile))
        .route("/api/products/{id}/expire", post(orders::expire))
        .route("/api/expiry", put(expiry::switch))
        .route("/healthz", get(meta::healthz));
    match settings.metrics_apart {
        true => routes,
        false => routes.route("/metrics", get(meta::metrics)),
    }
}

/// The product id of the path: a number from 0 to [`MAX_PRODUCT_ID`], else `bad_request`.
fn product_id(path: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    let Path(id) = path?;
    check_product_id(id)?;
    Ok(id)
}

/// `invalid_request` unless `value`, the id named `field`, has 1 to `max` characters and no
/// white space at either end: the rule of every user id and request id, in a body, a path, a
/// query or a buyer token.
fn check_id(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    // No more bytes than `max` is no more characters: most ids are counted without a walk.
    let too_long = value.len() > max && value.chars().count() > max;
    let padded = value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace);
    if value.is_empty() || too_long || padded {
        return Err(ApiError::Invalid(format!(
            "{field} must be 1 to {max} characters without surrounding spaces"
        )));
    }
    Ok(())
}

/// `bad_request` unless `id` is at most [`MAX_PRODUCT_ID`].
fn check_product_id(id: u64) -> Result<(), ApiError> {
    match id > MAX_PRODUCT_ID {
        true => Err(ApiError::BadRequest(format!(
            "product id must be at most {MAX_PRODUCT_ID}"
        ))),
        false => Ok(()),
    }
}
