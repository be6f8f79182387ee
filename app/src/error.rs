//! The one place where failures become HTTP answers: `{"error": code, "message": text}`.

use crate::api::{ErrorBody, ErrorCode};
use crate::db::errors::{DbFailure, classify};
use crate::inventory::ReadError;
use crate::lifecycle::{LifeError, Refused};
use crate::redis_stock::RedisStockError;
use crate::redis_stock::reconcile::ReconcileError;
use crate::serve::BodyTimedOut;
use crate::strategy::PurchaseError;
use std::sync::LazyLock;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The longest wait, in seconds, a client is told before retrying a `503` or a `429`. Each
/// refusal names a wait drawn evenly from 1 to this, so that refused clients come back spread
/// over seconds rather than in one wave a second later.
const RETRY_AFTER_MAX_SECS: u32 = 4;

/// Every way a request can fail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Unparseable input (malformed JSON, a path that is not a product id).
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed input that breaks a rule (quantity, id lengths, unknown strategy, …).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    UnknownStrategy(String),
    /// A request id reused with other parameters.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// The purchase was fenced out by a reconciliation.
    #[error(
        "this purchase was presumed lost by a reconciliation and voided; nothing was bought: buy with a new request id"
    )]
    PurchaseVoided,
    /// The deployment does not offer this strategy.
    #[error("{0}")]
    StrategyNotOffered(String),
    #[error(
        "this buyer has bought as many units of this product as it allows (its per-user limit)"
    )]
    LimitReached,
    #[error("the order's payment deadline has passed; its units went back on sale")]
    OrderExpired,
    #[error("the order was cancelled; its units went back on sale")]
    OrderCancelled,
    #[error("the order is paid")]
    OrderPaid,
    #[error("the purchase was accepted and its order is not placed yet; ask again once it is")]
    OrderPending,
    #[error("the sale has not started yet")]
    SaleNotStarted,
    #[error("the sale has ended")]
    SaleEnded,
    #[error("{0}")]
    PurchaseTokenRequired(String),
    /// A genuine purchase token shown with another purchase than the one it admits.
    #[error("{0}")]
    PurchaseTokenMismatch(String),
    /// A genuine purchase token past its expiry, its purchase never made.
    #[error("{0}")]
    PurchaseTokenExpired(String),
    #[error("too many requests from this buyer or address")]
    RateLimited,
    #[error("the service is at capacity")]
    Overloaded,
    #[error("missing or wrong admin token")]
    Unauthorized,
    #[error("missing, malformed, expired or forged buyer token")]
    Unauthenticated,
    #[error("the buyer token names another buyer than this request's user_id")]
    NotYourOrder,
    #[error("{0}")]
    NotFound(String),
    #[error("not enough stock left")]
    SoldOut,
    #[error("{0}")]
    LockLost(String),
    /// A lock or row lock was not obtained within the wait budget; retry later.
    #[error("{0}")]
    Busy(String),
    /// Redis lost the product's stock (see [`crate::redis_stock::epoch`]).
    #[error(
        "Redis lost this product's stock and the purchases it held (it restarted without its data): purchases are refused until an admin's reconcile rebuilds the stock from the orders; a purchase accepted and not yet placed was lost, and may be sent again then"
    )]
    StockLost,
    /// A backend could not be reached; the cause is logged, not sent.
    #[error("a backend this request needs is unavailable")]
    Unavailable(#[source] BoxError),
    /// The body had not all come by its deadline.
    #[error("{0}")]
    RequestTimeout(String),
    /// A bug or a schema problem; the cause is logged, not sent.
    #[error("internal error")]
    Internal(#[source] BoxError),
}

impl ApiError {
    /// The refusal while the database node is outside its Galera cluster's primary component
    /// (see `db::galera`).
    pub fn out_of_the_cluster() -> ApiError {
        ApiError::Unavailable(
            "the database node is outside its Galera cluster's primary component".into(),
        )
    }

    /// The refusal while the primary's commits wait for no replica (see `db::semi_sync`).
    pub fn not_replicated() -> ApiError {
        ApiError::Unavailable(
            "the database's primary replicates asynchronously (semi-synchronous replication \
             fell back or is off): an order answered now could be lost by a failover"
                .into(),
        )
    }

    pub fn status(&self) -> StatusCode {
        self.code().status()
    }

    /// The machine-readable `error` field; also the `outcome` label of the metrics.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::BadRequest(_) => ErrorCode::BadRequest,
            ApiError::Invalid(_) => ErrorCode::InvalidRequest,
            ApiError::UnknownStrategy(_) => ErrorCode::UnknownStrategy,
            ApiError::IdempotencyConflict(_) => ErrorCode::IdempotencyConflict,
            ApiError::PurchaseVoided => ErrorCode::PurchaseVoided,
            ApiError::StrategyNotOffered(_) => ErrorCode::StrategyNotOffered,
            ApiError::LimitReached => ErrorCode::LimitReached,
            ApiError::OrderExpired => ErrorCode::OrderExpired,
            ApiError::OrderCancelled => ErrorCode::OrderCancelled,
            ApiError::OrderPaid => ErrorCode::OrderPaid,
            ApiError::OrderPending => ErrorCode::OrderPending,
            ApiError::SaleNotStarted => ErrorCode::SaleNotStarted,
            ApiError::SaleEnded => ErrorCode::SaleEnded,
            ApiError::PurchaseTokenRequired(_) => ErrorCode::PurchaseTokenRequired,
            ApiError::PurchaseTokenMismatch(_) => ErrorCode::PurchaseTokenMismatch,
            ApiError::PurchaseTokenExpired(_) => ErrorCode::PurchaseTokenExpired,
            ApiError::RateLimited => ErrorCode::RateLimited,
            ApiError::Overloaded => ErrorCode::Overloaded,
            ApiError::Unauthorized => ErrorCode::Unauthorized,
            ApiError::Unauthenticated => ErrorCode::Unauthenticated,
            ApiError::NotYourOrder => ErrorCode::NotYourOrder,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::SoldOut => ErrorCode::SoldOut,
            ApiError::LockLost(_) => ErrorCode::LockLost,
            ApiError::Busy(_) => ErrorCode::Busy,
            ApiError::Unavailable(_) | ApiError::StockLost => ErrorCode::BackendUnavailable,
            ApiError::RequestTimeout(_) => ErrorCode::RequestTimeout,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }

    /// A body that could not be read because of `e`: `request_timeout` if it had not all come
    /// by its deadline, else `bad_request` saying `what` went wrong.
    pub fn unreadable_body(e: &(dyn std::error::Error + 'static), what: String) -> ApiError {
        let mut chain = std::iter::successors(Some(e), |e| e.source());
        match chain.find_map(|e| e.downcast_ref::<BodyTimedOut>()) {
            Some(timed_out) => ApiError::RequestTimeout(timed_out.to_string()),
            None => ApiError::BadRequest(what),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            ApiError::Internal(cause) => tracing::error!(error = %cause, "internal error"),
            ApiError::Unavailable(cause) => tracing::warn!(error = %cause, "backend unavailable"),
            _ => {}
        }
        let mut response = match fixed_body(&self) {
            Some(body) => (
                self.status(),
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body.clone(),
            )
                .into_response(),
            None => {
                let body = ErrorBody {
                    error: self.code(),
                    message: self.to_string(),
                };
                (self.status(), Json(body)).into_response()
            }
        };
        let headers = response.headers_mut();
        match self.code() {
            ErrorCode::Busy
            | ErrorCode::BackendUnavailable
            | ErrorCode::Overloaded
            | ErrorCode::RateLimited => {
                let secs = rand::random_range(1..=RETRY_AFTER_MAX_SECS);
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            ErrorCode::Unauthorized | ErrorCode::Unauthenticated => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

/// The body of an error whose message never changes, written once: the refusals a crowd gets
/// by the thousand (sold out, limit reached, sale not open, overloaded, rate limited) then cost
/// a reference count, not a formatting and a serialization each.
fn fixed_body(e: &ApiError) -> Option<&'static Bytes> {
    const FIXED: [ApiError; 10] = [
        ApiError::SoldOut,
        ApiError::StockLost,
        ApiError::LimitReached,
        ApiError::SaleNotStarted,
        ApiError::SaleEnded,
        ApiError::Overloaded,
        ApiError::RateLimited,
        ApiError::PurchaseVoided,
        ApiError::Unauthenticated,
        ApiError::NotYourOrder,
    ];
    static BODIES: LazyLock<Vec<Bytes>> = LazyLock::new(|| {
        FIXED
            .iter()
            .map(|e| {
                let body = ErrorBody {
                    error: e.code(),
                    message: e.to_string(),
                };
                Bytes::from(serde_json::to_vec(&body).expect("an error body serializes"))
            })
            .collect()
    });
    let kind = std::mem::discriminant(e);
    let i = FIXED
        .iter()
        .position(|f| std::mem::discriminant(f) == kind)?;
    Some(&BODIES[i])
}

impl From<PurchaseError> for ApiError {
    fn from(e: PurchaseError) -> ApiError {
        match e {
            PurchaseError::SoldOut => ApiError::SoldOut,
            PurchaseError::LimitReached => ApiError::LimitReached,
            PurchaseError::UnknownProduct => ApiError::NotFound("no such product".into()),
            PurchaseError::Busy(why) => ApiError::Busy(why),
            PurchaseError::RolledBack(why) => ApiError::Busy(format!(
                "the database rolled the transaction back ({why}); nothing was bought: retry"
            )),
            PurchaseError::Overloaded => ApiError::Overloaded,
            PurchaseError::LockLost(why) => ApiError::LockLost(why),
            PurchaseError::Unavailable(cause) | PurchaseError::OutcomeUnknown(cause) => {
                ApiError::Unavailable(cause)
            }
            PurchaseError::StockLost => ApiError::StockLost,
            PurchaseError::Conflict(why) => ApiError::IdempotencyConflict(why),
            PurchaseError::Duplicate => ApiError::Internal(e.to_string().into()),
            PurchaseError::Internal(cause) => ApiError::Internal(cause),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> ApiError {
        match classify(&e) {
            DbFailure::Unavailable => ApiError::Unavailable(Box::new(e)),
            DbFailure::Busy | DbFailure::RolledBack => {
                ApiError::Busy("row lock not obtained in time".into())
            }
            DbFailure::Duplicate | DbFailure::Other => ApiError::Internal(Box::new(e)),
        }
    }
}

impl From<RedisStockError> for ApiError {
    fn from(e: RedisStockError) -> ApiError {
        match e.is_unavailable() {
            true => ApiError::Unavailable(Box::new(e)),
            false => ApiError::Internal(Box::new(e)),
        }
    }
}

impl From<crate::first_come::QueueError> for ApiError {
    fn from(e: crate::first_come::QueueError) -> ApiError {
        match e {
            crate::first_come::QueueError::Redis(e) => e.into(),
            crate::first_come::QueueError::Database(e) => e.into(),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> ApiError {
        match e {
            ReadError::Database(e) => e.into(),
            ReadError::Redis(e) => e.into(),
        }
    }
}

impl From<ReconcileError> for ApiError {
    fn from(e: ReconcileError) -> ApiError {
        match e {
            ReconcileError::UnknownProduct(_) => ApiError::NotFound(e.to_string()),
            ReconcileError::NotInRedis(..) => ApiError::NotFound(e.to_string()),
            ReconcileError::Moved => ApiError::Busy(e.to_string()),
            // Refused for good, not for a while: only a reset starts the product again.
            ReconcileError::PartLost(..) => ApiError::Invalid(e.to_string()),
            ReconcileError::Redis(e) => e.into(),
            ReconcileError::Database(e) => e.into(),
        }
    }
}

impl From<LifeError> for ApiError {
    fn from(e: LifeError) -> ApiError {
        match e {
            LifeError::Refused(why) => match why {
                Refused::NoOrder => {
                    ApiError::NotFound("this buyer has no order under this request id".into())
                }
                Refused::Pending => ApiError::OrderPending,
                Refused::Voided => ApiError::PurchaseVoided,
                Refused::Expired => ApiError::OrderExpired,
                Refused::Cancelled => ApiError::OrderCancelled,
                Refused::Paid => ApiError::OrderPaid,
            },
            LifeError::Database(e) => e.into(),
            LifeError::Redis(e) => e.into(),
            LifeError::Lock(e) => e.into(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        let message = rejection.body_text();
        match rejection.status() {
            StatusCode::UNPROCESSABLE_ENTITY => ApiError::Invalid(message),
            _ => ApiError::unreadable_body(&rejection, message),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::BadRequest(rejection.body_text())
    }
}
