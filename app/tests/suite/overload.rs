//! Overload is refused, not queued. Past the purchases it may work on at once, past a buyer's
//! rate, past what a `batched` line or a `local-mutex` holds, the service answers at once with
//! a spread `Retry-After`; a buyer waits for an answer no longer than the request timeout (the
//! purchase goes on and its retry gets it); and a client that never sends its headers is
//! disconnected.

use crate::common;

use std::time::Duration;

use app::api::Strategy;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

fn click(user: &str, strategy: Strategy) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": format!("r-{user}"), "strategy": strategy })
}

/// One value of the service's Prometheus text (0 when not there yet).
async fn metric(app: &TestApp, name: &str) -> u64 {
    app.metric(name).await.unwrap_or(0)
}

/// Sends `click` pausing `hold_ms` in its critical section, in the background.
fn held(
    app: &TestApp,
    product: u64,
    click: Value,
    hold_ms: u64,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    common::sent(app, product, click, Some(hold_ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_its_purchases_in_flight_the_service_refuses_at_once_and_serves_what_it_took() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    config.max_in_flight = 4;
    let app = spawn_app(config).await;
    app.reset_in(1, 100, Strategy::RedisLua.home()).await;
    let holding: Vec<_> = (0..4)
        .map(|i| {
            held(
                &app,
                1,
                click(&format!("held-{i}"), Strategy::RedisLua),
                2_000,
            )
        })
        .collect();
    common::wait_until("four purchases in flight", || async {
        metric(&app, "seckill_purchases_in_flight").await == 4
    })
    .await;
    let r = app
        .purchase(1, &click("fifth", Strategy::RedisLua))
        .send()
        .await
        .expect("order");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let wait: Option<u32> = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    assert!(wait.is_some_and(|s| (1..=4).contains(&s)), "{wait:?}");
    let answer: Value = r.json().await.expect("json");
    assert_eq!(answer["error"], "overloaded");
    for task in holding {
        assert_eq!(task.await.expect("held").0, StatusCode::CREATED);
    }
    let (status, _) = app
        .order(1, &click("fifth", Strategy::RedisLua), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let view = app.drained(1).await;
    assert_eq!((view.sold, view.stock), (5, 95));
    app.stop().await;
    drop_database(&database_url).await;
}

/// The fewest purchases of a strategy the instance admits at once, however slowly it answers.
const LEAST: u32 = app::strategy::AtOnce::DEFAULT.least;

/// The purchases of `strategy` the instance admits at once now.
async fn admission_limit(app: &TestApp, strategy: Strategy) -> Option<u64> {
    app.metric(&format!(
        "seckill_admission_limit{{strategy=\"{}\"}}",
        strategy.name()
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strategy_slower_than_the_budget_admits_only_what_it_answers_within_it() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.latency_budget_ms = 250;
    let app = spawn_app(config).await;
    app.reset(1, 100).await;
    assert_eq!(
        admission_limit(&app, Strategy::Pessimistic).await,
        Some(256)
    );
    // Thirty buyers queue on one row lock, each holding it 100 ms: ten answers a second, and
    // the later ones wait seconds, far past the budget.
    let queue: Vec<_> = (0..30)
        .map(|i| {
            held(
                &app,
                1,
                click(&format!("queued-{i}"), Strategy::Pessimistic),
                100,
            )
        })
        .collect();
    common::wait_until("the limit down to what is answered in 250 ms", || async {
        admission_limit(&app, Strategy::Pessimistic).await == Some(u64::from(LEAST))
    })
    .await;
    let in_flight = metric(&app, "seckill_purchases_in_flight").await;
    if in_flight >= u64::from(LEAST) {
        let r = app
            .purchase(1, &click("one-more", Strategy::Pessimistic))
            .send()
            .await
            .expect("order");
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().contains_key("retry-after"));
        let answer: Value = r.json().await.expect("json");
        assert_eq!(answer["error"], "overloaded");
    }
    for task in queue {
        assert!(task.await.expect("queued").0.is_success());
    }
    // Idle, it keeps the limit it earned, and admits within it.
    assert_eq!(
        admission_limit(&app, Strategy::Pessimistic).await,
        Some(u64::from(LEAST))
    );
    let (status, _) = app
        .order(1, &click("after", Strategy::Pessimistic), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // Another strategy's limit is its own.
    assert_eq!(
        admission_limit(&app, Strategy::Conditional).await,
        Some(256)
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_answered_within_the_budget_is_admitted_whole_and_keeps_the_limit() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    // A budget no purchase here comes near, on any machine.
    config.latency_budget_ms = 60_000;
    let app = spawn_app(config).await;
    app.reset(1, 1_000).await;
    for burst in 0..3 {
        let clicks: Vec<_> = (0..100)
            .map(|i| {
                held(
                    &app,
                    1,
                    click(&format!("burst-{burst}-{i}"), Strategy::Conditional),
                    0,
                )
            })
            .collect();
        for task in clicks {
            let (status, answer) = task.await.expect("click");
            assert_eq!(status, StatusCode::CREATED, "{answer}");
        }
    }
    assert_eq!(
        admission_limit(&app, Strategy::Conditional).await,
        Some(256)
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_past_their_rate_is_refused_and_buys_nothing_with_it() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.rate_per_user = Some(1);
    let app = spawn_app(config).await;
    app.reset(1, 100).await;
    let clicks: Vec<_> = (0..20)
        .map(|i| {
            let body = json!({ "user_id": "bot", "quantity": 1, "request_id": format!("r-{i}"), "strategy": "conditional" });
            let request = app.purchase(1, &body);
            tokio::spawn(async move {
                let r = request.send().await.expect("order");
                (r.status(), r.json::<Value>().await.unwrap_or(Value::Null))
            })
        })
        .collect();
    let mut limited = 0;
    for click in clicks {
        let (status, answer) = click.await.expect("click");
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(answer["error"], "rate_limited");
            limited += 1;
        }
    }
    assert!(limited > 0, "20 clicks at once, none past a rate of 1/s");
    let view = app.drained(1).await;
    assert_eq!(view.sold as usize, 20 - limited, "{view:?}");
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_over_long_user_id_is_refused_before_the_rate_limiter_remembers_it() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.rate_per_user = Some(1);
    let app = spawn_app(config).await;
    app.reset(1, 100).await;
    let keys = "seckill_rate_limiter_keys{limiter=\"user\"}";
    let long = "u".repeat(app::api::MAX_USER_ID + 1);
    for i in 0..3 {
        let (status, answer) = app
            .order(
                1,
                &json!({ "user_id": long, "quantity": 1, "request_id": format!("r-{i}") }),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["error"], "invalid_request", "{answer}");
    }
    assert_eq!(
        app.metric(keys).await,
        Some(0),
        "the refused ids are remembered"
    );
    let (status, answer) = app
        .order(1, &click("buyer", Strategy::Conditional), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(
        app.metric(keys).await,
        Some(1),
        "a buyer within the rules is"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_waits_no_longer_than_the_request_timeout_and_the_retry_gets_the_purchase() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.request_timeout_ms = 300;
    let app = spawn_app(config).await;
    app.reset(1, 10).await;
    let (status, answer) = held(&app, 1, click("slow", Strategy::Conditional), 3_000)
        .await
        .expect("held");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["error"], "busy");
    common::wait_until("the purchase to end", || async {
        metric(&app, "seckill_purchases_in_flight").await == 0
    })
    .await;
    let (status, answer) = app
        .order(1, &click("slow", Strategy::Conditional), None)
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the retry replays the order: {answer}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_batched_line_and_a_busy_local_mutex_refuse_instead_of_queueing() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.batch_max = 1;
    config.batch_queue = 2;
    config.lock_wait_ms = 200;
    let app = spawn_app(config).await;
    for (product, strategy) in [(1, Strategy::Batched), (2, Strategy::LocalMutex)] {
        app.reset(product, 100).await;
        let first = held(
            &app,
            product,
            click(&format!("first-{product}"), strategy),
            3_000,
        );
        common::wait_until("the first purchase in flight", || async {
            metric(&app, "seckill_purchases_in_flight").await == 1
        })
        .await;
        let crowd: Vec<_> = (0..6)
            .map(|i| {
                held(
                    &app,
                    product,
                    click(&format!("crowd-{product}-{i}"), strategy),
                    0,
                )
            })
            .collect();
        // A full line is overload; a mutex not obtained in the lock wait is `busy`.
        let refusal = match strategy {
            Strategy::Batched => "overloaded",
            _ => "busy",
        };
        let mut busy = 0;
        for task in crowd {
            let (status, answer) = task.await.expect("crowd");
            if status == StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(answer["error"], refusal, "{strategy}: {answer}");
                busy += 1;
            }
        }
        assert!(busy > 0, "{strategy}: six more purchases all waited");
        assert!(first.await.expect("first").0.is_success());
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_never_sends_its_headers_is_disconnected() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.header_read_timeout_ms = 200;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app::serve_with_shutdown(config, listener, async {
        let _ = stopped.await;
    }));
    let mut silent = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let mut buffer = [0u8; 256];
    let closed = tokio::time::timeout(Duration::from_secs(60), silent.read(&mut buffer)).await;
    assert!(
        matches!(closed, Ok(Ok(_)) | Ok(Err(_))),
        "the silent connection was kept"
    );
    let _ = stop.send(());
    server.await.expect("join").expect("served");
    drop_database(&database_url).await;
}
