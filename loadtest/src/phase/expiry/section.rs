//! The expiry phase's section of the report: how the sweep was set against the purchases, each
//! strategy in one row, the payments that came too late or were refused, and a sentence for
//! every strategy whose sweep cost more than the bar or whose rounds compared nothing; and its
//! line of the README's results section.

use std::fmt::Write;

use super::judge::P99_BAR_PERCENT;
use super::schema::{ExpiryCost, ExpiryMiss, ExpiryShape};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::schema::Of;

/// The section, or nothing when the run had no expiry phase.
pub fn section(
    shape: Option<&ExpiryShape>,
    costs: &[Of<'_, ExpiryCost>],
    misses: &[ExpiryMiss],
) -> Section {
    let Some(shape) = shape else {
        return Section::default();
    };
    if costs.is_empty() {
        return Section::default();
    }
    let mut s = Section::titled("The expiry sweep beside purchases");
    s.prose(format!(
        "Each strategy that can be deployed buys, in a closed loop of {} buyers, a product \
         that cannot sell out and whose payment window is {} ms; {}, and the sweep of every \
         instance expires each unpaid order once it is due and gives its unit back to the \
         home the purchases deduct from. The same loop runs with every instance's sweep \
         paused (`PUT /api/expiry`). {} round(s), each measuring both ({} s after {} s of \
         warm-up, on a product reset to no orders, which goes first alternating); *added* is \
         the median round's p99 of purchases with the sweep over the same round's p99 without \
         it, with the other rounds' in parentheses; *unpaid* is the share of the orders left \
         to fall due. The bar: at most {P99_BAR_PERCENT:.0}% added.",
        costs[0].with_sweep.concurrency,
        shape.payment_window_ms,
        who_pays(shape),
        shape.rounds,
        shape.seconds,
        shape.warmup,
    ));
    s.table(table(costs));
    s.prose(return_locks(costs));
    s.prose(payments(costs));
    s.prose(went_wrong(misses));
    s
}

/// Who of the phase's buyers pays, and so how many orders fall due.
fn who_pays(shape: &ExpiryShape) -> String {
    let share = 100.0 * shape.non_payer_share;
    if shape.non_payer_share >= 1.0 {
        return "nobody pays, so every order falls due moments after it was placed — the \
                sweep's worst case, as many expiries as purchases"
            .into();
    }
    format!(
        "{share:.0}% of the buyers never pay, as in the flood, and the others pay right after \
         buying (each payment beside the purchases, not timed with them), so about {share:.0}% \
         of the orders fall due moments after they were placed"
    )
}

/// The expiry sweep's workload in a few words, for the README's results section.
pub fn workload(shape: &ExpiryShape) -> String {
    match shape.non_payer_share >= 1.0 {
        true => "expiring an order for every one bought beside it".into(),
        false => format!(
            "expiring the orders of the {:.0}% of buyers who never pay, beside the purchases",
            100.0 * shape.non_payer_share
        ),
    }
}

/// A sentence for the strategies whose returns took the seller's lock during the loops with
/// the sweep: how long each return held it (every purchase queued for the lock waited as long)
/// and waited for it; nothing when no return took one.
fn return_locks(costs: &[Of<'_, ExpiryCost>]) -> String {
    let held: Vec<String> = (costs.iter())
        .filter_map(|c| {
            let lock = &c.return_lock;
            Some(format!(
                "`{}` {:.1} ms held, {:.0} ms waited ({} returns)",
                c.strategy.name,
                lock.held_ms_each()?,
                lock.waited_ms_each()?,
                lock.taken
            ))
        })
        .collect();
    if held.is_empty() {
        return String::new();
    }
    format!(
        "The units an unfenced locked strategy sold go back under its lock, one acquisition per \
         batch of returns, and every purchase queued for the lock waits for as long as a return \
         holds it. Each return's hold and wait, on average, in the loops with the sweep: {}.\n\n",
        held.join(", ")
    )
}

/// A sentence for the payments that came after their order's deadline, and one for those
/// refused otherwise or unanswered; nothing when there were none.
fn payments(costs: &[Of<'_, ExpiryCost>]) -> String {
    let list = |count: fn(&ExpiryCost) -> u64| -> Vec<String> {
        (costs.iter())
            .filter(|c| count(c) > 0)
            .map(|c| format!("`{}` {}", c.strategy.name, count(c)))
            .collect()
    };
    let mut md = String::new();
    let late = list(|c| c.payments.too_late);
    if !late.is_empty() {
        let _ = writeln!(
            md,
            "Payments that arrived after their order's deadline (the order fell due as an \
             unpaid one does, and counts as unpaid): {}.\n",
            late.join(", ")
        );
    }
    let refused = list(|c| c.payments.refused);
    if !refused.is_empty() {
        let _ = writeln!(
            md,
            "Payments refused for another reason, or unanswered — payments the service should \
             have taken: {}.\n",
            refused.join(", ")
        );
    }
    md
}

fn table(costs: &[Of<'_, ExpiryCost>]) -> Table {
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    let mut t = Table::left(["strategy"]).and_right([
        "purchases/s with sweep",
        "without",
        "p99 ms with sweep",
        "without",
        "added",
        "unpaid",
        "expired/s",
    ]);
    for c in costs {
        t.row([
            format!("`{}`", c.strategy.name),
            format!("{:.0}", c.with_sweep.successes_per_sec),
            format!("{:.0}", c.without_sweep.successes_per_sec),
            ms(c.with_sweep.latency.p99_us),
            ms(c.without_sweep.latency.p99_us),
            added(c),
            format!("{:.0}%", 100.0 * c.payments.unpaid_share()),
            format!("{:.0}", c.expired_per_second()),
        ]);
    }
    t
}

/// The median round's share added, and every round's.
fn added(c: &ExpiryCost) -> String {
    let Some(median) = c.p99_added() else {
        return "–".into();
    };
    let rounds: Vec<String> = (c.p99_ratios.iter())
        .map(|r| format!("{:+.0}%", 100.0 * (r - 1.0)))
        .collect();
    format!("{:+.0}% ({})", 100.0 * median, rounds.join(", "))
}

/// The README's line: the least and the most the sweep added, over the strategies whose rounds
/// compared something; `None` when none did.
pub fn readme(
    shape: &ExpiryShape,
    costs: &[Of<'_, ExpiryCost>],
    misses: &[ExpiryMiss],
) -> Option<String> {
    let spoilt: Vec<_> = misses.iter().filter_map(ExpiryMiss::spoilt).collect();
    let added: Vec<f64> = (costs.iter())
        .filter(|c| !spoilt.contains(&c.strategy.name))
        .filter_map(|c| c.p99_added())
        .collect();
    if added.is_empty() {
        return None;
    }
    let within = (added.iter())
        .filter(|a| 100.0 * **a <= P99_BAR_PERCENT)
        .count();
    let (least, most) =
        (added.iter()).fold((f64::MAX, f64::MIN), |(l, m), a| (l.min(*a), m.max(*a)));
    let left_out = match costs.len() - added.len() {
        0 => String::new(),
        n => format!(" ({n} more whose rounds compared nothing, as the report says)"),
    };
    Some(format!(
        "The expiry sweep, {}, added {:+.0}% to {:+.0}% to the purchases' p99 (each strategy's \
         median round); {within} of {} strategies within {P99_BAR_PERCENT:.0}%{left_out}.",
        workload(shape),
        100.0 * least,
        100.0 * most,
        added.len(),
    ))
}

/// A sentence for every strategy that missed, or one saying none did.
pub fn went_wrong(misses: &[ExpiryMiss]) -> String {
    if misses.is_empty() {
        return format!(
            "The sweep added at most {P99_BAR_PERCENT:.0}% to every strategy's p99 of \
             purchases.\n"
        );
    }
    let mut md = String::from("What the expiry sweep cost:\n\n");
    for m in misses {
        let _ = writeln!(md, "- {}", miss(m));
    }
    md
}

/// One miss, in words, with its figures.
pub fn miss(m: &ExpiryMiss) -> String {
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
    match m {
        ExpiryMiss::CostlySweep {
            strategy,
            added_percent,
            bar_percent,
            with_p99_us,
            without_p99_us,
            expired_per_second,
        } => format!(
            "`{strategy}`: in its median round the sweep added {added_percent:.0}% to the \
             purchases' p99 (bar {bar_percent:.0}%), while it expired {expired_per_second:.0} \
             orders a second and gave each unit back to the same home the purchases take \
             theirs from; over all its rounds together, {} with it and {} without{}.",
            ms(*with_p99_us),
            ms(*without_p99_us),
            match with_p99_us <= without_p99_us {
                true => {
                    " — the rounds disagree on the direction: the cost is within a round's noise \
                     on this machine"
                }
                false => "",
            },
        ),
        ExpiryMiss::NothingExpired { strategy } => format!(
            "`{strategy}`: no order expired while the sweeps ran, so its rounds compared two \
             loops without expiries."
        ),
        ExpiryMiss::PausedSweepExpired { strategy, expired } => format!(
            "`{strategy}`: {expired} order(s) expired while every sweep was paused, so its \
             rounds without the sweep were not."
        ),
        ExpiryMiss::OthersDue { strategy, orders } => format!(
            "`{strategy}`: {orders} order(s) of other products fell due while the sweeps ran; \
             the sweeps expire the oldest first, so its rounds with the sweep measured their \
             expiry too, ahead of its own orders'."
        ),
    }
}

#[cfg(test)]
mod tests {
    use app::api::Strategy;

    use super::*;
    use crate::phase::expiry::judge::misses;
    use crate::phase::expiry::schema::ReturnLockUse;
    use crate::phase::expiry::schema::sample::{expiry_cost, expiry_shape};

    #[test]
    fn the_section_has_a_row_per_strategy_with_the_median_round_and_every_round() {
        let c = expiry_cost(Strategy::Conditional, &[1.04, 1.08, 0.97], 900);
        let md = section(Some(&expiry_shape()), &[c.of()], &[]).markdown();
        assert!(md.contains("## The expiry sweep beside purchases"), "{md}");
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` |"))
            .unwrap_or_else(|| panic!("no row:\n{md}"));
        assert!(
            row.contains("| 10.4 | 10.0 | +4% (+4%, +8%, -3%) | 30% | 450 |"),
            "{row}"
        );
        assert!(
            md.contains("30% of the buyers never pay, as in the flood, and the others pay"),
            "{md}"
        );
        assert!(md.contains("added at most 10%"), "{md}");
    }

    #[test]
    fn a_sweep_beyond_the_bar_is_told_with_both_p99s_and_its_pace() {
        let c = expiry_cost(Strategy::Batched, &[1.3, 1.25, 1.1], 900);
        let found = misses(&[c.of()]);
        let md = section(Some(&expiry_shape()), &[c.of()], &found).markdown();
        assert!(
            md.contains("- `batched`: in its median round the sweep added 25% to the purchases' p99 (bar 10%), while it expired 450 orders a second and gave each unit back to the same home the purchases take theirs from; over all its rounds together, 12.5 ms with it and 10.0 ms without."),
            "{md}"
        );
    }

    #[test]
    fn a_median_round_past_the_bar_beside_a_lower_pooled_p99_says_the_rounds_disagree() {
        let mut c = expiry_cost(Strategy::Batched, &[0.7, 1.25, 2.8], 900);
        c.with_sweep.latency.p99_us = 9_000;
        let found = misses(&[c.of()]);
        let md = section(Some(&expiry_shape()), &[c.of()], &found).markdown();
        assert!(
            md.contains(
                "9.0 ms with it and 10.0 ms without — the rounds disagree on the direction"
            ),
            "{md}"
        );
    }

    #[test]
    fn other_products_orders_due_beside_the_sweeps_are_told_with_their_count() {
        let mut c = expiry_cost(Strategy::RedisLua, &[0.9, 1.0, 1.4], 0);
        c.others_due = 10_833;
        let found = misses(&[c.of()]);
        let md = section(Some(&expiry_shape()), &[c.of()], &found).markdown();
        assert!(
            md.contains(
                "- `redis-lua`: 10833 order(s) of other products fell due while the sweeps ran"
            ),
            "{md}"
        );
    }

    #[test]
    fn every_buyer_a_non_payer_is_told_as_the_worst_case() {
        let c = expiry_cost(Strategy::Conditional, &[1.1], 900);
        let shape = ExpiryShape {
            non_payer_share: 1.0,
            ..expiry_shape()
        };
        let md = section(Some(&shape), &[c.of()], &[]).markdown();
        assert!(
            md.contains("nobody pays, so every order falls due moments after it was placed — the sweep's worst case"),
            "{md}"
        );
    }

    #[test]
    fn late_and_refused_payments_are_told_per_strategy() {
        let mut c = expiry_cost(Strategy::RedisLuaStream, &[1.1], 900);
        c.payments.too_late = 12;
        c.payments.refused = 1;
        let md = section(Some(&expiry_shape()), &[c.of()], &[]).markdown();
        assert!(
            md.contains("after their order's deadline (the order fell due as an unpaid one does, and counts as unpaid): `redis-lua-stream` 12."),
            "{md}"
        );
        assert!(
            md.contains("payments the service should have taken: `redis-lua-stream` 1."),
            "{md}"
        );
    }

    #[test]
    fn each_returns_hold_of_the_sellers_lock_is_told_only_for_strategies_whose_returns_took_it() {
        let mut locked = expiry_cost(Strategy::DbRowLock, &[1.3], 900);
        locked.return_lock = ReturnLockUse {
            taken: 19,
            waited_seconds: 3.8,
            held_seconds: 0.912,
        };
        let unlocked = expiry_cost(Strategy::Conditional, &[1.0], 900);
        let md = section(Some(&expiry_shape()), &[locked.of(), unlocked.of()], &[]).markdown();
        assert!(
            md.contains("in the loops with the sweep: `db-row-lock` 48.0 ms held, 200 ms waited (19 returns)."),
            "{md}"
        );
        assert!(!md.contains("`conditional` 0"), "{md}");
        let md = section(Some(&expiry_shape()), &[unlocked.of()], &[]).markdown();
        assert!(!md.contains("go back under its lock"), "{md}");
    }

    #[test]
    fn no_expiry_phase_no_section() {
        let c = expiry_cost(Strategy::Conditional, &[1.0], 1);
        assert!(section(None, &[c.of()], &[]).is_empty());
        assert!(section(Some(&expiry_shape()), &[], &[]).is_empty());
    }

    #[test]
    fn the_readme_line_leaves_out_the_strategies_whose_rounds_compared_nothing() {
        let mut run = crate::sample::report();
        crate::sample::phases(&mut run, Strategy::RedisLua).put(
            crate::phase::expiry::NAME,
            expiry_cost(Strategy::RedisLua, &[0.9, 0.66, 1.57], 0).result,
        );
        run.findings = crate::phase::findings(&run);
        let lines = crate::phase::readme(&run);
        assert_eq!(
            lines,
            [
                "The expiry sweep, expiring the orders of the 30% of buyers who never pay, beside \
              the purchases, added +4% to +4% to the purchases' p99 (each strategy's median \
              round); 1 of 1 strategies within 10% (1 more whose rounds compared nothing, as \
              the report says)."
            ],
        );
    }
}
