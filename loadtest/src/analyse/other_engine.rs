//! The same strategies on the other engine (`schema::OtherEngine`): of the committed runs
//! beside a run, the latest on the other database engine, on the same machine and otherwise
//! the same servers (one node of each, as far away, the buyers as near), that measured the
//! hot-row baseline and at least one of the run's strategies. Its medians are read as the
//! falls read them (`super::falls::committed`): from the results' index, or a folder's
//! `report.json` the index does not have yet.

use std::borrow::Borrow;

use crate::schema::comparison::Machines;
use crate::schema::history::Medians;
use crate::schema::world::World;
use crate::schema::{BaselineName, OtherEngine, RunReport};

/// The other engine's figures for `run`'s strategies, from the latest of `committed` (in
/// folder order, each with its folder when it has one) that fits; `None` where none does.
pub fn of<M: Borrow<Medians>>(
    run: &RunReport,
    committed: impl IntoIterator<Item = (Option<String>, M)>,
) -> Option<OtherEngine> {
    let world = run.world.unwrap_or(World::local(0));
    let fits = |other: &Medians| {
        let theirs = other.world.unwrap_or(World::local(0));
        let machines = Machines {
            a: other.machine.clone()?,
            b: run.machine(),
        };
        let beside = theirs.engine != world.engine
            && World::same_servers(Some(theirs.on(world.engine)), Some(world));
        (machines.same() && beside).then_some(theirs.engine)
    };
    let mut found = None;
    for (folder, other) in committed {
        let other = other.borrow();
        let Some(engine) = fits(other) else {
            continue;
        };
        let Some(&hot_row) = other.baselines.get(BaselineName::SqlHotRow.as_str()) else {
            continue;
        };
        let strategies: std::collections::BTreeMap<String, f64> = (run.strategies.iter())
            .filter_map(|s| {
                let name = s.strategy.name.name();
                Some((name.to_owned(), *other.strategies.get(name)?))
            })
            .collect();
        if strategies.is_empty() {
            continue;
        }
        found = Some(OtherEngine {
            engine,
            run: folder.unwrap_or_else(|| other.started_at.clone()),
            hot_row,
            strategies,
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::falls::medians;
    use crate::sample::report;
    use crate::schema::world::Engine;

    /// The sample run (on MariaDB, one node of each) on `engine`, started at `started_at`.
    fn on(engine: Engine, started_at: &str) -> RunReport {
        let mut r = report();
        r.started_at = started_at.into();
        r.world = Some(World::local(2).on(engine));
        r.baselines.push(crate::schema::Baseline {
            name: BaselineName::SqlHotRow,
            ..crate::sample::baseline()
        });
        r
    }

    #[test]
    fn a_run_sees_the_latest_run_of_the_other_engine_on_its_machine_and_servers() {
        let postgres = on(Engine::Postgres, "2026-12-05T13:00:00Z");
        let earlier = on(Engine::MariaDb, "2026-12-01T00:00:00Z");
        let mut later = on(Engine::MariaDb, "2026-12-04T00:00:00Z");
        later.strategies[1]
            .loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .successes_per_sec = 4321.0;
        let mut elsewhere = on(Engine::MariaDb, "2026-12-05T00:00:00Z");
        elsewhere.environment.cpu_model = Some("Another CPU".into());
        let mut galera = on(Engine::MariaDb, "2026-12-05T01:00:00Z");
        galera.world = galera
            .world
            .map(|w| w.arranged(crate::schema::world::Topology::GaleraOneWriter));
        let same = on(Engine::Postgres, "2026-12-05T02:00:00Z");
        let committed = [&earlier, &later, &elsewhere, &galera, &same]
            .map(|r| (Some(r.started_at.clone()), medians(r)));

        let other = of(&postgres, committed.iter().map(|(f, m)| (f.clone(), m))).unwrap();
        assert_eq!(
            (other.engine, other.run.as_str()),
            (Engine::MariaDb, "2026-12-04T00:00:00Z"),
            "the latest MariaDB run of this machine, one node of each"
        );
        assert_eq!(other.strategies.get("conditional"), Some(&4321.0));
        let hot_row = medians(&later).baselines["sql-hot-row"];
        assert_eq!(other.hot_row, hot_row);
        assert!(of(&postgres, [(None, medians(&same))]).is_none());
    }
}
