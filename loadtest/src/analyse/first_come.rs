//! Whether a flood sold first come, first served kept its promise: the first clicks bought,
//! in the order they were sent, and nothing was oversold, sold past the limit or stranded.

use crate::schema::CrowdResult;

/// Of the first clicks (as many as the units), the share that must buy.
pub const FIRST_CLICKS_BAR: f64 = 0.9;
/// The rank correlation between sending early and buying, as a share of the attainable, that
/// must be reached.
pub const RANK_SHARE_BAR: f64 = 0.9;

/// What a first-come flood missed, in words (empty: every bar met).
pub fn misses(f: &CrowdResult) -> Vec<String> {
    let mut missed = Vec::new();
    if f.fairness.first_clicks_won < FIRST_CLICKS_BAR {
        missed.push(format!(
            "{:.0}% of the first clicks bought (bar {:.0}%)",
            100.0 * f.fairness.first_clicks_won,
            100.0 * FIRST_CLICKS_BAR
        ));
    }
    match f.fairness.correlation_share() {
        Some(share) if share >= RANK_SHARE_BAR => {}
        Some(share) => missed.push(format!(
            "rank {share:.2} of the attainable (bar {RANK_SHARE_BAR:.2})"
        )),
        None => missed.push("no rank correlation (nobody bought, or everybody)".into()),
    }
    let a = &f.accounting;
    for (what, units) in [
        ("oversold", a.oversell),
        ("beyond the limit", f.beyond_limit),
        ("stranded", a.stranded),
    ] {
        if units != 0 {
            missed.push(format!("{units} unit(s) {what}"));
        }
    }
    missed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Fairness;

    fn flood(first_clicks_won: f64, rank: f64, oversell: i64) -> CrowdResult {
        let mut f = crate::sample::first_come_flood();
        f.fairness = Fairness {
            first_clicks_won,
            earliness_rank_correlation: Some(rank),
            attainable_correlation: Some(0.4),
        };
        f.accounting.oversell = oversell;
        f
    }

    #[test]
    fn a_first_come_flood_meets_its_bars_only_with_the_first_clicks_served_in_order_and_no_unit_lost()
     {
        assert!(misses(&flood(0.95, 0.38, 0)).is_empty());
        assert_eq!(misses(&flood(0.5, 0.38, 0)).len(), 1, "first clicks");
        assert_eq!(
            misses(&flood(0.95, 0.2, 0)).len(),
            1,
            "rank, 0.5 of the attainable"
        );
        assert_eq!(misses(&flood(0.95, 0.38, 1)).len(), 1, "oversold");
    }
}
