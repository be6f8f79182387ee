//! `POST /api/products/{id}/tokens`: a buyer's purchase token, issued only while the sale is
//! open, for one purchase under a request id it names, until it expires (see
//! [`crate::purchase_token`]).

use std::borrow::Cow;
use std::net::SocketAddr;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::{Extension, Json};
use time::OffsetDateTime;

use crate::api::{ErrorBody, MAX_USER_ID, PurchaseToken, TokenRequest};
use crate::error::ApiError;
use crate::purchase_token;
use crate::state::AppState;

/// Issues a purchase token of the buyer (the buyer token's, or on a server without a buyer key
/// the body's `user_id`) for the product's sale, once the sale is open: good
/// for one purchase, under the request id it names, for `--purchase-token-ttl-ms`. A token
/// request counts against the buyer's and the address's rates as a purchase does: it reads the
/// product as a purchase does, from the database when this instance does not remember it (an
/// unknown id, always).
#[utoipa::path(post, path = "/api/products/{id}/tokens", tag = "orders",
    params(("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0)),
    request_body = TokenRequest,
    responses(
        (status = 200, description = "A token for one purchase of this buyer in this sale: the request id that purchase must carry, and when the token expires", body = PurchaseToken),
        (status = 400, description = "`bad_request`: malformed JSON or id", body = ErrorBody),
        (status = 401, description = "`unauthenticated`: no valid buyer token (when the server has a buyer key)", body = ErrorBody),
        (status = 403, description = "`not_your_order`: the buyer token names another buyer than the body's `user_id`", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown product", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body had not all come by its deadline (`--body-read-timeout-ms`); the connection is closed", body = ErrorBody),
        (status = 409, description = "`sale_not_started` or `sale_ended`", body = ErrorBody),
        (status = 415, description = "`bad_request`: the body is not `application/json`", body = ErrorBody),
        (status = 422, description = "`invalid_request`: a user id out of its rules, no `user_id` on a server without a buyer key, or unknown fields", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this buyer or address is past its rate (the purchases' rate: a token request counts as one); retry after Retry-After", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait"))),
        (status = 503, description = "`backend_unavailable`", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn issue(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<u64>, PathRejection>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Result<Json<TokenRequest>, JsonRejection>,
) -> Result<Json<PurchaseToken>, ApiError> {
    let asked = std::time::Instant::now();
    let id = super::product_id(path)?;
    let Json(TokenRequest { user_id }) = body?;
    if let Some(user_id) = &user_id {
        super::check_id("user_id", user_id, MAX_USER_ID)?;
    }
    let user_id =
        super::identity::authenticate(&state.settings, &headers, user_id.map(Cow::Owned))?;
    let user_id = user_id.into_owned();
    super::rates::count(&state, &user_id, peer.as_deref())?;
    let known = (state.memory.product(id, None).await?.known)
        .ok_or_else(|| ApiError::NotFound(format!("no product {id}")))?;
    super::orders::within_sale(&known.rules, asked)?;
    let settings = &state.settings;
    let expires_at = OffsetDateTime::now_utc() + settings.purchase_token_ttl;
    // To the millisecond: what the token carries is what the buyer is told.
    let expires_at =
        (expires_at.replace_millisecond(expires_at.millisecond())).unwrap_or(expires_at);
    let issued = (settings.token_key).issue(
        id,
        &user_id,
        known.rules.starts_ms(),
        purchase_token::epoch_ms(expires_at),
    );
    Ok(Json(PurchaseToken {
        product_id: id,
        user_id,
        token: issued.token,
        request_id: issued.request_id,
        expires_at,
    }))
}
