//! The report's prose, worded from the findings (`analyse::findings`): "what went wrong and why"
//! for each strategy that broke an invariant or is declared unsafe, "where the time goes" for
//! each strategy measured with CPU, a paragraph per baseline beside its standard tool, and the
//! client check. Every number and every decision comes from the findings and the figures;
//! these functions only choose the words.

mod where_time_goes;

use std::fmt::Write;

pub use where_time_goes::time;

use crate::schema::{
    ClientCheck, SaleFinding, SaleReading, Sold, ToolComparison, ToolFinding, ToolReading,
    ToolVerdict,
};

/// Why a strategy whose stock write only its lock guards lost units that came back, as a
/// sentence to follow the count; empty for any other strategy.
pub fn lost_return(strategy: app::api::Strategy) -> &'static str {
    match strategy.lock_alone_guards_stock() {
        true => {
            " The units of an order it sold go back (expiry, cancellation) holding its product \
             lock, as each of its purchases holds it, because its purchases write back an \
             absolute figure computed from a plain read: a return between a holder's read and \
             its write would be written over. A unit still missing means the lock let a second \
             writer in: a holder past its lease wrote the figure it had read over the return (a \
             lost update of the return). The fenced variant writes only over the version it \
             read, and reads again."
        }
        false => "",
    }
}

/// How the flash sale's buyers met the door, for the sentences that describe the sale: empty
/// when they did not retry.
pub fn sale_door(r: &crate::schema::RunReport) -> String {
    match r.sold().map(|x| x.sale.door_retries).max() {
        Some(n) if n > 0 => format!(
            " (a buyer turned away at the door with `503 overloaded` clicks again, up to {n} \
             times)"
        ),
        _ => String::new(),
    }
}

/// Who got a core first, as a sentence to follow the run's description: empty when the servers
/// ran at the load generator's own niceness.
pub fn priority(niceness: i32) -> String {
    match niceness {
        0 => String::new(),
        n => format!(
            " The servers the run started (the database, Redis, the lock services, the app \
             instances) ran at niceness {n}, the load generator at its own: on shared cores the \
             kernel gave the generator a core first, as buyers clicking from their own machines \
             would have one, so that its wait for a core is not counted as the service's."
        ),
    }
}

/// What the sale's buyers do when turned away at the door, as a clause.
pub fn door_retries(times: u32) -> String {
    match times {
        0 => "this sale's buyers do not retry a refusal".to_owned(),
        n => format!(
            "this sale's buyers click again after such a refusal, 50–100 ms later, up to {n} \
             times, and these ran out of tries"
        ),
    }
}

/// What went wrong in `s`'s sale, and what its safety class makes of it.
pub fn sale(s: &Sold, f: &SaleFinding, instances: usize) -> String {
    let a = &s.sale.accounting;
    let name = &s.strategy.name;
    let mut p = format!(
        "**`{name}`** (declared {}; {}). With {} buyers sending {} requests of {} unit(s) to {} \
         instance(s) for {} units, the database holds {} order(s) for {} unit(s) and a final \
         stock of {}.",
        s.strategy.safety,
        s.strategy.description.trim_end_matches('.'),
        s.sale.buyers,
        s.sale.requests,
        s.sale.quantity,
        instances,
        a.initial_stock,
        a.orders,
        a.units_sold,
        a.final_stock,
    );
    if let Some(pct) = f.oversell_percent {
        let _ = write!(
            p,
            " It **oversold by {} unit(s)** ({pct:.1}% more than existed).",
            a.oversell
        );
    }
    if a.lost_updates > 0 {
        let _ = write!(
            p,
            " The stock counter went down by only {} while orders took {}: **{} decrement(s) \
             were lost** — buyers read the same stock value concurrently and each wrote back its \
             own result, so later writes erased earlier ones (a read-modify-write race; phantom \
             inventory that was sold twice).",
            f.counter_went_down_by, a.units_sold, a.lost_updates
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
        let _ = write!(
            p,
            " The counter still shows {} unit(s) although {} unit(s) were asked for",
            a.undersell, f.demand_units,
        );
        if a.lost_updates > 0 {
            p.push_str(
                ": stock that was in fact sold, left on the counter by the lost decrements (the \
                 shop would go on selling it).",
            );
        } else if s.sale.turned_away_at_the_door() {
            let _ = write!(
                p,
                ": {} request(s) ended neither in an order nor in `sold_out` ({}). Most were \
                 turned away at the service's door with `503 overloaded`: each instance admits \
                 as many purchases of a strategy at once as it answers within its latency \
                 budget, and refuses the rest at once; {}, so units stayed unsold (undersell) \
                 — what a strategy this slow costs a sale behind that door, not a broken \
                 deduction.",
                f.turned_away,
                s.sale.outcomes,
                door_retries(s.sale.door_retries),
            );
        } else {
            let _ = write!(
                p,
                ": {} request(s) ended neither in an order nor in `sold_out` ({}), so the \
                 strategy turned buyers away while stock remained (undersell).",
                f.turned_away, s.sale.outcomes
            );
        }
    }
    if f.errors > 0 {
        let _ = write!(
            p,
            " {} request(s) ended in errors (no answer, an answer outside the contract, or a \
             refused request; the app logs in `logs/` say why).",
            f.errors
        );
    }
    if f.acknowledged_mismatch {
        let _ = write!(
            p,
            " Clients received {} success answer(s) for {} order row(s).",
            s.sale.outcomes.created, a.orders
        );
    }
    p.push_str(match f.reading {
        SaleReading::UnsafeNoAnomaly => {
            " No anomaly showed in this run: the race window was not hit at this concurrency. \
             Unsafe means it *can* fail, not that it fails every time."
        }
        SaleReading::LeasesHeld => {
            " No anomaly showed in this run: no holder outlived its lease. It is safe only \
             while leases hold; the `lease-expiry` and `process-pause` scenarios show what \
             happens when one does not."
        }
        SaleReading::LeaseRanOut => {
            " It is safe only while leases hold, so this is a lease that ran out under a \
             holder still inside its critical section: a second holder was let in and nothing \
             in the database refused the first one's late write. Its fenced variant closes \
             that gap."
        }
        SaleReading::SafeBroken => {
            " **This strategy is declared safe, so this is a bug in it** (or in the accounting)."
        }
        SaleReading::AsMeasured => "",
    });
    p
}

/// A baseline beside its standard tool.
pub fn tool(f: &ToolFinding) -> String {
    let (name, tool) = (f.baseline, &f.tool);
    let c = match &f.verdict {
        ToolVerdict::NotInstalled => {
            return format!(
                "**`{name}`**: `{tool}` is not installed (`cargo xtask setup` installs it), so \
                 there is no figure to set beside ours."
            );
        }
        ToolVerdict::Failed { error } => return format!("**`{name}`**: `{tool}` failed: {error}"),
        ToolVerdict::Measured(c) => c,
    };
    let mut p = format!(
        "**`{name}`**: ours {:.0}/s, `{tool}` {:.0}/s on the same work and server: ours is \
         {:.0}% of it",
        c.ours_per_sec, c.theirs_per_sec, c.ours_percent
    );
    if c.reading == ToolReading::AtPar {
        p.push_str(", so the server, not our generator, sets this figure.");
        return p;
    }
    p.push('.');
    measured_costs(&mut p, tool, c);
    p
}

/// The CPU figures behind a gap to the tool, and what they say.
fn measured_costs(p: &mut String, tool: &str, c: &ToolComparison) {
    if let (Some(g), Some(tc)) = (c.generator_cpu_per_1000, c.tool_cpu_per_1000) {
        let _ = write!(
            p,
            " Per 1,000 operations our generator spent {g:.3} CPU-seconds, `{tool}` {tc:.3}."
        );
    }
    if let Some(s) = &c.server {
        let _ = write!(
            p,
            " The server (`{}`) spent {:.3} CPU-seconds per 1,000 under ours ({:.2} cores busy) \
             and {:.3} under `{tool}` ({:.2} cores).",
            s.group, s.ours_per_1000, s.ours_cores, s.theirs_per_1000, s.theirs_cores
        );
    }
    let Some(m) = &c.machine else { return };
    let _ = write!(
        p,
        " The machine's {} cores were {:.0}% busy under ours and {:.0}% under `{tool}`",
        m.cpus, m.ours_busy_percent, m.theirs_busy_percent
    );
    if let Some(rest) = m.rest_of_machine_cores {
        let _ = write!(
            p,
            " ({rest:.2} core(s) of it under ours taken by programs outside the run)"
        );
    }
    match &c.reading {
        ToolReading::CpuBound {
            per_operation,
            predicted_percent,
            debug_generator,
        } => {
            p.push_str(
                ": with every core busy, each CPU-second our generator spends beyond the tool's \
                 is taken from the server, so the gap is the cost of our generator on a machine \
                 it shares with the server.",
            );
            if let (Some((a, b)), Some(predicted)) = (per_operation, predicted_percent) {
                let _ = write!(
                    p,
                    " Generator and server together spent {a:.3} CPU-seconds per 1,000 under \
                     ours and {b:.3} under `{tool}`; with all cores busy the rate goes as the \
                     inverse of that cost, which predicts ours at {predicted:.0}% of \
                     `{tool}`'s (measured: {:.0}%).",
                    c.ours_percent
                );
            }
            if *debug_generator {
                p.push_str(
                    " This generator is a debug build, which multiplies that cost; the \
                     committed runs use a release build (`cargo xtask bench`).",
                );
            }
        }
        ToolReading::GeneratorIdle => p.push_str(
            ": cores were left idle under ours that the tool kept busy, so our generator keeps \
             less work in flight — a gap in the generator, not a lack of CPU.",
        ),
        ToolReading::NotCpuBound { per_operation } => {
            p.push_str(
                ": cores were left idle under both, so neither rate was bound by the CPU; at \
                 the same number of connections, the gap lies in how long each operation \
                 waits, not in what it costs",
            );
            if let Some((a, b)) = per_operation {
                let _ = write!(
                    p,
                    " (generator and server together: {a:.3} CPU-seconds per 1,000 under ours, \
                     {b:.3} under `{tool}`)"
                );
            }
            p.push('.');
        }
        ToolReading::AtPar | ToolReading::Unknown => p.push('.'),
    }
}

/// Whether the benchmark's client could be the ceiling of its HTTP figures.
pub fn client(c: &ClientCheck) -> String {
    let compared: Vec<String> = c
        .peers
        .iter()
        .map(|peer| {
            format!(
                "{} {:.0} ({:.0}%)",
                peer.name, peer.per_sec, peer.ours_percent
            )
        })
        .collect();
    let verdict = if c.client_may_be_ceiling {
        "so **the benchmark's client may be the ceiling of its HTTP figures**: read every HTTP \
         rate as a lower bound of what the server can do (the standard tools' paragraph below \
         says where the client's time goes)"
    } else {
        "so the server, not the client, sets the ceiling of the HTTP figures"
    };
    format!(
        "Client check: on the same `GET /api/noop`, the benchmark's client reached {:.0} \
         requests/s; {}; {verdict}.",
        c.ours_per_sec,
        compared.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use crate::schema::StrategyReport;
    use app::accounting::{Accounting, Ledger};
    use app::api::{ErrorCode, Strategy};
    use testkit::Answer;

    use super::*;

    /// `db-lock`'s sale of 100 units to 500 requests: 40 bought, the other 460 answered
    /// `refusal`, 60 units left.
    fn turned_away(refusal: ErrorCode, status: u16) -> (StrategyReport, SaleFinding) {
        let ledger = Ledger {
            initial_stock: 100,
            final_stock: 60,
            units_in_orders: 40,
            orders: 40,
            pending: 0,
            reserved: 0,
            paid: 40,
            returned: 0,
            returning: 0,
        };
        let mut s = crate::sample::strategy(Strategy::DbLock, ledger);
        for _ in 0..460 {
            s.sale.as_mut().unwrap().outcomes.count(&Answer::Refused {
                status,
                code: refusal,
            });
        }
        s.sale.as_mut().unwrap().accounting = Accounting::of(ledger, 500);
        let f = SaleFinding {
            strategy: Strategy::DbLock,
            safety: s.strategy.safety,
            oversell_percent: None,
            counter_went_down_by: 40,
            demand_units: 500,
            turned_away: 460,
            errors: 0,
            acknowledged_mismatch: false,
            reading: SaleReading::AsMeasured,
        };
        (s, f)
    }

    #[test]
    fn units_left_by_buyers_refused_at_the_door_are_told_as_the_doors_cost_not_a_broken_deduction()
    {
        let (s, f) = turned_away(ErrorCode::Overloaded, 503);
        let p = sale(&s.sold().unwrap(), &f, 2);
        assert!(p.contains("turned away at the service's door"), "{p}");
        assert!(p.contains("do not retry a refusal"), "{p}");
        assert!(!p.contains("so the strategy turned buyers away"), "{p}");
    }

    #[test]
    fn buyers_who_retried_at_the_door_are_told_to_have_run_out_of_tries() {
        let (mut s, f) = turned_away(ErrorCode::Overloaded, 503);
        s.sale.as_mut().unwrap().door_retries = 100;
        let p = sale(&s.sold().unwrap(), &f, 2);
        assert!(
            p.contains("up to 100 times, and these ran out of tries"),
            "{p}"
        );
    }

    #[test]
    fn units_left_by_a_strategy_that_gave_up_are_told_as_the_strategys_undersell() {
        let (s, f) = turned_away(ErrorCode::Busy, 503);
        let p = sale(&s.sold().unwrap(), &f, 2);
        assert!(p.contains("so the strategy turned buyers away"), "{p}");
    }
}
