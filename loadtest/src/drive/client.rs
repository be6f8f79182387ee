//! The app's HTTP API as every part of the benchmark uses it: one client ([`Api`]) for the
//! flash sale, the throughput loops, the baselines and the scenarios, and one answer type
//! ([`Answer`]) for what came back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Uri};

use crate::drive::connections::{Body, Connections};
use app::api::{
    ErrorBody, ErrorCode, Home, OrderRequest, OrderResponse, ProductView, Reconciliation,
    ResetProduct, Strategy, StrategyInfo, StrategyList,
};

/// Request header that makes the strategy pause inside its critical section (the app must
/// run with `--allow-fault-injection`).
const HOLD_HEADER: &str = "x-seckill-hold-ms";

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `201`: a new order (for the baselines that bypass HTTP: a deduction).
    Created { fencing_token: Option<u64> },
    /// `200` to an order: the original order of a replayed request id.
    Replayed { fencing_token: Option<u64> },
    /// An error answer of the contract: its status and code.
    Refused { status: u16, code: ErrorCode },
    /// A `2xx` to a request that places no order (`GET /api/noop`).
    Served { status: u16 },
    /// An answer outside the contract: another status, or a body that is not the documented one.
    Unexpected { status: u16 },
    /// No answer: connection refused or reset, timeout (for the baselines that bypass HTTP: the
    /// backend call failed).
    Transport,
}

impl Answer {
    /// The `409 sold_out` refusal (also what the direct baselines answer when stock ran out).
    pub const SOLD_OUT: Answer = Answer::Refused {
        status: 409,
        code: ErrorCode::SoldOut,
    };

    /// Classifies the answer to `POST …/orders`.
    pub fn of_order(status: u16, body: &[u8]) -> Answer {
        match status {
            201 | 200 => match serde_json::from_slice::<OrderResponse>(body) {
                Ok(o) if status == 201 => Answer::Created {
                    fencing_token: o.fencing_token,
                },
                Ok(o) => Answer::Replayed {
                    fencing_token: o.fencing_token,
                },
                Err(_) => Answer::Unexpected { status },
            },
            // Accepted, placed later by the stream consumers (`redis-lua-stream`): counted as
            // created, since the sale waits for the stream to drain before it reads the ledger.
            202 => match serde_json::from_slice::<app::api::OrderStatus>(body) {
                Ok(_) => Answer::Created {
                    fencing_token: None,
                },
                Err(_) => Answer::Unexpected { status },
            },
            _ => Answer::of_error(status, body),
        }
    }

    /// Classifies the answer to a request that places no order.
    pub fn of_request(status: u16, body: &[u8]) -> Answer {
        match status {
            200..=299 => Answer::Served { status },
            _ => Answer::of_error(status, body),
        }
    }

    fn of_error(status: u16, body: &[u8]) -> Answer {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(b) if status >= 400 => Answer::Refused {
                status,
                code: b.error,
            },
            _ => Answer::Unexpected { status },
        }
    }

    /// Whether this answer is a new order.
    pub fn created(&self) -> bool {
        matches!(self, Answer::Created { .. })
    }

    /// Whether this answer is a refusal with `code`.
    pub fn refused_with(&self, code: ErrorCode) -> bool {
        matches!(self, Answer::Refused { code: c, .. } if *c == code)
    }

    /// `201 order placed, token 7`, `409 lock_lost`, …
    pub fn describe(&self) -> String {
        let placed = |status: u16, what: &str, token: Option<u64>| match token {
            Some(t) => format!("{status} {what}, token {t}"),
            None => format!("{status} {what}"),
        };
        match self {
            Answer::Created { fencing_token } => placed(201, "order placed", *fencing_token),
            Answer::Replayed { fencing_token } => placed(200, "order replayed", *fencing_token),
            Answer::Refused { status, code } => format!("{status} {code}"),
            Answer::Served { status } => format!("{status}"),
            Answer::Unexpected { status } => format!("{status} (outside the contract)"),
            Answer::Transport => "no answer (transport error)".into(),
        }
    }
}

/// How many requests of a phase ended each way: every error code apart.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Outcomes {
    /// `201`: new orders (for the direct baselines: deductions).
    pub created: u64,
    /// `200`: the original orders of replayed request ids.
    pub replayed: u64,
    /// Refusals by error code (`sold_out`, `lock_lost`, `busy`, …), each a key of its own.
    #[serde(flatten)]
    pub refused: Refusals,
    /// `2xx` answers to requests that place no order (`GET /api/noop`).
    pub served: u64,
    /// Answers outside the contract, by status.
    pub unexpected: BTreeMap<u16, u64>,
    /// Requests that got no answer.
    pub transport_error: u64,
}

impl Outcomes {
    pub fn count(&mut self, answer: &Answer) {
        match *answer {
            Answer::Created { .. } => self.created += 1,
            Answer::Replayed { .. } => self.replayed += 1,
            Answer::Refused { code, .. } => *self.refused.entry(code) += 1,
            Answer::Served { .. } => self.served += 1,
            Answer::Unexpected { status } => *self.unexpected.entry(status).or_default() += 1,
            Answer::Transport => self.transport_error += 1,
        }
    }

    pub fn add(&mut self, o: &Outcomes) {
        self.created += o.created;
        self.replayed += o.replayed;
        for (code, n) in o.refused.iter() {
            *self.refused.entry(code) += n;
        }
        self.served += o.served;
        for (status, n) in &o.unexpected {
            *self.unexpected.entry(*status).or_default() += n;
        }
        self.transport_error += o.transport_error;
    }

    pub fn total(&self) -> u64 {
        self.created
            + self.replayed
            + self.refused.iter().map(|(_, n)| n).sum::<u64>()
            + self.served
            + self.unexpected.values().sum::<u64>()
            + self.transport_error
    }

    /// Refusals with `code`.
    pub fn refused(&self, code: ErrorCode) -> u64 {
        self.refused.0[Refusals::index(code)]
    }

    /// Requests that failed rather than being answered by the purchase contract: no answer,
    /// an answer outside the contract, or a refusal of the request itself (invalid, unknown
    /// strategy, internal error, …) rather than of the purchase.
    pub fn errors(&self) -> u64 {
        let request_refusals: u64 = self
            .refused
            .iter()
            .filter(|(code, _)| !is_purchase_refusal(*code))
            .map(|(_, n)| n)
            .sum();
        self.transport_error + self.unexpected.values().sum::<u64>() + request_refusals
    }
}

/// Refusal counts, one per [`ErrorCode`]; serialized as `{"sold_out": 3, …}` with the codes
/// that occurred, in [`ErrorCode::ALL`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals([u64; ErrorCode::ALL.len()]);

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals([0; ErrorCode::ALL.len()])
    }
}

impl Refusals {
    fn index(code: ErrorCode) -> usize {
        ErrorCode::ALL
            .iter()
            .position(|c| *c == code)
            .expect("ErrorCode::ALL lists every code")
    }

    fn entry(&mut self, code: ErrorCode) -> &mut u64 {
        &mut self.0[Refusals::index(code)]
    }

    /// The codes that occurred, with their counts.
    pub fn iter(&self) -> impl Iterator<Item = (ErrorCode, u64)> + '_ {
        ErrorCode::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(code, n)| (*code, n))
    }
}

impl Serialize for Refusals {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// Whether a refusal is one of the purchase's own outcomes (the product is sold out, the lock
/// was lost, the wait budget ran out, a backend is down) rather than a rejected request.
pub fn is_purchase_refusal(code: ErrorCode) -> bool {
    match code {
        ErrorCode::SoldOut
        | ErrorCode::LockLost
        | ErrorCode::Busy
        | ErrorCode::BackendUnavailable => true,
        ErrorCode::BadRequest
        | ErrorCode::InvalidRequest
        | ErrorCode::UnknownStrategy
        | ErrorCode::IdempotencyConflict
        | ErrorCode::Unauthorized
        | ErrorCode::NotFound
        | ErrorCode::Internal => false,
    }
}

/// `201 ×60, sold_out ×180, lock_lost ×2, no answer ×1`: every non-zero count.
impl std::fmt::Display for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let mut part = |what: String, n: u64| {
            if n > 0 {
                parts.push(format!("{what} ×{n}"));
            }
        };
        part("201".into(), self.created);
        part("200 replayed".into(), self.replayed);
        for (code, n) in self.refused.iter() {
            part(code.to_string(), n);
        }
        part("2xx".into(), self.served);
        for (status, n) in &self.unexpected {
            part(format!("{status} outside the contract"), *n);
        }
        part("no answer".into(), self.transport_error);
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The body of an order of `quantity` units by `user`, with the idempotency key `request_id`.
pub fn order_request(
    user: String,
    strategy: Strategy,
    request_id: String,
    quantity: i64,
) -> OrderRequest {
    OrderRequest {
        user_id: user,
        quantity,
        request_id,
        strategy: Some(strategy),
    }
}

/// A client for a set of app instances: the load's requests (orders, `GET /api/noop`) on
/// keep-alive connections of their own ([`crate::drive::connections`]), spread by the caller's
/// sequence number; admin calls through reqwest to the last instance (which no scenario kills
/// or freezes).
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT` of each instance.
    pub bases: Arc<[String]>,
    load: Arc<Connections>,
    admin_token: Option<Arc<str>>,
}

/// The longest a load request waits for its answer before it counts as unanswered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

impl Api {
    pub fn new(bases: Vec<String>, admin_token: Option<String>) -> Result<Api> {
        anyhow::ensure!(!bases.is_empty(), "no app instance to talk to");
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
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
        })
    }

    /// The instance request `n` goes to (round robin).
    pub fn base(&self, n: usize) -> &str {
        &self.bases[n % self.bases.len()]
    }

    fn admin(&self) -> &str {
        &self.bases[self.bases.len() - 1]
    }

    /// `PUT /api/products/{id}`: creates the product or resets it to `stock` units kept in
    /// `home`, and deletes its orders.
    pub async fn reset_product(&self, id: u64, stock: i64, home: Home) -> Result<()> {
        let url = format!("{}/api/products/{id}", self.admin());
        let mut request = self.http.put(&url).json(&ResetProduct {
            stock,
            home,
            buckets: None,
        });
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.with_context(|| format!("PUT {url}"))?;
        if !r.status().is_success() {
            bail!(
                "PUT {url}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
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

    /// `GET /api/products/{id}`: the product as the database has it.
    pub async fn product(&self, id: u64) -> Result<ProductView> {
        let url = format!("{}/api/products/{id}", self.admin());
        let r = self.http.get(&url).send().await?.error_for_status()?;
        r.json().await.with_context(|| format!("GET {url}"))
    }

    /// `GET /api/strategies`.
    pub async fn strategies(&self) -> Result<Vec<StrategyInfo>> {
        let url = format!("{}/api/strategies", self.admin());
        let r = self.http.get(&url).send().await?.error_for_status()?;
        let list: StrategyList = r.json().await.with_context(|| format!("GET {url}"))?;
        Ok(list.strategies)
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
        let Ok(uri) = Uri::try_from(format!("/api/products/{product}/orders")) else {
            return Answer::Transport;
        };
        let Ok(json) = serde_json::to_vec(body) else {
            return Answer::Transport;
        };
        let mut request = Request::new(Body::from(json));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if !hold.is_zero() {
            headers.insert(HOLD_HEADER, HeaderValue::from(hold.as_millis() as u64));
        }
        self.answer(n, request, Answer::of_order).await
    }

    /// `GET /api/noop` on instance `n % K`: the HTTP round trip alone.
    pub async fn noop(&self, n: usize) -> Answer {
        let mut request = Request::new(Body::default());
        *request.uri_mut() = Uri::from_static("/api/noop");
        self.answer(n, request, Answer::of_request).await
    }

    /// Sends `request` to instance `n % K` and classifies the status and body it gets back.
    async fn answer(
        &self,
        n: usize,
        request: Request<Body>,
        classify: fn(u16, &[u8]) -> Answer,
    ) -> Answer {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.load.send(n, request)).await {
            Ok(Ok((status, body))) => classify(status.as_u16(), &body),
            Ok(Err(_)) | Err(_) => Answer::Transport,
        }
    }

    /// Idle keep-alive connections kept for instance `n % K`.
    pub fn idle_connections(&self, n: usize) -> usize {
        self.load.idle(n)
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

/// Sums the Prometheus samples labelled `strategy="<strategy>"` whose metric name mentions
/// retries (`*retr*`, counters only: `_total` or no suffix). `None` when there are none.
pub fn retries_in_metrics(text: &str, strategy: Strategy) -> Option<f64> {
    let label = format!("strategy=\"{strategy}\"");
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or_default();
        let is_histogram_part = ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.ends_with(s));
        if name.contains("retr")
            && !is_histogram_part
            && series.contains(&label)
            && let Ok(v) = value.trim().parse::<f64>()
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_classified_by_status_and_documented_body() {
        let order = br#"{"order_id":1,"product_id":2,"user_id":"u","quantity":1,"strategy":"redis-lock-fenced","request_id":"r","fencing_token":7}"#;
        assert_eq!(
            Answer::of_order(201, order),
            Answer::Created {
                fencing_token: Some(7)
            }
        );
        assert_eq!(
            Answer::of_order(200, order),
            Answer::Replayed {
                fencing_token: Some(7)
            }
        );
        assert_eq!(
            Answer::of_order(503, br#"{"error":"backend_unavailable","message":"x"}"#),
            Answer::Refused {
                status: 503,
                code: ErrorCode::BackendUnavailable
            }
        );
        assert_eq!(
            Answer::of_order(409, br#"{"error":"lock_lost","message":"x"}"#),
            Answer::Refused {
                status: 409,
                code: ErrorCode::LockLost
            }
        );
        assert_eq!(
            Answer::of_order(503, b"garbage"),
            Answer::Unexpected { status: 503 }
        );
        assert_eq!(
            Answer::of_order(201, b""),
            Answer::Unexpected { status: 201 }
        );
        assert_eq!(Answer::of_request(204, b""), Answer::Served { status: 204 });
    }

    #[test]
    fn retries_are_summed_per_strategy_from_prometheus_text() {
        let text = "# HELP seckill_retries_total retries\n\
            seckill_retries_total{strategy=\"optimistic\",instance=\"a\"} 7\n\
            seckill_retries_total{strategy=\"optimistic\",instance=\"b\"} 5\n\
            seckill_retries_total{strategy=\"naive\"} 100\n\
            seckill_requests_total{strategy=\"optimistic\"} 9\n";
        assert_eq!(retries_in_metrics(text, Strategy::Optimistic), Some(12.0));
        assert_eq!(retries_in_metrics(text, Strategy::Conditional), None);
    }
}
