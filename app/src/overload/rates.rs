//! The buyers' rates: requests of the buyer routes per second a buyer (`--rate-per-user`) and
//! a client address (`--rate-per-address`) may make, bursts of as many (`429 rate_limited`
//! past them). They count requests, not purchases in flight, so they stand beside the
//! admission limiter, not in it: a status poll or a cancellation counts here and never there.

use std::fmt::Write;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// How often the rate limiters forget the buyers and addresses they have not seen lately.
const FORGET_EVERY: Duration = Duration::from_secs(60);

/// The per-buyer and per-address rate limiters, each where a rate is set.
pub struct Rates {
    per_user: Option<DefaultKeyedRateLimiter<String>>,
    per_address: Option<DefaultKeyedRateLimiter<IpAddr>>,
}

impl Rates {
    /// `per_user` and `per_address` requests per second (bursts of as many), where set.
    pub fn new(per_user: Option<u32>, per_address: Option<u32>) -> Rates {
        Rates {
            per_user: keyed(per_user),
            per_address: keyed(per_address),
        }
    }

    /// Whether the buyer, and the address when known, are within their rates (each counted).
    pub fn within(&self, user_id: &str, address: Option<IpAddr>) -> bool {
        let user = self
            .per_user
            .as_ref()
            .is_none_or(|limiter| limiter.check_key(&user_id.to_string()).is_ok());
        let address = match (&self.per_address, address) {
            (Some(limiter), Some(ip)) => limiter.check_key(&ip).is_ok(),
            _ => true,
        };
        user && address
    }

    /// The keys each limiter remembers, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP seckill_rate_limiter_keys Buyers or addresses a rate limiter remembers.\n\
             # TYPE seckill_rate_limiter_keys gauge\n",
        );
        for (limiter, keys) in [
            ("user", self.per_user.as_ref().map(|l| l.len())),
            ("address", self.per_address.as_ref().map(|l| l.len())),
        ] {
            if let Some(keys) = keys {
                let _ = writeln!(
                    out,
                    "seckill_rate_limiter_keys{{limiter=\"{limiter}\"}} {keys}"
                );
            }
        }
        out
    }

    /// Forgets, now and then, the keys the limiters have not seen lately, so their memory
    /// follows the buyers of the last minute rather than every buyer ever.
    pub async fn forget_idle_keys(&self) {
        loop {
            tokio::time::sleep(FORGET_EVERY).await;
            if let Some(limiter) = &self.per_user {
                forget_idle(limiter);
            }
            if let Some(limiter) = &self.per_address {
                forget_idle(limiter);
            }
        }
    }
}

/// A limiter of `rate` per second per key (bursts of as many), if a rate is set.
fn keyed<K: Hash + Eq + Clone>(rate: Option<u32>) -> Option<DefaultKeyedRateLimiter<K>> {
    rate.and_then(NonZeroU32::new)
        .map(|rate| RateLimiter::keyed(Quota::per_second(rate)))
}

fn forget_idle<K: Hash + Eq + Clone>(limiter: &DefaultKeyedRateLimiter<K>) {
    limiter.retain_recent();
    limiter.shrink_to_fit();
}
