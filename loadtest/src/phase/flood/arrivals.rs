//! How a flood arrives: who clicks and when, as [`testkit::Arrival`]s for the one crowd.
//!
//! The crowd starts `early_by` before the sale opens. Regular users click once each, at a
//! uniformly random moment of the burst after the opening; a share of them double-click (a
//! second click, with a request id of its own, 0–50 ms after the first — the browser's second
//! submit). A share are bots behind one shared account that all fire in the first 5 ms after
//! the opening (what a script does), and a share are bots that fire `early_by` before it (at
//! least: the sale opens only once each has its answer, [`super::crowd`]). The
//! arrivals are sorted by time, the early bots first, so a buyer's index is its place in the
//! send order.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use testkit::Arrival;

use super::schema::{FloodShape, Kind};

/// The flood's clicks in send order, each with its kind.
pub struct Plan {
    pub arrivals: Vec<Arrival>,
    pub kinds: Vec<Kind>,
    /// From the crowd's start to the opening.
    pub opens_after: Duration,
}

impl Plan {
    pub fn count(&self, kind: Kind) -> u64 {
        self.kinds.iter().filter(|k| **k == kind).count() as u64
    }

    /// Distinct users among the arrivals.
    pub fn people(&self) -> usize {
        let users: std::collections::HashSet<&str> =
            self.arrivals.iter().map(|a| a.user.as_str()).collect();
        users.len()
    }
}

/// The user id every shared-account bot uses.
pub const SHARED_ACCOUNT: &str = "bot-shared";

/// The arrivals of `shape`, drawn from `seed` (the same seed, the same flood).
pub fn plan(shape: &FloodShape, seed: u64) -> Plan {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let opens_after = Duration::from_millis(shape.early_by_ms);
    let burst = Duration::from_millis(shape.burst_ms.max(1));
    let share = |s: f64| (shape.users as f64 * s.clamp(0.0, 1.0)).round() as usize;
    let (shared, early) = (
        share(shape.shared_account_bot_share),
        share(shape.early_bot_share),
    );
    let regular = shape.users.saturating_sub(shared + early);
    let mut clicks: Vec<(Duration, String, Kind)> = Vec::with_capacity(shape.users * 11 / 10);
    let mut users: Vec<usize> = (0..shape.users).collect();
    users.shuffle(&mut rng);
    for (n, &user) in users.iter().enumerate() {
        let name = format!("u-{user}");
        if n < regular {
            let at = opens_after + burst.mul_f64(rng.random::<f64>());
            if rng.random::<f64>() < shape.double_click_share {
                let again = at + Duration::from_millis(rng.random_range(0..=50));
                clicks.push((again, name.clone(), Kind::Second));
            }
            clicks.push((at, name, Kind::Regular));
        } else if n < regular + shared {
            let at = opens_after + Duration::from_micros(rng.random_range(0..5_000));
            clicks.push((at, SHARED_ACCOUNT.to_owned(), Kind::SharedAccount));
        } else {
            clicks.push((Duration::ZERO, name, Kind::Early));
        }
    }
    // The early clicks first, so that they are the crowd's first arrivals however long the
    // early window (even none).
    clicks.sort_by_key(|(at, _, kind)| (*at, *kind != Kind::Early));
    let kinds = clicks.iter().map(|(_, _, kind)| *kind).collect();
    let arrivals = clicks
        .into_iter()
        .map(|(at, user, _)| Arrival { user, at })
        .collect();
    Plan {
        arrivals,
        kinds,
        opens_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(users: usize) -> FloodShape {
        FloodShape {
            users,
            units: 10,
            first_come: false,
            ..super::super::schema::sample::flood_shape()
        }
    }

    #[test]
    fn a_flood_has_its_shares_of_double_clicks_and_bots_in_send_order() {
        let plan = plan(&shape(10_000), 7);
        assert_eq!(plan.count(Kind::SharedAccount), 200);
        assert_eq!(plan.count(Kind::Early), 200);
        assert_eq!(plan.count(Kind::Regular), 9_600);
        let seconds = plan.count(Kind::Second);
        assert!((800..1_100).contains(&seconds), "{seconds}");
        assert!(plan.arrivals.windows(2).all(|w| w[0].at <= w[1].at));
        let opens = plan.opens_after;
        for (arrival, kind) in plan.arrivals.iter().zip(&plan.kinds) {
            match kind {
                Kind::Early => assert_eq!(arrival.at, Duration::ZERO),
                Kind::SharedAccount => assert_eq!(arrival.user, SHARED_ACCOUNT),
                _ => assert!(arrival.at >= opens && arrival.at <= opens + Duration::from_secs(2)),
            }
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_flood() {
        let (a, b) = (plan(&shape(500), 3), plan(&shape(500), 3));
        assert_eq!(a.arrivals, b.arrivals);
    }
}
