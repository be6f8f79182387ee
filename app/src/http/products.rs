//! `PUT /api/products/{id}` (admin: create or reset) and `GET /api/products/{id}`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;

use crate::db::products::{self, ProductView};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// Body of `PUT /api/products/{id}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetProduct {
    pub stock: i64,
}

/// Creates the product or resets it to `stock` units and deletes its orders (admin).
#[utoipa::path(put, path = "/api/products/{id}", tag = "products",
    params(("id" = u64, Path, description = "Product id")),
    request_body = ResetProduct,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The product after the reset", body = ProductView),
        (status = 400, description = "Malformed JSON or id", body = ErrorBody),
        (status = 401, description = "Missing or wrong admin token", body = ErrorBody),
        (status = 422, description = "Negative stock", body = ErrorBody)))]
pub async fn reset(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
    body: Result<Json<ResetProduct>, JsonRejection>,
) -> Result<(StatusCode, Json<ProductView>), ApiError> {
    authorize(&state, &headers)?;
    let Path(id) = path?;
    let Json(body) = body?;
    if body.stock < 0 {
        return Err(ApiError::Invalid("stock must be 0 or more".into()));
    }
    products::reset(&state.pool, id, body.stock).await?;
    let view = products::view(&state.pool, id)
        .await?
        .ok_or_else(|| ApiError::Internal("product vanished right after its reset".into()))?;
    Ok((StatusCode::OK, Json(view)))
}

/// The product's stock and order totals.
#[utoipa::path(get, path = "/api/products/{id}", tag = "products",
    params(("id" = u64, Path, description = "Product id")),
    responses(
        (status = 200, body = ProductView),
        (status = 404, description = "Unknown product", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<ProductView>, ApiError> {
    let Path(id) = path?;
    products::view(&state.pool, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no product {id}")))
}

/// With an admin token configured, requires `Authorization: Bearer <token>`.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.settings.admin_token else {
        return Ok(());
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(ApiError::Unauthorized),
    }
}

/// Compares without stopping at the first difference, so timing does not reveal a prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
