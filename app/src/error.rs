//! The one place where failures become HTTP answers: `{"error": code, "message": text}`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::db::errors::{DbFailure, classify};
use crate::strategy::PurchaseError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Seconds a client is told to wait before retrying a `503`.
const RETRY_AFTER_SECS: &str = "1";

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
    #[error("missing or wrong admin token")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("not enough stock left")]
    SoldOut,
    #[error("{0}")]
    LockLost(String),
    /// A lock or row lock was not obtained within the wait budget; retry later.
    #[error("{0}")]
    Busy(String),
    /// A backend could not be reached; the cause is logged, not sent.
    #[error("a backend this request needs is unavailable")]
    Unavailable(#[source] BoxError),
    /// A bug or a schema problem; the cause is logged, not sent.
    #[error("internal error")]
    Internal(#[source] BoxError),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Invalid(_) | ApiError::UnknownStrategy(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::SoldOut | ApiError::LockLost(_) => StatusCode::CONFLICT,
            ApiError::Busy(_) | ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable `error` field; also the `outcome` label of the metrics.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Invalid(_) => "invalid_request",
            ApiError::UnknownStrategy(_) => "unknown_strategy",
            ApiError::Unauthorized => "unauthorized",
            ApiError::NotFound(_) => "not_found",
            ApiError::SoldOut => "sold_out",
            ApiError::LockLost(_) => "lock_lost",
            ApiError::Busy(_) => "busy",
            ApiError::Unavailable(_) => "backend_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

/// The JSON body of every error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: &'static str,
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            ApiError::Internal(cause) => tracing::error!(error = %cause, "internal error"),
            ApiError::Unavailable(cause) => tracing::warn!(error = %cause, "backend unavailable"),
            _ => {}
        }
        let body = ErrorBody {
            error: self.code(),
            message: self.to_string(),
        };
        let mut response = (self.status(), Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Busy(_) | ApiError::Unavailable(_) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from_static(RETRY_AFTER_SECS),
                );
            }
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

impl From<PurchaseError> for ApiError {
    fn from(e: PurchaseError) -> ApiError {
        match e {
            PurchaseError::SoldOut => ApiError::SoldOut,
            PurchaseError::UnknownProduct => ApiError::NotFound("no such product".into()),
            PurchaseError::Busy(why) => ApiError::Busy(why),
            PurchaseError::LockLost(why) => ApiError::LockLost(why),
            PurchaseError::Unavailable(cause) => ApiError::Unavailable(cause),
            PurchaseError::Duplicate => ApiError::Internal(e.to_string().into()),
            PurchaseError::Internal(cause) => ApiError::Internal(cause),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> ApiError {
        match classify(&e) {
            DbFailure::Unavailable => ApiError::Unavailable(Box::new(e)),
            DbFailure::Busy => ApiError::Busy("row lock not obtained in time".into()),
            DbFailure::Duplicate | DbFailure::Other => ApiError::Internal(Box::new(e)),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        let message = rejection.body_text();
        match rejection.status() {
            StatusCode::UNPROCESSABLE_ENTITY => ApiError::Invalid(message),
            _ => ApiError::BadRequest(message),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::BadRequest(rejection.body_text())
    }
}
