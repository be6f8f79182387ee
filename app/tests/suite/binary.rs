//! The `seckill-app` binary itself: configured by environment variables, it creates and
//! migrates its database, serves, and exits cleanly on SIGTERM.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fresh_database_url;
use reqwest::StatusCode;

#[tokio::test]
async fn binary_creates_its_database_serves_and_exits_cleanly_on_sigterm() {
    let database_url = fresh_database_url().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_seckill-app"))
        .env_clear()
        .env("DATABASE_URL", &database_url)
        .env("SECKILL_LISTEN", format!("127.0.0.1:{port}"))
        .env("SECKILL_ADMIN_TOKEN", "t0ken")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn seckill-app");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = client.get(format!("{base}/healthz")).send().await;
        if health.is_ok_and(|r| r.status() == StatusCode::OK) {
            break;
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "seckill-app exited early"
        );
        assert!(
            Instant::now() < deadline,
            "seckill-app did not become healthy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let put = client
        .put(format!("{base}/api/products/1"))
        .bearer_auth("t0ken")
        .json(&serde_json::json!({ "stock": 2 }))
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), StatusCode::OK);
    assert_eq!(common::ledger(&database_url, 1).await.stock, 2);

    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(terminated.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "seckill-app ignored SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status {status}");
    common::drop_database(&database_url).await;
}
