//! What every handler shares.

use std::sync::Arc;

use sqlx::MySqlPool;

use crate::metrics::Metrics;
use crate::strategy::Registry;

/// Request-independent settings the handlers need.
#[derive(Debug, Clone)]
pub struct Settings {
    pub admin_token: Option<String>,
    pub default_strategy: crate::api::Strategy,
    pub max_quantity: u32,
    pub allow_fault_injection: bool,
}

/// The application state: cheap to clone, one per service instance.
#[derive(Clone)]
pub struct AppState {
    pub pool: MySqlPool,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub settings: Arc<Settings>,
}
