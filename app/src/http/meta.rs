//! Service metadata: strategies, health, metrics, OpenAPI.

use crate::api::{ErrorBody, Health, StrategyInfo, StrategyList};
use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

#[utoipa::path(get, path = "/api/strategies", tag = "meta",
    responses((status = 200, description = "Every strategy this deployment offers", body = StrategyList)))]
pub async fn strategies(State(state): State<AppState>) -> Json<StrategyList> {
    Json(StrategyList {
        default: state.settings.default_strategy,
        strategies: state
            .settings
            .offered
            .iter()
            .map(|&s| StrategyInfo {
                service: state.pool.engine().service_of(s),
                ..StrategyInfo::of(s)
            })
            .collect(),
    })
}

/// Does nothing: the benchmark's baseline for what the HTTP stack alone costs.
#[utoipa::path(get, path = "/api/noop", tag = "meta",
    responses((status = 204, description = "Nothing, as fast as the server can say it")))]
pub async fn noop() -> axum::http::StatusCode {
    axum::http::StatusCode::NO_CONTENT
}

/// 200 when the database answers (and, on a Galera cluster, its node is in the primary
/// component), else 503 `backend_unavailable`.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses(
    (status = 200, description = "The database answers", body = Health),
    (status = 503, description = "`backend_unavailable`", body = ErrorBody,
        headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if !state.membership.ready() {
        return Err(crate::error::ApiError::out_of_the_cluster());
    }
    crate::db::engine::each_engine!(state.pool.pool(), |c, _e| sqlx::query("SELECT 1")
        .execute(c)
        .await
        .map(|_| ()))?;
    Ok(Json(Health {
        status: "ok".into(),
        database: "ok".into(),
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
        state.metrics.render()
            + &state.limiter.render(&state.settings.offered)
            + &state.rates.render()
            + &state.pages.render()
            + &state.connections.render()
            + &state.memory.render()
            + &state.semi_sync.render(),
    )
}
