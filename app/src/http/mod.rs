//! Routes and handlers.

pub(crate) mod admin;
pub(crate) mod expiry;
pub(crate) mod identity;
pub(crate) mod meta;
pub mod openapi;
pub(crate) mod orders;
pub(crate) mod products;
pub(crate) mod tokens;

use axum::Router;
use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use axum::routing::{get, post, put};

use crate::api::MAX_PRODUCT_ID;
use crate::error::ApiError;
use crate::state::AppState;

/// The service's routes over `state`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/api/products/{id}",
            put(products::reset).get(products::show),
        )
        .route("/api/products/{id}/accounting", get(products::accounting))
        .route("/api/products/{id}/orders", post(orders::create))
        .route("/api/products/{id}/reconcile", post(products::reconcile))
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
        .route("/api/products/{id}/expire", post(orders::expire))
        .route("/api/expiry", put(expiry::switch))
        .route("/api/strategies", get(meta::strategies))
        .route("/api/noop", get(meta::noop))
        .route("/api/openapi.json", get(openapi::serve))
        .route("/healthz", get(meta::healthz))
        .route("/metrics", get(meta::metrics))
        .with_state(state)
}

/// The product id of the path: a number from 0 to [`MAX_PRODUCT_ID`], else `bad_request`.
fn product_id(path: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    let Path(id) = path?;
    check_product_id(id)?;
    Ok(id)
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
