//! The app's HTTP API as every client in the workspace uses it ([`Api`]): the load's
//! requests (orders, `GET /api/noop`) on keep-alive connections of their own
//! ([`crate::connections`]), the admin calls through reqwest.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};

use app::api::{
    ErrorBody, ErrorCode, ExpiryRound, Home, OrderRequest, OrderResponse, ProductView,
    Reconciliation, ResetProduct, Strategies, Strategy, StrategyInfo, StrategyList,
};
use app::buyer::BuyerKey;

use crate::answer::Answer;
use crate::connections::{self, Body, Connections};
use crate::wire;
use bytes::Bytes;

/// Request header that makes the strategy pause inside its critical section (the app must
/// run with `--allow-fault-injection`).
const HOLD_HEADER: &str = "x-seckill-hold-ms";
/// Request header that makes a transition of an order read its state and write it apart (the
/// app must run with `--allow-fault-injection`).
const UNCHECKED_HEADER: &str = "x-seckill-unchecked-transition";
/// How long the buyer tokens [`Api`] mints are good for: longer than any run, so that a
/// prepared order stays good while a run sends it.
const BUYER_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Faults a transition of an order is asked to play (the app must run with
/// `--allow-fault-injection`): the default plays none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fault {
    /// Read the order's state, then write it (the check-then-act race), instead of one
    /// conditional change.
    pub unchecked: bool,
    /// Pause inside the transition (for Redis-held stock: between the state change and the
    /// units' return).
    pub hold: Duration,
}

/// How a transition of an order was answered: the order as it now stands, or the refusal.
pub type Transition = std::result::Result<OrderResponse, ErrorCode>;

/// An order written once, path, headers and JSON body ([`Api::prepare_order`]).
#[derive(Debug, Clone)]
pub struct PreparedOrder(wire::Prepared);

/// `GET /api/noop`, written once.
static NOOP: LazyLock<wire::Prepared> = LazyLock::new(|| {
    let mut request = Request::new(Body::default());
    *request.uri_mut() = Uri::from_static("/api/noop");
    wire::Prepared::of(&request)
});

/// A client for a set of app instances: the load's requests (orders, `GET /api/noop`) on
/// keep-alive connections of their own ([`crate::connections`]), spread by the caller's
/// sequence number; admin calls through reqwest to the last instance (which no scenario kills
/// or freezes). Given the instances' buyer key ([`Api::with_buyer_key`]), it signs each
/// buyer's token itself, as a sign-in service would, and sends it with the buyer's requests.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT` of each instance.
    pub bases: Arc<[String]>,
    load: Arc<Connections>,
    admin_token: Option<Arc<str>>,
    /// The strategies the instances offer, once asked.
    offered: Arc<tokio::sync::OnceCell<Vec<Strategy>>>,
    buyer_key: Option<Arc<BuyerKey>>,
}

/// How long an idempotent request is sent again while its connections fail before an answer:
/// twice the service's default header-read deadline (5 s), the longest a crowd's idle
/// keep-alive connections hold every connection the service may hold.
const IDEMPOTENT_PATIENCE: Duration = Duration::from_secs(10);

/// The pause before an idempotent request's second sending; it doubles, up to
/// [`IDEMPOTENT_LONGEST_PAUSE`].
const IDEMPOTENT_FIRST_PAUSE: Duration = Duration::from_millis(50);
const IDEMPOTENT_LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Sends `request`, an idempotent one (a `PUT` of a whole state, a `GET`), again on a new
/// connection when its connection failed before any answer came: a connection the service
/// closed as it was taken from the pool, or one it closed at once because every one it may
/// hold was held — after a flood, the crowd's idle keep-alive connections hold them until the
/// service's header-read deadline lets them go, so the request is sent again, with pauses
/// that double, for [`IDEMPOTENT_PATIENCE`]. Sent again, such a request does what it would
/// have done once; a run of an hour is not lost to a crowd's leftovers. A request that timed
/// out is not sent again: the service may be working on it.
async fn send_idempotent(request: reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
    let started = std::time::Instant::now();
    let mut pause = IDEMPOTENT_FIRST_PAUSE;
    let mut request = request;
    loop {
        let Some(again) = request.try_clone() else {
            return request.send().await;
        };
        match request.send().await {
            Err(e)
                if !e.is_timeout()
                    && (e.is_connect() || e.is_request())
                    && started.elapsed() < IDEMPOTENT_PATIENCE =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(IDEMPOTENT_LONGEST_PAUSE);
                request = again;
            }
            answered => return answered,
        }
    }
}

/// The longest a load request waits for its answer before it counts as unanswered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an idle connection stays in the pool: below the service's header-read timeout.
const POOL_IDLE: Duration = Duration::from_secs(3);

impl Api {
    pub fn new(bases: Vec<String>, admin_token: Option<String>) -> Result<Api> {
        anyhow::ensure!(!bases.is_empty(), "no app instance to talk to");
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            // The service closes a connection that sends no request for its header-read
            // timeout (5 s by default); a pooled connection idle that long, taken for the next
            // request just as the service closes it, failed the request ("connection closed
            // before message completed"). Idle connections are let go sooner.
            .pool_idle_timeout(POOL_IDLE)
            .build()?;
        let authorities = bases
            .iter()
            .map(|b| {
                let uri: Uri = b.parse().with_context(|| format!("{b} is not a URL"))?;
                let authority = uri
                    .authority()
                    .with_context(|| format!("{b} has no host"))?;
                Ok(authority.as_str().to_owned())
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Api {
            http,
            load: Arc::new(Connections::new(&authorities)?),
            bases: bases.into(),
            admin_token: admin_token.map(Into::into),
            offered: Arc::default(),
            buyer_key: None,
        })
    }

    /// This client reaching the same instances at `bases` instead, in the same order (through
    /// something that stands in front of them: a relay adding the buyers' round trip), with
    /// the same admin token and buyer key.
    pub fn reaching(&self, bases: Vec<String>) -> Result<Api> {
        anyhow::ensure!(
            bases.len() == self.bases.len(),
            "{} addresses for {} instances",
            bases.len(),
            self.bases.len()
        );
        let mut api = Api::new(bases, self.admin_token.as_deref().map(String::from))?;
        api.buyer_key = self.buyer_key.clone();
        Ok(api)
    }

    /// This client, authenticating its buyers with tokens signed by `key` (the instances'
    /// `--buyer-key`).
    pub fn with_buyer_key(mut self, key: BuyerKey) -> Api {
        self.buyer_key = Some(Arc::new(key));
        self
    }

    /// The key this client signs its buyers' tokens with, if any.
    pub fn buyer_key(&self) -> Option<&BuyerKey> {
        self.buyer_key.as_deref()
    }

    /// `Bearer <token>` of `user`, when this client has a buyer key.
    fn buyer_token(&self, user: &str) -> Option<String> {
        let key = self.buyer_key.as_ref()?;
        let token = key.sign(user, SystemTime::now() + BUYER_TOKEN_LIFETIME);
        Some(format!("Bearer {token}"))
    }

    /// The instance request `n` goes to (round robin).
    pub fn base(&self, n: usize) -> &str {
        &self.bases[n % self.bases.len()]
    }

    fn admin(&self) -> &str {
        &self.bases[self.bases.len() - 1]
    }

    /// `PUT /api/products/{id}`: creates the product or resets it to `stock` units kept in
    /// `home`, and deletes its orders. Its orders fall due only after the longest payment
    /// window.
    pub async fn reset_product(&self, id: u64, stock: i64, home: Home) -> Result<()> {
        // No per-user limit to speak of: the benchmark's buyers buy again and again. No
        // deadline either: the orders a phase leaves would otherwise fall due during a later
        // one (the app's window is 15 minutes, a full run an hour), and the expiry sweep would
        // work beside that phase's purchases, or ahead of the orders the expiry phase watches.
        self.put_product(
            id,
            &ResetProduct {
                per_user_limit: Some(app::api::MAX_STOCK),
                payment_window_ms: Some(app::api::MAX_PAYMENT_WINDOW_MS),
                ..ResetProduct::new(stock, home)
            },
        )
        .await
    }

    /// `PUT /api/products/{id}` with every rule of `product` (limit, window, token). A product
    /// that names no strategies may be sold by every strategy the instances offer for its home:
    /// the benchmark compares them.
    pub async fn put_product(&self, id: u64, product: &ResetProduct) -> Result<()> {
        self.put_product_at(self.admin(), id, product).await
    }

    /// [`Api::put_product`] through every instance in turn: once it returns, each has
    /// forgotten the product as it was (a write forgets at once on the instance it goes
    /// through, and on the others only as news from Redis comes, or as their memory ages).
    pub async fn put_product_through_each(&self, id: u64, product: &ResetProduct) -> Result<()> {
        for base in self.bases.iter() {
            self.put_product_at(base, id, product).await?;
        }
        Ok(())
    }

    async fn put_product_at(&self, base: &str, id: u64, product: &ResetProduct) -> Result<()> {
        let url = format!("{base}/api/products/{id}");
        let mut product = *product;
        if product.strategies.is_none() {
            let offered = self
                .offered
                .get_or_try_init(|| async {
                    let list = self.strategies().await?;
                    anyhow::Ok(list.into_iter().map(|info| info.name).collect())
                })
                .await?;
            let home = product.home;
            product.strategies = Some(Strategies::of(
                offered.iter().copied().filter(|s| s.home() == home),
            ));
        }
        self.admin_put(&url, &product).await?;
        Ok(())
    }

    /// `PUT url` of `body` as JSON with the admin token: the answer, if it was a success.
    async fn admin_put(
        &self,
        url: &str,
        body: &impl serde::Serialize,
    ) -> Result<reqwest::Response> {
        let mut request = self.http.put(url).json(body);
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        let r = send_idempotent(request)
            .await
            .with_context(|| format!("PUT {url}"))?;
        if !r.status().is_success() {
            bail!(
                "PUT {url}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
        Ok(r)
    }

    /// `POST /api/products/{id}/reconcile`: repairs a Redis-held counter, says what it found.
    pub async fn reconcile(&self, id: u64) -> Result<Reconciliation> {
        let url = format!("{}/api/products/{id}/reconcile", self.admin());
        let mut request = self.http.post(&url);
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await?.error_for_status()?;
        r.json().await.with_context(|| format!("POST {url}"))
    }

    /// `GET /api/products/{id}/accounting`: the product as the database has it.
    pub async fn product(&self, id: u64) -> Result<ProductView> {
        let url = format!("{}/api/products/{id}/accounting", self.admin());
        let mut request = self.http.get(&url);
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        let r = send_idempotent(request).await?.error_for_status()?;
        r.json().await.with_context(|| format!("GET {url}"))
    }

    /// `GET /api/strategies`.
    pub async fn strategies(&self) -> Result<Vec<StrategyInfo>> {
        let url = format!("{}/api/strategies", self.admin());
        let r = send_idempotent(self.http.get(&url))
            .await?
            .error_for_status()?;
        let list: StrategyList = r.json().await.with_context(|| format!("GET {url}"))?;
        Ok(list.strategies)
    }

    /// An order of `body` for `product`, built once to be sent many times
    /// ([`Api::send_prepared`]): its buyer's token, if any, is part of its bytes.
    pub fn prepare_order(&self, product: u64, body: &OrderRequest) -> Result<PreparedOrder> {
        Ok(PreparedOrder(wire::Prepared::of(
            &self.order_post(product, body)?,
        )))
    }

    /// Sends one order to instance `n % K`.
    pub async fn order(&self, n: usize, product: u64, body: &OrderRequest) -> Answer {
        self.order_holding(n, product, body, Duration::ZERO).await
    }

    /// [`Api::order`], asking the strategy to pause `hold` inside its critical section.
    pub async fn order_holding(
        &self,
        n: usize,
        product: u64,
        body: &OrderRequest,
        hold: Duration,
    ) -> Answer {
        let Ok(mut request) = self.order_post(product, body) else {
            return Answer::Transport;
        };
        if !hold.is_zero() {
            (request.headers_mut()).insert(HOLD_HEADER, HeaderValue::from(hold.as_millis() as u64));
        }
        classified(self.load.send(n, &request), Answer::of_order).await
    }

    /// Sends `order`, prepared once, to instance `n % K`: for a load that repeats one request,
    /// as `wrk` repeats its script's, and spends nothing per request building it.
    pub async fn send_prepared(&self, n: usize, order: &PreparedOrder) -> Answer {
        classified(self.load.send_prepared(n, &order.0), Answer::of_order).await
    }

    /// `GET /api/noop` on instance `n % K`: the HTTP round trip alone, written once as the
    /// prepared orders are, so that a refusal beside it is set against a request built alike.
    pub async fn noop(&self, n: usize) -> Answer {
        classified(self.load.send_prepared(n, &NOOP), Answer::of_request).await
    }

    /// Idle keep-alive connections kept for instance `n % K`.
    pub fn idle_connections(&self, n: usize) -> usize {
        self.load.idle(n)
    }

    /// `POST /api/products/{product}/orders/{request_id}/pay?user_id=…` on instance `n % K`.
    pub async fn pay(
        &self,
        n: usize,
        product: u64,
        user: &str,
        request: &str,
    ) -> Result<Transition> {
        self.transition(n, product, user, request, "pay", Fault::default())
            .await
    }

    /// `pay` or `cancel` (`action`) of the buyer's order, playing `fault`: `POST
    /// /api/products/{product}/orders/{request_id}/{action}?user_id=…` on instance `n % K`.
    pub async fn transition(
        &self,
        n: usize,
        product: u64,
        user: &str,
        request: &str,
        action: &str,
        fault: Fault,
    ) -> Result<Transition> {
        let mut url = reqwest::Url::parse(self.base(n))?;
        url.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("{} cannot take a path", self.base(n)))?
            .extend([
                "api",
                "products",
                &product.to_string(),
                "orders",
                request,
                action,
            ]);
        url.query_pairs_mut().append_pair("user_id", user);
        let mut request = self.faulty(self.http.post(url.clone()), fault);
        // The admin token, which `faulty` sends when there is one, stands for any buyer.
        if self.admin_token.is_none()
            && let Some(token) = self.buyer_token(user)
        {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        let r = request.send().await?;
        let status = r.status();
        let body = r.bytes().await?;
        if status.is_success() {
            return Ok(Ok(
                serde_json::from_slice(&body).with_context(|| format!("POST {url}: {status}"))?
            ));
        }
        let refusal: ErrorBody = serde_json::from_slice(&body)
            .with_context(|| format!("POST {url}: {status} outside the contract"))?;
        Ok(Err(refusal.error))
    }

    /// `POST /api/products/{id}/expire` on instance `n % K`: one round of the expiry sweep on
    /// the product, now.
    pub async fn expire(&self, n: usize, id: u64, fault: Fault) -> Result<ExpiryRound> {
        let url = format!("{}/api/products/{id}/expire", self.base(n));
        let r = self.faulty(self.http.post(&url), fault).send().await?;
        if !r.status().is_success() {
            bail!(
                "POST {url}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
        r.json().await.with_context(|| format!("POST {url}"))
    }

    /// `PUT /api/expiry` on every instance: pauses (`true`) or resumes each one's expiry
    /// sweep; returns once no instance is running a round of it.
    pub async fn pause_sweeps(&self, paused: bool) -> Result<()> {
        for base in self.bases.iter() {
            let url = format!("{base}/api/expiry");
            let r = self
                .admin_put(&url, &app::api::SweepSwitch { paused })
                .await?;
            let state: app::api::SweepState =
                r.json().await.with_context(|| format!("PUT {url}"))?;
            anyhow::ensure!(state.paused == paused, "PUT {url}: the sweep is {state:?}");
        }
        Ok(())
    }

    /// `request` with the admin token and the headers of `fault`.
    fn faulty(
        &self,
        mut request: reqwest::RequestBuilder,
        fault: Fault,
    ) -> reqwest::RequestBuilder {
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        if fault.unchecked {
            request = request.header(UNCHECKED_HEADER, "1");
        }
        if !fault.hold.is_zero() {
            request = request.header(HOLD_HEADER, fault.hold.as_millis().to_string());
        }
        request
    }

    /// `GET /metrics` of every instance, concatenated (empty where unavailable).
    pub async fn metrics(&self) -> String {
        let mut all = String::new();
        for base in self.bases.iter() {
            if let Ok(r) = self.http.get(format!("{base}/metrics")).send().await
                && let Ok(text) = r.text().await
            {
                all.push_str(&text);
                all.push('\n');
            }
        }
        all
    }
}

impl Api {
    /// `POST /api/products/{product}/orders` with `body` as JSON, and its buyer's token when
    /// this client has a buyer key.
    fn order_post(&self, product: u64, body: &OrderRequest) -> Result<Request<Body>> {
        let mut request = Request::new(Body::from(serde_json::to_vec(body)?));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = Uri::try_from(format!("/api/products/{product}/orders"))?;
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(token) = (body.user_id.as_deref()).and_then(|user| self.buyer_token(user)) {
            headers.insert(AUTHORIZATION, HeaderValue::try_from(token)?);
        }
        Ok(request)
    }
}

/// Waits for the answer `sent` reads (at most [`REQUEST_TIMEOUT`]) and classifies its status
/// and body.
async fn classified(
    sent: impl Future<Output = Result<(StatusCode, Bytes), connections::Error>>,
    classify: fn(u16, &[u8]) -> Answer,
) -> Answer {
    match tokio::time::timeout(REQUEST_TIMEOUT, sent).await {
        Ok(Ok((status, body))) => classify(status.as_u16(), &body),
        Ok(Err(_)) | Err(_) => Answer::Transport,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server that resets its first connection once the request is in, and answers the
    /// second: what a service that closed a pooled connection, or refused one past its bound,
    /// looks like to the client.
    async fn resetting_once() -> (String, tokio::task::JoinHandle<u32>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let mut connections = 0;
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                connections += 1;
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await.unwrap();
                if connections == 1 {
                    stream.set_zero_linger().unwrap();
                    drop(stream);
                    continue;
                }
                let body = br#"{"ok":true}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(body).await.unwrap();
                return connections;
            }
        });
        (base, served)
    }

    #[tokio::test]
    async fn an_idempotent_request_whose_connection_is_reset_before_an_answer_is_sent_again() {
        let (base, served) = resetting_once().await;
        let put = reqwest::Client::new()
            .put(format!("{base}/api/expiry"))
            .body("{}");
        let answer = send_idempotent(put)
            .await
            .expect("answered the second time");
        assert_eq!(answer.status(), 200);
        assert_eq!(
            served.await.unwrap(),
            2,
            "one reset connection, one answered"
        );
    }
}
