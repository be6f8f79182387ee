//! The flood's crowd sent again, sold first come, first served, beside the random door's
//! flood in the report: what arrival order bought (the first clicks, the rank correlation) and
//! what it cost (the time to answer the crowd, the winners' and refused buyers' latency).

use super::super::judge::{FIRST_CLICKS_BAR, RANK_SHARE_BAR, first_come_misses as misses};
use super::super::schema::{CrowdResult, FloodResult};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::schema::{LatencySummary, Of};

/// The section; nothing when no flood was sent again.
pub fn section(floods: &[Of<'_, FloodResult>]) -> Section {
    let pairs: Vec<(&Of<'_, FloodResult>, &CrowdResult)> = (floods.iter())
        .filter_map(|f| f.first_come.as_ref().map(|fc| (f, fc)))
        .collect();
    if pairs.is_empty() {
        return Section::default();
    }
    let mut s = Section::default();
    s.heading(3, "First come, first served");
    s.prose(
        "The same crowd sent again right after each flood, to \
         the same strategy and instances, the product sold first come (`\"first_come\": true`): \
         each click takes its place in one queue in Redis as it comes in, across every \
         instance; the clicks with a place wait for room where others are refused \
         `overloaded`, and the clicks behind the units are refused `sold_out` at once. Each \
         cell reads random door → first come. Rank: the correlation between sending early and \
         buying as a share of the most a yes-or-no outcome allows (1: the first sent bought). \
         No second act and no kill in the second crowd.",
    );
    let arrow = |a: String, b: String| format!("{a} → {b}");
    let percent = |x: f64| format!("{:.0}%", 100.0 * x);
    let share = |x: Option<f64>| x.map_or_else(|| "–".into(), |s| format!("{s:.2}"));
    let p99 = |l: &LatencySummary| format!("{:.1}", l.p99_us as f64 / 1000.0);
    let mut t = Table::left(["strategy"]).and_right([
        "first clicks won",
        "rank",
        "answered ms",
        "winners p99 ms",
        "refused p99 ms",
        "bought",
        "oversell",
        "beyond limit",
        "stranded",
        "undersell",
    ]);
    for (f, fc) in &pairs {
        let random = &f.crowd;
        t.row([
            format!("`{}`", f.strategy.name),
            arrow(
                percent(random.fairness.first_clicks_won),
                percent(fc.fairness.first_clicks_won),
            ),
            arrow(
                share(random.fairness.correlation_share()),
                share(fc.fairness.correlation_share()),
            ),
            arrow(
                format!("{:.0}", random.all_answered_after_ms),
                format!("{:.0}", fc.all_answered_after_ms),
            ),
            arrow(p99(&random.winners), p99(&fc.winners)),
            arrow(p99(&random.refused), p99(&fc.refused)),
            arrow(
                random.outcomes.created.to_string(),
                fc.outcomes.created.to_string(),
            ),
            fc.accounting.oversell.to_string(),
            fc.beyond_limit.to_string(),
            fc.accounting.stranded.to_string(),
            fc.accounting.undersell.to_string(),
        ]);
    }
    s.table(t);
    let mut md = format!(
        "The bars: of the first clicks, {:.0}% or more bought; rank {RANK_SHARE_BAR:.2} of \
         the attainable or more; nothing oversold, sold past the limit or stranded.\n\n",
        100.0 * FIRST_CLICKS_BAR
    );
    let missed: Vec<String> = (pairs.iter())
        .filter_map(|(f, fc)| {
            let m = misses(fc);
            (!m.is_empty()).then(|| format!("- `{}`: {}.", f.strategy.name, m.join("; ")))
        })
        .collect();
    match missed.is_empty() {
        true => md.push_str("Every strategy met them.\n"),
        false => {
            md.push_str("Missed:\n\n");
            md.push_str(&missed.join("\n"));
            md.push('\n');
        }
    }
    s.prose(md);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::api::Strategy;

    #[test]
    fn each_strategy_sent_again_first_come_is_set_beside_its_random_flood_with_its_misses() {
        let mut missing =
            crate::phase::flood::schema::sample::flood(Strategy::Batched, 1_000.0, 1_000.0, 90.0);
        if let Some(fc) = &mut missing.first_come {
            fc.fairness.first_clicks_won = 0.5;
        }
        let floods = [
            crate::phase::flood::schema::sample::flood(
                Strategy::Conditional,
                1_000.0,
                1_000.0,
                90.0,
            ),
            missing,
        ];
        let md = section(&crate::sample::of(&floods)).markdown();
        assert!(md.contains("| `conditional` | 50% → 97% |"), "{md}");
        assert!(
            md.contains("- `batched`: 50% of the first clicks bought (bar 90%)."),
            "{md}"
        );
        assert!(!md.contains("- `conditional`"), "{md}");
        assert!(section(&crate::sample::of(&floods[..0])).is_empty());
    }
}
