//! Exact latencies in microseconds (hdrhistogram), as every driver records them, and their
//! summary for the report.

use std::time::Duration;

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use testkit::Outcomes;

use crate::schema::{Bucket, HistogramData, LatencySummary, LoadResult, Loop};

/// Highest recordable latency: one minute (longer ones are clamped, and counted as such).
const MAX_US: u64 = 60_000_000;

/// A latency histogram in µs, 3 significant digits.
#[derive(Debug, Clone)]
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            histogram: Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds"),
        }
    }
}

impl Latencies {
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(MAX_US);
        self.histogram.saturating_record(us.clamp(1, MAX_US));
    }

    pub fn add(&mut self, other: &Latencies) {
        self.histogram
            .add(&other.histogram)
            .expect("histograms with the same bounds add");
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Percentiles, max and mean, in µs.
    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        let q = |q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        LatencySummary {
            count: h.len(),
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if h.is_empty() { 0 } else { h.max() },
            mean_us: if h.is_empty() { 0.0 } else { h.mean() },
        }
    }

    /// The histogram's data: the percentile distribution (readable) and the whole histogram
    /// in HdrHistogram's V2 deflate format, base64 (exact, loadable by any HdrHistogram tool).
    pub fn data(&self) -> HistogramData {
        let distribution = if self.histogram.is_empty() {
            Vec::new()
        } else {
            self.histogram
                .iter_quantiles(2)
                .map(|v| Bucket {
                    value_us: v.value_iterated_to(),
                    percentile: v.quantile_iterated_to() * 100.0,
                    count: v.count_since_last_iteration(),
                })
                .collect()
        };
        let mut bytes = Vec::new();
        let encoded = match V2DeflateSerializer::new().serialize(&self.histogram, &mut bytes) {
            Ok(_) => base64_encode(&bytes),
            Err(e) => format!("unavailable: {e:?}"),
        };
        HistogramData {
            distribution,
            hdr_v2_deflate_base64: encoded,
        }
    }
}

impl Latencies {
    /// A run's result: its outcomes over `seconds`, and these latencies.
    pub fn result(
        &self,
        mode: Loop,
        concurrency: usize,
        seconds: f64,
        outcomes: Outcomes,
        not_sent: u64,
    ) -> LoadResult {
        LoadResult {
            mode,
            concurrency,
            seconds,
            attempts_per_sec: outcomes.total() as f64 / seconds,
            successes_per_sec: outcomes.created as f64 / seconds,
            outcomes,
            not_sent,
            latency: self.summary(),
            histogram: self.data(),
            repetitions: None,
        }
    }
}

/// Standard base64 with padding (what HdrHistogram's tools read).
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_test_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64_encode(input.as_bytes()), expected);
        }
    }

    #[test]
    fn summary_reports_percentiles_of_what_was_recorded() {
        let mut l = Latencies::default();
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert!((49_900..=50_100).contains(&s.p50_us), "{s:?}");
        assert!((99_000..=100_100).contains(&s.max_us), "{s:?}");
        assert!(s.p50_us <= s.p90_us && s.p90_us <= s.p99_us && s.p99_us <= s.max_us);
    }

    #[test]
    fn an_empty_histogram_summarises_to_zeros() {
        assert_eq!(Latencies::default().summary(), LatencySummary::default());
    }
}
