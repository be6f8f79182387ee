//! `PUT /api/expiry`: pausing and resuming an instance's expiry sweep (admin).

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::HeaderMap;

use crate::api::{ErrorBody, SweepState, SweepSwitch};
use crate::error::ApiError;
use crate::state::AppState;

/// Pauses or resumes this instance's expiry sweep (admin) and answers once no round of it is
/// running. A paused sweep expires nothing and queries nothing; due orders wait, still unpaid
/// (a payment after the deadline stays refused), and the first round after the resume ends
/// them. For an operator whose payments cannot go through for a while, and for measuring what
/// the sweep costs the purchases running beside it. Every instance has its own switch.
#[utoipa::path(put, path = "/api/expiry", tag = "orders",
    request_body = SweepSwitch,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The sweep now", body = SweepState),
        (status = 400, description = "`bad_request`: malformed JSON", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body had not all come by its deadline (`--body-read-timeout-ms`); the connection is closed", body = ErrorBody),
        (status = 415, description = "`bad_request`: the body is not `application/json`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: `paused` missing or not a boolean, or unknown fields", body = ErrorBody)))]
pub async fn switch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<SweepSwitch>, JsonRejection>,
) -> Result<Json<SweepState>, ApiError> {
    super::admin::authorize(&state.settings, &headers)?;
    let Json(SweepSwitch { paused }) = body?;
    state.life.pause_sweep(paused).await;
    let paused = state.life.sweep_paused();
    Ok(Json(SweepState {
        paused,
        sweeping: !paused && !state.settings.sweep.interval.is_zero(),
    }))
}
