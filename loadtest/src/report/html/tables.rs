//! The run's tables as HTML, each figure read from the schema (the same fields `report.md`
//! shows), each numeric cell carrying its value for sorting.

use maud::{Markup, html};

use super::page::{int, num};
use crate::report::markdown::{attempts_per_sec, spread, successes_per_sec};
use crate::report::schema::{LoadResult, Loop, RunReport, StandardTool, ToolStatus};

/// One row per strategy: its safety, the flash sale's accounting, closed-loop deductions/s,
/// its share of its backend's baseline and p99s. Sortable; a row whose sale broke an invariant
/// is marked.
pub fn summary(r: &RunReport) -> Markup {
    html! {
        table.sortable #summary {
            thead { tr {
                th { "strategy" } th { "service" } th { "safety" }
                th { "sold / stock" } th { "oversell" } th { "lost updates" }
                th { "negative stock" } th { "undersell" } th { "deductions/s (closed)" }
                th { "% of backend baseline" } th { "p99 closed (ms)" } th { "p99 open (ms)" }
            } }
            tbody {
                @for x in &r.strategies {
                    @let a = &x.sale.accounting;
                    @let broken = a.oversell > 0 || a.lost_updates > 0 || a.negative_stock > 0;
                    tr.bad[broken] data-strategy=(x.strategy.name) {
                        td { code { (x.strategy.name) } }
                        td { (x.strategy.service.name()) }
                        td { (x.strategy.safety) }
                        (num(a.units_sold as f64, format!("{} / {}", a.units_sold, a.initial_stock)))
                        (int(a.oversell)) (int(a.lost_updates)) (int(a.negative_stock)) (int(a.undersell))
                        (num(x.throughput.closed.successes_per_sec, successes_per_sec(&x.throughput.closed)))
                        @match x.percent_of_backend_baseline {
                            Some(p) => (num(p, format!("{p:.0}% of {}", x.baseline))),
                            None => td.num data-sort="" { "–" },
                        }
                        (ms(x.throughput.closed.latency.p99_us))
                        (ms(x.throughput.open.latency.p99_us))
                    }
                }
            }
        }
    }
}

/// The flash sale's accounting beside what the buyers were told.
pub fn accounting(r: &RunReport) -> Markup {
    html! {
        table.sortable #accounting {
            thead { tr {
                th { "strategy" } th { "safety" } th { "sold" } th { "final stock" } th { "orders" }
                th { "oversell" } th { "lost updates" } th { "negative stock" } th { "undersell" }
                th { "retries" } th { "seconds" } th { "answers" }
            } }
            tbody {
                @for x in &r.strategies {
                    @let a = &x.sale.accounting;
                    tr data-strategy=(x.strategy.name) {
                        td { code { (x.strategy.name) } }
                        td { (x.strategy.safety) }
                        td.num data-field="units_sold" data-sort=(a.units_sold) { (a.units_sold) }
                        td.num data-field="final_stock" data-sort=(a.final_stock) { (a.final_stock) }
                        td.num data-field="orders" data-sort=(a.orders) { (a.orders) }
                        td.num data-field="oversell" data-sort=(a.oversell) { (a.oversell) }
                        (int(a.lost_updates)) (int(a.negative_stock)) (int(a.undersell))
                        @match x.sale.retries {
                            Some(n) => (num(n, format!("{n:.0}"))),
                            None => td.num { "–" },
                        }
                        (num(x.sale.seconds, format!("{:.1}", x.sale.seconds)))
                        td { (x.sale.outcomes) }
                    }
                }
            }
        }
    }
}

/// Closed- or open-loop results, one row each.
pub fn loads<'a>(id: &str, rows: impl Iterator<Item = (String, &'a LoadResult)>) -> Markup {
    html! {
        table.sortable id=(id) {
            thead { tr {
                th { "what" } th { "concurrency" } th { "rate asked" } th { "attempts/s" }
                th { "successes/s" } th { "not sent" } th { "p50 µs" } th { "p90 µs" }
                th { "p99 µs" } th { "p99.9 µs" } th { "max µs" } th { "answers" }
            } }
            tbody {
                @for (name, l) in rows {
                    tr {
                        td { (name) }
                        (int(l.concurrency as i64))
                        @match l.mode {
                            Loop::Open { target_rate } => (num(target_rate, format!("{target_rate:.0}"))),
                            Loop::Closed => td.num { "–" },
                        }
                        (num(l.attempts_per_sec, attempts_per_sec(l)))
                        (num(l.successes_per_sec, successes_per_sec(l)))
                        (int(l.not_sent as i64))
                        @for us in [l.latency.p50_us, l.latency.p90_us, l.latency.p99_us, l.latency.p999_us, l.latency.max_us] {
                            (int(us as i64))
                        }
                        td { (l.outcomes) }
                    }
                }
            }
        }
    }
}

/// Ours beside the standard tools, where they ran.
pub fn tools(r: &RunReport) -> Markup {
    let f = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.3}"));
    html! {
        table.sortable #tools {
            thead { tr {
                th { "baseline" } th { "ours /s" } th { "tool" } th { "theirs /s" }
                th { "ours / theirs" } th { "generator CPU: ours / tool" }
            } }
            tbody {
                @for b in &r.baselines {
                    @if let Some(tool) = &b.standard_tool {
                        @let generator = b.cpu.as_ref().and_then(|c| c.group("generator")?.0);
                        tr {
                            td { code { (b.name) } }
                            (num(b.result.headline(), if b.result.outcomes.created > 0 {
                                successes_per_sec(&b.result)
                            } else {
                                attempts_per_sec(&b.result)
                            }))
                            td { code { (tool.tool) } }
                            (num(tool.per_sec.as_ref().map_or(0.0, |s| s.median), theirs(tool)))
                            @match tool.ours_percent {
                                Some(p) => (num(p, format!("{p:.0}%"))),
                                None => td.num { "–" },
                            }
                            td { (f(generator)) " / " (f(tool.tool_cpu_per_1000)) }
                        }
                    }
                }
            }
        }
    }
}

fn theirs(tool: &StandardTool) -> String {
    match (&tool.per_sec, tool.status) {
        (Some(s), _) => spread(s),
        (None, ToolStatus::NotInstalled) => "not installed".into(),
        (None, _) => "failed".into(),
    }
}

/// CPU-seconds per 1,000 deductions / busy cores, per process group.
pub fn cpu(r: &RunReport) -> Markup {
    let groups = r.cpu_groups();
    html! {
        table.sortable #cpu {
            thead { tr {
                th { "strategy" }
                @for g in &groups { th { (g) } }
                th { "rest (cores)" } th { "saturated" }
            } }
            tbody {
                @for x in &r.strategies {
                    @if let Some(cpu) = &x.cpu {
                        tr {
                            td { code { (x.strategy.name) } }
                            @for g in &groups {
                                @match cpu.group(g) {
                                    Some((Some(per_1000), cores)) => (num(per_1000, format!("{per_1000:.2} / {cores:.2}"))),
                                    Some((None, cores)) => (num(0.0, format!("– / {cores:.2}"))),
                                    None => td.num { "–" },
                                }
                            }
                            @match cpu.rest_of_machine_cores {
                                Some(c) => (num(c, format!("{c:.2}"))),
                                None => td.num { "–" },
                            }
                            td { (cpu.saturated.as_deref().unwrap_or("none")) }
                        }
                    }
                }
            }
        }
    }
}

/// The machine, the commit, the servers and their settings.
pub fn environment(r: &RunReport) -> Markup {
    let e = &r.environment;
    html! {
        table #environment {
            tbody {
                tr { th { "CPUs" } td data-field="cpus" { (e.cpus) } }
                tr { th { "CPU" } td data-field="cpu_model" { (e.cpu_model.as_deref().unwrap_or("unknown")) } }
                tr { th { "memory" } td { (e.memory_total.as_deref().unwrap_or("unknown")) } }
                tr { th { "OS" } td { (e.os) } }
                tr { th { "git commit" } td {
                    (e.git_commit.as_deref().unwrap_or("unknown"))
                    @if e.git_dirty == Some(true) { " (with uncommitted changes)" }
                } }
                tr { th { "servers" } td { (e.servers) } }
                @if let Some(added) = r.world.and_then(|w| w.distance.added("server")) {
                    tr { th { "round trip added" } td { (added) } }
                }
                @if let Some(added) = r.world.and_then(|w| w.buyers.added("app instance")) {
                    tr { th { "buyers' round trip added" } td { (added) } }
                }
                @if let Some(servers) = r.world.and_then(|w| w.topology.described()) {
                    tr { th { "topology" } td { (servers) } }
                }
                tr { th { "load generator build" } td { (e.generator_build) } }
                @for (k, v) in &e.versions { tr { th { (k) " version" } td { (v) } } }
                @for (k, v) in e.mariadb.iter().filter(|(k, _)| *k != "version") {
                    tr { th { "MariaDB " code { (k) } } td { (v) } }
                }
                @for (k, v) in e.redis.iter().filter(|(k, _)| *k != "redis_version") {
                    tr { th { "Redis " code { (k) } } td { (v) } }
                }
                @for (k, v) in &e.app {
                    tr { th { "app " code { (k) } } td { (v) } }
                }
            }
        }
    }
}

/// Microseconds as milliseconds, one decimal, sorted by the microseconds.
fn ms(us: u64) -> Markup {
    num(us as f64, format!("{:.1}", us as f64 / 1000.0))
}
