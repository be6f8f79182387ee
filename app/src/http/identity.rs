//! The buyer of a request (see [`crate::buyer`]): what the purchase, status, pay, cancel and
//! purchase-token routes settle before anything else keeps the request's `user_id` — the
//! per-user rate limiter included.

use std::borrow::Cow;
use std::time::SystemTime;

use axum::http::{HeaderMap, header};

use crate::api::MAX_USER_ID;
use crate::error::ApiError;
use crate::state::Settings;

/// The buyer of a request that names `named` (its `user_id`, [checked](super::check_id)
/// when given), with its headers.
///
/// With a buyer key, requires `Authorization: Bearer <buyer token>`: a missing, malformed,
/// expired or forged token is `unauthenticated`; the buyer is the token's, and a `user_id` the
/// request names must be it (`not_your_order` if not). The admin token stands for any buyer, so
/// that the operator's fault-injection headers (which take it) still work on buyer routes: the
/// request then names its buyer. Without a buyer key (`--anonymous-buyers`) the buyer is the
/// one the request names, which it must.
///
/// A buyer the request names is given back as it came, and checked without allocating; only
/// the buyer of a request that names none is decoded from the token, into a string of its own.
pub(crate) fn authenticate<'a>(
    settings: &Settings,
    headers: &HeaderMap,
    named: Option<Cow<'a, str>>,
) -> Result<Cow<'a, str>, ApiError> {
    let Some(key) = &settings.buyer_key else {
        return named.ok_or_else(|| {
            ApiError::Invalid(
                "user_id is required: this deployment takes buyers on their word \
                 (--anonymous-buyers)"
                    .into(),
            )
        });
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthenticated)?;
    match (key.verify(bearer, SystemTime::now()), named) {
        (Ok(buyer), Some(named)) if buyer.names(&named) => Ok(named),
        (Ok(_), Some(_)) => Err(ApiError::NotYourOrder),
        (Ok(buyer), None) => {
            let user_id = buyer.user_id().ok_or(ApiError::Unauthenticated)?;
            super::check_id("the buyer token's user id", &user_id, MAX_USER_ID)?;
            Ok(Cow::Owned(user_id))
        }
        (Err(_), named)
            if settings.admin_token.is_some()
                && super::admin::authorize(settings, headers).is_ok() =>
        {
            named.ok_or_else(|| {
                ApiError::Invalid(
                    "user_id is required with the admin token: it stands for any buyer, and \
                     names none"
                        .into(),
                )
            })
        }
        (Err(_), _) => Err(ApiError::Unauthenticated),
    }
}
