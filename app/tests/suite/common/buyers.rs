//! The buyer routes — purchase, status, pay, cancel, purchase token — called as a buyer's client
//! calls them, for the tests that go through them all.

use reqwest::{RequestBuilder, StatusCode};
use serde_json::{Value, json};

use super::TestApp;

/// A buyer route.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    Buy,
    Status,
    Pay,
    Cancel,
    Token,
}

pub const ROUTES: [Route; 5] = [
    Route::Buy,
    Route::Status,
    Route::Pay,
    Route::Cancel,
    Route::Token,
];

/// The request of `route` of `product` as `user`, with their buyer token
/// ([`TestApp::as_buyer`]), for the purchase of request id `purchase` (a purchase: of one
/// unit, through `conditional`).
pub fn request(
    app: &TestApp,
    route: Route,
    product: u64,
    user: &str,
    purchase: &str,
) -> RequestBuilder {
    app.as_buyer(unsigned(app, route, product, user, purchase), user)
}

/// [`request`] without a buyer token: naming `user`, and no more.
pub fn unsigned(
    app: &TestApp,
    route: Route,
    product: u64,
    user: &str,
    purchase: &str,
) -> RequestBuilder {
    let orders = format!("{}/api/products/{product}/orders", app.url);
    // The tests' ids need no escaping.
    match route {
        Route::Buy => app.client.post(&orders).json(&json!({
            "user_id": user, "quantity": 1, "request_id": purchase, "strategy": "conditional"
        })),
        Route::Status => app
            .client
            .get(format!("{orders}/{purchase}?user_id={user}")),
        Route::Pay => app
            .client
            .post(format!("{orders}/{purchase}/pay?user_id={user}")),
        Route::Cancel => app
            .client
            .post(format!("{orders}/{purchase}/cancel?user_id={user}")),
        Route::Token => app
            .client
            .post(format!("{}/api/products/{product}/tokens", app.url))
            .json(&json!({ "user_id": user })),
    }
}

/// Calls `route` of `product` naming `user` for `purchase`, with `Authorization: Bearer
/// <token>` when one is given (and none otherwise); the status and body.
pub async fn call(
    app: &TestApp,
    route: Route,
    product: u64,
    user: &str,
    purchase: &str,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut r = unsigned(app, route, product, user, purchase);
    if let Some(token) = token {
        r = r.bearer_auth(token);
    }
    let r = r.send().await.expect("buyer request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}
