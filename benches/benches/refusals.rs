//! What refusing a click costs inside the service once its product is sold out, with one core
//! refusing and with two at once. The service's router is called directly — no socket, no
//! client, no kernel — so what is measured is the service's own work. Beside it, through the
//! same calls: `GET /api/noop`, and HTTP's floor ([`testkit::floor`]: the purchase's body read
//! and refused with the service's `409 sold_out`, nothing else), so that a refusal reads as
//! "so much beyond what any refusal costs". With two cores at once, whatever every refusal
//! writes that the other core reads (a lock, a shared count, a reference count) is a cache line
//! passed between them on every click, and shows as the gap between the two figures.
//!
//! Beside them, `refusal/token-check`: of a refusal's work, the buyer token's check alone (one
//! HMAC-SHA-256 of the token, checked once the body is read and parsed).
//!
//! Run with `cargo bench -p benches --bench refusals`. One iteration is one request answered;
//! with two threads, criterion's time per iteration is the wall time of both threads' work over
//! the requests they answered together (so perfect scaling halves it; a thread is started per
//! sample, a few microseconds over thousands of requests).

use std::time::{Duration, Instant, SystemTime};

use app::api::{Home, OrderRequest, Strategy};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderValue, Method, Request, StatusCode, Uri};
use benches::shop::Shop;
use criterion::Criterion;
use tokio::runtime::Runtime;
use tower::Service;

const GROUP: &str = "refusal";

/// How many cores refuse at once.
const THREADS: [usize; 2] = [1, 2];

/// The strategies whose refusals are measured: one whose stock the database holds, one whose
/// stock Redis holds (their memories of a sold-out product are loaded from different places;
/// the refusal from memory should cost the same).
const STRATEGIES: [(Strategy, Home); 2] = [
    (Strategy::Conditional, Home::Row),
    (Strategy::RedisLua, Home::Redis),
];

/// Product ids of this bench, one per strategy.
const FIRST_PRODUCT: u64 = 7_100_000;

/// One request, built anew for each call from parts that cost nothing to copy (a clone of a
/// static `Uri`, `Bytes` or header value counts no reference), and the answer it must get.
#[derive(Clone)]
struct Call {
    method: Method,
    uri: Uri,
    body: Bytes,
    /// The buyer's token, for a purchase.
    authorization: Option<HeaderValue>,
    expect: StatusCode,
}

impl Call {
    fn new(method: Method, path: String, body: Vec<u8>, expect: StatusCode) -> Call {
        // Leaked once per benchmark: a static `Uri` and body are cloned without a count.
        let path: &'static str = Box::leak(path.into_boxed_str());
        let body: &'static [u8] = Box::leak(body.into_boxed_slice());
        Call {
            method,
            uri: Uri::from_static(path),
            body: Bytes::from_static(body),
            authorization: None,
            expect,
        }
    }

    /// This call, as a buyer's: with `authorization` (`Bearer <buyer token>`).
    fn of_buyer(self, authorization: String) -> Call {
        let value: &'static str = Box::leak(authorization.into_boxed_str());
        Call {
            authorization: Some(HeaderValue::from_static(value)),
            ..self
        }
    }

    async fn once(&self, router: &mut Router) {
        let mut request = Request::new(Body::from(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        if let Some(value) = &self.authorization {
            request.headers_mut().insert(AUTHORIZATION, value.clone());
        }
        let answer = router.call(request).await.expect("the router answers");
        assert_eq!(answer.status(), self.expect, "{} {}", self.method, self.uri);
    }
}

/// The wall time of `iters` calls shared among `threads` threads of their own, each calling
/// the router in a `block_on` of the runtime (whose workers stay idle): threads, not tasks,
/// so that the two really run on two cores rather than wherever the scheduler puts them.
fn across(runtime: &Runtime, router: &Router, threads: usize, iters: u64, call: &Call) -> Duration {
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads as u64 {
            let mut router = router.clone();
            let share = iters / threads as u64 + u64::from(t < iters % threads as u64);
            scope.spawn(move || {
                runtime.block_on(async {
                    for _ in 0..share {
                        call.once(&mut router).await;
                    }
                })
            });
        }
    });
    started.elapsed()
}

/// The late buyer.
const LATE: &str = "late";

/// A late buyer's click through `strategy`: refused once its product is sold out.
fn late_click(strategy: Strategy) -> OrderRequest {
    testkit::order_request(LATE.into(), strategy, "late-click".into(), 1)
}

fn body_of(order: &OrderRequest) -> Vec<u8> {
    serde_json::to_vec(order).expect("an order serializes")
}

/// Sells `product` out through `strategy` (one unit, one buyer), then clicks as a late buyer
/// until a click is refused without reaching the strategy — from memory. The instance's state
/// is waited for, not a time.
async fn sell_out(api: &testkit::Api, product: u64, strategy: Strategy, home: Home) {
    api.reset_product(product, 1, home).await.expect("reset");
    let winner = testkit::order_request("winner".into(), strategy, "winning-click".into(), 1);
    let answer = api.order(0, product, &winner).await;
    assert!(
        answer.created(),
        "the one unit sells: {}",
        answer.describe()
    );
    let late = late_click(strategy);
    loop {
        let before = started(api).await;
        let answer = api.order(0, product, &late).await;
        let sold_out = answer.refused_with(app::api::ErrorCode::SoldOut);
        assert!(sold_out, "a late click is refused: {}", answer.describe());
        if started(api).await == before {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Purchases that reached their strategy, ever.
async fn started(api: &testkit::Api) -> f64 {
    let text = api.metrics().await;
    testkit::metrics::series_values(&text, "seckill_purchases_started_total").sum()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let env = benches::env();
    let shop = runtime.block_on(Shop::start(&env.endpoints));
    let key = (shop.state.settings.buyer_key.clone()).expect("testkit's apps have a buyer key");
    let api = testkit::Api::new(vec![shop.url.clone()], None)
        .expect("a client")
        .with_buyer_key(key.clone());
    let service = app::http::router(shop.state.clone());
    let floor = testkit::floor::router();

    let noop = Call::new(
        Method::GET,
        "/api/noop".into(),
        Vec::new(),
        StatusCode::NO_CONTENT,
    );
    let mut calls = vec![
        ("noop".to_string(), &service, noop),
        (
            "floor".to_string(),
            &floor,
            Call::new(
                Method::POST,
                format!("/api/products/{FIRST_PRODUCT}/orders"),
                body_of(&late_click(Strategy::Conditional)),
                StatusCode::CONFLICT,
            )
            .of_buyer(shop.authorization(LATE)),
        ),
    ];
    for (n, (strategy, home)) in STRATEGIES.into_iter().enumerate() {
        let product = FIRST_PRODUCT + n as u64;
        runtime.block_on(sell_out(&api, product, strategy, home));
        calls.push((
            strategy.name().to_string(),
            &service,
            Call::new(
                Method::POST,
                format!("/api/products/{product}/orders"),
                body_of(&late_click(strategy)),
                StatusCode::CONFLICT,
            )
            .of_buyer(shop.authorization(LATE)),
        ));
    }

    let mut criterion: Criterion = benches::criterion();
    let mut group = criterion.benchmark_group(GROUP);
    for (name, router, call) in &calls {
        for threads in THREADS {
            group.bench_function(format!("{name}/{threads}-thread"), |b| {
                b.iter_custom(|iters| across(&runtime, router, threads, iters, call));
            });
        }
    }
    let bearer = shop.authorization(LATE);
    let token = bearer.strip_prefix("Bearer ").expect("a bearer token");
    group.bench_function("token-check", |b| {
        b.iter(|| {
            key.verify(std::hint::black_box(token), SystemTime::now())
                .is_ok()
        });
    });
    group.finish();
    criterion.final_summary();
}
