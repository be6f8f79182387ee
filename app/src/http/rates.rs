//! The buyers' rates (`--rate-per-user`, `--rate-per-address`), which every buyer route counts
//! against: a purchase, a purchase-token request, a status poll, a payment and a cancellation,
//! together. Each of them reads the database; a client that may poll or cancel as fast as it
//! likes takes the buyers' connections as a crowd of clicks would. A route asks once the
//! request's ids are within the rules and its buyer is authenticated: a limiter then remembers
//! no id longer than the rules allow, and a forged request spends nothing of its victim's rate.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;

use crate::error::ApiError;
use crate::state::AppState;

/// Counts the request against the rate of `user_id` and of its peer's address (when known);
/// `rate_limited` once either is past it.
pub(crate) fn count(
    state: &AppState,
    user_id: &str,
    peer: Option<&ConnectInfo<SocketAddr>>,
) -> Result<(), ApiError> {
    let address = peer.map(|ConnectInfo(peer)| peer.ip());
    match state.rates.within(user_id, address) {
        true => Ok(()),
        false => Err(ApiError::RateLimited),
    }
}
