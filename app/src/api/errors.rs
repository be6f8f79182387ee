//! Every error code of the API, the status that carries it, and the JSON body of every error.

use std::fmt;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every error code the API answers, in the `error` field of [`ErrorBody`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: malformed JSON, a path that is not a product id, a malformed header.
    BadRequest,
    /// 422: well-formed input that breaks a rule (quantity, id lengths).
    InvalidRequest,
    /// 422: no strategy of that name.
    UnknownStrategy,
    /// 409: a buyer's request id reused for the same product with another quantity or
    /// strategy. A conflict with what the server holds, not a malformed request: 422 is kept
    /// for input no state of the server would accept, which is what the contract test can
    /// check.
    IdempotencyConflict,
    /// 409: the purchase of this request id was presumed lost by a reconciliation and fenced
    /// out: nothing was bought; buy with a new request id.
    PurchaseVoided,
    /// 403: this deployment does not offer the strategy named (`--strategies`).
    StrategyNotOffered,
    /// 409: the buyer would hold more of this product than its per-user limit.
    LimitReached,
    /// 409: the order's payment deadline has passed (its units go, or went, back on sale):
    /// it can no longer be paid or cancelled.
    OrderExpired,
    /// 409: the order was cancelled (its units went back on sale).
    OrderCancelled,
    /// 409: the order is paid: it cannot be cancelled (paying it again changes nothing).
    OrderPaid,
    /// 409: the purchase was accepted and its order is not placed yet (`redis-lua-stream`):
    /// ask again once its status says `placed`.
    OrderPending,
    /// 409: the sale has not opened yet.
    SaleNotStarted,
    /// 409: the sale has closed.
    SaleEnded,
    /// 403: the product requires a purchase token and the purchase carries none, or one that
    /// is not this buyer's for this product's sale.
    PurchaseTokenRequired,
    /// 403: the purchase token admits one purchase, and it is another: the purchase must carry
    /// the request id the token names (a token buys once).
    PurchaseTokenMismatch,
    /// 403: the purchase token has expired (`--purchase-token-ttl-ms`) and its purchase was
    /// never made: ask for a new token. (The purchase it made, sent again, is still answered
    /// with its order.)
    PurchaseTokenExpired,
    /// 429: this buyer or address sent more than its rate allows; retry after `Retry-After`.
    RateLimited,
    /// 503: the service is at capacity and refused the request at once; retry after
    /// `Retry-After`.
    Overloaded,
    /// 401: missing or wrong admin token.
    Unauthorized,
    /// 401: the buyer route needs a buyer token (`--buyer-key` is set) and the request carries
    /// none, or one that is malformed, expired or not signed with the deployment's key.
    Unauthenticated,
    /// 403: the buyer token names another buyer than the request's `user_id`.
    NotYourOrder,
    /// 404: no such product.
    NotFound,
    /// 409: not enough stock left.
    SoldOut,
    /// 409: a fenced write was refused: a newer lock holder claimed the product.
    LockLost,
    /// 503: the lock or row lock was not obtained within the wait budget; retry.
    Busy,
    /// 503: a backend the request needs is unreachable or not configured.
    BackendUnavailable,
    /// 408: the request's body had not all come by its deadline (`--body-read-timeout-ms`);
    /// the connection is closed.
    RequestTimeout,
    /// 500: a bug; the cause is logged, never sent.
    Internal,
}

impl ErrorCode {
    /// Every code, for listings and exhaustive tests.
    pub const ALL: &[ErrorCode] = &[
        ErrorCode::BadRequest,
        ErrorCode::InvalidRequest,
        ErrorCode::UnknownStrategy,
        ErrorCode::IdempotencyConflict,
        ErrorCode::PurchaseVoided,
        ErrorCode::StrategyNotOffered,
        ErrorCode::LimitReached,
        ErrorCode::OrderExpired,
        ErrorCode::OrderCancelled,
        ErrorCode::OrderPaid,
        ErrorCode::OrderPending,
        ErrorCode::SaleNotStarted,
        ErrorCode::SaleEnded,
        ErrorCode::PurchaseTokenRequired,
        ErrorCode::PurchaseTokenMismatch,
        ErrorCode::PurchaseTokenExpired,
        ErrorCode::RateLimited,
        ErrorCode::Overloaded,
        ErrorCode::Unauthorized,
        ErrorCode::Unauthenticated,
        ErrorCode::NotYourOrder,
        ErrorCode::NotFound,
        ErrorCode::SoldOut,
        ErrorCode::LockLost,
        ErrorCode::Busy,
        ErrorCode::BackendUnavailable,
        ErrorCode::RequestTimeout,
        ErrorCode::Internal,
    ];

    /// The HTTP status that carries this code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest | ErrorCode::UnknownStrategy => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ErrorCode::Unauthorized | ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorCode::StrategyNotOffered
            | ErrorCode::PurchaseTokenRequired
            | ErrorCode::PurchaseTokenMismatch
            | ErrorCode::PurchaseTokenExpired
            | ErrorCode::NotYourOrder => StatusCode::FORBIDDEN,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::SoldOut
            | ErrorCode::LockLost
            | ErrorCode::IdempotencyConflict
            | ErrorCode::PurchaseVoided
            | ErrorCode::LimitReached
            | ErrorCode::OrderExpired
            | ErrorCode::OrderCancelled
            | ErrorCode::OrderPaid
            | ErrorCode::OrderPending
            | ErrorCode::SaleNotStarted
            | ErrorCode::SaleEnded => StatusCode::CONFLICT,
            ErrorCode::Busy | ErrorCode::BackendUnavailable | ErrorCode::Overloaded => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The wire name (`"sold_out"`); also the `outcome` label of the metrics.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnknownStrategy => "unknown_strategy",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::PurchaseVoided => "purchase_voided",
            ErrorCode::StrategyNotOffered => "strategy_not_offered",
            ErrorCode::LimitReached => "limit_reached",
            ErrorCode::OrderExpired => "order_expired",
            ErrorCode::OrderCancelled => "order_cancelled",
            ErrorCode::OrderPaid => "order_paid",
            ErrorCode::OrderPending => "order_pending",
            ErrorCode::SaleNotStarted => "sale_not_started",
            ErrorCode::SaleEnded => "sale_ended",
            ErrorCode::PurchaseTokenRequired => "purchase_token_required",
            ErrorCode::PurchaseTokenMismatch => "purchase_token_mismatch",
            ErrorCode::PurchaseTokenExpired => "purchase_token_expired",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::NotYourOrder => "not_your_order",
            ErrorCode::NotFound => "not_found",
            ErrorCode::SoldOut => "sold_out",
            ErrorCode::LockLost => "lock_lost",
            ErrorCode::Busy => "busy",
            ErrorCode::BackendUnavailable => "backend_unavailable",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The JSON body of every error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorCode,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_serializes_as_its_wire_name() {
        for &code in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(code).ok(),
                Some(serde_json::json!(code.name()))
            );
        }
    }
}
