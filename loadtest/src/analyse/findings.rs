//! What the figures of a run say, computed once into [`Findings`] (stored in `report.json`
//! and rendered by `report::prose`): what went wrong in each strategy's sale and what its
//! safety class makes of it, where each strategy's time went, whether a baseline's figure is
//! the server's or our generator's beside its standard tool, and whether our client could be
//! the ceiling of the HTTP figures, and each phase's own (judged by the phase, see
//! [`crate::phase`]). Decisions (saturated, CPU-bound, at par) are made here, from thresholds
//! named here; the prose only words them.

use app::api::Safety;
use app::metrics::Stage;

use crate::schema::{
    Baseline, BaselineName, BelowBaseline, ClientCheck, CpuUse, DoorRefused, Findings, GROUPS,
    GroupCpu, GroupWait, MachineLoad, Pace, Peer, RunReport, SaleFinding, SaleReading, ServerCpu,
    Sold, StagePart, StageTime, StageTimes, StandardTool, TimeFinding, ToolComparison, ToolFinding,
    ToolReading, ToolStatus, ToolVerdict, WaitedIn,
};

/// Machine busier than this share of its cores counts as CPU-bound.
const BUSY_SHARE: f64 = 0.9;
/// A CPU group below this many CPU-seconds per 1,000 deductions is left out of the note.
const NOTEWORTHY_CPU: f64 = 0.005;
/// The least wait for a core, in cores, a group's is worth naming for: a twentieth of one.
const NOTEWORTHY_WAIT: f64 = 0.05;
/// Programs outside the run taking less than this many cores are not mentioned.
const NOTEWORTHY_REST: f64 = 0.05;
/// Cores the tool kept busy beyond ours, as a share of the machine, that count as "idle under
/// ours".
const IDLE_SHARE: f64 = 0.1;
/// Below this share of the fastest peer's rate, our client may be the ceiling.
const CLIENT_PAR: f64 = 0.8;

/// Every finding of `report` (whose own findings are ignored).
pub fn of(report: &RunReport) -> Findings {
    let cpus = report.environment.cpus.max(1);
    Findings {
        sales: report
            .sold()
            .filter(|s| s.strategy.safety != Safety::Safe || s.sale.accounting.is_incorrect())
            .map(|s| sale(&s))
            .collect(),
        time: report
            .sold()
            .filter_map(|s| time(report, &s, cpus))
            .collect(),
        tools: report
            .baselines
            .iter()
            .filter_map(|b| {
                let t = b.standard_tool.as_ref()?;
                Some(ToolFinding {
                    baseline: b.name,
                    tool: t.tool.clone(),
                    verdict: tool(b.name, b, t, cpus, &report.environment.generator_build),
                })
            })
            .collect(),
        client: client(report),
        ..Findings::default()
    }
}

fn sale(s: &Sold) -> SaleFinding {
    let a = &s.sale.accounting;
    let o = &s.sale.outcomes;
    let incorrect = a.is_incorrect();
    let clean = !incorrect && a.undersell == 0;
    let reading = match (s.strategy.safety, incorrect) {
        (Safety::Unsafe, false) if clean => SaleReading::UnsafeNoAnomaly,
        (Safety::WhileLeasesHold, false) if clean => SaleReading::LeasesHeld,
        (Safety::WhileLeasesHold, true) => SaleReading::LeaseRanOut,
        (Safety::Safe, true) => SaleReading::SafeBroken,
        _ => SaleReading::AsMeasured,
    };
    SaleFinding {
        strategy: s.strategy.name,
        safety: s.strategy.safety,
        oversell_percent: (a.oversell > 0)
            .then(|| 100.0 * a.oversell as f64 / a.initial_stock.max(1) as f64),
        counter_went_down_by: a.initial_stock - a.final_stock,
        demand_units: s.sale.requests as i64 * s.sale.quantity,
        turned_away: s.sale.turned_away(),
        errors: o.errors(),
        acknowledged_mismatch: s.sale.acknowledged_minus_orders != 0,
        reading,
    }
}

fn time(report: &RunReport, s: &Sold, cpus: usize) -> Option<TimeFinding> {
    let cpu = s.cpu.as_ref()?;
    let cpu_per_1000 = GROUPS
        .iter()
        .filter_map(|(group, _)| {
            let (per_1000, _) = cpu.group(group)?;
            let per_1000 = per_1000.filter(|v| *v >= NOTEWORTHY_CPU)?;
            Some(GroupCpu {
                group: (*group).to_string(),
                per_1000,
            })
        })
        .collect();
    let machine = cpu.machine_busy_cores.map(|m| 100.0 * m / cpus as f64);
    let pace = match (
        &cpu.saturated,
        cpu.ready_throughout(),
        cpu.busiest(),
        machine,
    ) {
        (Some(name), _, Some((_, cores)), _) => Pace::Saturated {
            process: name.clone(),
            cores,
        },
        (None, Some(server), ..) => Pace::ReadyThroughout {
            process: server.process.clone(),
            running: server.busy_cores,
            waiting: server.waiting_cores.unwrap_or_default(),
            per_purchase_us: server.per_1000_successes.map(|s| 1000.0 * s),
        },
        (None, None, _, Some(pct)) if pct >= 100.0 * BUSY_SHARE => Pace::MachineBusy {
            cpus,
            busy_percent: pct,
            rest_of_machine_cores: cpu.rest_of_machine_cores.unwrap_or(0.0),
        },
        (None, None, Some((name, cores)), machine) => Pace::Waiting {
            busiest: name.to_string(),
            cores,
            machine_busy_percent: machine,
            waited_in: (s.stages.as_ref().and_then(waited_in)).map(|mut w| {
                if let Some(part) = &mut w.of_which
                    && part.stage == Stage::Commit.name()
                {
                    part.disk_flush_p50_us = report.environment.disk_flush.map(|f| f.p50_us);
                }
                w
            }),
            waited_for_a_core: waited_for_a_core(cpu),
        },
        _ => Pace::Unknown,
    };
    Some(TimeFinding {
        strategy: s.strategy.name,
        deductions_per_sec: s.throughput.closed.successes_per_sec,
        cpu_per_1000,
        pace,
        below_baseline: below_baseline(report, s),
    })
}

/// The groups whose threads waited for a core for a noteworthy share of the time, most first.
fn waited_for_a_core(cpu: &CpuUse) -> Vec<GroupWait> {
    let mut waits: Vec<GroupWait> = (GROUPS.iter())
        .filter_map(|(group, _)| {
            let cores = cpu.waiting(group).filter(|w| *w >= NOTEWORTHY_WAIT)?;
            Some(GroupWait {
                group: (*group).to_string(),
                cores,
                running: cpu.group(group)?.1,
            })
        })
        .collect();
    waits.sort_by(|a, b| b.cores.total_cmp(&a.cores));
    waits
}

/// Where the purchases of `times` spent the most of their time in the service, per purchase
/// answered: the longest of the door, the strategy's own stages (the strategy as a whole when it
/// times none of its own) and what is left beyond the door and the strategy; with the longest
/// part of it timed on its own (a batch's look-up, stock `UPDATE`, orders' `INSERT` or
/// `COMMIT`), if any. A part is never a candidate itself.
fn waited_in(times: &StageTimes) -> Option<WaitedIn> {
    if times.purchases == 0 || times.mean_us <= 0.0 {
        return None;
    }
    let answered = times.purchases as f64;
    let per_purchase = |t: &StageTime| t.mean_us * t.purchases as f64 / answered;
    let (door, whole) = (Stage::Admission.name(), Stage::Strategy.name());
    let part_of = |name: &str| Stage::named(name).and_then(Stage::part_of);
    let own: Vec<(&str, f64)> = (times.stages.iter())
        .filter(|t| t.stage != door && t.stage != whole && part_of(&t.stage).is_none())
        .map(|t| (t.stage.as_str(), per_purchase(t)))
        .collect();
    let timed = |name: &str| {
        (times.stages.iter())
            .find(|t| t.stage == name)
            .map(per_purchase)
    };
    let (admission, strategy) = (timed(door).unwrap_or(0.0), timed(whole).unwrap_or(0.0));
    let mut candidates = vec![
        (door, admission),
        (OUTSIDE, (times.mean_us - admission - strategy).max(0.0)),
    ];
    match own.is_empty() {
        true => candidates.push((whole, strategy)),
        false => candidates.extend(own),
    }
    let (stage, mean_us) = candidates.into_iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let of_which = (times.stages.iter())
        .filter(|t| part_of(&t.stage).is_some_and(|whole| whole.name() == stage))
        .max_by(|a, b| per_purchase(a).total_cmp(&per_purchase(b)))
        .map(|t| StagePart {
            stage: t.stage.clone(),
            mean_us: per_purchase(t),
            disk_flush_p50_us: None,
        });
    Some(WaitedIn {
        stage: stage.to_owned(),
        mean_us,
        share_percent: 100.0 * mean_us / times.mean_us,
        of_which,
    })
}

/// [`WaitedIn::stage`] for the time beyond the door and the strategy.
pub const OUTSIDE: &str = "outside";

fn below_baseline(report: &RunReport, s: &Sold) -> Option<BelowBaseline> {
    let percent = s.percent_of_backend_baseline?;
    if percent >= BelowBaseline::THRESHOLD_PERCENT {
        return None;
    }
    let base = &report.baseline(s.baseline)?.result;
    let closed = &s.throughput.closed;
    let o = &closed.outcomes;
    let unsold = o.total() - o.created - o.replayed;
    Some(BelowBaseline {
        percent,
        baseline: s.baseline,
        ours_per_sec: closed.successes_per_sec,
        baseline_per_sec: base.successes_per_sec,
        concurrency: closed.concurrency,
        p50_us: closed.latency.p50_us,
        baseline_p50_us: base.latency.p50_us,
        noop: report
            .baseline(BaselineName::HttpNoop)
            .map(|n| (n.result.latency.p50_us, n.result.attempts_per_sec)),
        unsold_percent: (unsold > 0).then(|| 100.0 * unsold as f64 / o.total().max(1) as f64),
        door: closed.door_percent().map(|percent| DoorRefused {
            percent,
            budget_ms: report.settings.latency_budget_ms,
        }),
    })
}

fn tool(
    name: BaselineName,
    b: &Baseline,
    t: &StandardTool,
    cpus: usize,
    generator_build: &str,
) -> ToolVerdict {
    let (Some(theirs), Some(pct)) = (&t.per_sec, t.ours_percent) else {
        return match t.status {
            ToolStatus::NotInstalled => ToolVerdict::NotInstalled,
            _ => ToolVerdict::Failed {
                error: t
                    .error
                    .as_deref()
                    .unwrap_or("no output")
                    .chars()
                    .take(300)
                    .collect(),
            },
        };
    };
    let cpus_f = cpus as f64;
    let group = name.server_group();
    let (ours_cpu, theirs_cpu) = (b.cpu.as_ref(), t.cpu.as_ref());
    let generator = ours_cpu.and_then(|c| c.group("generator")?.0);
    let server_of = |c: Option<&CpuUse>| c.and_then(|c| c.group(group));
    let server = match (server_of(ours_cpu), server_of(theirs_cpu)) {
        (Some((Some(so), co)), Some((Some(st), ct))) => Some(ServerCpu {
            group: group.to_string(),
            ours_per_1000: so,
            ours_cores: co,
            theirs_per_1000: st,
            theirs_cores: ct,
        }),
        _ => None,
    };
    let per_operation = match (&server, generator, t.tool_cpu_per_1000) {
        (Some(s), Some(g), Some(tc)) => Some((g + s.ours_per_1000, tc + s.theirs_per_1000)),
        _ => None,
    };
    let busy = |c: Option<&CpuUse>| c.and_then(|c| c.machine_busy_cores);
    let machine = busy(ours_cpu)
        .zip(busy(theirs_cpu))
        .map(|(mo, mt)| MachineLoad {
            cpus,
            ours_busy_percent: 100.0 * mo / cpus_f,
            theirs_busy_percent: 100.0 * mt / cpus_f,
            rest_of_machine_cores: ours_cpu
                .and_then(|c| c.rest_of_machine_cores)
                .filter(|r| *r >= NOTEWORTHY_REST),
        });
    let reading = if pct >= ToolFinding::PAR_PERCENT {
        ToolReading::AtPar
    } else {
        match &machine {
            None => ToolReading::Unknown,
            Some(m) if m.ours_busy_percent >= 100.0 * BUSY_SHARE => ToolReading::CpuBound {
                per_operation,
                predicted_percent: per_operation
                    .filter(|_| m.theirs_busy_percent >= 100.0 * BUSY_SHARE)
                    .map(|(ours, theirs)| 100.0 * theirs / ours),
                debug_generator: generator_build == "debug",
            },
            Some(m) if m.theirs_busy_percent - m.ours_busy_percent >= 100.0 * IDLE_SHARE => {
                ToolReading::GeneratorIdle
            }
            Some(_) => ToolReading::NotCpuBound { per_operation },
        }
    };
    ToolVerdict::Measured(ToolComparison {
        ours_per_sec: b.result.headline(),
        theirs_per_sec: theirs.median,
        ours_percent: pct,
        generator_cpu_per_1000: generator,
        tool_cpu_per_1000: t.tool_cpu_per_1000,
        server,
        machine,
        reading,
    })
}

/// How the benchmark's own client compares with goose and, where it ran, `wrk` on the same
/// no-op: the verdict follows the faster peer, since a client slower than `wrk` cannot claim
/// the server sets the ceiling because it beats goose. `None` without both the no-op and goose
/// baselines.
fn client(report: &RunReport) -> Option<ClientCheck> {
    let noop = report.baseline(BaselineName::HttpNoop)?;
    let ours = noop.result.attempts_per_sec;
    let goose = report
        .baseline(BaselineName::GooseNoop)?
        .result
        .attempts_per_sec;
    if goose <= 0.0 {
        return None;
    }
    let mut peers = vec![("goose".to_string(), goose)];
    if let Some(tool) = &noop.standard_tool
        && let Some(rate) = tool.per_sec.as_ref().map(|s| s.median)
        && rate > 0.0
    {
        peers.push((tool.tool.clone(), rate));
    }
    let fastest = peers.iter().map(|(_, rate)| *rate).fold(0.0, f64::max);
    Some(ClientCheck {
        ours_per_sec: ours,
        peers: peers
            .into_iter()
            .map(|(name, per_sec)| Peer {
                name,
                per_sec,
                ours_percent: 100.0 * ours / per_sec,
            })
            .collect(),
        client_may_be_ceiling: ours < CLIENT_PAR * fastest,
    })
}

#[cfg(test)]
mod tests {
    use app::api::{ErrorCode, Strategy};

    use super::*;
    use crate::measure::cpu::{Process, Span};
    use crate::measure::tools::{Outcome, Runs};
    use crate::report::prose;
    use crate::sample::report;

    #[test]
    fn only_the_unsafe_strategy_that_oversold_gets_a_sale_finding_with_its_figures() {
        let r = report();
        let findings = of(&r);
        assert_eq!(findings.sales.len(), 1, "{:?}", findings.sales);
        let f = &findings.sales[0];
        assert_eq!(f.strategy, Strategy::Naive);
        assert_eq!(f.oversell_percent, Some(37.0));
        assert_eq!(f.counter_went_down_by, 80);
        assert_eq!(f.reading, SaleReading::AsMeasured);
        let naive = r.strategy(Strategy::Naive).unwrap();
        assert_eq!(naive.sale.accounting.lost_updates, 57);
        let p = prose::sale(&naive, f, r.settings.instances);
        assert!(p.contains("oversold by 37 unit(s)"), "{p}");
        assert!(p.contains("**57 decrement(s) were lost**"), "{p}");
    }

    #[test]
    fn a_waiting_strategy_waited_in_its_longest_stage_or_at_the_door_or_outside() {
        let stage = |stage: &str, purchases: u64, mean_us: f64| StageTime {
            stage: stage.into(),
            purchases,
            mean_us,
        };
        let times = |stages: Vec<StageTime>| StageTimes {
            purchases: 100,
            mean_us: 1_000.0,
            stages,
        };
        // Half the purchases waited 1,200 µs at the door: 600 µs per purchase answered.
        let door = times(vec![
            stage("admission", 50, 1_200.0),
            stage("strategy", 100, 300.0),
        ]);
        let at_door = waited_in(&door).unwrap();
        assert_eq!(
            (at_door.stage.as_str(), at_door.mean_us),
            ("admission", 600.0)
        );
        // No stage of its own: the strategy as a whole.
        let whole = times(vec![
            stage("admission", 100, 100.0),
            stage("strategy", 100, 800.0),
        ]);
        assert_eq!(waited_in(&whole).unwrap().stage, "strategy");
        // Its own stages, not the strategy that holds them.
        let queued = times(vec![
            stage("strategy", 100, 900.0),
            stage("queued", 100, 700.0),
            stage("batch", 100, 200.0),
        ]);
        assert_eq!(waited_in(&queued).unwrap().stage, "queued");
        // A part is named with its stage, never in its place: the batch's `COMMIT`.
        let committing = times(vec![
            stage("strategy", 100, 900.0),
            stage("queued", 100, 100.0),
            stage("batch", 100, 800.0),
            stage("stock_update", 100, 90.0),
            stage("commit", 100, 700.0),
        ]);
        let batch = waited_in(&committing).unwrap();
        assert_eq!(
            (batch.stage.as_str(), batch.of_which),
            (
                "batch",
                Some(StagePart {
                    stage: "commit".into(),
                    mean_us: 700.0,
                    disk_flush_p50_us: None,
                })
            )
        );
        let no_part = waited_in(&queued).unwrap();
        assert_eq!(no_part.of_which, None);
        // Most of the time beyond the door and the strategy.
        let outside = times(vec![
            stage("admission", 100, 100.0),
            stage("strategy", 100, 200.0),
        ]);
        let rest = waited_in(&outside).unwrap();
        assert_eq!((rest.stage.as_str(), rest.share_percent), (OUTSIDE, 70.0));
        assert_eq!(waited_in(&times(vec![])).unwrap().stage, OUTSIDE);
        let none = StageTimes {
            purchases: 0,
            ..times(vec![])
        };
        assert_eq!(waited_in(&none), None);
    }

    #[test]
    fn ratios_to_the_backend_baseline_come_from_the_same_run() {
        let r = report();
        let p = r.strategies[1]
            .loops
            .as_ref()
            .unwrap()
            .percent_of_backend_baseline
            .unwrap();
        assert!((p - 40.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn the_pace_is_the_saturated_process_or_else_waiting() {
        let processes = vec![
            Process::new("app-0", "app", 1),
            Process::new("mariadbd", "mariadbd", 2),
            Process::new("generator", "generator", 3),
        ];
        let span = |db: f64| Span {
            wall_seconds: 10.0,
            cpu_seconds: vec![Some(2.0), Some(db), Some(1.0)],
            // The app's threads waited for a core 3 s of 10, mariadbd's too little to name, the
            // generator's not read.
            waited_seconds: vec![Some(3.0), Some(0.2), None],
            machine_cpu_seconds: Some(12.0),
            successes: 4000.0,
        };
        let mut r = report();
        r.strategies[0].loops.as_mut().unwrap().cpu = Some(span(3.0).usage(&processes));
        r.strategies[1].loops.as_mut().unwrap().cpu = Some(span(9.5).usage(&processes));
        let time = of(&r).time;
        assert_eq!(time.len(), 2, "{time:?}");
        assert_eq!(
            time[1].pace,
            Pace::Saturated {
                process: "mariadbd".into(),
                cores: 0.95
            }
        );
        let mariadb = time[1].cpu_per_1000.iter().find(|g| g.group == "mariadbd");
        assert_eq!(mariadb.map(|g| g.per_1000), Some(2.375));
        assert!(matches!(&time[0].pace, Pace::Waiting { busiest, .. } if busiest == "mariadbd"));
        // The sample's purchases spend 1,500 of their 2,500 µs waiting for the lock.
        let Pace::Waiting {
            waited_in,
            waited_for_a_core,
            ..
        } = &time[0].pace
        else {
            unreachable!("waiting, asserted above")
        };
        assert_eq!(
            waited_for_a_core,
            &vec![GroupWait {
                group: "app".into(),
                cores: 0.3,
                running: 0.2,
            }]
        );
        assert_eq!(
            waited_in,
            &Some(WaitedIn {
                stage: "lock_wait".into(),
                mean_us: 1_500.0,
                share_percent: 60.0,
                of_which: None,
            })
        );
        let words = prose::time(&r.strategies[0].sold().unwrap(), &time[0]);
        assert!(
            words.contains("60% of a purchase's time in the service (1500 µs) went to waiting for the strategy's lock"),
            "{words}"
        );
        assert!(
            words.contains(
                "Ready to run, its processes still waited for a core: the app instances 0.30 \
                 beside 0.20 running (seconds per second"
            ),
            "{words}"
        );
        let below = time[1]
            .below_baseline
            .as_ref()
            .expect("40% of its baseline");
        assert_eq!(
            (below.baseline, below.concurrency),
            (BaselineName::SqlConditional, 10)
        );
    }

    #[test]
    fn a_single_threaded_server_ready_to_run_throughout_sets_the_pace_with_no_core_saturated() {
        let processes = vec![
            Process::new("app-0", "app", 1),
            Process::new("redis-server", "redis-server", 2),
            Process::new("generator", "generator", 3),
        ];
        // Redis ran half a core and waited 0.45 of one (ready 95% of the time), or 0.3 of one.
        let span = |redis_waited: f64| Span {
            wall_seconds: 10.0,
            cpu_seconds: vec![Some(6.0), Some(5.0), Some(1.0)],
            waited_seconds: vec![Some(2.0), Some(redis_waited), None],
            machine_cpu_seconds: Some(14.0),
            successes: 100_000.0,
        };
        let mut r = report();
        r.strategies[0].loops.as_mut().unwrap().cpu = Some(span(4.5).usage(&processes));
        r.strategies[1].loops.as_mut().unwrap().cpu = Some(span(3.0).usage(&processes));
        let time = of(&r).time;
        assert_eq!(
            time[0].pace,
            Pace::ReadyThroughout {
                process: "redis-server".into(),
                running: 0.5,
                waiting: 0.45,
                per_purchase_us: Some(50.0),
            }
        );
        assert!(
            matches!(&time[1].pace, Pace::Waiting { busiest, .. } if busiest == "app-0"),
            "ready 80% of the time is not throughout: {:?}",
            time[1].pace
        );
        let words = prose::time(&r.strategies[0].sold().unwrap(), &time[0]);
        assert!(
            words.contains(
                "`redis-server` was saturated counting its wait for a core: its one thread was \
                 on a core 0.50 of the time and waited 0.45 more for one — ready to run 95% of \
                 the time, and on a core 53% of that."
            ),
            "{words}"
        );
        assert!(
            words.contains("would bound the rate at about 20000 purchases/s (a projection"),
            "{words}"
        );
    }

    #[test]
    fn attempts_refused_at_the_door_are_told_apart_from_those_that_waited_out_their_budget() {
        let processes = vec![Process::new("mariadbd", "mariadbd", 1)];
        let span = Span {
            wall_seconds: 10.0,
            cpu_seconds: vec![Some(1.0)],
            machine_cpu_seconds: Some(4.0),
            successes: 4000.0,
            ..Span::default()
        };
        let mut r = report();
        r.settings.latency_budget_ms = Some(200);
        let loops = r.strategies[1].loops.as_mut().unwrap();
        loops.cpu = Some(span.usage(&processes));
        // 400 sold, 3,500 refused at the door, 100 that waited out their lock's budget.
        let refused = |code, n| (0..n).map(move |_| testkit::Answer::Refused { status: 503, code });
        for answer in refused(ErrorCode::Overloaded, 3_500).chain(refused(ErrorCode::Busy, 100)) {
            loops.throughput.closed.outcomes.count(&answer);
        }
        let time = of(&r).time;
        let below = (time.iter())
            .find(|t| t.strategy == r.strategies[1].strategy.name)
            .and_then(|t| t.below_baseline.clone())
            .expect("40% of its baseline");
        assert_eq!(below.unsold_percent, Some(90.0));
        assert_eq!(
            below.door,
            Some(DoorRefused {
                percent: 87.5,
                budget_ms: Some(200),
            })
        );
        r.strategies[1]
            .loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .outcomes = Default::default();
        let time = of(&r).time;
        let below = (time.iter())
            .find(|t| t.strategy == r.strategies[1].strategy.name)
            .and_then(|t| t.below_baseline.clone())
            .expect("40% of its baseline");
        assert_eq!(below.door, None);
    }

    #[test]
    fn a_baseline_below_its_standard_tool_gets_the_measured_reason_and_a_missing_tool_says_so() {
        let processes = vec![
            Process::new("mariadbd", "mariadbd", 1),
            Process::new("generator", "generator", 2),
        ];
        let usage = |db: f64, generator: f64, successes: f64, machine: f64| {
            Span {
                wall_seconds: 10.0,
                cpu_seconds: vec![Some(db), Some(generator)],
                machine_cpu_seconds: Some(machine),
                successes,
                ..Span::default()
            }
            .usage(&processes)
        };
        let mut r = report();
        let mut runs = Runs::default();
        runs.push(
            "mysqlslap",
            "mysqlslap …".into(),
            Outcome::Measured {
                per_sec: 2000.0,
                operations: 20_000.0,
                cpu_seconds: Some(1.0),
            },
        );
        let mut tool = runs.summary(1000.0).unwrap();
        tool.cpu = Some(usage(9.0, 0.0, 20_000.0, 19.5));
        r.baselines[0].cpu = Some(usage(5.0, 9.0, 10_000.0, 19.5));
        r.baselines[0].standard_tool = Some(tool);
        let f = &of(&r).tools[0];
        let ToolVerdict::Measured(c) = &f.verdict else {
            panic!("{f:?}")
        };
        assert_eq!(c.ours_percent, 50.0);
        assert_eq!(
            (c.generator_cpu_per_1000, c.tool_cpu_per_1000),
            (Some(0.9), Some(0.05))
        );
        // (0.45 + 0.05) / (0.5 + 0.9) of the tool's rate.
        let ToolReading::CpuBound {
            predicted_percent: Some(predicted),
            ..
        } = c.reading
        else {
            panic!("{c:?}")
        };
        assert!((predicted - 100.0 * 0.5 / 1.4).abs() < 1e-9, "{predicted}");
        let p = prose::tool(f);
        assert!(
            p.contains("predicts ours at 36% of `mysqlslap`'s (measured: 50%)"),
            "{p}"
        );
        let md = crate::document::markdown(&r);
        assert!(md.contains("| `sql-conditional` | 1000 | `mysqlslap` | 2000 | 50% | 0.900 / 0.050 | 0.500 / 0.450 |"), "{md}");

        r.baselines[0].cpu = Some(usage(5.0, 9.0, 10_000.0, 12.0));
        r.baselines[0].standard_tool.as_mut().unwrap().cpu = Some(usage(9.0, 0.0, 20_000.0, 12.0));
        let ToolVerdict::Measured(c) = &of(&r).tools[0].verdict else {
            panic!()
        };
        assert!(
            matches!(c.reading, ToolReading::NotCpuBound { .. }),
            "{c:?}"
        );

        let mut missing = Runs::default();
        missing.push("mysqlslap", "mysqlslap".into(), Outcome::NotInstalled);
        r.baselines[0].standard_tool = missing.summary(1000.0);
        assert_eq!(of(&r).tools[0].verdict, ToolVerdict::NotInstalled);
        assert!(crate::document::markdown(&r).contains("| `mysqlslap` | not installed | – |"));
    }
}
