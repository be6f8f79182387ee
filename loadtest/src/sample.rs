//! A small run's report, for the tests of the renderings and the analyses: two strategies
//! (`naive`, which oversold, and `conditional`), one baseline.

use std::collections::BTreeMap;
use std::time::Duration;

use app::accounting::{Accounting, Ledger};
use app::api::{Strategy, StrategyInfo};
use testkit::Outcomes;

use crate::drive::latency::Latencies;
use crate::schema::world::World;
use crate::schema::{
    Baseline, BaselineName, ByPhase, Environment, Findings, LoadResult, Loop, OPEN_RATE_SHARE, Of,
    RunReport, SCHEMA_VERSION, SaleResult, Settings, StageTime, StageTimes, StrategyReport,
    ThroughputResult,
};

/// A run result of `per_sec` deductions in one second, latencies 1–50 ms.
pub fn load(mode: Loop, per_sec: u64) -> LoadResult {
    let mut l = Latencies::default();
    for ms in 1..=50 {
        l.record(Duration::from_millis(ms));
    }
    let outcomes = Outcomes {
        created: per_sec,
        ..Outcomes::default()
    };
    l.result(mode, 10, 1.0, outcomes, 0)
}

/// The `sql-conditional` baseline at 1,000 deductions/s.
pub fn baseline() -> Baseline {
    Baseline {
        name: BaselineName::SqlConditional,
        what: "test".into(),
        result: load(Loop::Closed, 1000),
        cpu: None,
        standard_tool: None,
        paired_percent: None,
    }
}

/// `strategy`'s report: a sale of 100 units to 500 requests ending in `ledger`, 400 closed-loop
/// deductions/s.
pub fn strategy(strategy: Strategy, ledger: Ledger) -> StrategyReport {
    let sale = SaleResult {
        requests: 500,
        buyers: 10,
        quantity: 1,
        seconds: 1.0,
        outcomes: Outcomes {
            created: ledger.orders as u64,
            ..Outcomes::default()
        },
        accounting: Accounting::of(ledger, 500),
        acknowledged_minus_orders: 0,
        retries: None,
        latency: Latencies::default().summary(),
        drain_seconds: None,
        door_retries: 0,
    };
    let throughput = ThroughputResult {
        closed: load(Loop::Closed, 400),
        open: load(Loop::Open { target_rate: 280.0 }, 280),
    };
    let mut loops = crate::analyse::ratios::loops(strategy, throughput, &[baseline()], None);
    loops.stages = Some(stages());
    StrategyReport {
        sale: Some(sale),
        loops: Some(loops),
        ..StrategyReport::of(StrategyInfo::of(strategy))
    }
}

/// A phase's result with the strategy it belongs to, as a test makes one; it reads as the
/// result, and [`Tagged::of`] gives it as the report's readers take it.
#[derive(Debug, Clone)]
pub struct Tagged<T> {
    pub strategy: StrategyInfo,
    pub result: T,
}

impl<T> Tagged<T> {
    pub fn new(strategy: Strategy, result: T) -> Tagged<T> {
        Tagged {
            strategy: StrategyInfo::of(strategy),
            result,
        }
    }

    /// The result as the report's readers take it.
    pub fn of(&self) -> Of<'_, T> {
        Of {
            strategy: &self.strategy,
            result: &self.result,
        }
    }
}

impl<T> std::ops::Deref for Tagged<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.result
    }
}

impl<T> std::ops::DerefMut for Tagged<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.result
    }
}

/// Each of `tagged` as the report's readers take it.
pub fn of<T>(tagged: &[Tagged<T>]) -> Vec<Of<'_, T>> {
    tagged.iter().map(Tagged::of).collect()
}

/// The phases of `strategy`'s record in `report`, made if it has none.
pub fn phases(report: &mut RunReport, strategy: Strategy) -> &mut ByPhase {
    &mut report.record_mut(&StrategyInfo::of(strategy)).phases
}

/// Puts the phase `name`'s `shape` in `report`'s settings and `conditional`'s `figures` in its
/// record, each under the phase's name.
pub fn put_phase<S, F>(report: &mut RunReport, name: &str, shape: S, figures: F)
where
    S: serde::Serialize + std::any::Any + Send + Sync,
    F: serde::Serialize + std::any::Any + Send + Sync,
{
    report.settings.phases.put(name, shape);
    phases(report, Strategy::Conditional).put(name, figures);
}

/// 400 purchases at 2,500 µs in the service: 300 µs admitted, 2,000 µs in the strategy, of
/// which 1,500 µs waiting for a lock.
pub fn stages() -> StageTimes {
    let stage = |stage: &str, mean_us: f64| StageTime {
        stage: stage.to_owned(),
        purchases: 400,
        mean_us,
    };
    StageTimes {
        purchases: 400,
        mean_us: 2_500.0,
        stages: vec![
            stage("admission", 300.0),
            stage("strategy", 2_000.0),
            stage("lock_wait", 1_500.0),
        ],
    }
}

/// The sample's machine.
pub fn environment() -> Environment {
    Environment {
        cpus: 2,
        cpu_model: Some("Test CPU".into()),
        memory_total: None,
        os: "linux".into(),
        git_commit: None,
        git_dirty: None,
        servers: "spawned".into(),
        generator_build: "release".into(),
        versions: BTreeMap::new(),
        mariadb: BTreeMap::new(),
        postgres: BTreeMap::new(),
        redis: BTreeMap::new(),
        app: BTreeMap::new(),
        disk_flush: None,
    }
}

/// The sample run, its findings computed.
pub fn report() -> RunReport {
    let ledger = |final_stock, units| Ledger {
        initial_stock: 100,
        final_stock,
        units_in_orders: units,
        orders: units,
        pending: 0,
        reserved: 0,
        paid: units,
        returned: 0,
        returning: 0,
    };
    let mut report = RunReport {
        schema_version: SCHEMA_VERSION,
        started_at: "2026-11-21T00:00:00Z".into(),
        finished_at: "2026-11-21T00:01:00Z".into(),
        duration_seconds: 60.0,
        settings: Settings {
            strategies: Vec::new(),
            instances: 2,
            stock: 100,
            buyers: 10,
            demand: 500,
            quantity: 1,
            seconds: 1.0,
            warmup: 0.0,
            repetitions: 1,
            rate: None,
            open_rate_share: OPEN_RATE_SHARE,
            quick: true,
            baselines: true,
            scenarios: false,
            only_baselines: false,
            only_before_sale: false,
            server_niceness: 10,
            phases: ByPhase::default(),
            latency_budget_ms: None,
        },
        world: Some(World::local(2)),
        environment: environment(),
        baselines: vec![baseline()],
        hot_row_sweep: Vec::new(),
        strategies: vec![
            strategy(Strategy::Naive, ledger(20, 137)),
            strategy(Strategy::Conditional, ledger(0, 100)),
        ],
        scenarios: Vec::new(),
        findings: Findings::default(),
        falls: Vec::new(),
        other_engine: None,
    };
    for put in crate::phase::SAMPLES {
        put(&mut report);
    }
    report.findings = crate::phase::findings(&report);
    report
}
