//! A sale has a window and, if the product asks for one, a purchase token. A click before the
//! start or after the end, or one without its buyer's token, is refused with a clear code and
//! takes nothing; tokens are issued only while the sale is open, good for one buyer of one sale,
//! for the one purchase they name and until they expire, and on every instance that shares the
//! secret.

use crate::common;

use app::api::Strategy;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

fn at(offset_secs: i64) -> String {
    (OffsetDateTime::now_utc() + time::Duration::seconds(offset_secs))
        .format(&Rfc3339)
        .expect("a timestamp")
}

fn click(user: &str, request: &str, strategy: Strategy, token: Option<&str>) -> Value {
    let mut body =
        json!({ "user_id": user, "quantity": 1, "request_id": request, "strategy": strategy });
    if let Some(token) = token {
        body["purchase_token"] = json!(token);
    }
    body
}

/// A purchase token as issued: the string to show, the request id of the one purchase it
/// admits, and when it expires.
struct Issued {
    token: String,
    request_id: String,
    expires_at: OffsetDateTime,
}

impl Issued {
    /// The purchase this token admits: `user`'s, under the token's request id.
    fn click(&self, user: &str, strategy: Strategy) -> Value {
        click(user, &self.request_id, strategy, Some(&self.token))
    }
}

/// `user`'s token for `product`, which the instance must issue.
async fn issued(app: &TestApp, product: u64, user: &str) -> Issued {
    let (status, answer) = token(app, product, user).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let text = |field: &str| {
        answer[field]
            .as_str()
            .unwrap_or_else(|| panic!("no {field}: {answer}"))
            .to_string()
    };
    Issued {
        token: text("token"),
        request_id: text("request_id"),
        expires_at: OffsetDateTime::parse(&text("expires_at"), &Rfc3339).expect("RFC 3339"),
    }
}

/// Sends `body` to `product`, which must refuse it `403` with `code`; the refusal.
async fn forbidden(app: &TestApp, product: u64, body: &Value, code: &str) -> Value {
    let (status, answer) = app.order(product, body, None).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::FORBIDDEN, Some(code)),
        "{body}: {answer}"
    );
    answer
}

/// Waits until the clock is past `at`.
async fn past(at: OffsetDateTime) {
    common::wait_until("the token expired", || async {
        OffsetDateTime::now_utc() > at
    })
    .await;
}

async fn token(app: &TestApp, product: u64, user: &str) -> (StatusCode, Value) {
    let request = (app.client)
        .post(format!("{}/api/products/{product}/tokens", app.url))
        .json(&json!({ "user_id": user }));
    let r = app
        .as_buyer(request, user)
        .send()
        .await
        .expect("token request");
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_click_outside_the_sale_window_is_refused_and_takes_nothing() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    for (n, strategy) in [
        Strategy::Conditional,
        Strategy::RedisLuaStream,
        Strategy::Batched,
    ]
    .into_iter()
    .enumerate()
    {
        let product = n as u64 + 1;
        let home = strategy.home();
        let windows = [
            (
                json!({ "stock": 5, "home": home, "sale_starts_at": at(3600) }),
                "sale_not_started",
            ),
            (
                json!({ "stock": 5, "home": home, "sale_starts_at": at(-7200), "sale_ends_at": at(-3600) }),
                "sale_ended",
            ),
        ];
        for (rules, code) in windows {
            app.reset_with(product, &rules).await;
            let (status, answer) = app
                .order(product, &click("u", "r", strategy, None), None)
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
            assert_eq!(answer["error"], code, "{strategy}: {answer}");
            let view = app.drained(product).await;
            assert_eq!((view.stock, view.orders), (5, 0), "{strategy}: {view:?}");
        }
        let open = json!({ "stock": 5, "home": home, "sale_starts_at": at(-60), "sale_ends_at": at(3600) });
        app.reset_with(product, &open).await;
        let (status, answer) = app
            .order(product, &click("u", "r", strategy, None), None)
            .await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_that_ends_before_it_starts_never_opens() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    let strategy = Strategy::Conditional;
    for (starts, ends, code) in [
        (60, 30, "sale_not_started"),
        (-30, -60, "sale_ended"),
        (-30, -30, "sale_ended"),
    ] {
        let rules = json!({ "stock": 5, "sale_starts_at": at(starts), "sale_ends_at": at(ends) });
        app.reset_with(1, &rules).await;
        let (status, answer) = app.order(1, &click("u", "r", strategy, None), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["error"], code, "{answer}");
        let view = app.drained(1).await;
        assert_eq!((view.stock, view.orders), (5, 0), "{view:?}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_that_requires_a_token_sells_only_to_buyers_who_show_their_own() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.purchase_token_secret = Some("shared between instances".into());
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    let strategy = Strategy::Conditional;

    // Before the start, no token is issued, and a click without one is refused.
    a.reset_with(
        1,
        &json!({ "stock": 5, "sale_starts_at": at(3600), "token_required": true }),
    )
    .await;
    let (status, answer) = token(&a, 1, "alice").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"], "sale_not_started");

    a.reset_with(
        1,
        &json!({ "stock": 5, "sale_starts_at": at(-1), "token_required": true }),
    )
    .await;
    let alices = issued(&a, 1, "alice").await;
    let forged = format!("{}.{}.forged", alices.request_id, i64::MAX);
    let refusals = [
        click("alice", &alices.request_id, strategy, None),
        alices.click("mallory", strategy),
        click("alice", &alices.request_id, strategy, Some(&forged)),
    ];
    for refused in refusals {
        forbidden(&b, 1, &refused, "purchase_token_required").await;
    }
    assert_eq!(b.drained(1).await.orders, 0);
    // Issued by one instance, shown to another: the secret is shared.
    let (status, answer) = b.order(1, &alices.click("alice", strategy), None).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    // A new sale (another start) makes the old token worthless: its purchase is a new one.
    a.reset_with(
        1,
        &json!({ "stock": 5, "sale_starts_at": at(-2), "token_required": true }),
    )
    .await;
    forbidden(
        &a,
        1,
        &alices.click("alice", strategy),
        "purchase_token_required",
    )
    .await;
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purchase_token_buys_once_under_the_request_id_it_names() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.purchase_token_secret = Some("shared between instances".into());
    let app = spawn_app(config).await;
    let strategy = Strategy::Conditional;
    for product in [1, 2] {
        app.reset_with(
            product,
            &json!({ "stock": 5, "sale_starts_at": at(-1), "token_required": true }),
        )
        .await;
    }
    let alices = issued(&app, 1, "alice").await;

    // Under a request id of the buyer's choosing, the token admits nothing.
    let mine = click("alice", "mine", strategy, Some(&alices.token));
    let answer = forbidden(&app, 1, &mine, "purchase_token_mismatch").await;
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains(&alices.request_id), "{answer}");

    // Under its own, it buys; the same purchase sent again is answered with its order.
    let (status, bought) = app.order(1, &alices.click("alice", strategy), None).await;
    assert_eq!(status, StatusCode::CREATED, "{bought}");
    let (status, again) = app.order(1, &alices.click("alice", strategy), None).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["order_id"], bought["order_id"], "{again}");

    // A second purchase with it, under another request id, is refused.
    let second = click("alice", "second", strategy, Some(&alices.token));
    forbidden(&app, 1, &second, "purchase_token_mismatch").await;

    // It is still its buyer's, for its product only.
    let mallorys = alices.click("mallory", strategy);
    forbidden(&app, 1, &mallorys, "purchase_token_required").await;
    forbidden(
        &app,
        2,
        &alices.click("alice", strategy),
        "purchase_token_required",
    )
    .await;

    assert_eq!(app.drained(1).await.orders, 1);
    assert_eq!(app.drained(2).await.orders, 0);
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_purchase_token_buys_nothing_but_its_purchase_still_replays() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    // A life short enough to wait out; a purchase that misses it takes a new token.
    config.purchase_token_ttl_ms = 1_000;
    let app = spawn_app(config).await;
    for (product, strategy) in [(1, Strategy::Conditional), (2, Strategy::RedisLuaStream)] {
        let home = strategy.home();
        app.reset_with(
            product,
            &json!({ "stock": 5, "home": home, "sale_starts_at": at(-1), "token_required": true }),
        )
        .await;
        // A purchase made within its token's life.
        let bought = loop {
            let token = issued(&app, product, "alice").await;
            let (status, answer) = app
                .order(product, &token.click("alice", strategy), None)
                .await;
            match answer["error"].as_str() {
                Some("purchase_token_expired") => continue,
                _ => assert!(status.is_success(), "{strategy}: {status} {answer}"),
            }
            break token;
        };
        let unused = issued(&app, product, "alice").await;
        past(bought.expires_at.max(unused.expires_at)).await;

        let expired = unused.click("alice", strategy);
        forbidden(&app, product, &expired, "purchase_token_expired").await;

        // The purchase it made, sent again, is answered with its order (or, its order still
        // on its way from the stream, accepted again): an expired token refuses new purchases
        // only.
        let (status, answer) = app
            .order(product, &bought.click("alice", strategy), None)
            .await;
        assert!(
            status == StatusCode::OK || status == StatusCode::ACCEPTED,
            "{strategy}: {status} {answer}"
        );
        assert_eq!(
            answer["request_id"],
            bought.request_id.as_str(),
            "{strategy}"
        );
        let view = app.drained(product).await;
        assert_eq!((view.stock, view.orders), (4, 1), "{strategy}: {view:?}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}
