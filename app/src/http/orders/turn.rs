//! A purchase of a product sold first come, first served: its place in the product's queue
//! ([`crate::first_come`]), taken before the admission limiter is asked for room.

use std::time::Instant;

use crate::error::ApiError;
use crate::first_come::{Ticket, Turn};
use crate::state::AppState;
use crate::strategy::Purchase;

use super::observe;

/// The ticket of `purchase`'s place, if it has one (`None`: it goes the ordinary way: every
/// unit is promised and none is being served, or the product has no queue); refused when every
/// unit is promised to earlier clicks, or the buyer's clicks being served hold the limit.
pub(super) async fn take(
    state: &AppState,
    purchase: &Purchase,
    started: Instant,
) -> Result<Option<Ticket>, ApiError> {
    let Some(queue) = &state.first_come else {
        return Ok(None);
    };
    // Boxed, here and in `settle`: Redis's round trips, kilobytes of future, would otherwise
    // be carried by every purchase's, first come or not.
    let refused = match Box::pin(queue.take(purchase)).await? {
        Turn::Yours(ticket) => return Ok(Some(ticket)),
        Turn::Settled | Turn::NotOpened => return Ok(None),
        Turn::Behind => ApiError::SoldOut,
        Turn::OverLimit => ApiError::LimitReached,
        Turn::Pending => ApiError::Busy(
            "this purchase is being served: ask for its status, or send it again later".into(),
        ),
    };
    let code = refused.code();
    observe(state, purchase.strategy, None, code, started);
    Err(refused)
}

/// Whether a purchase answered so keeps the unit its place kept: it was sold to it.
pub(super) fn kept(answer: &super::Answer) -> bool {
    matches!(
        answer,
        Ok(super::Success::Created(_) | super::Success::Accepted(_))
    )
}

/// Settles `ticket` once its purchase is answered, logging what cannot be settled (its place
/// is then given up at its deadline).
pub(super) async fn settle(ticket: Ticket, kept: bool) {
    if let Err(e) = Box::pin(ticket.settle(kept)).await {
        tracing::warn!(error = %e, kept,
            "could not settle a first-come place; it is given up at its deadline");
    }
}
