//! The report's prose, generated from the measured figures: "what went wrong and why" for each
//! strategy that broke an invariant or is declared unsafe, and "where the time goes" for each
//! strategy far below its backend's baseline. Templates filled with numbers; no verdict is
//! written in advance.

use std::fmt::Write;

use super::{RunReport, StrategyReport};
use crate::baselines::BaselineName;
use app::api::{ErrorCode, Safety};

/// Below this share of its backend baseline, a strategy gets a "where the time goes" note.
pub const FAR_BELOW_BASELINE_PERCENT: f64 = 60.0;

/// One paragraph per strategy that is unsafe or broke an invariant; empty when none.
pub fn what_went_wrong(report: &RunReport) -> Vec<String> {
    report
        .strategies
        .iter()
        .filter(|s| s.strategy.safety != Safety::Safe || s.sale.accounting.is_incorrect())
        .map(|s| wrong_paragraph(report, s))
        .collect()
}

fn wrong_paragraph(report: &RunReport, s: &StrategyReport) -> String {
    let a = &s.sale.accounting;
    let name = &s.strategy.name;
    let mut p = String::new();
    let declared = format!("declared {}", s.strategy.safety);
    let _ = write!(
        p,
        "**`{name}`** ({declared}; {}). With {} buyers sending {} requests of {} unit(s) to {} \
         instance(s) for {} units, the database holds {} order(s) for {} unit(s) and a final \
         stock of {}.",
        s.strategy.description.trim_end_matches('.'),
        s.sale.buyers,
        s.sale.requests,
        s.sale.quantity,
        report.settings.instances,
        a.initial_stock,
        a.orders,
        a.units_sold,
        a.final_stock,
    );
    if a.oversell > 0 {
        let _ = write!(
            p,
            " It **oversold by {} unit(s)** ({:.1}% more than existed).",
            a.oversell,
            100.0 * a.oversell as f64 / a.initial_stock as f64
        );
    }
    if a.lost_updates > 0 {
        let _ = write!(
            p,
            " The stock counter went down by only {} while orders took {}: **{} decrement(s) \
             were lost** — buyers read the same stock value concurrently and each wrote back its \
             own result, so later writes erased earlier ones (a read-modify-write race; phantom \
             inventory that was sold twice).",
            a.initial_stock - a.final_stock,
            a.units_sold,
            a.lost_updates
        );
    }
    if a.negative_stock > 0 {
        let _ = write!(
            p,
            " Stock ended **{} below zero**: each decrement was atomic, but nothing checked that \
             stock remained, so every concurrent buyer that arrived while stock was low still \
             subtracted.",
            a.negative_stock
        );
    }
    if a.undersell > 0 {
        let o = &s.sale.outcomes;
        let turned_away = o.total() - o.created - o.replayed - o.refused(ErrorCode::SoldOut);
        let _ = write!(
            p,
            " The counter still shows {} unit(s) although {} unit(s) were asked for",
            a.undersell,
            s.sale.requests as i64 * s.sale.quantity,
        );
        if a.lost_updates > 0 {
            let _ = write!(
                p,
                ": stock that was in fact sold, left on the counter by the lost decrements \
                 (the shop would go on selling it)."
            );
        } else {
            let _ = write!(
                p,
                ": {turned_away} request(s) ended neither in an order nor in `sold_out` ({o}), \
                 so the strategy turned buyers away while stock remained (undersell)."
            );
        }
    }
    if s.sale.outcomes.errors() > 0 {
        let _ = write!(
            p,
            " {} request(s) ended in errors (no answer, an answer outside the contract, or a \
             refused request; the app logs in `logs/` say why).",
            s.sale.outcomes.errors()
        );
    }
    if s.sale.acknowledged_minus_orders != 0 {
        let _ = write!(
            p,
            " Clients received {} success answer(s) for {} order row(s).",
            s.sale.outcomes.created, a.orders
        );
    }
    let clean = !a.is_incorrect() && a.undersell == 0;
    let _ = match (s.strategy.safety, a.is_incorrect()) {
        (Safety::Unsafe, false) if clean => write!(
            p,
            " No anomaly showed in this run: the race window was not hit at this concurrency. \
             Unsafe means it *can* fail, not that it fails every time."
        ),
        (Safety::WhileLeasesHold, false) if clean => write!(
            p,
            " No anomaly showed in this run: no holder outlived its lease. It is safe only \
             while leases hold; the `lease-expiry` and `process-pause` scenarios show what \
             happens when one does not."
        ),
        (Safety::WhileLeasesHold, true) => write!(
            p,
            " It is safe only while leases hold, so this is a lease that ran out under a \
             holder still inside its critical section: a second holder was let in and nothing \
             in the database refused the first one's late write. Its fenced variant closes \
             that gap."
        ),
        (Safety::Safe, true) => write!(
            p,
            " **This strategy is declared safe, so this is a bug in it** (or in the accounting)."
        ),
        _ => Ok(()),
    };
    p
}

/// One note per strategy whose closed-loop deductions/s are below
/// [`FAR_BELOW_BASELINE_PERCENT`] of its backend baseline.
pub fn where_time_goes(report: &RunReport) -> Vec<String> {
    let noop = find(report, BaselineName::HttpNoop);
    report
        .strategies
        .iter()
        .filter_map(|s| {
            let pct = s.percent_of_backend_baseline?;
            if pct >= FAR_BELOW_BASELINE_PERCENT {
                return None;
            }
            let base = find(report, s.baseline)?;
            let closed = &s.throughput.closed;
            let mut p = format!(
                "**`{}`** reaches {:.0}% of `{}` ({:.0} vs {:.0} deductions/s at {} concurrent \
                 clients). Its median latency is {} µs against {} µs for the bare backend work",
                s.strategy.name,
                pct,
                s.baseline,
                closed.successes_per_sec,
                base.successes_per_sec,
                closed.concurrency,
                closed.latency.p50_us,
                base.latency.p50_us,
            );
            if let Some(noop) = noop {
                let _ = write!(
                    p,
                    " and {} µs for an HTTP round trip that does nothing ({:.0} requests/s)",
                    noop.latency.p50_us, noop.attempts_per_sec
                );
            }
            p.push('.');
            let o = &closed.outcomes;
            let unsold = o.total() - o.created - o.replayed;
            if unsold > 0 {
                let _ = write!(
                    p,
                    " {:.1}% of its attempts ended without a sale ({o}): each one paid for \
                     waiting or retrying until its lock or retry budget ran out.",
                    100.0 * unsold as f64 / o.total().max(1) as f64,
                );
            }
            Some(p)
        })
        .collect()
}

/// How the benchmark's own client compares with goose on the same no-op: whether the client
/// could be the ceiling of the HTTP figures. `None` without both baselines.
pub fn client_check(report: &RunReport) -> Option<String> {
    let ours = find(report, BaselineName::HttpNoop)?;
    let goose = find(report, BaselineName::GooseNoop)?;
    if goose.attempts_per_sec <= 0.0 {
        return None;
    }
    let pct = 100.0 * ours.attempts_per_sec / goose.attempts_per_sec;
    let verdict = if pct >= 80.0 {
        "so the server, not the client, sets the ceiling of the HTTP figures"
    } else {
        "so **the benchmark's client may be the ceiling of its HTTP figures**: read every HTTP \
         rate as a lower bound of what the server can do"
    };
    Some(format!(
        "Client check: on the same `GET /api/noop`, the benchmark's client reached {:.0} \
         requests/s and goose {:.0} ({pct:.0}%), {verdict}.",
        ours.attempts_per_sec, goose.attempts_per_sec
    ))
}

fn find(report: &RunReport, name: BaselineName) -> Option<&crate::load::LoadResult> {
    report
        .baselines
        .iter()
        .find(|b| b.name == name)
        .map(|b| &b.result)
}
