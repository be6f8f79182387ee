//! The `seckill-app` binary itself: configured by environment variables, it creates and
//! migrates its database, serves, and exits cleanly on SIGTERM; `buyer-token` mints a buyer
//! token by hand.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::fresh_database_url;
use reqwest::StatusCode;

/// The buyer key the binary is started with.
const KEY: &str = "the binary's buyer key";

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
        .env("SECKILL_BUYER_KEY", KEY)
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

#[test]
fn buyer_token_prints_a_token_of_the_user_signed_with_the_buyer_key() {
    let mint = |key: Option<&str>, user: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_seckill-app"));
        command
            .env_clear()
            .args(["buyer-token", "--user", user, "--ttl-secs", "60"]);
        if let Some(key) = key {
            command.env("SECKILL_BUYER_KEY", key);
        }
        command.output().expect("run seckill-app buyer-token")
    };
    let minted = mint(Some(KEY), "alice");
    assert!(minted.status.success(), "{minted:?}");
    let token = String::from_utf8(minted.stdout).expect("text");
    let key = app::buyer::BuyerKey::new(KEY.as_bytes());
    let buyer = (key.verify(token.trim(), SystemTime::now())).expect("a token of the key");
    assert!(buyer.names("alice"));
    let later = SystemTime::now() + Duration::from_secs(61);
    assert!(
        key.verify(token.trim(), later).is_err(),
        "good past its --ttl-secs"
    );

    let keyless = mint(None, "alice");
    assert!(!keyless.status.success());
    let stderr = String::from_utf8_lossy(&keyless.stderr);
    assert!(stderr.contains("--buyer-key"), "{stderr}");
    assert!(!mint(Some(KEY), " alice").status.success());
}
