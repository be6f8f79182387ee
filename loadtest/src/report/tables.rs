//! The run's tables, built once from the schema into the one table model
//! ([`super::table::Table`]): `report.md` and `report.html` print the same tables with the
//! same figures, and neither decides what a table holds.

use super::table::{Align, Cell, Table};
use crate::schema::{CpuUse, LoadResult, Loop, RunReport, Spread, StandardTool, ToolStatus};

/// One row per strategy: its safety, the flash sale's accounting, closed-loop deductions/s,
/// its share of its backend's baseline and p99s; a row whose sale broke an invariant is
/// marked. Also printed at the end of a run.
pub fn summary(r: &RunReport) -> Table {
    let mut t = Table::left(["strategy", "service", "safety"])
        .and_right([
            "sold / stock",
            "oversell",
            "lost updates",
            "negative stock",
            "undersell",
            "deductions/s (closed)",
            "% of backend baseline",
            "p99 closed (ms)",
            "p99 open (ms)",
        ])
        .named("summary");
    for x in r.sold() {
        let a = &x.sale.accounting;
        let broken = a.oversell > 0 || a.lost_updates > 0 || a.negative_stock > 0;
        let closed = &x.throughput.closed;
        t.strategy_row(
            &x.strategy.name.to_string(),
            broken,
            [
                Cell::code(x.strategy.name),
                Cell::text(x.strategy.service.name()),
                Cell::text(x.strategy.safety.to_string()),
                Cell::num(
                    a.units_sold as f64,
                    format!("{} / {}", a.units_sold, a.initial_stock),
                ),
                Cell::int(a.oversell),
                Cell::int(a.lost_updates),
                Cell::int(a.negative_stock),
                Cell::int(a.undersell),
                Cell::num(closed.successes_per_sec, successes_per_sec(closed)),
                x.percent_of_backend_baseline.map_or_else(Cell::none, |p| {
                    Cell::num(p, format!("{p:.0}% of `{}`", x.baseline))
                }),
                ms(closed.latency.p99_us),
                ms(x.throughput.open.latency.p99_us),
            ],
        );
    }
    t
}

/// The flash sale's accounting beside what the buyers were told.
pub fn accounting(r: &RunReport) -> Table {
    let mut t = Table::left(["strategy", "safety"])
        .and_right([
            "sold",
            "final stock",
            "orders",
            "oversell",
            "lost updates",
            "negative stock",
            "undersell",
            "retries",
            "seconds",
        ])
        .and_left(["answers"])
        .named("accounting");
    for x in r.sold() {
        let a = &x.sale.accounting;
        t.strategy_row(
            &x.strategy.name.to_string(),
            false,
            [
                Cell::code(x.strategy.name),
                Cell::text(x.strategy.safety.to_string()),
                Cell::int(a.units_sold).field("units_sold"),
                Cell::int(a.final_stock).field("final_stock"),
                Cell::int(a.orders).field("orders"),
                Cell::int(a.oversell).field("oversell"),
                Cell::int(a.lost_updates),
                Cell::int(a.negative_stock),
                Cell::int(a.undersell),
                (x.sale.retries).map_or_else(Cell::none, |n| Cell::num(n, format!("{n:.0}"))),
                Cell::num(x.sale.seconds, format!("{:.1}", x.sale.seconds)),
                Cell::text(x.sale.outcomes.to_string()),
            ],
        );
    }
    t
}

/// Each strategy's closed loop.
pub fn closed_loops(r: &RunReport) -> Table {
    let rows = r
        .sold()
        .map(|x| (Cell::code(x.strategy.name), &x.loops.throughput.closed));
    loads("closed", rows)
}

/// Each strategy's open loop.
pub fn open_loops(r: &RunReport) -> Table {
    let rows = r
        .sold()
        .map(|x| (Cell::code(x.strategy.name), &x.loops.throughput.open));
    loads("open", rows)
}

/// The baselines: nothing of ours between the load and the server.
pub fn baselines(r: &RunReport) -> Table {
    let rows = r.baselines.iter().map(|b| {
        let name = Cell::text(format!("`{}`: {}", b.name, b.what));
        (name, &b.result)
    });
    loads("baseline-loads", rows)
}

/// Loads, one row each: their rates, latencies and answers.
fn loads<'a>(id: &'static str, rows: impl Iterator<Item = (Cell, &'a LoadResult)>) -> Table {
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
        .and_left(["answers"])
        .named(id);
    for (name, l) in rows {
        let lat = &l.latency;
        let mut row = vec![
            name,
            Cell::int(l.concurrency as i64),
            match l.mode {
                Loop::Open { target_rate } => Cell::num(target_rate, format!("{target_rate:.0}")),
                Loop::Closed => Cell::none(),
            },
            Cell::num(l.attempts_per_sec, attempts_per_sec(l)),
            Cell::num(l.successes_per_sec, successes_per_sec(l)),
            Cell::int(l.not_sent as i64),
        ];
        let us = [lat.p50_us, lat.p90_us, lat.p99_us, lat.p999_us, lat.max_us];
        row.extend(us.map(|us| Cell::int(us as i64)));
        row.push(Cell::text(l.outcomes.to_string()));
        t.row(row);
    }
    t
}

/// Ours beside the standard tools, where they ran.
pub fn tools(r: &RunReport) -> Table {
    let mut t = Table::left(["baseline"])
        .and_right(["ours /s"])
        .and_left(["tool"])
        .and_right([
            "theirs /s",
            "ours / theirs",
            "generator CPU: ours / tool",
            "server CPU: ours / theirs",
        ])
        .named("tools");
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
            Cell::code(b.name),
            Cell::num(b.result.headline(), ours),
            Cell::code(&tool.tool),
            Cell::num(
                tool.per_sec.as_ref().map_or(0.0, |s| s.median),
                theirs(tool),
            ),
            tool.ours_percent
                .map_or_else(Cell::none, |p| Cell::num(p, format!("{p:.0}%"))),
            Cell::text(format!("{} / {}", f(generator), f(tool.tool_cpu_per_1000))),
            Cell::text(format!(
                "{} / {}",
                f(server(b.cpu.as_ref())),
                f(server(tool.cpu.as_ref()))
            )),
        ]);
    }
    t
}

/// The tool's rate, or why there is none.
fn theirs(tool: &StandardTool) -> String {
    match (&tool.per_sec, tool.status) {
        (Some(s), _) => spread(s),
        (None, ToolStatus::NotInstalled) => "not installed".into(),
        (None, _) => "failed".into(),
    }
}

/// CPU-seconds per 1,000 deductions / busy cores, per process group.
pub fn cpu(r: &RunReport) -> Table {
    let groups = r.cpu_groups();
    let mut t = Table::left(["strategy"])
        .and_right(groups.iter().chain(&["rest (cores)"]))
        .and_left(["saturated"])
        .named("cpu");
    for x in r.sold() {
        let Some(cpu) = &x.cpu else { continue };
        let mut row = vec![Cell::code(x.strategy.name)];
        row.extend(groups.iter().map(|g| match cpu.group(g) {
            Some((Some(per_1000), cores)) => {
                Cell::num(per_1000, format!("{per_1000:.2} / {cores:.2}"))
            }
            Some((None, cores)) => Cell::num(0.0, format!("– / {cores:.2}")),
            None => Cell::none(),
        }));
        row.push(
            (cpu.rest_of_machine_cores)
                .map_or_else(Cell::none, |c| Cell::num(c, format!("{c:.2}"))),
        );
        row.push(
            cpu.saturated
                .as_deref()
                .map_or(Cell::text("none"), Cell::code),
        );
        t.row(row);
    }
    t
}

/// The bare hot-row update at several connection counts.
pub fn hot_row_sweep(sweep: &[LoadResult]) -> Table {
    let mut t = Table::new([("connections", Align::Right)])
        .and_right(["updates/s", "p50 µs", "p99 µs"])
        .named("sweep");
    for l in sweep {
        t.row([
            Cell::int(l.concurrency as i64),
            Cell::num(l.successes_per_sec, successes_per_sec(l)),
            Cell::int(l.latency.p50_us as i64),
            Cell::int(l.latency.p99_us as i64),
        ]);
    }
    t
}

/// The machine, the commit, the servers and their settings.
pub fn environment(r: &RunReport) -> Table {
    let e = &r.environment;
    let mut t = Table::left(["", ""])
        .named("environment")
        .with_headed_rows();
    let unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    t.row([
        Cell::text("CPUs"),
        Cell::text(e.cpus.to_string()).field("cpus"),
    ]);
    t.row([
        Cell::text("CPU"),
        Cell::text(unknown(&e.cpu_model)).field("cpu_model"),
    ]);
    t.row([Cell::text("memory"), Cell::text(unknown(&e.memory_total))]);
    t.row(["OS", &e.os]);
    t.row([
        "git commit".to_string(),
        match (&e.git_commit, e.git_dirty) {
            (Some(c), Some(true)) => format!("`{c}` (with uncommitted changes)"),
            (Some(c), _) => format!("`{c}`"),
            _ => "unknown".into(),
        },
    ]);
    t.row(["servers", &e.servers]);
    if let Some(added) = r.world.and_then(|w| w.distance.added("server")) {
        t.row(["round trip added".to_string(), added]);
    }
    if let Some(added) = r.world.and_then(|w| w.buyers.added("app instance")) {
        t.row(["buyers' round trip added".to_string(), added]);
    }
    if let Some(servers) = r.world.and_then(|w| w.topology.described()) {
        t.row(["topology", servers]);
    }
    if let Some(engine) = r.world.and_then(|w| w.engine.described()) {
        t.row(["engine", engine]);
    }
    t.row(["load generator build", &e.generator_build]);
    for (k, v) in &e.versions {
        t.row([format!("{k} version"), v.clone()]);
    }
    for (k, v) in e.mariadb.iter().filter(|(k, _)| *k != "version") {
        t.row([format!("MariaDB `{k}`"), v.clone()]);
    }
    for (k, v) in e.postgres.iter().filter(|(k, _)| *k != "server_version") {
        t.row([format!("PostgreSQL `{k}`"), v.clone()]);
    }
    for (k, v) in e.redis.iter().filter(|(k, _)| *k != "redis_version") {
        t.row([format!("Redis `{k}`"), v.clone()]);
    }
    for (k, v) in &e.app {
        t.row([format!("app `{k}`"), v.clone()]);
    }
    if let Some(f) = &e.disk_flush {
        t.row([
            "disk flush (`fdatasync` of a 4 KiB write where the servers keep their data)"
                .to_string(),
            format!(
                "p50 {} µs, p90 {} µs ({} flushes)",
                f.p50_us, f.p90_us, f.flushes
            ),
        ]);
    }
    t
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

/// Microseconds as milliseconds, one decimal, sorted by the microseconds.
fn ms(us: u64) -> Cell {
    Cell::num(us as f64, format!("{:.1}", us as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_table_names_each_app_setting_the_run_changed() {
        let mut r = crate::sample::report();
        let md = environment(&r).render();
        assert!(!md.contains("| app `"), "the defaults name nothing");
        (r.environment.app).insert("--rollback-retries".into(), "3".into());
        let t = environment(&r);
        assert!(
            t.render().contains("| app `--rollback-retries` | 3 |"),
            "{}",
            t.render()
        );
        let html = crate::report::html::table::print(&t).into_string();
        assert!(
            html.contains("<th>app <code>--rollback-retries</code></th>"),
            "{html}"
        );
    }

    #[test]
    fn the_environment_table_gives_the_disk_flush_where_it_was_measured() {
        let mut r = crate::sample::report();
        assert!(!environment(&r).render().contains("disk flush"));
        r.environment.disk_flush = Some(crate::schema::DiskFlush {
            flushes: 100,
            p50_us: 2_100,
            p90_us: 3_400,
        });
        let md = environment(&r).render();
        assert!(
            md.contains("p50 2100 µs, p90 3400 µs (100 flushes)"),
            "{md}"
        );
    }

    /// The run's tables as `report.md` and `report.html` print them.
    fn tables(r: &RunReport) -> Vec<Table> {
        vec![
            summary(r),
            accounting(r),
            closed_loops(r),
            open_loops(r),
            baselines(r),
            tools(r),
            cpu(r),
            hot_row_sweep(&r.hot_row_sweep),
            environment(r),
        ]
    }

    #[test]
    fn every_strategys_figures_are_on_both_pages() {
        let r = crate::sample::report();
        let md = crate::document::markdown(&r);
        let html = crate::document::html(&r, &[], None);
        let tables = tables(&r);
        for t in tables.iter().filter(|t| !t.is_empty()) {
            let id = t.id.unwrap();
            assert!(md.contains(&t.render()), "report.md lacks the `{id}` table");
            let printed = crate::report::html::table::print(t).into_string();
            assert!(
                html.contains(&printed),
                "report.html lacks the `{id}` table"
            );
        }
        for x in r.sold() {
            let a = &x.sale.accounting;
            let row = |t: &Table| {
                let name = x.strategy.name.to_string();
                let row = t.rows.iter().find(|row| row.name.as_ref() == Some(&name));
                row.unwrap_or_else(|| panic!("{name} has no row"))
                    .cells
                    .clone()
            };
            let sold = row(&tables[1]);
            for (field, value) in [
                ("units_sold", a.units_sold),
                ("final_stock", a.final_stock),
                ("orders", a.orders),
                ("oversell", a.oversell),
            ] {
                let c = sold.iter().find(|c| c.field == Some(field)).unwrap();
                assert_eq!(
                    (c.text.clone(), c.sort),
                    (value.to_string(), Some(value as f64))
                );
            }
            let rate = &row(&tables[0])[8];
            assert_eq!(rate.sort, Some(x.throughput.closed.successes_per_sec));
        }
    }
}
