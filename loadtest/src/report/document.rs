//! The run's report as one model: its parts in the order they are read, each a [`Section`]
//! with the name a page links it by. `report.md` ([`super::markdown`]) and `report.html`
//! ([`super::html`]) print these parts and decide nothing about what they hold.

use super::section::Section;
use super::{falls, flood, prose, stages, tables};
use crate::phase::REGISTRY;
use crate::schema::RunReport;

/// One part of the report.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its name on a page (the HTML id), linked from the page's list of sections.
    pub id: String,
    /// What the list of sections calls it.
    pub label: String,
    pub section: Section,
}

impl Part {
    fn new(id: &str, label: &str, section: Section) -> Part {
        Part {
            id: id.to_owned(),
            label: label.to_owned(),
            section,
        }
    }
}

/// The report's title.
pub fn title(r: &RunReport) -> String {
    format!("seckill-bench run, {}", r.started_at)
}

/// The report's parts, in order; a part with nothing to say is left out.
pub fn parts(r: &RunReport) -> Vec<Part> {
    let mut fell = Section::default();
    fell.warning(falls::markdown(falls::AGAINST_BEST, &r.falls));
    let flood = flood::section(r.settings.flood.as_ref(), &r.floods, &r.findings.flood);
    let mut parts = vec![
        Part::new("falls", "fell by half", fell),
        Part::new("summary-section", "summary", summary(r)),
        Part::new("flood", "flood", flood),
    ];
    for phase in REGISTRY {
        parts.push(Part::new(phase.name(), phase.label(), phase.section(r)));
    }
    parts.extend([
        Part::new("findings", "what went wrong", went_wrong(r)),
        Part::new("sale", "flash sale", accounting(r)),
        Part::new("throughput", "throughput", throughput(r)),
        Part::new("stages", "stages", stages::section(r)),
        Part::new("baselines", "baselines", baselines(r)),
        Part::new("time", "where the time goes", time(r)),
        Part::new("environment-section", "environment", environment(r)),
    ]);
    parts.retain(|p| !p.section.is_empty());
    parts
}

/// How the run was made, the summary table and its charts.
fn summary(r: &RunReport) -> Section {
    let s = &r.settings;
    let mut out = Section::default();
    out.prose(format!(
        "{} strategies on {} app instance(s); flash sale of {} units to {} concurrent buyers \
         sending {} requests of {} unit(s){}; each closed-loop and baseline figure is the median \
         of {} run(s) of {} s (each after {} s warm-up), interleaved across strategies and \
         across baselines, with min–max in parentheses; one open loop of {} s at {}. Total \
         run time {:.0} s.{}",
        r.strategies.len(),
        s.instances,
        s.stock,
        s.buyers,
        s.demand,
        s.quantity,
        prose::sale_door(r),
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
    ));
    out.heading(2, "Summary");
    out.table(tables::summary(r));
    for chart in ["throughput", "latency", "oversell"] {
        out.chart(format!("{chart}.svg"), chart);
    }
    out
}

/// Each sale that broke an invariant, each phase's misses, and each fault scenario, in words.
fn went_wrong(r: &RunReport) -> Section {
    let mut out = Section::titled("What went wrong and why");
    if r.findings.sales.is_empty() {
        out.prose("Every strategy kept every invariant in this run.");
    }
    for f in &r.findings.sales {
        if let Some(s) = r.strategy(f.strategy) {
            out.prose(prose::sale(s, f, r.settings.instances));
        }
    }
    for phase in REGISTRY {
        if let Some(words) = phase.went_wrong(r) {
            out.prose(words);
        }
    }
    if !r.scenarios.is_empty() {
        out.heading(3, "Fault scenarios");
        out.prose(
            "Each scenario starts its own servers and app instances, injects one fault, and \
             compares what each strategy or lock was expected to do with what it did. For a \
             deliberately broken variant, *pass* means its failure showed.",
        );
        for s in &r.scenarios {
            out.scenario(s.clone());
        }
    }
    out
}

fn accounting(r: &RunReport) -> Section {
    let mut out = Section::titled("Flash sale: the database's accounting");
    out.prose(
        "sold = Σ order quantities; oversell = max(0, sold − S); lost updates = sold − (S − \
         final stock) when positive; undersell = units left although demand exceeded supply. \
         The answers are what the clients were told, each code counted apart.",
    );
    out.table(tables::accounting(r));
    out
}

fn throughput(r: &RunReport) -> Section {
    let mut out = Section::titled("Throughput, closed loop");
    out.table(tables::closed_loops(r));
    out.heading(
        2,
        "Throughput, open loop (latency from the intended send time)",
    );
    out.table(tables::open_loops(r));
    if r.strategies.iter().any(|x| x.cpu.is_some()) {
        out.heading(2, "CPU per 1,000 deductions (closed loop)");
        out.prose(
            "From `/proc/<pid>/stat` before and after each closed-loop run, all runs together: \
             CPU-seconds per 1,000 deductions / cores busy on average, per process group; \
             *saturated* is a process at ≥ 0.9 cores. *Rest* is what programs outside the run \
             took of the machine.",
        );
        out.table(tables::cpu(r));
    }
    out
}

fn baselines(r: &RunReport) -> Section {
    let mut out = Section::titled("Baselines (nothing of ours in between)");
    if r.baselines.is_empty() {
        out.prose("Skipped (`--no-baselines`).");
    } else {
        out.table(tables::baselines(r));
        if let Some(check) = &r.findings.client {
            out.prose(prose::client(check));
        }
        if r.baselines.iter().any(|b| b.standard_tool.is_some()) {
            out.heading(3, "Ours beside the standard tools");
            out.prose(
                "The same work on the same server in the same rounds, driven by the tool \
                 people trust for it; medians with min–max. CPU-seconds per 1,000 \
                 operations.",
            );
            out.table(tables::tools(r));
            for f in &r.findings.tools {
                out.prose(prose::tool(f));
            }
        }
    }
    if !r.hot_row_sweep.is_empty() {
        out.heading(3, "The hot row at several connection counts");
        out.prose(
            "The bare `UPDATE … SET stock = stock - 1` on one row, one task per connection: \
             how the database's hot-row ceiling depends on how many contend for it.",
        );
        out.table(tables::hot_row_sweep(&r.hot_row_sweep));
    }
    out
}

/// Where each strategy's time went, in words; nothing when no strategy was read.
fn time(r: &RunReport) -> Section {
    let mut out = Section::default();
    if r.findings.time.is_empty() {
        return out;
    }
    out.heading(2, "Where the time goes");
    for f in &r.findings.time {
        if let Some(s) = r.strategy(f.strategy) {
            out.prose(prose::time(s, f));
        }
    }
    out
}

fn environment(r: &RunReport) -> Section {
    let mut out = Section::titled("Environment");
    out.table(tables::environment(r));
    out
}
