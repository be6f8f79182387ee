//! The app's HTTP API as the benchmark uses it (issue 3's contract), and how an answer counts.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// How one purchase request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 201: a new order.
    Sold,
    /// 200: the original order of a replayed request id.
    Replayed,
    /// 409 `sold_out`.
    SoldOut,
    /// 503 `busy`: the lock or row lock was not obtained within the wait budget.
    Busy,
    /// 503 `backend_unavailable`.
    Unavailable,
    /// Anything else: another status, a transport error, a timeout.
    Error,
}

impl Outcome {
    /// Classifies a status and, for 503, the error code of the body.
    pub fn classify(status: u16, body: &[u8]) -> Outcome {
        match status {
            201 => Outcome::Sold,
            200 => Outcome::Replayed,
            409 => Outcome::SoldOut,
            503 => match serde_json::from_slice::<ErrorBody>(body) {
                Ok(b) if b.error == "backend_unavailable" => Outcome::Unavailable,
                _ => Outcome::Busy,
            },
            _ => Outcome::Error,
        }
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
}

/// Outcome counts of a phase.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Outcomes {
    pub sold: u64,
    pub replayed: u64,
    pub sold_out: u64,
    pub busy: u64,
    pub unavailable: u64,
    pub errors: u64,
}

impl Outcomes {
    pub fn count(&mut self, o: Outcome) {
        *match o {
            Outcome::Sold => &mut self.sold,
            Outcome::Replayed => &mut self.replayed,
            Outcome::SoldOut => &mut self.sold_out,
            Outcome::Busy => &mut self.busy,
            Outcome::Unavailable => &mut self.unavailable,
            Outcome::Error => &mut self.errors,
        } += 1;
    }

    pub fn add(&mut self, o: &Outcomes) {
        self.sold += o.sold;
        self.replayed += o.replayed;
        self.sold_out += o.sold_out;
        self.busy += o.busy;
        self.unavailable += o.unavailable;
        self.errors += o.errors;
    }

    pub fn total(&self) -> u64 {
        self.sold + self.replayed + self.sold_out + self.busy + self.unavailable + self.errors
    }
}

/// The body of `POST /api/products/{id}/orders`.
#[derive(Debug, Clone, Serialize)]
pub struct OrderRequest<'a> {
    pub user_id: String,
    pub quantity: i64,
    pub request_id: String,
    pub strategy: &'a str,
}

/// One line of `GET /api/strategies`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StrategyInfo {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub backend: String,
    #[serde(default)]
    pub safe: bool,
}

/// A client for a set of app instances.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT` of each instance.
    pub bases: Vec<String>,
    admin_token: String,
}

impl Api {
    pub fn new(bases: Vec<String>, admin_token: String, pool: usize) -> Result<Api> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(pool)
            .timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()?;
        Ok(Api {
            http,
            bases,
            admin_token,
        })
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The instance request `n` goes to (round robin).
    pub fn base(&self, n: usize) -> &str {
        &self.bases[n % self.bases.len()]
    }

    /// `PUT /api/products/{id}`: creates the product or resets it to `stock` and deletes its orders.
    pub async fn reset_product(&self, id: u64, stock: i64) -> Result<()> {
        let url = format!("{}/api/products/{id}", self.base(0));
        let r = self
            .http
            .put(&url)
            .bearer_auth(&self.admin_token)
            .json(&serde_json::json!({ "stock": stock }))
            .send()
            .await
            .with_context(|| format!("PUT {url}"))?;
        if !r.status().is_success() {
            bail!(
                "PUT {url}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// `GET /api/strategies`.
    pub async fn strategies(&self) -> Result<Vec<StrategyInfo>> {
        let url = format!("{}/api/strategies", self.base(0));
        let r = self.http.get(&url).send().await?.error_for_status()?;
        let v: serde_json::Value = r.json().await.with_context(|| format!("GET {url}"))?;
        // Accept a bare list or an object wrapping it.
        let list = match v {
            serde_json::Value::Object(mut o) => o
                .remove("strategies")
                .context("GET /api/strategies: no `strategies` list")?,
            v => v,
        };
        Ok(serde_json::from_value(list)?)
    }

    /// Sends one order to instance `n % K` and classifies the answer.
    pub async fn order(&self, n: usize, product: u64, body: &OrderRequest<'_>) -> Outcome {
        let url = format!("{}/api/products/{product}/orders", self.base(n));
        match self.http.post(url).json(body).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.bytes().await.unwrap_or_default();
                Outcome::classify(status, &body)
            }
            Err(_) => Outcome::Error,
        }
    }

    /// `GET /metrics` of every instance, concatenated (empty where unavailable).
    pub async fn metrics(&self) -> String {
        let mut all = String::new();
        for base in &self.bases {
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
pub fn retries_in_metrics(text: &str, strategy: &str) -> Option<f64> {
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
    fn a_503_is_busy_unless_the_body_says_the_backend_is_unavailable() {
        assert_eq!(
            Outcome::classify(503, br#"{"error":"busy"}"#),
            Outcome::Busy
        );
        assert_eq!(
            Outcome::classify(503, br#"{"error":"backend_unavailable","message":"x"}"#),
            Outcome::Unavailable
        );
        assert_eq!(Outcome::classify(503, b"garbage"), Outcome::Busy);
        assert_eq!(Outcome::classify(201, b""), Outcome::Sold);
        assert_eq!(Outcome::classify(409, b""), Outcome::SoldOut);
        assert_eq!(Outcome::classify(500, b""), Outcome::Error);
    }

    #[test]
    fn retries_are_summed_per_strategy_from_prometheus_text() {
        let text = "# HELP seckill_retries_total retries\n\
            seckill_retries_total{strategy=\"optimistic\",instance=\"a\"} 7\n\
            seckill_retries_total{strategy=\"optimistic\",instance=\"b\"} 5\n\
            seckill_retries_total{strategy=\"naive\"} 100\n\
            seckill_requests_total{strategy=\"optimistic\"} 9\n";
        assert_eq!(retries_in_metrics(text, "optimistic"), Some(12.0));
        assert_eq!(retries_in_metrics(text, "conditional"), None);
    }
}
