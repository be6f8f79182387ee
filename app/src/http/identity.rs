//! The buyer of a request, once a buyer key is configured (see [`crate::buyer`]): what the
//! purchase, status, pay, cancel and purchase-token routes check before anything else keeps
//! the request's `user_id` — the per-user rate limiter included.

use std::time::SystemTime;

use axum::http::{HeaderMap, header};

use crate::error::ApiError;
use crate::state::Settings;

/// With a buyer key configured, requires `Authorization: Bearer <buyer token>` naming
/// `user_id`: a missing, malformed, expired or forged token is `unauthenticated`, a good token
/// of another buyer `not_your_order`. The admin token stands for any buyer, so that the
/// operator's fault-injection headers (which take it) still work on buyer routes.
pub(crate) fn authenticate(
    settings: &Settings,
    headers: &HeaderMap,
    user_id: &str,
) -> Result<(), ApiError> {
    let Some(key) = &settings.buyer_key else {
        return Ok(());
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthenticated)?;
    match key.verify(bearer, SystemTime::now()) {
        Ok(buyer) if buyer.names(user_id) => Ok(()),
        Ok(_) => Err(ApiError::NotYourOrder),
        Err(_)
            if settings.admin_token.is_some()
                && super::admin::authorize(settings, headers).is_ok() =>
        {
            Ok(())
        }
        Err(_) => Err(ApiError::Unauthenticated),
    }
}
