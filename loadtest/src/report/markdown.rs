//! `report.md`: the tables, the generated explanations, links to the charts.

use std::fmt::Write;

use super::{RunReport, explain};
use crate::drive::load::{LoadResult, Loop};

/// The whole report.
pub fn render(r: &RunReport) -> String {
    let mut md = String::new();
    let s = &r.settings;
    let _ = writeln!(md, "# seckill-bench run, {}\n", r.started_at);
    let _ = writeln!(
        md,
        "{} strategies on {} app instance(s); flash sale of {} units to {} concurrent buyers \
         sending {} requests of {} unit(s); each closed-loop and baseline figure is the median \
         of {} run(s) of {} s (each after {} s warm-up), interleaved across strategies and \
         across baselines, with min–max in parentheses; one open loop of {} s at {}. Total \
         run time {:.0} s.\n",
        r.strategies.len(),
        s.instances,
        s.stock,
        s.buyers,
        s.demand,
        s.quantity,
        s.repetitions,
        s.seconds,
        s.warmup,
        s.seconds,
        s.rate.map_or_else(
            || format!(
                "{:.0}% of each strategy's closed-loop attempts/s",
                100.0 * crate::measure::throughput::DEFAULT_RATE_SHARE
            ),
            |r| format!("{r} requests/s")
        ),
        r.duration_seconds
    );
    md.push_str("## Summary\n\n");
    md.push_str(&summary_table(r));
    md.push_str(
        "\n![throughput](throughput.svg)\n![latency](latency.svg)\n![oversell](oversell.svg)\n",
    );

    md.push_str("\n## What went wrong and why\n\n");
    let wrong = explain::what_went_wrong(r);
    if wrong.is_empty() {
        md.push_str("Every strategy kept every invariant in this run.\n");
    }
    for p in wrong {
        let _ = writeln!(md, "{p}\n");
    }
    if !r.scenarios.is_empty() {
        md.push_str(
            "\n### Fault scenarios\n\nEach scenario starts its own servers and app instances, \
             injects one fault, and compares what each strategy or lock was expected to do with \
             what it did. For a deliberately broken variant, *pass* means its failure showed.\n\n",
        );
        for s in &r.scenarios {
            let _ = writeln!(md, "{}\n", super::scenarios::markdown(s));
        }
    }

    md.push_str("\n## Flash sale: the database's accounting\n\n");
    md.push_str(
        "sold = Σ order quantities; oversell = max(0, sold − S); lost updates = sold − (S − \
         final stock) when positive; undersell = units left although demand exceeded supply. \
         The answers are what the clients were told, each code counted apart.\n\n",
    );
    md.push_str(
        "| strategy | safety | sold | final stock | oversell | lost updates | negative stock | undersell | retries | seconds | answers |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n",
    );
    for x in &r.strategies {
        let (a, o) = (&x.sale.accounting, &x.sale.outcomes);
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {o} |",
            x.strategy.name,
            x.strategy.safety,
            a.units_sold,
            a.final_stock,
            a.oversell,
            a.lost_updates,
            a.negative_stock,
            a.undersell,
            x.sale.retries.map_or("–".into(), |r| format!("{r:.0}")),
            x.sale.seconds
        );
    }

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

    md.push_str("\n## Baselines (nothing of ours in between)\n\n");
    if r.baselines.is_empty() {
        md.push_str("Skipped (`--no-baselines`).\n");
    } else {
        md.push_str(&load_table(
            r.baselines
                .iter()
                .map(|b| (format!("`{}`: {}", b.name, b.what), &b.result)),
        ));
        if let Some(check) = explain::client_check(r) {
            let _ = writeln!(md, "\n{check}");
        }
        if r.baselines.iter().any(|b| b.standard_tool.is_some()) {
            md.push_str("\n### Ours beside the standard tools\n\n");
            md.push_str(
                "The same work on the same server in the same rounds, driven by the tool people \
                 trust for it; medians with min–max. CPU-seconds per 1,000 operations.\n\n",
            );
            md.push_str(&tools_table(r));
            for note in explain::tool_notes(r) {
                let _ = writeln!(md, "\n{note}");
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
    let notes = explain::where_time_goes(r);
    if !notes.is_empty() {
        md.push_str("\n## Where the time goes\n\n");
        for n in notes {
            let _ = writeln!(md, "{n}\n");
        }
    }

    md.push_str("\n## Environment\n\n");
    md.push_str(&environment(r));
    md
}

/// The summary table (also printed at the end of a run).
pub fn summary_table(r: &RunReport) -> String {
    let mut md = String::from(
        "| strategy | service | safety | sold / stock | oversell | lost updates | negative stock | undersell | deductions/s (closed) | % of backend baseline | p99 closed (ms) | p99 open (ms) |\n\
         |---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for x in &r.strategies {
        let a = &x.sale.accounting;
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            x.strategy.name,
            x.strategy.service.name(),
            x.strategy.safety,
            a.units_sold,
            a.initial_stock,
            a.oversell,
            a.lost_updates,
            a.negative_stock,
            a.undersell,
            per_sec(&x.throughput.closed, Rate::Successes),
            x.percent_of_backend_baseline
                .map_or("–".into(), |p| format!("{p:.0}% of `{}`", x.baseline)),
            x.throughput.closed.latency.p99_us as f64 / 1000.0,
            x.throughput.open.latency.p99_us as f64 / 1000.0,
        );
    }
    md
}

fn load_table<'a>(rows: impl Iterator<Item = (String, &'a LoadResult)>) -> String {
    let mut md = String::from(
        "| what | concurrency | rate asked | attempts/s | successes/s | not sent | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | answers |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n",
    );
    for (name, l) in rows {
        let o = &l.outcomes;
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {o} |",
            l.concurrency,
            match l.mode {
                Loop::Open { target_rate } => format!("{target_rate:.0}"),
                Loop::Closed => "–".into(),
            },
            per_sec(l, Rate::Attempts),
            per_sec(l, Rate::Successes),
            l.not_sent,
            l.latency.p50_us,
            l.latency.p90_us,
            l.latency.p99_us,
            l.latency.p999_us,
            l.latency.max_us
        );
    }
    md
}

/// Which rate of a load result.
#[derive(Clone, Copy)]
pub enum Rate {
    Attempts,
    Successes,
}

/// A rate, with its runs' min–max when it is the median of several.
pub fn per_sec(l: &LoadResult, rate: Rate) -> String {
    match (&l.repetitions, rate) {
        (Some(rep), Rate::Attempts) => rep.attempts_per_sec.display(),
        (Some(rep), Rate::Successes) => rep.successes_per_sec.display(),
        (None, Rate::Attempts) => format!("{:.0}", l.attempts_per_sec),
        (None, Rate::Successes) => format!("{:.0}", l.successes_per_sec),
    }
}

fn tools_table(r: &RunReport) -> String {
    let mut md = String::from(
        "| baseline | ours /s | tool | theirs /s | ours / theirs | generator CPU: ours / tool | server CPU: ours / theirs |\n\
         |---|--:|---|--:|--:|--:|--:|\n",
    );
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.3}"));
    for b in &r.baselines {
        let Some(t) = &b.standard_tool else { continue };
        let group = explain::server_group(b.name);
        let server = |c: Option<&crate::measure::cpu::CpuUse>| c.and_then(|c| c.group(group)?.0);
        let generator = b.cpu.as_ref().and_then(|c| c.group("generator")?.0);
        let _ = writeln!(
            md,
            "| `{}` | {} | `{}` | {} | {} | {} / {} | {} / {} |",
            b.name,
            per_sec(
                &b.result,
                if b.result.outcomes.created > 0 {
                    Rate::Successes
                } else {
                    Rate::Attempts
                }
            ),
            t.tool,
            t.per_sec
                .as_ref()
                .map_or_else(|| t.status.clone(), |s| s.display()),
            t.ours_percent.map_or("–".into(), |p| format!("{p:.0}%")),
            f(generator),
            f(t.tool_cpu_per_1000),
            f(server(b.cpu.as_ref())),
            f(server(t.cpu.as_ref())),
        );
    }
    md
}

fn cpu_table(r: &RunReport) -> String {
    let groups: Vec<(&str, &str)> = explain::GROUPS
        .iter()
        .copied()
        .filter(|(g, _)| {
            r.strategies
                .iter()
                .any(|x| x.cpu.as_ref().and_then(|c| c.group(g)).is_some())
        })
        .collect();
    let mut md = String::from("| strategy |");
    for (g, _) in &groups {
        let _ = write!(md, " {g} |");
    }
    md.push_str(" rest (cores) | saturated |\n|---|");
    md.push_str(&"--:|".repeat(groups.len() + 1));
    md.push_str("---|\n");
    for x in &r.strategies {
        let Some(cpu) = &x.cpu else { continue };
        let _ = write!(md, "| `{}` |", x.strategy.name);
        for (g, _) in &groups {
            let cell = match cpu.group(g) {
                Some((Some(per_1000), cores)) => format!("{per_1000:.2} / {cores:.2}"),
                Some((None, cores)) => format!("– / {cores:.2}"),
                None => "–".into(),
            };
            let _ = write!(md, " {cell} |");
        }
        let _ = writeln!(
            md,
            " {} | {} |",
            cpu.rest_of_machine_cores
                .map_or("–".into(), |c| format!("{c:.2}")),
            cpu.saturated
                .as_deref()
                .map_or("none".into(), |s| format!("`{s}`")),
        );
    }
    md
}

fn sweep_table(sweep: &[LoadResult]) -> String {
    let mut md = String::from("| connections | updates/s | p50 µs | p99 µs |\n|--:|--:|--:|--:|\n");
    for l in sweep {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            l.concurrency,
            per_sec(l, Rate::Successes),
            l.latency.p50_us,
            l.latency.p99_us
        );
    }
    md
}

fn environment(r: &RunReport) -> String {
    let e = &r.environment;
    let mut md = String::from("| | |\n|---|---|\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(md, "| {k} | {v} |");
    };
    row("CPUs", e.cpus.to_string());
    row("CPU", e.cpu_model.clone().unwrap_or_default());
    row("memory", e.memory_total.clone().unwrap_or_default());
    row("OS", e.os.clone());
    row(
        "git commit",
        match (&e.git_commit, e.git_dirty) {
            (Some(c), Some(true)) => format!("`{c}` (with uncommitted changes)"),
            (Some(c), _) => format!("`{c}`"),
            _ => "unknown".into(),
        },
    );
    row("servers", e.servers.to_string());
    row("load generator build", e.generator_build.to_string());
    for (k, v) in &e.versions {
        row(&format!("{k} version"), v.clone());
    }
    for (k, v) in &e.mariadb {
        if k != "version" {
            row(&format!("MariaDB `{k}`"), v.clone());
        }
    }
    for (k, v) in &e.redis {
        if k != "redis_version" {
            row(&format!("Redis `{k}`"), v.clone());
        }
    }
    md
}
