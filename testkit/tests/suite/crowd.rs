//! The one crowd against a fake shop served on a free port: it makes exactly its clicks,
//! retries what it is told to with the same request id, stops at `sold_out` when asked,
//! holds the clicks after a sale's opening until it is opened, and counts every answer by code.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::api::{ErrorBody, ErrorCode, OrderRequest, OrderResponse, Strategy};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use testkit::{Api, Clicks, Crowd, Retry, Spread};

/// What the fake shop knows: its stock, how often it saw each request id, which instance
/// served it, and how many first tries of a request id it answers `busy`.
#[derive(Default)]
struct Shop {
    stock: i64,
    busy_first_tries: u32,
    seen: HashMap<String, u32>,
    served_by: Vec<usize>,
}

type Shared = Arc<Mutex<Shop>>;

async fn order(
    State((shop, instance)): State<(Shared, usize)>,
    Path(product): Path<u64>,
    Json(body): Json<OrderRequest>,
) -> Response {
    let mut shop = shop.lock().unwrap();
    shop.served_by.push(instance);
    let tries = shop.seen.entry(body.request_id.clone()).or_default();
    *tries += 1;
    let refuse = |status: StatusCode, error| {
        let body = ErrorBody {
            error,
            message: error.to_string(),
        };
        (status, Json(body)).into_response()
    };
    if *tries <= shop.busy_first_tries {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Busy);
    }
    if shop.stock < body.quantity {
        return refuse(StatusCode::CONFLICT, ErrorCode::SoldOut);
    }
    shop.stock -= body.quantity;
    let placed = OrderResponse {
        order_id: 1,
        product_id: product,
        user_id: body.user_id.unwrap_or_default(),
        quantity: body.quantity as u32,
        strategy: body.strategy.unwrap_or(Strategy::Conditional),
        request_id: body.request_id,
        fencing_token: None,
        stage: app::api::OrderStage::Reserved,
    };
    (StatusCode::CREATED, Json(placed)).into_response()
}

/// `instances` servers of one fake shop with `stock` units; a client of all of them.
async fn shop(stock: i64, busy_first_tries: u32, instances: usize) -> (Api, Shared) {
    let shop: Shared = Arc::new(Mutex::new(Shop {
        stock,
        busy_first_tries,
        ..Shop::default()
    }));
    let mut bases = Vec::new();
    for instance in 0..instances {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        bases.push(format!("http://{}", listener.local_addr().unwrap()));
        let router = axum::Router::new()
            .route("/api/products/{id}/orders", post(order))
            .with_state((shop.clone(), instance));
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    }
    (Api::new(bases, None).unwrap(), shop)
}

#[tokio::test]
async fn a_crowd_makes_exactly_its_clicks_and_counts_every_answer_by_code() {
    let (api, shop) = shop(20, 0, 2).await;
    let answers = Crowd::new(5, Clicks::Total(50), Strategy::Conditional, "run")
        .run(&api, 7)
        .await;
    assert_eq!(answers.clicks.len(), 50);
    assert_eq!(answers.created(), 20);
    assert_eq!(answers.refused(ErrorCode::SoldOut), 30);
    let outcomes = answers.outcomes();
    assert_eq!((outcomes.created, outcomes.total()), (20, 50), "{outcomes}");
    let shop = shop.lock().unwrap();
    assert_eq!(shop.seen.len(), 50, "a request id of its own per click");
    assert!(shop.seen.values().all(|&n| n == 1), "nothing sent twice");
    assert!(answers.clicks.iter().all(|c| c.sent <= c.answered));
    let first = shop.served_by.iter().filter(|&&i| i == 0).count();
    assert_eq!(
        (first, shop.served_by.len() - first),
        (25, 25),
        "spread by click"
    );
}

#[tokio::test]
async fn a_watched_crowd_reports_every_click_it_records_as_it_is_answered() {
    let (api, _shop) = shop(3, 1, 1).await;
    let seen: Arc<Mutex<Vec<testkit::Click>>> = Arc::default();
    let watcher = seen.clone();
    let answers = Crowd::new(2, Clicks::Total(6), Strategy::Conditional, "watched")
        .retrying(Retry {
            when: Retry::transient,
            times: 2,
            pause: Duration::ZERO,
            jitter: Duration::ZERO,
        })
        .watched(move |click| watcher.lock().unwrap().push(click.clone()))
        .run(&api, 7)
        .await;
    let mut seen = seen.lock().unwrap().clone();
    let mut recorded = answers.clicks.clone();
    let by_id = |c: &testkit::Click| c.request_id.clone();
    seen.sort_by_key(by_id);
    recorded.sort_by_key(by_id);
    assert_eq!(seen, recorded, "the watch saw each click once, as recorded");
    assert!(
        seen.iter().all(|c| c.tries == 2),
        "after its retry, not before"
    );
}

#[tokio::test]
async fn a_retried_answer_is_sent_again_with_the_same_request_id() {
    let (api, shop) = shop(10, 1, 1).await;
    let retry_busy = Retry {
        when: |a| a.refused_with(ErrorCode::Busy),
        times: 3,
        pause: Duration::from_millis(1),
        jitter: Duration::from_millis(1),
    };
    let answers = Crowd::new(4, Clicks::Each(1), Strategy::Conditional, "retry")
        .retrying(retry_busy)
        .run(&api, 7)
        .await;
    assert_eq!(answers.created(), 4);
    assert!(answers.clicks.iter().all(|c| c.tries == 2), "{answers:?}");
    let shop = shop.lock().unwrap();
    assert_eq!(shop.seen.len(), 4);
    assert!(shop.seen.values().all(|&n| n == 2), "{:?}", shop.seen);
}

#[tokio::test]
async fn an_answer_the_policy_does_not_retry_ends_the_click() {
    let (api, _) = shop(10, 1, 1).await;
    let answers = Crowd::new(3, Clicks::Each(2), Strategy::Conditional, "once")
        .run(&api, 7)
        .await;
    assert_eq!(answers.clicks.len(), 6);
    assert_eq!(answers.refused(ErrorCode::Busy), 6);
    assert!(answers.clicks.iter().all(|c| c.tries == 1));
}

#[tokio::test]
async fn buyers_clicking_until_sold_out_stop_once_one_is_told_so() {
    let (api, shop) = shop(12, 0, 2).await;
    let until = Clicks::UntilSoldOut {
        pause: Duration::from_millis(1),
        patience: Duration::from_secs(30),
    };
    let answers = Crowd::new(4, until, Strategy::Conditional, "until")
        .by_buyer()
        .run(&api, 7)
        .await;
    assert_eq!(answers.created(), 12);
    let sold_out = answers.refused(ErrorCode::SoldOut);
    assert!((1..=4).contains(&sold_out), "{sold_out} sold_out answers");
    assert_eq!(shop.lock().unwrap().stock, 0);
}

#[tokio::test]
async fn clicks_go_only_through_the_instances_named() {
    let (api, shop) = shop(100, 0, 3).await;
    let answers = Crowd::new(6, Clicks::Each(2), Strategy::Conditional, "through")
        .through(&[1, 2], Spread::ByBuyer)
        .staggered(Duration::from_millis(1))
        .run(&api, 7)
        .await;
    assert_eq!(answers.created(), 12);
    let shop = shop.lock().unwrap();
    assert!(!shop.served_by.contains(&0), "{:?}", shop.served_by);
    assert_eq!(shop.served_by.iter().filter(|&&i| i == 1).count(), 6);
    assert!(answers.clicks.iter().all(|c| c.answer.created()));
}

/// Three arrivals ahead of the opening, five from it, every one at the crowd's start.
fn arrivals_at_once() -> Vec<testkit::Arrival> {
    (0..8)
        .map(|n| testkit::Arrival {
            user: format!("a-{n}"),
            at: Duration::ZERO,
        })
        .collect()
}

#[tokio::test]
async fn a_crowd_waiting_for_its_opening_sends_only_the_clicks_ahead_of_it_until_opened() {
    let (api, shop) = shop(100, 0, 2).await;
    let sale = Crowd::arriving(arrivals_at_once(), Strategy::Conditional, "opening")
        .opening(3, Duration::ZERO)
        .start(&api, 7);
    sale.ahead_answered().await;
    assert_eq!(
        shop.lock().unwrap().seen.len(),
        3,
        "the clicks ahead of the opening answered, and no other sent"
    );
    sale.open(tokio::time::Instant::now());
    let answers = sale.finish().await;
    assert_eq!(answers.created(), 8);
    let opened = answers.opened.expect("the sale opened");
    for click in &answers.clicks {
        match click.buyer {
            0..3 => assert!(
                click.answered <= opened,
                "{click:?} answered after {opened:?}"
            ),
            _ => assert!(click.sent >= opened, "{click:?} sent before {opened:?}"),
        }
    }
}

#[tokio::test]
async fn a_crowd_stopped_before_its_opening_sends_nothing_more_and_never_opened() {
    let (api, shop) = shop(100, 0, 1).await;
    let sale = Crowd::arriving(arrivals_at_once(), Strategy::Conditional, "stopped")
        .opening(3, Duration::ZERO)
        .start(&api, 7);
    sale.ahead_answered().await;
    let answers = sale.stop().await;
    assert_eq!((answers.clicks.len(), answers.opened), (3, None));
    assert_eq!(shop.lock().unwrap().seen.len(), 3);
}
