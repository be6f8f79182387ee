//! The flood's section of the report: how it arrived, each strategy's flood in one row, and
//! the cores a record flood would need (a projection, labelled as one).

use std::fmt::Write;

use app::api::ErrorCode;

pub mod chart;
mod first_come;
mod resale;

use super::judge::{FLOOD_BAR, REFUSAL_BAR_PERCENT};
use super::schema::{FloodMiss, FloodResult, FloodShape, PROJECTED_CLICKS_PER_SECOND};
use crate::report::section::Section;
use crate::report::table::{Align, Table};
use crate::schema::{GROUPS, LatencySummary, Of};

/// The section, or nothing when the run had no flood.
pub fn section(
    shape: Option<&FloodShape>,
    floods: &[Of<'_, FloodResult>],
    misses: &[FloodMiss],
) -> Section {
    let Some(shape) = shape else {
        return Section::default();
    };
    if floods.is_empty() {
        return Section::default();
    }
    let mut s = Section::titled("The flood");
    s.prose(describe(shape));
    s.table(outcome_table(floods));
    s.prose(format!(
        "Sold out: from the opening to the answer that sold the last unit; answered: to the \
         last answer of any click. Shed: `503 overloaded`, `429 rate_limited`, `busy`, \
         `backend_unavailable`. Beyond limit: units buyers hold past one each, from the orders. \
         First clicks: of the first S regular clicks sent, the share that bought; rank: \
         Spearman's correlation between how early a click was sent and whether it bought (1: \
         first come, first served). Refusals once sold out: a closed loop of purchases of the \
         sold-out product beside `GET /api/noop` on the same connections, alternated {} times: \
         the median rate of the refusals, and as a share of the no-op the median of each \
         round's own ratio (its pair ran back to back); where the flood left units, buyers who \
         click until told `sold_out` buy them first (\"after N more sold\"; not timed if they \
         could not: the loop would buy). \
         ÷ no-op \
         flood: the time until every click was answered over the time the same crowd (the same \
         arrivals, instances and client), sent right after, took to be answered asking \
         `GET /api/noop` instead. The bars: the fastest safe strategy within {FLOOD_BAR}× the \
         no-op flood; refusals once sold out at {REFUSAL_BAR_PERCENT}% of no-op or more.",
        floods
            .iter()
            .find_map(|f| f.after_sold_out.map(|r| r.rounds))
            .unwrap_or(0)
    ));
    s.prose(went_wrong(floods, misses));
    for f in floods {
        let file = chart::file_name(f);
        s.chart(file, format!("the flood through `{}`", f.strategy.name));
    }
    s.append(resale::section(shape, floods));
    s.append(first_come::section(floods));
    s.prose("Latency from each click's send, winners and refused buyers apart:");
    s.table(latency_table(floods));
    if let Some(t) = projection_table(floods) {
        s.prose(format!(
            "**A projection, not a measurement:** the cores each kind of process would need \
             for {:.0} clicks/s, scaled linearly from the CPU it spent per click in this flood \
             (which includes the refusals, most of a flood). Real scaling is rarely linear: the \
             hot row and single-threaded Redis stop scaling long before.",
            PROJECTED_CLICKS_PER_SECOND,
        ));
        s.table(t);
    }
    s
}

/// The flood's arrival, in one sentence.
pub fn describe(shape: &FloodShape) -> String {
    format!(
        "{} people click within {} ms of the opening for {} units (one per customer) across {} \
         instance(s): {:.0}% double-click, {:.0}% are bots behind one shared account firing at \
         the opening, {:.0}% are bots firing at least {} ms early (the sale opens once each is answered); {}.",
        shape.users,
        shape.burst_ms,
        shape.units,
        shape.instances,
        100.0 * shape.double_click_share,
        100.0 * shape.shared_account_bot_share,
        100.0 * shape.early_bot_share,
        shape.early_by_ms,
        if shape.retries == 0 {
            "nobody retries".to_owned()
        } else {
            format!(
                "a `503` is retried up to {} times, 1–4 s later",
                shape.retries
            )
        }
    )
}

fn outcome_table(floods: &[Of<'_, FloodResult>]) -> Table {
    let mut t = Table::left(["strategy", "safety"]).and_right([
        "clicks",
        "bought",
        "sold out ms",
        "answered ms",
        "early refused",
        "limit refused",
        "shed",
        "no answer",
        "oversell",
        "beyond limit",
        "stranded",
        "undersell",
        "first clicks won",
        "rank",
        "refusals once sold out",
        "÷ no-op flood",
    ]);
    for f in floods {
        let (c, o) = (&f.crowd, &f.crowd.outcomes);
        let shed = [
            ErrorCode::Overloaded,
            ErrorCode::RateLimited,
            ErrorCode::Busy,
            ErrorCode::BackendUnavailable,
        ]
        .iter()
        .map(|c| o.refused(*c))
        .sum::<u64>();
        let a = &c.accounting;
        t.row([
            format!("`{}`", f.strategy.name),
            f.strategy.safety.to_string(),
            c.clicks.to_string(),
            o.created.to_string(),
            c.sold_out_after_ms
                .map_or_else(|| "not sold out".into(), |ms| format!("{ms:.0}")),
            format!("{:.0}", c.all_answered_after_ms),
            format!(
                "{} / {}",
                o.refused(ErrorCode::SaleNotStarted),
                f.early_clicks
            ),
            o.refused(ErrorCode::LimitReached).to_string(),
            shed.to_string(),
            (o.transport_error + o.unexpected.values().sum::<u64>()).to_string(),
            a.oversell.to_string(),
            c.beyond_limit.to_string(),
            a.stranded.to_string(),
            a.undersell.to_string(),
            format!("{:.0}%", 100.0 * c.fairness.first_clicks_won),
            c.fairness
                .earliness_rank_correlation
                .map_or_else(|| "–".into(), |r| format!("{r:.2}")),
            match f.after_sold_out {
                Some(r) if r.sold_after_flood > 0 => format!(
                    "{:.0}/s ({:.0}% of no-op), after {} more sold",
                    r.refusals_per_second,
                    r.percent_of_noop(),
                    r.sold_after_flood
                ),
                Some(r) => format!(
                    "{:.0}/s ({:.0}% of no-op)",
                    r.refusals_per_second,
                    r.percent_of_noop()
                ),
                None if !f.sold_out() => "not sold out".into(),
                None => "–".into(),
            },
            match (f.answered_over_noop(), f.noop_flood) {
                (Some(ratio), Some(noop)) => {
                    format!("{ratio:.2}× ({:.0} ms)", noop.all_answered_after_ms)
                }
                _ => "–".into(),
            },
        ]);
    }
    t
}

fn latency_table(floods: &[Of<'_, FloodResult>]) -> Table {
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    let cells = |l: &LatencySummary| [ms(l.p50_us), ms(l.p99_us), ms(l.max_us)];
    let mut t = Table::left(["strategy"]).and_right([
        "winners p50 ms",
        "winners p99 ms",
        "winners max ms",
        "refused p50 ms",
        "refused p99 ms",
        "refused max ms",
    ]);
    for f in floods {
        let mut row = vec![format!("`{}`", f.strategy.name)];
        row.extend(cells(&f.crowd.winners));
        row.extend(cells(&f.crowd.refused));
        t.row(row);
    }
    t
}

/// The cores each group would need for a record flood; nothing when no group spent any.
fn projection_table(floods: &[Of<'_, FloodResult>]) -> Option<Table> {
    // The groups that spent CPU in some flood, in the report's order of groups.
    let groups: Vec<&str> = (GROUPS.iter())
        .map(|(group, _)| *group)
        .filter(|g| {
            floods
                .iter()
                .any(|f| f.projection.iter().any(|p| p.group == *g))
        })
        .collect();
    if groups.is_empty() {
        return None;
    }
    let mut t = Table::new([("strategy", Align::Left)]).and_right(
        groups
            .iter()
            .map(|g| format!("{g}: CPU ms / 1,000 clicks → cores")),
    );
    for f in floods {
        let mut row = vec![format!("`{}`", f.strategy.name)];
        for g in &groups {
            row.push(f.projection.iter().find(|p| &p.group == g).map_or_else(
                || "–".into(),
                |p| format!("{:.0} → {:.1}", p.cpu_ms_per_1000_clicks, p.cores),
            ));
        }
        t.row(row);
    }
    Some(t)
}

/// Every flood that broke a rule, and every bar missed, in words from their figures.
fn went_wrong(floods: &[Of<'_, FloodResult>], misses: &[FloodMiss]) -> String {
    let mut md = String::new();
    for f in floods {
        let (a, name) = (&f.crowd.accounting, f.strategy.name);
        if f.crowd.beyond_limit > 0 {
            let _ = writeln!(
                md,
                "- `{name}` let buyers take {} unit(s) beyond one per customer: its limit is \
                 a read followed by a purchase, and a buyer's simultaneous clicks (the {} bots \
                 behind one account, the double clicks) all read \"nothing bought yet\" before \
                 any of them committed. The stock itself stayed safe (oversell {}).",
                f.crowd.beyond_limit, f.shared_account_clicks, a.oversell
            );
        }
        if a.oversell > 0 {
            let _ = writeln!(
                md,
                "- `{name}` sold {} unit(s) more than the {} there were.",
                a.oversell, a.initial_stock
            );
        }
        if a.stranded > 0 {
            let _ = writeln!(
                md,
                "- `{name}` left {} unit(s) missing from the stock's home with no order \
                 holding them.{}",
                a.stranded,
                crate::report::prose::lost_return(name)
            );
        }
    }
    if md.is_empty() {
        md.push_str(
            "No strategy broke a rule in the flood: no oversell, no buyer past the limit, \
                     no unit taken without an order.\n",
        );
    }
    for miss in misses {
        let _ = writeln!(md, "- {}", missed(miss));
    }
    md.push_str(&early_clicks(floods));
    md.push_str(&http_floor(misses, super::judge::refusals_at_bar(floods)));
    format!("What went wrong in the flood:\n\n{md}")
}

/// What became of the bots that fired before the opening, from each row's answers: the early
/// click is the failure a sale window exists for (a bot first in line before the sale opens).
fn early_clicks(floods: &[Of<'_, FloodResult>]) -> String {
    let rows: Vec<_> = floods.iter().filter(|f| f.early_clicks > 0).collect();
    let Some(first) = rows.first() else {
        return String::new();
    };
    let refused = |f: &FloodResult| f.crowd.outcomes.refused(ErrorCode::SaleNotStarted);
    let all = rows.iter().filter(|f| refused(f) >= f.early_clicks).count();
    let mut md = format!(
        "- The early click: of the {} bots that fired before the opening, every one was refused \
         `409 sale_not_started` in {all} of {} rows. The sale's window is checked against the \
         instance's memory of the product before any strategy runs: a bot that fires early is \
         told to wait and takes nothing, and is no nearer the front for having fired first.",
        first.early_clicks,
        rows.len()
    );
    for f in rows.iter().filter(|f| refused(f) < f.early_clicks) {
        let _ = write!(
            md,
            " In `{}`'s row {} were; the other {} were answered only after the opening, among \
             the sale's own clicks.",
            f.strategy.name,
            refused(f),
            f.early_clicks - refused(f)
        );
    }
    md.push('\n');
    md
}

/// Where HTTP alone puts a refusal beside the no-op, when refusals missed their bar and the
/// run measured it; `met` safe strategies' refusals met the bar.
fn http_floor(misses: &[FloodMiss], met: usize) -> String {
    let shares: Vec<(f64, f64, f64)> = misses
        .iter()
        .filter_map(|m| match m {
            FloodMiss::CostlyRefusals {
                percent_of_noop,
                bar_percent,
                http_floor_percent: Some(floor),
                ..
            } => Some((*percent_of_noop, *bar_percent, *floor)),
            _ => None,
        })
        .collect();
    let Some(&(_, bar, floor)) = shares.first() else {
        return String::new();
    };
    let mut reached: Vec<f64> = shares.iter().map(|s| s.0).collect();
    reached.sort_by(f64::total_cmp);
    let median = reached[reached.len() / 2];
    let mut md = format!(
        "- HTTP alone: the same purchase, refused with the same `409 sold_out` by servers with \
         nothing of the service behind their routes (the body read, nothing else), came back at \
         {floor:.0}% of their own `GET /api/noop` (`http-floor-refusal` over the \
         `http-floor-noop` measured right before it, the median of this run's baseline \
         rounds). The refusals above reached {median:.0}% (median)."
    );
    if floor < bar {
        let _ = write!(
            md,
            " The bar of {bar}% asks for more than HTTP's own difference between the two \
             requests leaves (a body to read, a path parameter to route and an answer with a \
             body, against a bodiless `GET` answered `204`)"
        );
        md.push_str(&match met {
            0 => ": in this run no refusal of the service could meet it, however little it did."
                .to_owned(),
            n => format!(
                ". {n} safe strateg{} measured above it all the same: each strategy's ratio \
                 comes from its own rounds right after its flood, HTTP's from the baselines' \
                 rounds, and a refusal of the service above HTTP's floor, which does less, \
                 shows how far such rounds differ on this machine, not a refusal that costs \
                 less than HTTP's.",
                if n == 1 { "y" } else { "ies" }
            ),
        });
    }
    md.push('\n');
    md
}

/// A bar of the flood missed, in one sentence.
fn missed(miss: &FloodMiss) -> String {
    match miss {
        FloodMiss::SlowFlood {
            strategy,
            answered_ms,
            noop_answered_ms,
            bar_ratio,
        } => format!(
            "The fastest safe strategy, `{strategy}`, answered every click {answered_ms:.0} ms \
             after the opening, {:.2}× the {noop_answered_ms:.0} ms the same crowd asking \
             `GET /api/noop` took: beyond the bar of {bar_ratio}×.",
            answered_ms / noop_answered_ms.max(f64::EPSILON)
        ),
        FloodMiss::CostlyRefusals {
            strategy,
            percent_of_noop,
            bar_percent,
            ..
        } => format!(
            "`{strategy}` refused the sold-out product at {percent_of_noop:.0}% of the rate of \
             `GET /api/noop` on the same connections, below the bar of {bar_percent}%."
        ),
    }
}

#[cfg(test)]
mod tests {
    use app::api::Strategy;

    use super::*;
    use crate::phase::flood::schema::sample::flood;

    fn refusal_miss(percent_of_noop: f64, http_floor_percent: Option<f64>) -> FloodMiss {
        FloodMiss::CostlyRefusals {
            strategy: Strategy::Batched,
            percent_of_noop,
            bar_percent: REFUSAL_BAR_PERCENT,
            http_floor_percent,
        }
    }

    #[test]
    fn the_early_clicks_are_told_from_each_rows_answers() {
        let mut rows = [
            flood(Strategy::Naive, 1_000.0, 1_000.0, 90.0),
            flood(Strategy::Conditional, 1_000.0, 1_000.0, 90.0),
        ];
        assert_eq!(
            early_clicks(&crate::sample::of(&rows)),
            "",
            "no early bots, nothing to say"
        );
        for (row, refused) in rows.iter_mut().zip([289, 400]) {
            row.early_clicks = 400;
            for _ in 0..refused {
                row.crowd.outcomes.count(&testkit::Answer::Refused {
                    status: 409,
                    code: ErrorCode::SaleNotStarted,
                });
            }
        }
        let text = early_clicks(&crate::sample::of(&rows));
        assert!(text.contains("of the 400 bots"), "{text}");
        assert!(text.contains("in 1 of 2 rows"), "{text}");
        assert!(
            text.contains("In `naive`'s row 289 were; the other 111"),
            "{text}"
        );
        assert!(!text.contains("`conditional`'s row"), "{text}");
    }

    #[test]
    fn refusals_below_the_bar_are_set_beside_what_http_alone_reached() {
        let misses = [
            refusal_miss(66.0, Some(72.4)),
            refusal_miss(70.0, Some(72.4)),
        ];
        let below = http_floor(&misses, 0);
        assert!(below.contains("came back at 72% of their own"), "{below}");
        assert!(below.contains("reached 70% (median)"), "{below}");
        assert!(
            below.contains("no refusal of the service could meet it"),
            "{below}"
        );
        // Some strategies measured above the bar and the floor: no claim that none could.
        let some_met = http_floor(&misses, 2);
        assert!(!some_met.contains("could meet it"), "{some_met}");
        assert!(
            some_met.contains("2 safe strategies measured above it all the same"),
            "{some_met}"
        );
        // HTTP alone above the bar: the refusals' own cost is what missed it.
        let above = http_floor(&[refusal_miss(66.0, Some(91.0))], 0);
        assert!(above.contains("came back at 91%"), "{above}");
        assert!(!above.contains("could meet it"), "{above}");
        assert!(!above.contains("all the same"), "{above}");
        // A report without the floor's baselines says nothing of it.
        assert_eq!(http_floor(&[refusal_miss(66.0, None)], 0), "");
    }
}
