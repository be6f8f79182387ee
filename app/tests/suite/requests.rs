//! The HTTP contract at its edges: bad input, unknown things, the admin token, metadata.

use crate::common;

use app::api::{Safety, Strategy, StrategyList};
use app::db::Engine;
use common::{TestApp, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// POSTs `body` as it is to `path`, as buyer `u` (whom every order of these tests names).
async fn post_raw(app: &TestApp, path: &str, body: impl AsRef<[u8]>) -> (StatusCode, Value) {
    let request = (app.client)
        .post(format!("{}{path}", app.url))
        .header("content-type", "application/json")
        .body(body.as_ref().to_vec());
    let r = app.as_buyer(request, "u").send().await.expect("request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn order(quantity: Value, user: &str, request: &str, strategy: Option<&str>) -> Value {
    let mut body = json!({ "user_id": user, "quantity": quantity, "request_id": request });
    if let Some(s) = strategy {
        body["strategy"] = json!(s);
    }
    body
}

/// The answer is a 4xx JSON error with a code and a non-empty message.
fn assert_client_error(status: StatusCode, body: &Value, what: &str) {
    assert!(
        status.is_client_error(),
        "{what}: status {status}, body {body}"
    );
    assert!(
        body["error"].as_str().is_some_and(|c| !c.is_empty()),
        "{what}: {body}"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {body}"
    );
}

#[tokio::test]
async fn every_malformed_order_is_refused_with_a_4xx_and_a_message() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, 10).await;
    let long = "x".repeat(200);

    let (status, body) = post_raw(&app, "/api/products/1/orders", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_client_error(status, &body, "invalid JSON");

    // A user id whose bytes are not UTF-8 (0xFF) is no JSON either.
    let (status, body) = post_raw(
        &app,
        "/api/products/1/orders",
        b"{\"user_id\": \"u\xff\", \"quantity\": 1, \"request_id\": \"r\"}",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_client_error(status, &body, "a body that is not UTF-8");

    let (status, body) = post_raw(&app, "/api/products/1/orders", r#"{"user_id": "u"}"#).await;
    assert_client_error(status, &body, "missing fields");

    let cases = [
        ("quantity 0", order(json!(0), "u", "r-0", None)),
        ("quantity -1", order(json!(-1), "u", "r-1", None)),
        (
            "quantity above the maximum",
            order(json!(6), "u", "r-2", None),
        ),
        ("huge quantity", order(json!(1e30), "u", "r-3", None)),
        ("quantity as a string", order(json!("1"), "u", "r-4", None)),
        ("empty user id", order(json!(1), "", "r-5", None)),
        ("over-long user id", order(json!(1), &long, "r-6", None)),
        ("empty request id", order(json!(1), "u", "", None)),
        ("over-long request id", order(json!(1), "u", &long, None)),
        (
            "user id with a leading space",
            order(json!(1), " u", "r-10", None),
        ),
        (
            "request id with a trailing tab",
            order(json!(1), "u", "r-11\t", None),
        ),
        (
            "unknown strategy",
            order(json!(1), "u", "r-7", Some("no-such-strategy")),
        ),
    ];
    for (what, body) in cases {
        let (status, answer) = app.order(1, &body, None).await;
        assert_client_error(status, &answer, what);
    }

    let (status, body) = app
        .order(1, &order(json!(1), "u", "r-8", Some("nope")), None)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"], "unknown_strategy");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("conditional"),
        "lists known ones: {body}"
    );

    let (status, body) = app
        .order(1, &order(json!(1), "u", "r-9", None), Some(0))
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "a valid order still works: {body}"
    );

    // Nothing above bought anything but the last order.
    let truth = common::ledger(&database_url, 1).await;
    assert_eq!((truth.stock, truth.orders), (9, 1), "{truth:?}");
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn a_body_longer_than_16_kib_is_refused_even_when_it_holds_a_valid_request() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, 10).await;
    // A valid order, padded with whitespace JSON allows: one byte past the bound, then one
    // within it.
    let order = order(json!(1), "u", "r-1", Some("conditional")).to_string();
    let padded = |len: usize| format!("{order}{}", " ".repeat(len - order.len()));
    let (status, body) = post_raw(&app, "/api/products/1/orders", padded(16 * 1024 + 1)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_client_error(status, &body, "an order past 16 KiB");
    let (status, body) = post_raw(&app, "/api/products/1/orders", padded(16 * 1024)).await;
    assert_eq!(status, StatusCode::CREATED, "an order of 16 KiB: {body}");
    // The same bound for every other body.
    let reset = json!({ "stock": 10 }).to_string();
    let r = app
        .client
        .put(format!("{}/api/products/2", app.url))
        .header("content-type", "application/json")
        .body(format!("{reset}{}", " ".repeat(16 * 1024)))
        .send()
        .await
        .expect("reset");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "a reset past 16 KiB");
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn an_order_sent_one_byte_a_chunk_is_read_whole() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, 10).await;
    let user = "a-buyer-whose-id-spans-many-chunks";
    let body = order(json!(2), user, "r-1", Some("conditional")).to_string();
    // Chunked, one byte a chunk: hyper hands the handler one frame per chunk.
    let chunks: String = body
        .bytes()
        .map(|b| format!("1\r\n{}\r\n", b as char))
        .collect();
    let address = app.url.trim_start_matches("http://");
    let token = app.buyers.token(user).expect("a buyer token");
    let request = format!(
        "POST /api/products/1/orders HTTP/1.1\r\nhost: {address}\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\n\
         authorization: Bearer {token}\r\nconnection: close\r\n\r\n{chunks}0\r\n\r\n"
    );
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .expect("the answer");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let (_, json) = answer.split_once("\r\n\r\n").expect("a body");
    let created: Value = serde_json::from_str(json).expect("json");
    assert_eq!(
        (created["user_id"].as_str(), created["quantity"].as_u64()),
        (Some(user), Some(2))
    );
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn unknown_products_answer_404_and_bad_ids_400() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    for strategy in [
        "conditional",
        "naive",
        "pessimistic",
        "optimistic",
        "db-lock",
    ] {
        let (status, body) = app
            .order(
                404,
                &order(json!(1), "u", &format!("r-{strategy}"), Some(strategy)),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{strategy}: {body}");
        assert_eq!(body["error"], "not_found");
    }
    let r = app
        .client
        .get(format!("{}/api/products/404", app.url))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = app
        .client
        .get(format!("{}/api/products/abc", app.url))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"], "bad_request");
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn admin_token_guards_product_resets_only() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.admin_token = Some("s3cret".into());
    let app = spawn_app(config).await;
    let url = format!("{}/api/products/7", app.url);
    let put = |auth: Option<&'static str>| {
        let mut r = app
            .client
            .put(&url)
            .json(&json!({ "stock": 3, "per_user_limit": 2 }));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };

    for auth in [
        None,
        Some("Bearer wrong"),
        Some("s3cret"),
        Some("Basic s3cret"),
    ] {
        let r = put(auth).await.expect("put");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"], "unauthorized");
    }
    let r = put(Some("Bearer s3cret")).await.expect("put");
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        (body["stock"].as_i64(), body["initial_stock"].as_i64()),
        (Some(3), Some(3))
    );

    // Reading the page and buying need no admin token; the accounting does.
    let (status, _) = app.order(7, &order(json!(2), "u", "r-1", None), None).await;
    assert_eq!(status, StatusCode::CREATED);
    let read = |url: String, token: Option<&'static str>| {
        let mut r = app.client.get(url);
        if let Some(token) = token {
            r = r.bearer_auth(token);
        }
        async move {
            r.send()
                .await
                .expect("get")
                .json::<Value>()
                .await
                .expect("json")
        }
    };
    let rules = json!({ "per_user_limit": 2, "token_required": false, "first_come": false,
                        "payment_window_ms": 900000,
                        "strategies": ["conditional"] });
    let mut page = read(url.clone(), None).await;
    assert!(page["age_ms"].is_u64(), "{page}");
    page.as_object_mut().expect("an object").remove("age_ms");
    assert_eq!(
        page,
        json!({ "id": 7, "home": "row", "rules": rules, "stock": 1, "initial_stock": 3 })
    );
    let accounting = format!("{url}/accounting");
    assert_eq!(
        read(accounting.clone(), None).await["error"],
        "unauthorized"
    );
    assert_eq!(
        read(accounting, Some("s3cret")).await,
        json!({ "id": 7, "home": "row", "rules": rules,
                "stock": 1, "initial_stock": 3, "sold": 2, "orders": 1, "pending": 0, "stranded": 0,
                "reserved": 2, "paid": 0, "expired": 0, "cancelled": 0, "returning": 0 })
    );

    // Reconciling is an admin's act too.
    let reconcile = app
        .client
        .post(format!("{url}/reconcile"))
        .send()
        .await
        .expect("reconcile");
    assert_eq!(reconcile.status(), StatusCode::UNAUTHORIZED);
    // So is pausing the expiry sweep.
    let pause = app
        .client
        .put(format!("{}/api/expiry", app.url))
        .json(&json!({ "paused": true }))
        .send()
        .await
        .expect("pause");
    assert_eq!(pause.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn reset_deletes_orders_and_restores_stock() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(3, 5).await;
    let (status, _) = app.order(3, &order(json!(5), "u", "r-1", None), None).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = app.order(3, &order(json!(1), "u", "r-2", None), None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("sold_out"))
    );
    app.reset(3, 4).await;
    let truth = common::ledger(&database_url, 3).await;
    assert_eq!((truth.initial, truth.stock, truth.orders), (4, 4, 0));
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn metadata_endpoints_describe_the_service() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    let get = |path: &str| app.client.get(format!("{}{path}", app.url)).send();

    let list: StrategyList = get("/api/strategies")
        .await
        .expect("get")
        .json()
        .await
        .expect("a strategy list");
    assert_eq!(list.default, Strategy::Conditional);
    let safety = |name: Strategy| {
        list.strategies
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.safety)
    };
    assert_eq!(safety(Strategy::Conditional), Some(Safety::Safe));
    assert_eq!(safety(Strategy::RedisLock), Some(Safety::WhileLeasesHold));
    assert_eq!(safety(Strategy::RedisLockFenced), Some(Safety::Safe));
    assert_eq!(safety(Strategy::Naive), Some(Safety::Unsafe));
    assert_eq!(safety(Strategy::LocalMutex), Some(Safety::Unsafe));
    assert_eq!(list.strategies.len(), Engine::MySql.strategies().len());
    assert!(list.strategies.iter().all(|s| !s.description.is_empty()));

    let doc: Value = get("/api/openapi.json")
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "{doc}"
    );
    for (path, method) in [
        ("/api/products/{id}", "put"),
        ("/api/products/{id}", "get"),
        ("/api/products/{id}/accounting", "get"),
        ("/api/products/{id}/orders", "post"),
        ("/api/strategies", "get"),
        ("/api/noop", "get"),
        ("/healthz", "get"),
        ("/metrics", "get"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from the OpenAPI document"
        );
    }
    assert!(doc["components"]["schemas"]["OrderRequest"].is_object());

    let health = get("/healthz").await.expect("get");
    assert_eq!(health.status(), StatusCode::OK);
    let noop = get("/api/noop").await.expect("get");
    assert_eq!(noop.status(), StatusCode::NO_CONTENT);

    app.reset(1, 1).await;
    app.order(1, &order(json!(1), "u", "r-1", None), None).await;
    app.order(1, &order(json!(1), "u", "r-2", None), None).await;
    let metrics = get("/metrics")
        .await
        .expect("get")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"seckill_purchases_total{strategy="conditional",outcome="created"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"seckill_purchases_total{strategy="conditional",outcome="sold_out"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("seckill_purchase_duration_seconds_count{strategy=\"conditional\"} 2")
    );
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn hold_header_is_ignored_without_fault_injection() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.allow_fault_injection = false;
    let app = spawn_app(config).await;
    app.reset(1, 5).await;
    // A hold this long would blow the client's 60 s timeout if it were honoured.
    let started = std::time::Instant::now();
    let (status, _) = app
        .order(1, &order(json!(1), "u", "r-1", None), Some(100_000))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(started.elapsed() < std::time::Duration::from_secs(50));
    app.stop().await;
    common::drop_database(&database_url).await;
}
