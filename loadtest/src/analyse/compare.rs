//! `seckill-bench compare <run-a> <run-b>`: what changed between two runs, computed from the
//! two reports as the schema reads them (`schema::json`), rendered by `report::comparison`.
//!
//! First what fell by more than half from A to B on the same machine, judged on the medians
//! alone (see [`super::falls`]): rounds wide enough to pass for noise below must not hide a
//! fall to a tenth.
//!
//! Then correctness: every change of oversell, undersell, lost updates or negative stock; a
//! strategy expected not to oversell (declared safe, or safe while leases hold: the flash sale
//! injects no fault) whose oversell, lost updates or negative stock go from 0 to anything is a
//! regression, whatever the noise.
//!
//! Then what a run can reproduce (see [`super::reproduce`]): the strategies' order (Spearman's
//! ρ, and each strategy's place) and each strategy's rate over its own baseline, each judged
//! against the spread of the runs' own rounds.
//!
//! Then the absolute figures per baseline and strategy: throughput and p99. They are judged
//! only when both runs come from the same machine (CPU model and core count): a change is
//! marked when it is larger than the noise of these runs and, where both runs give min–max,
//! the two ranges do not overlap. The noise is estimated from the baselines, whose work never
//! changes: the median of their relative min–max in both runs; for runs without min–max, the
//! median change of a baseline between the two runs. From different machines the rates are
//! shown side by side, unjudged: another machine moves them all.

use app::accounting::Accounting;
use app::api::Safety;

use super::reproduce;
use crate::schema::comparison::{
    Change, Comparison, CorrectnessChange, FieldChange, Figures, Machines, Moved, Noise,
    NoiseSource, Range, Regression,
};
use crate::schema::{LoadResult, RunReport, Settings, Sold};

/// Noise assumed when neither run has min–max nor a baseline in common.
pub const DEFAULT_NOISE: f64 = 0.2;
/// The least noise assumed: a few per cent separate any two runs of the same work.
pub const MIN_NOISE: f64 = 0.05;

/// How the hot-row sweep's points are named; they are not used to estimate noise (one
/// connection against a hot row varies more than the work the strategies compare with).
const SWEEP_PREFIX: &str = "hot-row sweep ×";

/// The accounting figures a strategy expected not to oversell must keep at 0.
const MUST_STAY_ZERO: [&str; 3] = ["oversell", "lost_updates", "negative_stock"];
/// The accounting figures that say whether a sale was correct.
const CORRECTNESS: [&str; 4] = ["oversell", "undersell", "lost_updates", "negative_stock"];

/// Run A against run B.
pub fn compare(a: &RunReport, b: &RunReport) -> Comparison {
    let (base_a, base_b) = (baselines(a), baselines(b));
    let noise = noise(&base_a, &base_b);
    let machines = Machines {
        a: a.machine(),
        b: b.machine(),
    };
    let mut names: Vec<&String> = base_a.iter().map(|(n, _)| n).collect();
    names.extend(
        base_b
            .iter()
            .map(|(n, _)| n)
            .filter(|n| !base_a.iter().any(|(m, _)| m == *n)),
    );
    let of = |list: &[(String, Figures)], name: &str| {
        list.iter().find(|(n, _)| n == name).map(|(_, f)| f.clone())
    };
    let baselines: Vec<Change> = names
        .into_iter()
        .map(|name| change(name, of(&base_a, name), of(&base_b, name), noise.fraction))
        .collect();
    let mut strategies = Vec::new();
    let mut regressions = Vec::new();
    for sb in b.sold() {
        let sa = a.strategy(sb.strategy.name);
        let mut ch = change(
            &sb.strategy.name.to_string(),
            sa.as_ref().map(strategy_figures),
            Some(strategy_figures(&sb)),
            noise.fraction,
        );
        if let Some(sa) = sa {
            ch.accounting = accounting_changes(&sa, &sb);
            ch.ratio = reproduce::ratio(a, &sa)
                .zip(reproduce::ratio(b, &sb))
                .map(|(ra, rb)| Moved {
                    moved: reproduce::ratio_moved(&ra, &rb),
                    a: ra,
                    b: rb,
                });
            regressions.extend(
                ch.accounting
                    .iter()
                    .filter(|f| f.regression)
                    .map(|f| Regression {
                        strategy: ch.name.clone(),
                        field: f.field,
                        b: f.b,
                    }),
            );
        }
        strategies.push(ch);
    }
    for sa in a.sold() {
        if b.strategy(sa.strategy.name).is_none() {
            strategies.push(change(
                &sa.strategy.name.to_string(),
                Some(strategy_figures(&sa)),
                None,
                noise.fraction,
            ));
        }
    }
    let (ranking, ranks) = reproduce::ranking(a, b);
    for (name, ra, rb) in ranks {
        if let Some(ch) = strategies.iter_mut().find(|c| c.name == name) {
            ch.rank = Some(Moved {
                moved: reproduce::rank_moved(&ra, &rb),
                a: ra,
                b: rb,
            });
        }
    }
    let mut correctness: Vec<CorrectnessChange> = strategies
        .iter()
        .flat_map(|ch| {
            ch.accounting
                .iter()
                .filter(|f| CORRECTNESS.contains(&f.field))
                .map(|f| CorrectnessChange {
                    strategy: ch.name.clone(),
                    field: f.field,
                    a: f.a,
                    b: f.b,
                    regression: f.regression,
                })
        })
        .collect();
    correctness.sort_by_key(|c| !c.regression);
    let mut baselines: Vec<Change> = baselines;
    if !machines.same() {
        for ch in baselines.iter_mut().chain(strategies.iter_mut()) {
            ch.moved = None;
        }
    }
    Comparison {
        a: a.started_at.clone(),
        b: b.started_at.clone(),
        noise,
        machines,
        settings_changed: settings_changes(&a.settings, &b.settings),
        falls: super::falls::against(b, [(None, super::falls::medians(a))]),
        regressions,
        correctness,
        ranking,
        baselines,
        strategies,
    }
}

fn change(name: &str, a: Option<Figures>, b: Option<Figures>, noise: f64) -> Change {
    let moved = a
        .as_ref()
        .zip(b.as_ref())
        .and_then(|(a, b)| moved(a.rate, b.rate, noise));
    let percent = a.as_ref().zip(b.as_ref()).and_then(|(a, b)| {
        (a.rate.median > 0.0).then(|| 100.0 * (b.rate.median - a.rate.median) / a.rate.median)
    });
    Change {
        name: name.to_string(),
        figures: (a, b),
        percent,
        moved,
        accounting: Vec::new(),
        rank: None,
        ratio: None,
    }
}

/// Rate, spread and p99 of one load result: successes/s where there are successes,
/// attempts/s otherwise.
fn figures(l: &LoadResult) -> Figures {
    let by_successes = l.successes_per_sec > 0.0;
    let spread = l.repetitions.as_ref().map(|r| match by_successes {
        true => &r.successes_per_sec,
        false => &r.attempts_per_sec,
    });
    Figures {
        rate: Range {
            median: match by_successes {
                true => l.successes_per_sec,
                false => l.attempts_per_sec,
            },
            min_max: spread.map(|s| (s.min, s.max)),
        },
        p99_ms: l.latency.p99_us as f64 / 1000.0,
        p99_open_ms: None,
    }
}

fn strategy_figures(s: &Sold) -> Figures {
    Figures {
        p99_open_ms: Some(s.throughput.open.latency.p99_us as f64 / 1000.0),
        ..figures(&s.throughput.closed)
    }
}

/// Every baseline's figures, and the hot-row sweep's points.
fn baselines(run: &RunReport) -> Vec<(String, Figures)> {
    let mut all: Vec<(String, Figures)> = run
        .baselines
        .iter()
        .map(|b| (b.name.to_string(), figures(&b.result)))
        .collect();
    all.extend(
        run.hot_row_sweep
            .iter()
            .map(|l| (format!("{SWEEP_PREFIX}{:03}", l.concurrency), figures(l))),
    );
    all
}

/// See the module doc: the median (the upper one, for an even count) of the baselines'
/// relative min–max in both runs; without any, of the baselines' relative changes between
/// the runs; without either, [`DEFAULT_NOISE`]. Never less than [`MIN_NOISE`]. The hot-row
/// sweep is left out.
pub fn noise(a: &[(String, Figures)], b: &[(String, Figures)]) -> Noise {
    let named = |run: &[(String, Figures)]| {
        run.iter()
            .filter(|(name, _)| !name.starts_with(SWEEP_PREFIX))
            .cloned()
            .collect::<Vec<_>>()
    };
    let ranges: Vec<(f64, String)> = named(a)
        .into_iter()
        .chain(named(b))
        .filter_map(|(name, f)| {
            let (min, max) = f.rate.min_max?;
            (f.rate.median > 0.0).then(|| ((max - min) / f.rate.median, name))
        })
        .collect();
    if let Some((fraction, widest)) = upper_median(&ranges) {
        return Noise {
            fraction: fraction.max(MIN_NOISE),
            source: NoiseSource::Ranges {
                figures: ranges.len(),
                widest,
                widest_fraction: ranges.iter().map(|(v, _)| *v).fold(0.0, f64::max),
            },
        };
    }
    let changes: Vec<(f64, String)> = named(a)
        .into_iter()
        .filter_map(|(name, fa)| {
            let fb = &b.iter().find(|(n, _)| *n == name)?.1;
            (fa.rate.median > 0.0).then(|| {
                (
                    (fb.rate.median - fa.rate.median).abs() / fa.rate.median,
                    name,
                )
            })
        })
        .collect();
    match upper_median(&changes) {
        Some((fraction, _)) => Noise {
            fraction: fraction.max(MIN_NOISE),
            source: NoiseSource::Changes {
                baselines: changes.len(),
            },
        },
        None => Noise {
            fraction: DEFAULT_NOISE,
            source: NoiseSource::Assumed,
        },
    }
}

/// The upper median of the values, and the name of the largest.
fn upper_median(values: &[(f64, String)]) -> Option<(f64, String)> {
    let mut sorted: Vec<f64> = values.iter().map(|(v, _)| *v).collect();
    sorted.sort_by(f64::total_cmp);
    let median = *sorted.get(sorted.len() / 2)?;
    let widest = values
        .iter()
        .max_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(_, n)| n.clone())?;
    Some((median, widest))
}

/// The settings that differ between the runs (`buyers 200 → 50`), field by field.
pub fn settings_changes(a: &Settings, b: &Settings) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return Vec::new();
    };
    b.iter()
        .filter(|(k, v)| a.get(*k).is_some_and(|old| old != *v))
        .map(|(k, v)| format!("{k} {} → {v}", a[k]))
        .collect()
}

/// Whether `b` moved away from `a` beyond the noise: up (`Some(true)`), down (`Some(false)`)
/// or not (`None`).
pub fn moved(a: Range, b: Range, noise: f64) -> Option<bool> {
    if a.median <= 0.0 {
        return (b.median > 0.0).then_some(true);
    }
    let change = (b.median - a.median) / a.median;
    if change.abs() <= noise {
        return None;
    }
    if let (Some((amin, amax)), Some((bmin, bmax))) = (a.min_max, b.min_max)
        && bmin <= amax
        && amin <= bmax
    {
        return None;
    }
    Some(change > 0.0)
}

/// The flash-sale accounting's fields, by name.
pub fn fields(a: &Accounting) -> [(&'static str, i64); 8] {
    [
        ("initial_stock", a.initial_stock),
        ("final_stock", a.final_stock),
        ("units_sold", a.units_sold),
        ("orders", a.orders),
        ("oversell", a.oversell),
        ("lost_updates", a.lost_updates),
        ("negative_stock", a.negative_stock),
        ("undersell", a.undersell),
    ]
}

/// The accounting fields that differ; a field a strategy expected not to oversell must keep
/// at 0 that left it is a regression.
fn accounting_changes(a: &Sold, b: &Sold) -> Vec<FieldChange> {
    let expected_safe = b.strategy.safety != Safety::Unsafe;
    fields(&a.sale.accounting)
        .into_iter()
        .zip(fields(&b.sale.accounting))
        .filter(|((_, va), (_, vb))| va != vb)
        .map(|((field, va), (_, vb))| FieldChange {
            field,
            a: va,
            b: vb,
            regression: expected_safe && MUST_STAY_ZERO.contains(&field) && va == 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use app::api::Strategy;

    use super::*;
    use crate::report::comparison::render;
    use crate::sample::report;
    use crate::schema::Spread;

    fn range(median: f64, min_max: Option<(f64, f64)>) -> Range {
        Range { median, min_max }
    }

    /// The sample run with `conditional` at `rate` deductions/s (min–max ±5%) and the given
    /// oversell.
    fn run(rate: f64, oversell: i64) -> RunReport {
        let mut r = report();
        let c = &mut r.strategies[1];
        c.loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .successes_per_sec = rate;
        let spread = Spread::of(&[rate * 0.95, rate, rate * 1.05]).unwrap();
        c.loops.as_mut().unwrap().throughput.closed.repetitions =
            Some(crate::schema::Repetitions {
                runs: 3,
                attempts_per_sec: spread.clone(),
                successes_per_sec: spread.clone(),
                p99_us: spread,
            });
        c.sale.as_mut().unwrap().accounting.oversell = oversell;
        r
    }

    /// Figures of three rounds (their median is the middle one).
    fn rounds(rates: [f64; 3]) -> crate::schema::Repetitions {
        let spread = Spread::of(&rates).unwrap();
        crate::schema::Repetitions {
            runs: 3,
            attempts_per_sec: spread.clone(),
            successes_per_sec: spread.clone(),
            p99_us: spread,
        }
    }

    /// The sample run on `cpu`, with `naive`'s, `conditional`'s and the baseline's rounds.
    fn on(cpu: &str, naive: [f64; 3], conditional: [f64; 3], baseline: [f64; 3]) -> RunReport {
        let mut r = report();
        r.environment.cpu_model = Some(cpu.into());
        let set = |load: &mut LoadResult, rates: [f64; 3]| {
            load.repetitions = Some(rounds(rates));
            load.successes_per_sec = load.repetitions.as_ref().unwrap().successes_per_sec.median;
        };
        set(
            &mut r.strategies[0].loops.as_mut().unwrap().throughput.closed,
            naive,
        );
        set(
            &mut r.strategies[1].loops.as_mut().unwrap().throughput.closed,
            conditional,
        );
        set(&mut r.baselines[0].result, baseline);
        r
    }

    #[test]
    fn a_strategy_of_b_below_half_of_a_is_named_at_the_top_however_wide_its_rounds() {
        let a = on(
            "cpu",
            [950.0, 1000.0, 1050.0],
            [950.0, 1000.0, 1050.0],
            [1000.0; 3],
        );
        // `naive` at 0.4 of A, its rounds reaching past A's; `conditional` at 0.6.
        let mut b = on(
            "cpu",
            [300.0, 400.0, 1100.0],
            [550.0, 600.0, 650.0],
            [1000.0; 3],
        );
        b.started_at = "2026-11-22T00:00:00Z".into();
        let c = compare(&a, &b);
        let md = render(&c);
        let lines: Vec<&str> = md.lines().take(5).collect();
        assert_eq!(
            lines,
            [
                "# Comparison: 2026-11-21T00:00:00Z → 2026-11-22T00:00:00Z",
                "",
                "**Fell by more than half from run A:**",
                "",
                "- `naive` 400/s against 1000/s in 2026-11-21T00:00:00Z (0.40×; `sql-conditional` \
                 1.00× in the same two runs)",
            ],
            "{md}"
        );
        let top = &md[..md.find("Both runs on the same machine").unwrap()];
        assert!(!top.contains("`conditional`"), "{top}");
        let page = crate::report::html::render_comparison(&c);
        let at = page
            .find("<div class=\"warning\"><p><strong>Fell by more than half")
            .expect("a falls section");
        assert!(
            at < page.find("Both runs on the same machine").unwrap(),
            "{page}"
        );
        assert!(
            page[at..].contains("<code>naive</code> 400/s against 1000/s"),
            "{page}"
        );
        // From another machine, nothing is judged to have fallen.
        b.environment.cpu_model = Some("other cpu".into());
        assert!(compare(&a, &b).falls.is_empty());
    }

    #[test]
    fn runs_from_different_machines_show_their_rates_unjudged_and_judge_order_and_ratios() {
        let xeon = on(
            "Intel(R) Xeon(R)",
            [95.0, 100.0, 105.0],
            [390.0, 400.0, 410.0],
            [990.0, 1000.0, 1010.0],
        );
        // Everything twice as fast: the same order, the same ratios.
        let epyc = on(
            "AMD EPYC",
            [190.0, 200.0, 210.0],
            [780.0, 800.0, 820.0],
            [1980.0, 2000.0, 2020.0],
        );
        let c = compare(&xeon, &epyc);
        assert!(!c.machines.same());
        assert!(
            c.strategies
                .iter()
                .chain(&c.baselines)
                .all(|ch| ch.moved.is_none())
        );
        let ranking = c.ranking.clone().unwrap();
        assert_eq!((ranking.spearman, ranking.beyond_noise), (1.0, false));
        let conditional = c
            .strategies
            .iter()
            .find(|ch| ch.name == "conditional")
            .unwrap();
        let ratio = conditional.ratio.as_ref().unwrap();
        assert_eq!(
            (ratio.a.median, ratio.b.median, ratio.moved),
            (0.4, 0.4, None)
        );
        let md = render(&c);
        assert!(md.contains("**The runs come from different machines** (A: Intel(R) Xeon(R), 2 CPUs; B: AMD EPYC, 2 CPUs)"), "{md}");
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| `")).collect();
        assert!(rows.len() >= 5, "{md}");
        assert!(
            rows.iter().all(|l| !l.contains('▲') && !l.contains('▼')),
            "{md}"
        );
        // The same doubling on one machine is judged.
        let same = compare(
            &on(
                "AMD EPYC",
                [95.0, 100.0, 105.0],
                [390.0, 400.0, 410.0],
                [990.0, 1000.0, 1010.0],
            ),
            &epyc,
        );
        assert!(same.machines.same());
        assert!(
            same.strategies.iter().all(|ch| ch.moved == Some(true)),
            "{:?}",
            same.strategies
        );
    }

    #[test]
    fn a_ratio_to_the_own_baseline_is_judged_against_the_rounds_of_both() {
        let a = on(
            "cpu",
            [95.0, 100.0, 105.0],
            [390.0, 400.0, 410.0],
            [990.0, 1000.0, 1010.0],
        );
        // Conditional at 0.25 of its baseline instead of 0.4: apart from A's rounds.
        let b = on(
            "other cpu",
            [190.0, 200.0, 210.0],
            [490.0, 500.0, 510.0],
            [1980.0, 2000.0, 2020.0],
        );
        let c = compare(&a, &b);
        let conditional = c
            .strategies
            .iter()
            .find(|ch| ch.name == "conditional")
            .unwrap();
        assert_eq!(conditional.ratio.as_ref().unwrap().moved, Some(false));
        let row = render(&c)
            .lines()
            .find(|l| l.starts_with("| `conditional` | ") && l.contains("of `sql-conditional`"))
            .unwrap()
            .to_string();
        assert!(
            row.contains("**▼ 0.40 (0.39–0.41) → 0.25 (0.24–0.26) of `sql-conditional`**"),
            "{row}"
        );
        // Rounds that overlap are not a move.
        let near = on(
            "other cpu",
            [190.0, 200.0, 210.0],
            [700.0, 780.0, 900.0],
            [1980.0, 2000.0, 2020.0],
        );
        let c = compare(&a, &near);
        let conditional = c
            .strategies
            .iter()
            .find(|ch| ch.name == "conditional")
            .unwrap();
        assert_eq!(conditional.ratio.as_ref().unwrap().moved, None);
    }

    #[test]
    fn an_order_that_changed_more_than_its_rounds_do_is_beyond_noise() {
        let a = on(
            "cpu",
            [95.0, 100.0, 105.0],
            [390.0, 400.0, 410.0],
            [1000.0; 3],
        );
        let swapped = on(
            "cpu",
            [500.0, 510.0, 520.0],
            [390.0, 400.0, 410.0],
            [1000.0; 3],
        );
        let c = compare(&a, &swapped);
        let ranking = c.ranking.clone().unwrap();
        assert_eq!(
            ranking.within_run,
            Some(1.0),
            "every round ranks them alike"
        );
        assert_eq!((ranking.spearman, ranking.beyond_noise), (-1.0, true));
        let naive = c.strategies.iter().find(|ch| ch.name == "naive").unwrap();
        assert_eq!(naive.rank.as_ref().unwrap().moved, Some(true));
        assert!(render(&c).contains("**the order changed beyond noise**"));
        // Rounds that disagree with each other make the same swap noise.
        let unsure = on(
            "cpu",
            [95.0, 100.0, 450.0],
            [390.0, 400.0, 410.0],
            [1000.0; 3],
        );
        let ranking = compare(&unsure, &swapped).ranking.unwrap();
        assert!(!ranking.beyond_noise, "{ranking:?}");
    }

    #[test]
    fn correctness_changes_come_first_and_regressions_before_the_rest() {
        let a = run(100.0, 0);
        let mut b = run(100.0, 2);
        b.strategies[1].sale.as_mut().unwrap().accounting.undersell = 5;
        b.strategies[0]
            .sale
            .as_mut()
            .unwrap()
            .accounting
            .lost_updates += 1;
        let c = compare(&a, &b);
        let listed: Vec<(&str, &str, bool)> = c
            .correctness
            .iter()
            .map(|x| (x.strategy.as_str(), x.field, x.regression))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("conditional", "oversell", true),
                ("naive", "lost_updates", false),
                ("conditional", "undersell", false),
            ]
        );
        let md = render(&c);
        let at = |text: &str| md.find(text).unwrap_or_else(|| panic!("no {text}:\n{md}"));
        assert!(at("## Correctness") < at("## What another run can reproduce"));
        assert!(at("- `conditional`: undersell 0 → 5") < at("## Strategies"));
    }

    #[test]
    fn a_change_counts_only_beyond_the_noise_and_with_ranges_apart() {
        assert_eq!(moved(range(100.0, None), range(115.0, None), 0.2), None);
        assert_eq!(
            moved(range(100.0, None), range(130.0, None), 0.2),
            Some(true)
        );
        assert_eq!(
            moved(range(100.0, None), range(70.0, None), 0.2),
            Some(false)
        );
        let overlapping = moved(
            range(100.0, Some((90.0, 140.0))),
            range(130.0, Some((120.0, 150.0))),
            0.2,
        );
        assert_eq!(overlapping, None);
        let apart = moved(
            range(100.0, Some((90.0, 110.0))),
            range(130.0, Some((120.0, 150.0))),
            0.2,
        );
        assert_eq!(apart, Some(true));
    }

    #[test]
    fn noise_is_the_median_baseline_range_or_else_the_median_baseline_change() {
        let with_ranges = |r: f64| {
            vec![(
                "http-noop".to_string(),
                Figures {
                    rate: range(1000.0, Some((1000.0 * (1.0 - r), 1000.0 * (1.0 + r)))),
                    p99_ms: 1.0,
                    p99_open_ms: None,
                },
            )]
        };
        let n = noise(&with_ranges(0.05), &with_ranges(0.05));
        assert!((n.fraction - 0.1).abs() < 1e-9, "{n:?}");
        assert!(
            matches!(n.source, NoiseSource::Ranges { figures: 2, .. }),
            "{n:?}"
        );
        let without = |median: f64| {
            vec![(
                "http-noop".to_string(),
                Figures {
                    rate: range(median, None),
                    p99_ms: 1.0,
                    p99_open_ms: None,
                },
            )]
        };
        assert!((noise(&without(1000.0), &without(1300.0)).fraction - 0.3).abs() < 1e-9);
        assert_eq!(
            noise(&without(1000.0), &without(1000.0)).fraction,
            MIN_NOISE
        );
        assert_eq!(noise(&[], &[]).fraction, DEFAULT_NOISE);
    }

    #[test]
    fn differing_settings_are_named_in_a_warning() {
        let (a, mut b) = (run(100.0, 0), run(100.0, 0));
        b.settings.buyers = 50;
        b.settings.quick = false;
        let c = compare(&a, &b);
        assert_eq!(
            c.settings_changed,
            vec![
                "buyers 10 → 50".to_string(),
                "quick true → false".to_string()
            ]
        );
        assert!(render(&c).contains("**The runs' settings differ** (buyers 10 → 50"));
    }

    #[test]
    fn a_safe_strategy_that_starts_to_oversell_is_always_flagged() {
        let c = compare(&run(100.0, 0), &run(100.0, 1));
        assert_eq!(
            c.regressions,
            vec![Regression {
                strategy: Strategy::Conditional.to_string(),
                field: "oversell",
                b: 1
            }]
        );
        let md = render(&c);
        assert!(
            md.contains("- **`conditional`** (expected not to oversell): oversell 0 → 1"),
            "{md}"
        );
        assert!(md.contains("**oversell 0 → 1 (correctness)**"), "{md}");
        let clean = render(&compare(&run(100.0, 0), &run(100.0, 0)));
        assert!(clean.contains("No strategy expected to be safe"), "{clean}");
        // `naive` oversold in both runs, and is not expected to be safe anyway.
        let mut b = run(100.0, 0);
        b.strategies[0].sale.as_mut().unwrap().accounting.oversell += 5;
        assert!(compare(&run(100.0, 0), &b).regressions.is_empty());
    }

    #[test]
    fn the_rendering_marks_moves_beyond_noise_and_lists_every_baseline_and_strategy() {
        let md = render(&compare(&run(100.0, 0), &run(200.0, 0)));
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional`") && l.contains("(95–105)"))
            .unwrap();
        assert!(row.contains("**▲ +100%**"), "{row}");
        assert!(row.contains("| 100 (95–105) | 200 (190–210) |"), "{row}");
        assert!(row.contains("| same |"), "{row}");
        let md = render(&compare(&run(100.0, 0), &run(102.0, 0)));
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional`") && l.contains("(97–107)"))
            .unwrap_or_else(|| panic!("{md}"));
        assert!(row.contains("| +2% |"), "{row}");
        assert!(md.contains("`sql-conditional`"), "{md}");
        assert!(md.contains("`naive`"), "{md}");
    }
}
