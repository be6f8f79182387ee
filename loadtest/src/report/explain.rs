//! The report's prose, generated from the measured figures: "what went wrong and why" for each
//! strategy that broke an invariant or is declared unsafe, and "where the time goes" for each
//! strategy far below its backend's baseline. Templates filled with numbers; no verdict is
//! written in advance.

use std::fmt::Write;

use super::{RunReport, StrategyReport};
use crate::measure::baselines::BaselineName;
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

/// One note per strategy measured with CPU accounting: where its CPU went per 1,000
/// deductions, which process was saturated (or that none was, so the time went to waiting),
/// and, for a strategy below [`FAR_BELOW_BASELINE_PERCENT`] of its backend baseline, its
/// latencies against the bare work's.
pub fn where_time_goes(report: &RunReport) -> Vec<String> {
    report
        .strategies
        .iter()
        .filter_map(|s| {
            let mut p = cpu_note(s, report.environment.cpus)?;
            if let Some(latency) = latency_note(report, s) {
                p.push(' ');
                p.push_str(&latency);
            }
            Some(p)
        })
        .collect()
}

/// The CPU groups in the order the report lists them, with their words.
pub const GROUPS: [(&str, &str); 7] = [
    ("app", "the app instances"),
    ("mariadbd", "mariadbd"),
    ("redis-server", "Redis"),
    ("zookeeper", "ZooKeeper"),
    ("etcd", "etcd"),
    ("memcached", "memcached"),
    ("generator", "the load generator"),
];

fn cpu_note(s: &StrategyReport, cpus: usize) -> Option<String> {
    let cpu = s.cpu.as_ref()?;
    let parts: Vec<String> = GROUPS
        .iter()
        .filter_map(|(group, words)| {
            let (per_1000, _) = cpu.group(group)?;
            let per_1000 = per_1000.filter(|v| *v >= 0.005)?;
            Some(format!("{words} {per_1000:.2}"))
        })
        .collect();
    let mut p = format!(
        "**`{}`** ({:.0} deductions/s).",
        s.strategy.name, s.throughput.closed.successes_per_sec
    );
    if !parts.is_empty() {
        let _ = write!(
            p,
            " CPU-seconds per 1,000 deductions: {}.",
            parts.join(", ")
        );
    }
    let machine = cpu
        .machine_busy_cores
        .map(|m| 100.0 * m / cpus.max(1) as f64);
    let rest = cpu.rest_of_machine_cores.unwrap_or(0.0);
    let _ = match (&cpu.saturated, cpu.busiest(), machine) {
        (Some(name), Some((_, cores)), _) => write!(
            p,
            " `{name}` was saturated ({cores:.2} cores busy on average): it sets this \
             strategy's pace."
        ),
        (None, _, Some(pct)) if pct >= 90.0 => write!(
            p,
            " No single process was saturated, but the machine's {cpus} cores were {pct:.0}% \
             busy ({rest:.2} core(s) taken by programs outside the run): the processes \
             compete for the CPU, and more cores would raise the figure."
        ),
        (None, Some((name, cores)), machine) => write!(
            p,
            " No process was saturated (the busiest, `{name}`, used {cores:.2} cores{}): the \
             time goes to waiting — row locks, lock hand-offs, round trips — not to computing.",
            machine.map_or_else(String::new, |m| format!("; the machine was {m:.0}% busy"))
        ),
        _ => Ok(()),
    };
    Some(p)
}

/// For a strategy below [`FAR_BELOW_BASELINE_PERCENT`] of its backend baseline: its latency
/// against the bare work's and the no-op round trip's.
fn latency_note(report: &RunReport, s: &StrategyReport) -> Option<String> {
    let pct = s.percent_of_backend_baseline?;
    if pct >= FAR_BELOW_BASELINE_PERCENT {
        return None;
    }
    let noop = find(report, BaselineName::HttpNoop);
    let base = find(report, s.baseline)?;
    let closed = &s.throughput.closed;
    let mut p = format!(
        "It reaches {:.0}% of `{}` ({:.0} vs {:.0} deductions/s at {} concurrent clients). Its \
         median latency is {} µs against {} µs for the bare backend work",
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
            " {:.1}% of its attempts ended without a sale ({o}): each one paid for waiting or \
             retrying until its lock or retry budget ran out.",
            100.0 * unsold as f64 / o.total().max(1) as f64,
        );
    }
    Some(p)
}

/// At or above this share of the standard tool's rate, our figure counts as the server's.
pub const TOOL_PAR_PERCENT: f64 = 80.0;

/// The process group that serves a baseline's work.
pub fn server_group(name: BaselineName) -> &'static str {
    match name {
        BaselineName::HttpNoop | BaselineName::GooseNoop => "app",
        BaselineName::SqlConditional | BaselineName::SqlHotRow => "mariadbd",
        BaselineName::RedisLua => "redis-server",
    }
}

/// One sentence or paragraph per baseline with a standard tool beside it: the two figures,
/// and below [`TOOL_PAR_PERCENT`] the measured reason (CPU of our generator against the
/// tool's, of the server under each, and how busy the machine was).
pub fn tool_notes(report: &RunReport) -> Vec<String> {
    let cpus = report.environment.cpus.max(1) as f64;
    report
        .baselines
        .iter()
        .filter_map(|b| {
            let t = b.standard_tool.as_ref()?;
            let tool = &t.tool;
            let (Some(theirs), Some(pct)) = (&t.per_sec, t.ours_percent) else {
                return Some(match t.status.as_str() {
                    "not installed" => format!(
                        "**`{}`**: `{tool}` is not installed (`cargo xtask setup` installs it), \
                         so there is no figure to set beside ours.",
                        b.name
                    ),
                    _ => format!(
                        "**`{}`**: `{tool}` failed: {}",
                        b.name,
                        t.error
                            .as_deref()
                            .unwrap_or("no output")
                            .chars()
                            .take(300)
                            .collect::<String>()
                    ),
                });
            };
            let ours = crate::analyse::spread::headline(&b.result);
            let mut p = format!(
                "**`{}`**: ours {ours:.0}/s, `{tool}` {:.0}/s on the same work and server: \
                 ours is {pct:.0}% of it",
                b.name, theirs.median
            );
            if pct >= TOOL_PAR_PERCENT {
                p.push_str(", so the server, not our generator, sets this figure.");
                return Some(p);
            }
            p.push('.');
            let group = server_group(b.name);
            let ours_cpu = b.cpu.as_ref();
            let theirs_cpu = t.cpu.as_ref();
            let generator = ours_cpu
                .and_then(|c| c.group("generator"))
                .and_then(|(per, _)| per);
            if let (Some(g), Some(tc)) = (generator, t.tool_cpu_per_1000) {
                let _ = write!(
                    p,
                    " Per 1,000 operations our generator spent {g:.3} CPU-seconds, `{tool}` \
                     {tc:.3}."
                );
            }
            let server = |c: Option<&crate::measure::cpu::CpuUse>| c.and_then(|c| c.group(group));
            let mut per_operation = None;
            if let (Some((Some(so), co)), Some((Some(st), ct))) =
                (server(ours_cpu), server(theirs_cpu))
            {
                let _ = write!(
                    p,
                    " The server (`{group}`) spent {so:.3} CPU-seconds per 1,000 under ours \
                     ({co:.2} cores busy) and {st:.3} under `{tool}` ({ct:.2} cores)."
                );
                if let (Some(g), Some(tc)) = (generator, t.tool_cpu_per_1000) {
                    per_operation = Some((g + so, tc + st));
                }
            }
            let busy =
                |c: Option<&crate::measure::cpu::CpuUse>| c.and_then(|c| c.machine_busy_cores);
            if let (Some(mo), Some(mt)) = (busy(ours_cpu), busy(theirs_cpu)) {
                let _ = write!(
                    p,
                    " The machine's {cpus:.0} cores were {:.0}% busy under ours and {:.0}% \
                     under `{tool}`",
                    100.0 * mo / cpus,
                    100.0 * mt / cpus
                );
                if let Some(rest) = ours_cpu
                    .and_then(|c| c.rest_of_machine_cores)
                    .filter(|r| *r >= 0.05)
                {
                    let _ = write!(
                        p,
                        " ({rest:.2} core(s) of it under ours taken by programs outside the run)"
                    );
                }
                if mo >= 0.9 * cpus {
                    p.push_str(
                        ": with every core busy, each CPU-second our generator spends beyond \
                         the tool's is taken from the server, so the gap is the cost of our \
                         generator on a machine it shares with the server.",
                    );
                    if let Some((a, b)) = per_operation.filter(|_| mt >= 0.9 * cpus) {
                        let _ = write!(
                            p,
                            " Generator and server together spent {a:.3} CPU-seconds per 1,000 \
                             under ours and {b:.3} under `{tool}`; with all cores busy the rate \
                             goes as the inverse of that cost, which predicts ours at {:.0}% \
                             of `{tool}`'s (measured: {pct:.0}%).",
                            100.0 * b / a
                        );
                    }
                    if report.environment.generator_build == "debug" {
                        p.push_str(
                            " This generator is a debug build, which multiplies that cost; \
                             the committed runs use a release build (`cargo xtask bench`).",
                        );
                    }
                } else if mt - mo >= 0.1 * cpus {
                    p.push_str(
                        ": cores were left idle under ours that the tool kept busy, so our \
                         generator keeps less work in flight — a gap in the generator, not a \
                         lack of CPU.",
                    );
                } else {
                    let _ = write!(
                        p,
                        ": cores were left idle under both, so neither rate was bound by the \
                         CPU; at the same number of connections, the gap lies in how long \
                         each operation waits, not in what it costs"
                    );
                    if let Some((a, b)) = per_operation {
                        let _ = write!(
                            p,
                            " (generator and server together: {a:.3} CPU-seconds per 1,000 \
                             under ours, {b:.3} under `{tool}`)"
                        );
                    }
                    p.push('.');
                }
            }
            Some(p)
        })
        .collect()
}

/// How the benchmark's own client compares with goose and, where it ran, `wrk` on the same
/// no-op: whether the client could be the ceiling of the HTTP figures. The verdict follows the
/// faster peer: a client slower than `wrk` cannot claim the server sets the ceiling because it
/// beats goose. `None` without both the no-op and goose baselines.
pub fn client_check(report: &RunReport) -> Option<String> {
    let noop = report
        .baselines
        .iter()
        .find(|b| b.name == BaselineName::HttpNoop)?;
    let ours = noop.result.attempts_per_sec;
    let goose = find(report, BaselineName::GooseNoop)?.attempts_per_sec;
    if goose <= 0.0 {
        return None;
    }
    let mut peers = vec![("goose", goose)];
    if let Some(tool) = &noop.standard_tool
        && let Some(rate) = tool.per_sec.as_ref().map(|s| s.median)
        && rate > 0.0
    {
        peers.push((tool.tool.as_str(), rate));
    }
    let compared: Vec<String> = peers
        .iter()
        .map(|(name, rate)| format!("{name} {rate:.0} ({:.0}%)", 100.0 * ours / rate))
        .collect();
    let fastest = peers.iter().map(|(_, rate)| *rate).fold(0.0, f64::max);
    let verdict = if ours >= 0.8 * fastest {
        "so the server, not the client, sets the ceiling of the HTTP figures"
    } else {
        "so **the benchmark's client may be the ceiling of its HTTP figures**: read every HTTP \
         rate as a lower bound of what the server can do (the standard tools' paragraph below \
         says where the client's time goes)"
    };
    Some(format!(
        "Client check: on the same `GET /api/noop`, the benchmark's client reached {ours:.0} \
         requests/s; {}; {verdict}.",
        compared.join(", ")
    ))
}

fn find(report: &RunReport, name: BaselineName) -> Option<&crate::drive::load::LoadResult> {
    report
        .baselines
        .iter()
        .find(|b| b.name == name)
        .map(|b| &b.result)
}
