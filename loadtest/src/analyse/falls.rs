//! What fell by more than half: a strategy's closed-loop median (or a baseline's rate) less
//! than [`Fall::BELOW`] of the best median another run on the same machine measured for it.
//!
//! A run is compared with the run before it (`super::compare`), a change judged against the
//! noise of the rounds' min–max. A strategy whose rounds spread wide, or that sinks a little
//! in each of several runs, never crosses that noise: a tenfold fall can pass unsaid that way.
//! Against the best run on the machine the whole slide shows. Only the medians are judged: a
//! median below half of the best is no spread's doing. A run of another machine (CPU model and
//! core count, [`RunReport::machine`]) is never the best: another machine moves every rate.
//!
//! A slow day halves every rate: the machine's own figures, the baselines, fall with the
//! strategies. Each fall carries how far its reference fell between the same two runs (a
//! strategy's own baseline, `http-noop` for another baseline: [`Fall::baseline`]), so the
//! report names first what fell beyond the machine ([`Fall::with_the_machine`]).
//!
//! The committed runs are judged by their [`Medians`] as the history index
//! (`results/history.json`, [`crate::report::run_history`]) keeps them, so that a run whose
//! folder was deleted from the checkout still counts; a folder the index does not have yet is
//! read from its `report.json`.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::ratios::baseline_of;
use crate::schema::comparison::Machines;
use crate::schema::history::{self as run_history, Medians};
use crate::schema::json;
use crate::schema::world::World;
use crate::schema::{BaselineFall, BaselineName, DoorRefused, Fall, Fallen, RunReport};

/// Every committed run of the results folder `out`, with its folder's name, in folder order:
/// the entries of its history index, and every folder with a `report.json` this program can
/// read that the index does not have yet (a report it cannot read is left out with a warning;
/// `latest`, a link to one of them, is left out).
pub fn committed(out: &Path) -> Vec<(Option<String>, Medians)> {
    let entries = run_history::read(out)
        .inspect_err(|e| tracing::warn!("judging falls against the run folders alone: {e:#}"))
        .ok()
        .flatten()
        .map(|h| h.runs)
        .unwrap_or_default();
    let mut runs: Vec<(String, Medians)> = (entries.into_iter())
        .map(|r| (r.folder, r.medians))
        .collect();
    let indexed: BTreeSet<String> = runs.iter().map(|(folder, _)| folder.clone()).collect();
    let unindexed = run_folders(out)
        .into_iter()
        .filter(|(folder, _)| !indexed.contains(folder));
    runs.extend(
        unindexed
            .filter_map(|(folder, path)| read(folder, &path))
            .map(|(folder, report)| (folder, medians(&report))),
    );
    runs.sort_by(|(a, _), (b, _)| a.cmp(b));
    (runs.into_iter())
        .map(|(folder, medians)| (Some(folder), medians))
        .collect()
}

/// Every run folder in `out` (each `<dir>/report.json`) this program can read, with its name,
/// in folder order, read one at a time. A report it cannot read is left out with a warning;
/// `latest`, a link to one of them, is left out.
pub fn reports(out: &Path) -> impl Iterator<Item = (String, RunReport)> {
    (run_folders(out).into_iter()).filter_map(|(folder, path)| read(folder, &path))
}

/// The folders of `out` with a `report.json`, by name.
fn run_folders(out: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<(String, PathBuf)> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        // The entry's own type: a link to a folder is not a folder.
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(_, p)| p.join("report.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The report of the run folder at `path`, if this program can read it.
fn read(folder: String, path: &Path) -> Option<(String, RunReport)> {
    json::read(path)
        .inspect_err(|e| tracing::warn!("not judging falls against {}: {e:#}", path.display()))
        .ok()
        .map(|report| (folder, report))
}

/// What a fall is judged on in `run`: its start, its machine, and each strategy's closed-loop
/// median and each baseline's rate, by name (the first of a name, as [`RunReport::strategy`]
/// finds it). A median that is not a number is left out: it can be no run's best.
pub fn medians(run: &RunReport) -> Medians {
    let mut strategies = std::collections::BTreeMap::new();
    for s in &run.strategies {
        let name = s.strategy.name;
        if let Some(m) = median(run, Fallen::Strategy(name)).filter(|m| m.is_finite()) {
            strategies.entry(name.name().to_owned()).or_insert(m);
        }
    }
    let mut baselines = std::collections::BTreeMap::new();
    for b in &run.baselines {
        if let Some(m) = median(run, Fallen::Baseline(b.name)).filter(|m| m.is_finite()) {
            baselines.entry(b.name.as_str().to_owned()).or_insert(m);
        }
    }
    Medians {
        started_at: run.started_at.clone(),
        machine: Some(run.machine()),
        world: run.world.and_then(World::unless_local),
        strategies,
        baselines,
    }
}

/// The falls of `run` against `others` (each with its folder, when it has one): for every
/// strategy and baseline of `run`, the best median the others from its machine measured, and
/// a fall where `run`'s is below [`Fall::BELOW`] of it. Of equal bests, the first counts.
pub fn against<M: Borrow<Medians>>(
    run: &RunReport,
    others: impl IntoIterator<Item = (Option<String>, M)>,
) -> Vec<Fall> {
    let subjects: Vec<(Fallen, f64)> = run
        .strategies
        .iter()
        .map(|s| Fallen::Strategy(s.strategy.name))
        .chain(run.baselines.iter().map(|b| Fallen::Baseline(b.name)))
        .filter_map(|fallen| Some((fallen, median(run, fallen)?)))
        .collect();
    let mut best: Vec<Option<Best>> = vec![None; subjects.len()];
    for (dir, other) in others {
        let other = other.borrow();
        let Some(theirs) = &other.machine else {
            continue;
        };
        let machines = Machines {
            a: theirs.clone(),
            b: run.machine(),
        };
        if !machines.same() || !World::same_servers(other.world, run.world) {
            continue;
        }
        for ((fallen, _), best) in subjects.iter().zip(&mut best) {
            let median = match fallen {
                Fallen::Strategy(s) => other.strategies.get(s.name()),
                Fallen::Baseline(b) => other.baselines.get(b.as_str()),
            };
            let Some(&median) = median else {
                continue;
            };
            if best.as_ref().is_none_or(|b| median > b.median) {
                *best = Some(Best {
                    median,
                    reference: reference_of(*fallen)
                        .and_then(|b| other.baselines.get(b.as_str()).copied()),
                    dir: dir.clone(),
                    started_at: other.started_at.clone(),
                });
            }
        }
    }
    subjects
        .into_iter()
        .zip(best)
        .filter_map(|((fallen, now), best)| {
            let best = best?;
            (now < Fall::BELOW * best.median).then(|| Fall {
                fallen,
                median: now,
                best_median: best.median,
                baseline: reference_of(fallen).and_then(|name| {
                    let then = best.reference.filter(|r| *r > 0.0)?;
                    Some(BaselineFall {
                        name,
                        ratio: median(run, Fallen::Baseline(name))? / then,
                    })
                }),
                best_dir: best.dir,
                best_started_at: best.started_at,
                ratio: now / best.median,
                door_percent: door_percent(run, fallen),
            })
        })
        .collect()
}

/// The share of `fallen`'s closed-loop attempts in `run` that its door refused, when it was
/// most of them.
fn door_percent(run: &RunReport, fallen: Fallen) -> Option<f64> {
    let Fallen::Strategy(name) = fallen else {
        return None;
    };
    let percent = run.strategy(name)?.throughput.closed.door_percent()?;
    DoorRefused::is_most(percent).then_some(percent)
}

/// The baseline a fall of `fallen` is set beside: a strategy's own, `http-noop` for another
/// baseline, none for `http-noop`.
fn reference_of(fallen: Fallen) -> Option<BaselineName> {
    match fallen {
        Fallen::Strategy(s) => Some(baseline_of(s)),
        Fallen::Baseline(BaselineName::HttpNoop) => None,
        Fallen::Baseline(_) => Some(BaselineName::HttpNoop),
    }
}

/// The best median found so far, its reference's rate in the same run, and its run.
#[derive(Clone)]
struct Best {
    median: f64,
    reference: Option<f64>,
    dir: Option<String>,
    started_at: String,
}

/// The median a fall is judged on: a strategy's closed-loop deductions/s (the summary table's
/// figure), a baseline's rate (successes/s where its work has successes, attempts/s where not).
fn median(run: &RunReport, of: Fallen) -> Option<f64> {
    match of {
        Fallen::Strategy(s) => run
            .strategy(s)
            .map(|x| x.throughput.closed.successes_per_sec),
        Fallen::Baseline(b) => run.baseline(b).map(|x| x.result.headline()),
    }
}

#[cfg(test)]
mod tests {
    use app::api::ErrorCode;

    use super::*;
    use crate::sample::report;
    use crate::schema::{LoadResult, Repetitions, Spread};

    /// Three rounds whose median is `rounds[1]`, as the closed loop of a run records them.
    fn set(load: &mut LoadResult, rounds: [f64; 3]) {
        let spread = Spread::of(&rounds).unwrap();
        load.successes_per_sec = spread.median;
        load.repetitions = Some(Repetitions {
            runs: 3,
            attempts_per_sec: spread.clone(),
            successes_per_sec: spread.clone(),
            p99_us: spread,
        });
    }

    /// The sample run, started at `started_at` on `cpu`, with `naive`'s and `conditional`'s
    /// closed-loop rounds.
    fn run(
        started_at: &str,
        cpu: Option<&str>,
        naive: [f64; 3],
        conditional: [f64; 3],
    ) -> RunReport {
        let mut r = report();
        r.started_at = started_at.into();
        r.environment.cpu_model = cpu.map(Into::into);
        set(
            &mut r.strategies[0].loops.as_mut().unwrap().throughput.closed,
            naive,
        );
        set(
            &mut r.strategies[1].loops.as_mut().unwrap().throughput.closed,
            conditional,
        );
        r
    }

    fn best() -> RunReport {
        run(
            "2026-11-01T00:00:00Z",
            Some("Test CPU"),
            [950.0, 1000.0, 1050.0],
            [950.0, 1000.0, 1050.0],
        )
    }

    /// `naive` at 0.4 of its best, its rounds spread wide enough to reach it; `conditional` at
    /// 0.6.
    fn fallen(cpu: Option<&str>) -> RunReport {
        run(
            "2026-11-02T00:00:00Z",
            cpu,
            [300.0, 400.0, 1100.0],
            [550.0, 600.0, 650.0],
        )
    }

    #[test]
    fn a_run_on_other_servers_is_judged_only_against_runs_on_the_same_servers() {
        use crate::schema::world::Topology;
        let on_cluster = |mut r: RunReport| {
            r.world = Some(World::local(2).arranged(Topology::RedisCluster));
            r
        };
        let now = on_cluster(fallen(Some("Test CPU")));
        let local_best = medians(&best());
        assert_eq!(local_best.world, None);
        assert!(against(&now, [(None, local_best)]).is_empty());
        let cluster_best = medians(&on_cluster(best()));
        assert!(cluster_best.world.is_some());
        assert_eq!(against(&now, [(None, cluster_best.clone())]).len(), 1);
        // And a local run is not judged against the cluster's.
        assert!(against(&fallen(Some("Test CPU")), [(None, cluster_best)]).is_empty());
    }

    #[test]
    fn a_strategy_below_half_its_best_is_named_at_the_top_of_the_report_and_one_at_0_6_is_not() {
        let mut now = fallen(Some("Test CPU"));
        now.falls = against(&now, [(Some("best-run".to_string()), medians(&best()))]);
        assert_eq!(
            now.falls,
            vec![Fall {
                fallen: Fallen::Strategy(app::api::Strategy::Naive),
                median: 400.0,
                best_median: 1000.0,
                best_dir: Some("best-run".into()),
                best_started_at: "2026-11-01T00:00:00Z".into(),
                ratio: 0.4,
                baseline: Some(BaselineFall {
                    name: BaselineName::SqlConditional,
                    ratio: 1.0,
                }),
                door_percent: None,
            }]
        );
        let md = crate::document::markdown(&now);
        let lines: Vec<&str> = md.lines().take(5).collect();
        assert_eq!(
            lines,
            [
                "# seckill-bench run, 2026-11-02T00:00:00Z",
                "",
                "**Fell by more than half against the best run on this machine:**",
                "",
                "- `naive` 400/s against 1000/s in best-run (0.40×; `sql-conditional` 1.00× in the \
                 same two runs)",
            ],
            "{md}"
        );
        let top = &md[..md.find("## Summary").unwrap()];
        assert!(!top.contains("`conditional`"), "{top}");

        let page = crate::document::html(&now, &[], None);
        let at = page.find("<section id=\"falls\"").expect("a falls section");
        assert!(at < page.find("id=\"summary-section\"").unwrap(), "{page}");
        let section = &page[at..];
        let section = &section[..section.find("</section>").unwrap()];
        assert!(
            section.contains("<code>naive</code> 400/s against 1000/s in best-run (0.40×; "),
            "{section}"
        );
        assert!(!section.contains("<code>conditional</code>"), "{section}");

        now.falls.clear();
        assert!(!crate::document::markdown(&now).contains("Fell by"));
        assert!(!crate::document::html(&now, &[], None).contains("id=\"falls\""));
    }

    #[test]
    fn a_fall_whose_attempts_the_door_mostly_refused_says_so_beside_it() {
        let mut now = fallen(Some("Test CPU"));
        let closed = &mut now.strategies[0].loops.as_mut().unwrap().throughput.closed;
        let refused = testkit::Answer::Refused {
            status: 503,
            code: ErrorCode::Overloaded,
        };
        // 400 sold beside 1,200 refused at the door: three attempts in four.
        for _ in 0..1_200 {
            closed.outcomes.count(&refused);
        }
        now.falls = against(&now, [(Some("best-run".to_string()), medians(&best()))]);
        assert_eq!(now.falls[0].door_percent, Some(75.0));
        let md = crate::document::markdown(&now);
        assert!(
            md.contains(
                "- `naive` 400/s against 1000/s in best-run (0.40×; `sql-conditional` 1.00× in the \
                 same two runs): 75% of its closed loop's attempts in this run were refused at the \
                 door, `503 overloaded`\n"
            ),
            "{md}"
        );
        // A door that refused fewer than half is not the fall's story.
        let closed = &mut now.strategies[0].loops.as_mut().unwrap().throughput.closed;
        closed.outcomes = Default::default();
        closed.outcomes.created = 400;
        for _ in 0..300 {
            closed.outcomes.count(&refused);
        }
        assert_eq!(
            against(&now, [(None, medians(&best()))])[0].door_percent,
            None
        );
    }

    /// `r` with an `http-noop` baseline beside its `sql-conditional`, at the same rate.
    fn with_http_noop(mut r: RunReport) -> RunReport {
        let mut noop = r.baselines[0].clone();
        noop.name = BaselineName::HttpNoop;
        r.baselines.push(noop);
        r
    }

    #[test]
    fn on_a_slow_day_what_fell_as_far_as_its_baseline_is_set_apart_and_a_fall_beyond_it_leads() {
        // The machine at 0.4 of the best run: both baselines, `conditional` with them; `naive`
        // at 0.1, a quarter of its rate over its own baseline: a fall of its own.
        let mut now = with_http_noop(run(
            "2026-11-02T00:00:00Z",
            Some("Test CPU"),
            [90.0, 100.0, 110.0],
            [380.0, 400.0, 420.0],
        ));
        for b in &mut now.baselines {
            b.result.successes_per_sec *= 0.4;
            b.result.attempts_per_sec *= 0.4;
        }
        let best = with_http_noop(best());
        now.falls = against(&now, [(Some("best-run".to_string()), medians(&best))]);
        let judged: Vec<(Fallen, bool)> = (now.falls.iter())
            .map(|f| (f.fallen, f.with_the_machine()))
            .collect();
        use app::api::Strategy::{Conditional, Naive};
        assert_eq!(
            judged,
            [
                (Fallen::Strategy(Naive), false),
                (Fallen::Strategy(Conditional), true),
                (Fallen::Baseline(BaselineName::SqlConditional), true),
                (Fallen::Baseline(BaselineName::HttpNoop), true),
            ]
        );
        let md = crate::document::markdown(&now);
        let top = &md[..md.find("## Summary").unwrap()];
        assert!(
            top.contains(
                "**Fell by more than half against the best run on this machine:**\n\n- `naive` \
                 100/s against 1000/s in best-run (0.10×; `sql-conditional` 0.40× in the same two \
                 runs)\n\n**Fell by more than half against the best run on this machine, as far \
                 as the machine did**"
            ),
            "{top}"
        );
        assert!(
            top.contains(
                ": `conditional` 0.40× (`sql-conditional` 0.40×), baseline `sql-conditional` \
                 0.40× (`http-noop` 0.40×), baseline `http-noop` 0.40×.\n"
            ),
            "{top}"
        );
        // Nothing beyond the machine: no lead list, the machine's paragraph alone.
        now.falls.retain(|f| f.with_the_machine());
        let md = crate::report::falls::markdown("Fell", &now.falls);
        assert!(
            md.starts_with("**Fell, as far as the machine did**"),
            "{md}"
        );
        // A run that did not measure the strategy's baseline cannot say its fall is the
        // machine's.
        now.baselines
            .retain(|b| b.name != BaselineName::SqlConditional);
        let falls = against(&now, [(None, medians(&best))]);
        let conditional = (falls.iter())
            .find(|f| f.fallen == Fallen::Strategy(Conditional))
            .unwrap();
        assert_eq!(conditional.baseline, None);
        assert!(!conditional.with_the_machine());
    }

    #[test]
    fn a_run_of_another_machine_is_never_the_best() {
        let faster = |cpu: Option<&str>| {
            run(
                "2026-10-01T00:00:00Z",
                cpu,
                [9_000.0, 10_000.0, 11_000.0],
                [9_000.0, 10_000.0, 11_000.0],
            )
        };
        let now = fallen(Some("Test CPU"));
        let falls = against(
            &now,
            [
                (
                    Some("other".to_string()),
                    medians(&faster(Some("Other CPU"))),
                ),
                (Some("unknown".to_string()), medians(&faster(None))),
                (Some("same".to_string()), medians(&best())),
            ],
        );
        let best_runs: Vec<(Fallen, &str)> =
            falls.iter().map(|f| (f.fallen, f.best_run())).collect();
        assert_eq!(
            best_runs,
            [(Fallen::Strategy(app::api::Strategy::Naive), "same")]
        );
        let mut two_cores_more = faster(Some("Test CPU"));
        two_cores_more.environment.cpus += 2;
        assert_eq!(against(&now, [(None, medians(&two_cores_more))]), []);
        // A run that does not know its CPU has no machine to compare with.
        assert_eq!(against(&fallen(None), [(None, medians(&faster(None)))]), []);
    }

    #[test]
    fn a_baseline_below_half_its_best_is_a_fall_too() {
        let mut faster = best();
        faster.baselines[0].result.successes_per_sec *= 3.0;
        let falls = against(&best(), [(None, medians(&faster))]);
        assert_eq!(falls.len(), 1, "{falls:?}");
        let md = crate::report::falls::markdown("Fell", &falls);
        assert!(
            md.contains(
                "- baseline `sql-conditional` 1000/s against 3000/s in 2026-11-01T00:00:00Z (0.33×)"
            ),
            "{md}"
        );
    }

    #[test]
    fn the_committed_runs_are_every_readable_report_in_the_folder_but_latest() {
        let out = tempfile::tempdir().unwrap();
        let write = |dir: &str, text: &str| {
            std::fs::create_dir_all(out.path().join(dir)).unwrap();
            std::fs::write(out.path().join(dir).join("report.json"), text).unwrap();
        };
        write("2026-11-01T00-00-00Z", &json::to_string(&best()).unwrap());
        write("2026-11-01T01-00-00Z", "{\"schema_version\": 99}");
        std::fs::create_dir_all(out.path().join("2026-11-01T02-00-00Z-lock-matrix")).unwrap();
        crate::report::link_latest(out.path(), &out.path().join("2026-11-01T00-00-00Z")).unwrap();
        let found: Vec<Option<String>> = (committed(out.path()).into_iter())
            .map(|(dir, _)| dir)
            .collect();
        assert_eq!(found, [Some("2026-11-01T00-00-00Z".to_string())]);
        let now = fallen(Some("Test CPU"));
        let falls = against(&now, committed(out.path()));
        assert_eq!(falls[0].best_run(), "2026-11-01T00-00-00Z");
    }
}
