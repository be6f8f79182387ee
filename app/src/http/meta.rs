//! Service metadata: strategies, health, metrics, OpenAPI.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use crate::strategy::StrategyInfo;

/// Body of `GET /api/strategies`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StrategyList {
    pub default: String,
    pub strategies: Vec<StrategyInfo>,
}

#[utoipa::path(get, path = "/api/strategies", tag = "meta",
    responses((status = 200, description = "Every registered strategy", body = StrategyList)))]
pub async fn strategies(State(state): State<AppState>) -> Json<StrategyList> {
    Json(StrategyList {
        default: state.settings.default_strategy.clone(),
        strategies: state.registry.infos().cloned().collect(),
    })
}

/// Does nothing: the benchmark's baseline for what the HTTP stack alone costs.
#[utoipa::path(get, path = "/api/noop", tag = "meta",
    responses((status = 204, description = "Nothing, as fast as the server can say it")))]
pub async fn noop() -> axum::http::StatusCode {
    axum::http::StatusCode::NO_CONTENT
}

/// Body of a healthy `GET /healthz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    pub status: &'static str,
    pub database: &'static str,
}

/// 200 when the database answers, else 503 `backend_unavailable`.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses(
    (status = 200, description = "The database answers", body = Health),
    (status = 503, description = "`backend_unavailable`", body = ErrorBody)))]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    sqlx::query("SELECT 1").execute(&state.pool).await?;
    Ok(Json(Health {
        status: "ok",
        database: "ok",
    }))
}

#[utoipa::path(get, path = "/metrics", tag = "meta",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

#[utoipa::path(get, path = "/api/openapi.json", tag = "meta",
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn openapi() -> impl IntoResponse {
    Json(crate::openapi::document())
}
