//! A product's public page costs what a refusal costs: read from the product row alone, once per
//! lifetime however many buyers refresh it, through connections no buyer needs; the full
//! accounting is an admin read.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection};

use crate::common::{self, fresh_database_url, spawn_app, test_config};

/// Whether another session holds product `id`'s row locked.
async fn row_locked(side: &mut MySqlConnection, id: u64) -> bool {
    sqlx::query("BEGIN")
        .execute(&mut *side)
        .await
        .expect("begin");
    let taken = sqlx::query("SELECT id FROM products WHERE id = ? FOR UPDATE NOWAIT")
        .bind(id)
        .fetch_optional(&mut *side)
        .await
        .is_err();
    sqlx::query("ROLLBACK")
        .execute(&mut *side)
        .await
        .expect("rollback");
    taken
}

#[tokio::test]
async fn a_page_is_read_while_every_buyer_connection_is_held() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    // One connection for the purchases, held below by one purchase for as long as it may be.
    config.db_pool_size = 1;
    config.db_acquire_timeout_ms = 120_000;
    let app = spawn_app(config).await;
    app.reset(1, 10).await;
    app.reset(2, 10).await;

    let holder = {
        let body = json!({ "user_id": "u-hold", "quantity": 1, "request_id": "r-hold",
                           "strategy": "pessimistic" });
        let request = app.purchase(1, &body);
        tokio::spawn(async move { request.header("x-seckill-hold-ms", "120000").send().await })
    };
    let mut side = MySqlConnection::connect(&database_url)
        .await
        .expect("side connection");
    while !row_locked(&mut side, 1).await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let page = app
        .client
        .get(format!("{}/api/products/2", app.url))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        row_locked(&mut side, 1).await,
        "the page was answered only once the buyer let go of the purchases' one connection"
    );
    let page: Value = page.json().await.expect("json");
    assert_eq!(page["stock"], 10, "{page}");

    // The holder's connection ends its transaction; the test's database can then be dropped.
    let thread: Option<u64> = sqlx::query_scalar(
        "SELECT t.trx_mysql_thread_id FROM information_schema.innodb_trx t \
         JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id \
         WHERE p.db = DATABASE() AND t.trx_rows_locked > 0",
    )
    .fetch_optional(&mut side)
    .await
    .expect("holder's thread");
    if let Some(thread) = thread {
        let kill = format!("KILL CONNECTION {thread}");
        let _ = sqlx::query(sqlx::AssertSqlSafe(kill))
            .execute(&mut side)
            .await;
    }
    let _ = holder.await;
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn a_crowd_refreshing_a_page_reads_it_once() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.page_ttl_ms = 600_000;
    let app = spawn_app(config).await;
    app.reset(3, 50).await;
    let body = json!({ "user_id": "u-1", "quantity": 1, "request_id": "r-1" });
    let (status, answer) = app.order(3, &body, None).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    let crowd = (0..64).map(|_| {
        let client = app.client.clone();
        let url = format!("{}/api/products/3", app.url);
        async move {
            let r = client.get(url).send().await.expect("page");
            assert_eq!(r.status(), StatusCode::OK);
            r.json::<Value>().await.expect("json")
        }
    });
    let pages = futures::future::join_all(crowd).await;

    assert_eq!(app.metric("seckill_page_reads_total").await, Some(1));
    assert_eq!(app.metric("seckill_page_reads_at_once_max").await, Some(1));
    for page in &pages {
        assert_eq!(page["stock"], 49, "{page}");
        assert!(
            page.get("sold").is_none() && page.get("orders").is_none(),
            "the public page shows no order figures: {page}"
        );
    }
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn an_unknown_product_is_answered_and_not_remembered() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    for id in 1_000..1_200 {
        let r = app
            .client
            .get(format!("{}/api/products/{id}", app.url))
            .send()
            .await
            .expect("page");
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
    assert_eq!(app.metric("seckill_pages_kept").await, Some(0));
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn the_accounting_is_for_the_admin_and_the_page_for_anyone() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.admin_token = Some("s3cret".into());
    let app = spawn_app(config).await;
    let put = app
        .client
        .put(format!("{}/api/products/4", app.url))
        .bearer_auth("s3cret")
        .json(&json!({ "stock": 5 }))
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), StatusCode::OK);

    let page = app
        .client
        .get(format!("{}/api/products/4", app.url))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), StatusCode::OK);
    let accounting = format!("{}/api/products/4/accounting", app.url);
    let refused = app.client.get(&accounting).send().await.expect("get");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let view: Value = app
        .client
        .get(&accounting)
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(
        (view["stock"].clone(), view["sold"].clone()),
        (json!(5), json!(0))
    );
    app.stop().await;
    common::drop_database(&database_url).await;
}

/// `GET` of product `id`'s page.
async fn view(app: &common::TestApp, id: u64) -> reqwest::Response {
    (app.client)
        .get(format!("{}/api/products/{id}", app.url))
        .send()
        .await
        .expect("page")
}

#[tokio::test]
async fn a_page_view_past_the_instances_rate_that_may_not_wait_is_refused_busy_with_retry_after() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.page_views_per_second = 1;
    config.page_max_wait_ms = 0;
    let app = spawn_app(config).await;
    app.reset(1, 10).await;
    // One view a second: the views asked one after another soon meet a turn taken.
    let mut refused = None;
    for _ in 0..100 {
        let page = view(&app, 1).await;
        if page.status() != StatusCode::OK {
            refused = Some(page);
            break;
        }
    }
    let refused = refused.expect("a hundred views in a row, each served at once");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "busy", "{body}");
}

#[tokio::test]
async fn page_views_past_the_rate_wait_their_turns_one_interval_apart_and_are_all_served() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.page_views_per_second = 10;
    config.page_max_wait_ms = 60_000;
    let app = spawn_app(config).await;
    app.reset(1, 10).await;
    let began = std::time::Instant::now();
    let views = futures::future::join_all((0..5).map(|_| view(&app, 1))).await;
    assert!(views.iter().all(|v| v.status() == StatusCode::OK));
    // Five turns a tenth of a second apart: the last came four intervals after the first.
    assert!(
        began.elapsed() >= Duration::from_millis(400),
        "{:?}",
        began.elapsed()
    );
}
