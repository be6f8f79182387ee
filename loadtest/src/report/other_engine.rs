//! The same strategies on the other engine (`schema::OtherEngine`), beside this run's: each
//! engine's closed-loop median and its share of that engine's own hot-row baseline.

use super::section::Section;
use super::table::{Cell, Table};
use crate::analyse::falls::medians;
use crate::schema::world::World;
use crate::schema::{BaselineName, RunReport};

/// Nothing where the run found no run of the other engine beside it.
pub fn section(r: &RunReport) -> Section {
    let (Some(other), Some(hot_row)) = (&r.other_engine, r.baseline(BaselineName::SqlHotRow))
    else {
        return Section::default();
    };
    let here = r.world.unwrap_or(World::local(0)).engine;
    let (this, there) = (here.name(), other.engine.name());
    let hot_row = hot_row.result.headline();
    let mut out = Section::titled(format!("The same strategies on {there}"));
    out.prose(format!(
        "Each strategy's closed-loop median in this run on {this} and in the latest run on \
         {there} on this machine and otherwise the same servers ([`{run}`](../{run}/report.md)), \
         each as a share of its own engine's hot-row baseline — the bare `UPDATE` of one row, \
         {hot_row:.0}/s on {this} here and {other_hot:.0}/s on {there} there: one row's ceiling \
         on each engine, so that the shares compare what each design makes of its engine rather \
         than the two engines' commits.",
        run = other.run,
        other_hot = other.hot_row,
    ));
    let ours = medians(r);
    let mut t = Table::left(["strategy"])
        .and_right([
            format!("{this}: deductions/s"),
            format!("{this}: % of its hot row"),
            format!("{there}: deductions/s"),
            format!("{there}: % of its hot row"),
        ])
        .named("other-engine");
    for s in &r.strategies {
        let name = s.strategy.name.name();
        let (Some(&mine), Some(&theirs)) = (ours.strategies.get(name), other.strategies.get(name))
        else {
            continue;
        };
        t.row([
            Cell::code(name),
            Cell::num(mine, format!("{mine:.0}")),
            share(mine, hot_row),
            Cell::num(theirs, format!("{theirs:.0}")),
            share(theirs, other.hot_row),
        ]);
    }
    out.table(t);
    out
}

fn share(rate: f64, hot_row: f64) -> Cell {
    match hot_row > 0.0 {
        true => {
            let p = 100.0 * rate / hot_row;
            Cell::num(p, format!("{p:.0}%"))
        }
        false => Cell::none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::world::Engine;
    use crate::schema::{Baseline, OtherEngine};

    #[test]
    fn each_strategy_measured_on_both_engines_is_a_share_of_its_own_engines_hot_row() {
        let mut r = crate::sample::report();
        r.world = Some(World::local(2).on(Engine::Postgres));
        assert!(section(&r).is_empty(), "no other engine, no section");
        let mut hot_row = Baseline {
            name: BaselineName::SqlHotRow,
            ..crate::sample::baseline()
        };
        hot_row.result.successes_per_sec = 800.0;
        r.baselines.push(hot_row);
        r.other_engine = Some(OtherEngine {
            engine: Engine::MariaDb,
            run: "2026-12-05T09-15-03Z".into(),
            hot_row: 2_000.0,
            strategies: [("conditional".to_owned(), 1_000.0)].into(),
        });
        let md = section(&r).markdown();
        assert!(md.contains("The same strategies on MariaDB"), "{md}");
        assert!(md.contains("(../2026-12-05T09-15-03Z/report.md)"), "{md}");
        let conditional = md.lines().find(|l| l.contains("`conditional`")).unwrap();
        let ours = medians(&r).strategies["conditional"];
        let expected = format!(
            "| `conditional` | {ours:.0} | {:.0}% | 1000 | 50% |",
            100.0 * ours
                / r.baseline(BaselineName::SqlHotRow)
                    .unwrap()
                    .result
                    .headline()
        );
        assert_eq!(conditional, expected, "{md}");
        assert!(!md.contains("`naive`"), "measured on one engine only: {md}");
    }
}
