//! `report.md`: what fell by more than half first, then the tables, the findings in words,
//! links to the charts.

use std::fmt::Write;

use super::schema::{CpuUse, LoadResult, Loop, RunReport, Spread, StandardTool, ToolStatus};
use super::table::{Align, Table};
use super::{falls, prose, scenarios};

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
    md.push_str(&summary_table(r));
    md.push_str(
        "\n![throughput](throughput.svg)\n![latency](latency.svg)\n![oversell](oversell.svg)\n",
    );

    md.push_str(&super::flood::markdown(
        r.settings.flood.as_ref(),
        &r.floods,
        &r.findings.flood,
    ));
    for phase in crate::phase::REGISTRY {
        md.push_str(&phase.section(r));
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
    md.push_str(&accounting_table(r));

    md.push_str("\n## Throughput, closed loop\n\n");
    md.push_str(&load_table(
        r.strategies
            .iter()
            .map(|x| (format!("`{}`", x.strategy.name), &x.throughput.closed)),
    ));
    md.push_str("\n## Throughput, open loop (latency from the intended send time)\n\n");
    md.push_str(&load_table(
        r.strategies
            .iter()
            .map(|x| (format!("`{}`", x.strategy.name), &x.throughput.open)),
    ));

    if r.strategies.iter().any(|x| x.cpu.is_some()) {
        md.push_str("\n## CPU per 1,000 deductions (closed loop)\n\n");
        md.push_str(
            "From `/proc/<pid>/stat` before and after each closed-loop run, all runs together: \
             CPU-seconds per 1,000 deductions / cores busy on average, per process group; \
             *saturated* is a process at ≥ 0.9 cores. *Rest* is what programs outside the run \
             took of the machine.\n\n",
        );
        md.push_str(&cpu_table(r));
    }
    md.push_str(&super::stages::markdown(r));

    md.push_str("\n## Baselines (nothing of ours in between)\n\n");
    if r.baselines.is_empty() {
        md.push_str("Skipped (`--no-baselines`).\n");
    } else {
        md.push_str(&load_table(
            r.baselines
                .iter()
                .map(|b| (format!("`{}`: {}", b.name, b.what), &b.result)),
        ));
        if let Some(check) = &r.findings.client {
            let _ = writeln!(md, "\n{}", prose::client(check));
        }
        if r.baselines.iter().any(|b| b.standard_tool.is_some()) {
            md.push_str("\n### Ours beside the standard tools\n\n");
            md.push_str(
                "The same work on the same server in the same rounds, driven by the tool people \
                 trust for it; medians with min–max. CPU-seconds per 1,000 operations.\n\n",
            );
            md.push_str(&tools_table(r));
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
        md.push_str(&sweep_table(&r.hot_row_sweep));
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
    md.push_str(&environment(r));
    md
}

/// The summary table (also printed at the end of a run).
pub fn summary_table(r: &RunReport) -> String {
    let mut t = Table::left(["strategy", "service", "safety"]).and_right([
        "sold / stock",
        "oversell",
        "lost updates",
        "negative stock",
        "undersell",
        "deductions/s (closed)",
        "% of backend baseline",
        "p99 closed (ms)",
        "p99 open (ms)",
    ]);
    for x in &r.strategies {
        let a = &x.sale.accounting;
        t.row([
            format!("`{}`", x.strategy.name),
            x.strategy.service.name().to_string(),
            x.strategy.safety.to_string(),
            format!("{} / {}", a.units_sold, a.initial_stock),
            a.oversell.to_string(),
            a.lost_updates.to_string(),
            a.negative_stock.to_string(),
            a.undersell.to_string(),
            successes_per_sec(&x.throughput.closed),
            x.percent_of_backend_baseline
                .map_or("–".into(), |p| format!("{p:.0}% of `{}`", x.baseline)),
            ms(x.throughput.closed.latency.p99_us),
            ms(x.throughput.open.latency.p99_us),
        ]);
    }
    t.render()
}

fn accounting_table(r: &RunReport) -> String {
    let mut t = Table::left(["strategy", "safety"])
        .and_right([
            "sold",
            "final stock",
            "oversell",
            "lost updates",
            "negative stock",
            "undersell",
            "retries",
            "seconds",
        ])
        .and_left(["answers"]);
    for x in &r.strategies {
        let a = &x.sale.accounting;
        t.row([
            format!("`{}`", x.strategy.name),
            x.strategy.safety.to_string(),
            a.units_sold.to_string(),
            a.final_stock.to_string(),
            a.oversell.to_string(),
            a.lost_updates.to_string(),
            a.negative_stock.to_string(),
            a.undersell.to_string(),
            x.sale.retries.map_or("–".into(), |r| format!("{r:.0}")),
            format!("{:.1}", x.sale.seconds),
            x.sale.outcomes.to_string(),
        ]);
    }
    t.render()
}

fn load_table<'a>(rows: impl Iterator<Item = (String, &'a LoadResult)>) -> String {
    let mut t = Table::left(["what"])
        .and_right([
            "concurrency",
            "rate asked",
            "attempts/s",
            "successes/s",
            "not sent",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "p99.9 µs",
            "max µs",
        ])
        .and_left(["answers"]);
    for (name, l) in rows {
        t.row([
            name,
            l.concurrency.to_string(),
            match l.mode {
                Loop::Open { target_rate } => format!("{target_rate:.0}"),
                Loop::Closed => "–".into(),
            },
            attempts_per_sec(l),
            successes_per_sec(l),
            l.not_sent.to_string(),
            l.latency.p50_us.to_string(),
            l.latency.p90_us.to_string(),
            l.latency.p99_us.to_string(),
            l.latency.p999_us.to_string(),
            l.latency.max_us.to_string(),
            l.outcomes.to_string(),
        ]);
    }
    t.render()
}

/// `1,234 (1,100–1,300)`: a median, with the range of its runs when there were several.
pub fn spread(s: &Spread) -> String {
    if s.runs.len() < 2 {
        return format!("{:.0}", s.median);
    }
    format!("{:.0} ({:.0}–{:.0})", s.median, s.min, s.max)
}

/// Attempts/s, with its runs' min–max when it is the median of several.
pub fn attempts_per_sec(l: &LoadResult) -> String {
    l.repetitions.as_ref().map_or_else(
        || format!("{:.0}", l.attempts_per_sec),
        |rep| spread(&rep.attempts_per_sec),
    )
}

/// Successes/s, with its runs' min–max when it is the median of several.
pub fn successes_per_sec(l: &LoadResult) -> String {
    l.repetitions.as_ref().map_or_else(
        || format!("{:.0}", l.successes_per_sec),
        |rep| spread(&rep.successes_per_sec),
    )
}

/// Microseconds as milliseconds, one decimal.
fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

fn tools_table(r: &RunReport) -> String {
    let mut t = Table::left(["baseline"])
        .and_right(["ours /s"])
        .and_left(["tool"])
        .and_right([
            "theirs /s",
            "ours / theirs",
            "generator CPU: ours / tool",
            "server CPU: ours / theirs",
        ]);
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.3}"));
    for b in &r.baselines {
        let Some(tool) = &b.standard_tool else {
            continue;
        };
        let group = b.name.server_group();
        let server = |c: Option<&CpuUse>| c.and_then(|c| c.group(group)?.0);
        let generator = b.cpu.as_ref().and_then(|c| c.group("generator")?.0);
        let ours = if b.result.outcomes.created > 0 {
            successes_per_sec(&b.result)
        } else {
            attempts_per_sec(&b.result)
        };
        t.row([
            format!("`{}`", b.name),
            ours,
            format!("`{}`", tool.tool),
            theirs(tool),
            tool.ours_percent.map_or("–".into(), |p| format!("{p:.0}%")),
            format!("{} / {}", f(generator), f(tool.tool_cpu_per_1000)),
            format!(
                "{} / {}",
                f(server(b.cpu.as_ref())),
                f(server(tool.cpu.as_ref()))
            ),
        ]);
    }
    t.render()
}

/// The tool's rate, or why there is none.
fn theirs(tool: &StandardTool) -> String {
    match (&tool.per_sec, tool.status) {
        (Some(s), _) => spread(s),
        (None, ToolStatus::NotInstalled) => "not installed".into(),
        (None, _) => "failed".into(),
    }
}

fn cpu_table(r: &RunReport) -> String {
    let groups = r.cpu_groups();
    let mut t = Table::left(["strategy"])
        .and_right(groups.iter().chain(&["rest (cores)"]))
        .and_left(["saturated"]);
    for x in &r.strategies {
        let Some(cpu) = &x.cpu else { continue };
        let mut row = vec![format!("`{}`", x.strategy.name)];
        row.extend(groups.iter().map(|g| match cpu.group(g) {
            Some((Some(per_1000), cores)) => format!("{per_1000:.2} / {cores:.2}"),
            Some((None, cores)) => format!("– / {cores:.2}"),
            None => "–".into(),
        }));
        row.push(
            cpu.rest_of_machine_cores
                .map_or("–".into(), |c| format!("{c:.2}")),
        );
        row.push(
            cpu.saturated
                .as_deref()
                .map_or("none".into(), |s| format!("`{s}`")),
        );
        t.row(row);
    }
    t.render()
}

fn sweep_table(sweep: &[LoadResult]) -> String {
    let mut t =
        Table::new([("connections", Align::Right)]).and_right(["updates/s", "p50 µs", "p99 µs"]);
    for l in sweep {
        t.row([
            l.concurrency.to_string(),
            successes_per_sec(l),
            l.latency.p50_us.to_string(),
            l.latency.p99_us.to_string(),
        ]);
    }
    t.render()
}

fn environment(r: &RunReport) -> String {
    let e = &r.environment;
    let mut t = Table::left(["", ""]);
    t.row(["CPUs".to_string(), e.cpus.to_string()]);
    t.row(["CPU".to_string(), e.cpu_model.clone().unwrap_or_default()]);
    t.row([
        "memory".to_string(),
        e.memory_total.clone().unwrap_or_default(),
    ]);
    t.row(["OS".to_string(), e.os.clone()]);
    t.row([
        "git commit".to_string(),
        match (&e.git_commit, e.git_dirty) {
            (Some(c), Some(true)) => format!("`{c}` (with uncommitted changes)"),
            (Some(c), _) => format!("`{c}`"),
            _ => "unknown".into(),
        },
    ]);
    t.row(["servers".to_string(), e.servers.clone()]);
    if let Some(added) = r.world.and_then(|w| w.distance.added("server")) {
        t.row(["round trip added".to_string(), added]);
    }
    if let Some(added) = r.world.and_then(|w| w.buyers.added("app instance")) {
        t.row(["buyers' round trip added".to_string(), added]);
    }
    if let Some(servers) = r.world.and_then(|w| w.topology.described()) {
        t.row(["topology".to_string(), servers.to_string()]);
    }
    t.row([
        "load generator build".to_string(),
        e.generator_build.clone(),
    ]);
    for (k, v) in &e.versions {
        t.row([format!("{k} version"), v.clone()]);
    }
    for (k, v) in e.mariadb.iter().filter(|(k, _)| *k != "version") {
        t.row([format!("MariaDB `{k}`"), v.clone()]);
    }
    for (k, v) in e.redis.iter().filter(|(k, _)| *k != "redis_version") {
        t.row([format!("Redis `{k}`"), v.clone()]);
    }
    for (k, v) in &e.app {
        t.row([format!("app `{k}`"), v.clone()]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_table_names_each_app_setting_the_run_changed() {
        let mut r = crate::sample::report();
        assert!(
            !environment(&r).contains("| app `"),
            "the defaults name nothing"
        );
        (r.environment.app).insert("--rollback-retries".into(), "3".into());
        let md = environment(&r);
        assert!(md.contains("| app `--rollback-retries` | 3 |"), "{md}");
        let html = crate::report::html::tables::environment(&r).into_string();
        assert!(html.contains("<code>--rollback-retries</code>"), "{html}");
    }
}
