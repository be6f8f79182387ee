//! What one purchase costs in round trips to each server: counted by the relays in front of the
//! servers (`--rtt`), one purchase at a time, each on its own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the round-trip phase counts (the same for every strategy of a run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTripShape {
    /// Purchases made one after another, each by a buyer of its own.
    pub purchases: u64,
}

/// One strategy's purchases, counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundTrips {
    /// Purchases sent; each waited for the one before it.
    pub purchases: u64,
    /// Of them, answered as placed or accepted (`201`, `202`).
    pub placed: u64,
    /// Each kind of server (`mariadb`, `redis`, `redlock`, `zookeeper`, `etcd`, `memcached`):
    /// exchanges per purchase with one server of that kind — a request after its answer, one
    /// round trip waited for; over the Redlock set's five, asked at once, the mean of one.
    /// Counted for each purchase, the mean of all but those that counted the most: a tenth, or
    /// as many as [`Self::idle_per_second`] says met what nobody buying asks for; a kind no
    /// purchase used is left out.
    pub per_purchase: BTreeMap<String, f64>,
    /// Each kind of server: exchanges per second while nobody bought, over a second right
    /// before the purchases.
    pub idle_per_second: BTreeMap<String, f64>,
    /// The purchases' median time, as their buyer waited for it, in ms.
    pub median_ms: f64,
    /// Calls a purchase sent while it held a lock — the product's row lock or a distributed
    /// lock — after the call that took it, through the one that released it: round trips every
    /// other buyer of the product waited for. The service's own count
    /// (`seckill_calls_under_lock_total` over `seckill_lock_holds_total`), the mean over the
    /// purchases that held one; `None` for a strategy that holds no lock across a call, or a
    /// run recorded before the service counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub under_lock: Option<f64>,
}

impl RoundTrips {
    /// Round trips per purchase over every server.
    pub fn total(&self) -> f64 {
        self.per_purchase.values().sum()
    }
}

/// The sample run's round trips, for the tests of the renderings and the analyses.
#[cfg(test)]
pub mod sample {
    use std::collections::BTreeMap;

    use app::api::Strategy;

    use super::{RoundTripShape, RoundTrips};
    use crate::sample::Tagged;
    use crate::schema::RunReport;

    /// Puts the round-trip phase's shape in `report`'s settings, and `conditional`'s count (four
    /// round trips to MariaDB a purchase) in its record.
    pub fn put(report: &mut RunReport) {
        let shape = RoundTripShape { purchases: 40 };
        let counted = round_trips(Strategy::Conditional, &[("mariadb", 4.0)]).result;
        crate::sample::put_phase(report, super::super::NAME, shape, counted);
    }

    /// A strategy's purchases counted: `per_purchase` round trips to each kind of server, 40
    /// purchases of 1.2 ms, nothing asked while nobody bought.
    pub fn round_trips(strategy: Strategy, per_purchase: &[(&str, f64)]) -> Tagged<RoundTrips> {
        Tagged::new(
            strategy,
            RoundTrips {
                purchases: 40,
                placed: 40,
                per_purchase: (per_purchase.iter())
                    .map(|(kind, n)| (kind.to_string(), *n))
                    .collect(),
                idle_per_second: BTreeMap::new(),
                median_ms: 1.2,
                under_lock: None,
            },
        )
    }
}
