//! HTTP's floor: routes with nothing of the service behind them, for the load's baselines
//! `http-floor-noop` and `http-floor-refusal` (served by `seckill-bench http-floor`) and the
//! micro-benchmark of refusals (called in-process).
//!
//! They answer two requests: `GET /api/noop` with `204`, as the service does, and a purchase —
//! `POST /api/products/{id}/orders` with an order's body — with the service's own `409
//! sold_out`, having read the body and nothing else (no parse, no lookup, no count). What a
//! refusal costs there beside the no-op is HTTP's own difference between the two requests —
//! a body to read, a path parameter to route, an answer with a body — which no refusal of the
//! service's can go below.

use app::error::ApiError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{get, post};

/// The floor's routes.
pub fn router() -> Router {
    Router::new()
        .route("/api/noop", get(noop))
        .route("/api/products/{id}/orders", post(refuse))
}

async fn noop() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// A purchase refused as the service refuses one of a sold-out product, its body read and
/// left unread beyond that.
async fn refuse(_product: Path<u64>, _order: Bytes) -> ApiError {
    ApiError::SoldOut
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_floor_refuses_a_purchase_with_the_services_own_sold_out_answer() {
        let request = Request::post("/api/products/7/orders")
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"user_id":"u","quantity":1,"request_id":"r"}"#,
            ))
            .unwrap();
        let answer = router().oneshot(request).await.unwrap();
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 16)
            .await
            .unwrap();
        let refusal: app::api::ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(refusal.error, app::api::ErrorCode::SoldOut);
        let noop = Request::get("/api/noop").body(Body::empty()).unwrap();
        assert_eq!(
            router().oneshot(noop).await.unwrap().status(),
            StatusCode::NO_CONTENT
        );
    }
}
