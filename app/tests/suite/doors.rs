//! The doors an attacker tries first are shut. The service will not start on an address other
//! machines can reach without an admin token; a deployment offers only the strategies it names
//! (any client could otherwise sell a product through `naive` and undo its sales); and the
//! fault-injection header, which holds a lock or a row for up to two minutes, is an admin's
//! tool once a token is set.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use app::api::Strategy;
use common::{drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn the_binary_refuses_to_listen_beyond_loopback_without_an_admin_token() {
    let database_url = fresh_database_url().await;
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_seckill-app"))
        .env_clear()
        .env("DATABASE_URL", &database_url)
        .env("SECKILL_LISTEN", format!("0.0.0.0:{port}"))
        .env("SECKILL_BUYER_KEY", common::BUYER_KEY)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn seckill-app");
    let client = reqwest::Client::new();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        let health = client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await;
        if health.is_ok_and(|r| r.status().is_success()) {
            let _ = child.kill();
            panic!("seckill-app serves 0.0.0.0 with its admin endpoints open to anyone");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let output = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!status.success());
    assert!(stderr.contains("SECKILL_ADMIN_TOKEN"), "{stderr}");
    drop_database(&database_url).await;
}

#[tokio::test]
async fn a_deployment_offers_only_the_strategies_it_names() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.strategies = vec![Strategy::Conditional, Strategy::Batched];
    let app = spawn_app(config).await;
    app.reset(1, 10).await;
    let list: Value = app
        .client
        .get(format!("{}/api/strategies", app.url))
        .send()
        .await
        .expect("strategies")
        .json()
        .await
        .expect("json");
    let names: Vec<&str> = list["strategies"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["conditional", "batched"]);
    let naive = json!({ "user_id": "u", "quantity": 1, "request_id": "r-1", "strategy": "naive" });
    let (status, answer) = app.order(1, &naive, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["error"], "strategy_not_offered", "{answer}");
    let offered =
        json!({ "user_id": "u", "quantity": 1, "request_id": "r-2", "strategy": "batched" });
    assert_eq!(app.order(1, &offered, None).await.0, StatusCode::CREATED);
    assert_eq!(common::ledger(&database_url, 1).await.orders, 1);
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn a_default_strategy_outside_the_offered_ones_is_a_start_up_error() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.strategies = vec![Strategy::Batched];
    config.default_strategy = Strategy::Conditional;
    let error = app::build(&config).await.err().expect("a start-up error");
    assert!(error.to_string().contains("conditional"), "{error}");
    drop_database(&database_url).await;
}

#[tokio::test]
async fn with_an_admin_token_the_hold_header_is_an_admins_tool() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.admin_token = Some("s3cret".into());
    let app = spawn_app(config).await;
    let reset = app
        .client
        .put(format!("{}/api/products/1", app.url))
        .bearer_auth("s3cret")
        .json(&json!({ "stock": 10 }))
        .send()
        .await
        .expect("reset");
    assert_eq!(reset.status(), StatusCode::OK);
    let click =
        json!({ "user_id": "u", "quantity": 1, "request_id": "r-1", "strategy": "conditional" });
    let (status, answer) = app.order(1, &click, Some(10)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert_eq!(common::ledger(&database_url, 1).await.orders, 0);
    // Not as a buyer: the admin token, its only credential, stands for the buyer it names.
    let held = app
        .client
        .post(format!("{}/api/products/1/orders", app.url))
        .bearer_auth("s3cret")
        .header("x-seckill-hold-ms", "10")
        .json(&click)
        .send()
        .await
        .expect("order");
    assert_eq!(held.status(), StatusCode::CREATED);
    app.stop().await;
    drop_database(&database_url).await;
}
