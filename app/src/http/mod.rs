//! Routes and handlers.

pub(crate) mod meta;
pub(crate) mod orders;
pub(crate) mod products;

use axum::Router;
use axum::routing::{get, post, put};

use crate::state::AppState;

/// The service's routes over `state`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/api/products/{id}",
            put(products::reset).get(products::show),
        )
        .route("/api/products/{id}/orders", post(orders::create))
        .route("/api/strategies", get(meta::strategies))
        .route("/api/noop", get(meta::noop))
        .route("/api/openapi.json", get(meta::openapi))
        .route("/healthz", get(meta::healthz))
        .route("/metrics", get(meta::metrics))
        .with_state(state)
}
