//! Given the instances' buyer key, the client authenticates every buyer it sends: an order
//! built per request, one prepared once and sent many times, and a transition of an order each
//! carry a token that names the request's own buyer.

use std::time::SystemTime;

use app::api::{ErrorBody, ErrorCode, OrderRequest, OrderResponse, Strategy};
use app::buyer::BuyerKey;
use axum::Json;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use testkit::{Answer, Api, Clicks, Crowd, order_request};

const KEY: &[u8] = b"the instances' buyer key";

/// Whether `headers` carry a token of [`KEY`] naming `user`.
fn names(headers: &HeaderMap, user: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|token| BuyerKey::new(KEY).verify(token, SystemTime::now()).ok())
        .is_some_and(|buyer| buyer.names(user))
}

fn unauthenticated() -> Response {
    let body = ErrorBody {
        error: ErrorCode::Unauthenticated,
        message: "no token of this buyer".into(),
    };
    (StatusCode::UNAUTHORIZED, Json(body)).into_response()
}

fn placed(user: String, request: String) -> OrderResponse {
    OrderResponse {
        order_id: 1,
        product_id: 1,
        user_id: user,
        quantity: 1,
        strategy: Strategy::Conditional,
        request_id: request,
        fencing_token: None,
        stage: app::api::OrderStage::Reserved,
    }
}

/// A shop whose buyer routes check tokens as the app does with `--buyer-key`.
async fn shop() -> String {
    async fn order(headers: HeaderMap, Json(body): Json<OrderRequest>) -> Response {
        let user = body.user_id.unwrap_or_default();
        if !names(&headers, &user) {
            return unauthenticated();
        }
        (StatusCode::CREATED, Json(placed(user, body.request_id))).into_response()
    }
    async fn pay(
        headers: HeaderMap,
        Path((_, request)): Path<(u64, String)>,
        Query(buyer): Query<std::collections::HashMap<String, String>>,
    ) -> Response {
        let user = buyer.get("user_id").cloned().unwrap_or_default();
        if !names(&headers, &user) {
            return unauthenticated();
        }
        Json(placed(user, request)).into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = axum::Router::new()
        .route("/api/products/{id}/orders", post(order))
        .route("/api/products/{id}/orders/{request}/pay", post(pay));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

const UNAUTHENTICATED: Answer = Answer::Refused {
    status: 401,
    code: ErrorCode::Unauthenticated,
};

#[tokio::test]
async fn a_client_with_the_buyer_key_authenticates_each_buyer_and_one_without_it_none() {
    let base = shop().await;
    let keyed = Api::new(vec![base.clone()], None)
        .unwrap()
        .with_buyer_key(BuyerKey::new(KEY));
    let bare = Api::new(vec![base], None).unwrap();
    let alice = order_request("alice".into(), Strategy::Conditional, "a-1".into(), 1);
    let bob = order_request("bob".into(), Strategy::Conditional, "b-1".into(), 1);

    assert!(matches!(
        keyed.order(0, 1, &alice).await,
        Answer::Created { .. }
    ));
    assert_eq!(bare.order(0, 1, &alice).await, UNAUTHENTICATED);

    let prepared = keyed.prepare_order(1, &bob).unwrap();
    for n in 0..3 {
        assert!(matches!(
            keyed.send_prepared(n, &prepared).await,
            Answer::Created { .. }
        ));
    }
    let prepared = bare.prepare_order(1, &bob).unwrap();
    assert_eq!(bare.send_prepared(0, &prepared).await, UNAUTHENTICATED);

    let paid = keyed.pay(0, 1, "alice", "a-1").await.unwrap();
    assert_eq!(paid.map(|o| o.user_id), Ok("alice".to_string()));
    let refused = bare.pay(0, 1, "alice", "a-1").await.unwrap();
    assert_eq!(refused.map(|o| o.user_id), Err(ErrorCode::Unauthenticated));

    let answers = Crowd::new(4, Clicks::Total(20), Strategy::Conditional, "run")
        .run(&keyed, 1)
        .await;
    assert_eq!(answers.clicks.len(), 20);
    assert!(
        answers
            .clicks
            .iter()
            .all(|c| matches!(c.answer, Answer::Created { .. })),
        "every buyer of the crowd is authenticated"
    );
}
