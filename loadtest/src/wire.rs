//! The app's wire types as the benchmark reads and writes them.
//!
//! Transitional: these mirror `app/src/http` and `app/src/error.rs` until the app exports its
//! own (`app::api`); then this module re-exports those and the copies go.

use serde::{Deserialize, Serialize};

/// The `error` field of every refusal the API answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    InvalidRequest,
    UnknownStrategy,
    Unauthorized,
    NotFound,
    SoldOut,
    LockLost,
    Busy,
    BackendUnavailable,
    Internal,
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorCode,
    pub message: String,
}

/// The body of `POST /api/products/{id}/orders`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderRequest {
    pub user_id: String,
    pub quantity: i64,
    pub request_id: String,
    pub strategy: Option<String>,
}

/// An order, as answered by `201` (created) and `200` (replayed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderResponse {
    pub order_id: u64,
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub strategy: String,
    pub request_id: String,
    pub fencing_token: Option<u64>,
}

/// `GET /api/products/{id}`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ProductView {
    pub id: u64,
    pub stock: i64,
    pub initial_stock: i64,
    /// Sum of ordered quantities.
    pub sold: i64,
    /// Number of orders.
    pub orders: i64,
}

/// One strategy of `GET /api/strategies`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StrategyInfo {
    pub name: String,
    pub description: String,
    pub backend: String,
    pub safe: bool,
}

/// The body of `GET /api/strategies`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StrategyList {
    pub default: String,
    pub strategies: Vec<StrategyInfo>,
}
