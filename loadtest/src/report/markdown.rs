//! `report.md`: what fell by more than half first, then the tables, the findings in words,
//! links to the charts.

use std::fmt::Write;

use super::schema::RunReport;
use super::{falls, prose, scenarios, tables};

/// The whole report.
pub fn render(r: &RunReport) -> String {
    let mut md = String::new();
    let s = &r.settings;
    let _ = writeln!(md, "# seckill-bench run, {}\n", r.started_at);
    md.push_str(&falls::markdown(falls::AGAINST_BEST, &r.falls));
    let _ = writeln!(
        md,
        "{} strategies on {} app instance(s); flash sale of {} units to {} concurrent buyers \
         sending {} requests of {} unit(s){}; each closed-loop and baseline figure is the median \
         of {} run(s) of {} s (each after {} s warm-up), interleaved across strategies and \
         across baselines, with min–max in parentheses; one open loop of {} s at {}. Total \
         run time {:.0} s.{}\n",
        r.strategies.len(),
        s.instances,
        s.stock,
        s.buyers,
        s.demand,
        s.quantity,
        super::prose::sale_door(r),
        s.repetitions,
        s.seconds,
        s.warmup,
        s.seconds,
        s.rate.map_or_else(
            || format!(
                "{:.0}% of each strategy's closed-loop attempts/s",
                100.0 * s.open_rate_share
            ),
            |r| format!("{r} requests/s")
        ),
        r.duration_seconds,
        prose::priority(s.server_niceness),
    );
    md.push_str("## Summary\n\n");
    md.push_str(&tables::summary(r).render());
    md.push_str(
        "\n![throughput](throughput.svg)\n![latency](latency.svg)\n![oversell](oversell.svg)\n",
    );

    md.push_str(
        &super::flood::section(r.settings.flood.as_ref(), &r.floods, &r.findings.flood).markdown(),
    );
    for phase in crate::phase::REGISTRY {
        md.push_str(&phase.section(r).markdown());
    }

    md.push_str("\n## What went wrong and why\n\n");
    if r.findings.sales.is_empty() {
        md.push_str("Every strategy kept every invariant in this run.\n");
    }
    for f in &r.findings.sales {
        if let Some(s) = r.strategy(f.strategy) {
            let _ = writeln!(md, "{}\n", prose::sale(s, f, r.settings.instances));
        }
    }
    for phase in crate::phase::REGISTRY {
        if let Some(words) = phase.went_wrong(r) {
            let _ = writeln!(md, "{words}");
        }
    }
    if !r.scenarios.is_empty() {
        md.push_str(
            "\n### Fault scenarios\n\nEach scenario starts its own servers and app instances, \
             injects one fault, and compares what each strategy or lock was expected to do with \
             what it did. For a deliberately broken variant, *pass* means its failure showed.\n\n",
        );
        for s in &r.scenarios {
            let _ = writeln!(md, "{}\n", scenarios::markdown(s));
        }
    }

    md.push_str("\n## Flash sale: the database's accounting\n\n");
    md.push_str(
        "sold = Σ order quantities; oversell = max(0, sold − S); lost updates = sold − (S − \
         final stock) when positive; undersell = units left although demand exceeded supply. \
         The answers are what the clients were told, each code counted apart.\n\n",
    );
    md.push_str(&tables::accounting(r).render());

    md.push_str("\n## Throughput, closed loop\n\n");
    md.push_str(&tables::closed_loops(r).render());
    md.push_str("\n## Throughput, open loop (latency from the intended send time)\n\n");
    md.push_str(&tables::open_loops(r).render());

    if r.strategies.iter().any(|x| x.cpu.is_some()) {
        md.push_str("\n## CPU per 1,000 deductions (closed loop)\n\n");
        md.push_str(
            "From `/proc/<pid>/stat` before and after each closed-loop run, all runs together: \
             CPU-seconds per 1,000 deductions / cores busy on average, per process group; \
             *saturated* is a process at ≥ 0.9 cores. *Rest* is what programs outside the run \
             took of the machine.\n\n",
        );
        md.push_str(&tables::cpu(r).render());
    }
    md.push_str(&super::stages::section(r).markdown());

    md.push_str("\n## Baselines (nothing of ours in between)\n\n");
    if r.baselines.is_empty() {
        md.push_str("Skipped (`--no-baselines`).\n");
    } else {
        md.push_str(&tables::baselines(r).render());
        if let Some(check) = &r.findings.client {
            let _ = writeln!(md, "\n{}", prose::client(check));
        }
        if r.baselines.iter().any(|b| b.standard_tool.is_some()) {
            md.push_str("\n### Ours beside the standard tools\n\n");
            md.push_str(
                "The same work on the same server in the same rounds, driven by the tool people \
                 trust for it; medians with min–max. CPU-seconds per 1,000 operations.\n\n",
            );
            md.push_str(&tables::tools(r).render());
            for f in &r.findings.tools {
                let _ = writeln!(md, "\n{}", prose::tool(f));
            }
        }
    }
    if !r.hot_row_sweep.is_empty() {
        md.push_str("\n### The hot row at several connection counts\n\n");
        md.push_str(
            "The bare `UPDATE … SET stock = stock - 1` on one row, one task per connection: \
             how the database's hot-row ceiling depends on how many contend for it.\n\n",
        );
        md.push_str(&tables::hot_row_sweep(&r.hot_row_sweep).render());
    }
    if !r.findings.time.is_empty() {
        md.push_str("\n## Where the time goes\n\n");
        for f in &r.findings.time {
            if let Some(s) = r.strategy(f.strategy) {
                let _ = writeln!(md, "{}\n", prose::time(s, f));
            }
        }
    }

    md.push_str("\n## Environment\n\n");
    md.push_str(&tables::environment(r).render());
    md
}
