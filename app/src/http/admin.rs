//! The admin token: what `PUT /api/products/{id}`, `reconcile` and the fault-injection header
//! require once one is configured.

use axum::http::{HeaderMap, header};

use crate::error::ApiError;
use crate::state::Settings;

/// With an admin token configured, requires `Authorization: Bearer <token>`.
pub(crate) fn authorize(settings: &Settings, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &settings.admin_token else {
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
