//! A strategy's figures in proportion: its closed-loop throughput as a share of the baselines
//! measured in the same run.

use app::api::Strategy;
use app::strategy::Kind;

use crate::schema::{Baseline, BaselineName, CpuUse, LoadResult, Loops, ThroughputResult};

/// Which baseline a strategy is compared with: the one of the store that holds its stock.
/// Every kind of strategy in the catalogue keeps the stock in MariaDB — its own strategies,
/// and the locked ones too, whose lock only guards a database read-modify-write — so each is
/// compared with `sql-conditional`. A kind that kept the stock elsewhere (a Redis counter,
/// compared with `redis-lua`) would have to say so here: the match is exhaustive.
pub fn baseline_of(strategy: Strategy) -> BaselineName {
    match strategy.spec().kind {
        Kind::Own { .. } | Kind::Locked { .. } => BaselineName::SqlConditional,
    }
}

/// A strategy's loops, their ratios to the baselines `measured` in the same run filled in.
pub fn loops(
    strategy: Strategy,
    throughput: ThroughputResult,
    measured: &[Baseline],
    cpu: Option<CpuUse>,
) -> Loops {
    let baseline = baseline_of(strategy);
    let rate_of = |name: BaselineName, f: fn(&LoadResult) -> f64| {
        measured
            .iter()
            .find(|b| b.name == name)
            .map(|b| f(&b.result))
            .filter(|r| *r > 0.0)
    };
    let percent_of_backend_baseline = rate_of(baseline, |r| r.successes_per_sec)
        .map(|base| 100.0 * throughput.closed.successes_per_sec / base);
    let percent_of_http_noop = rate_of(BaselineName::HttpNoop, |r| r.attempts_per_sec)
        .map(|base| 100.0 * throughput.closed.attempts_per_sec / base);
    Loops {
        throughput,
        baseline,
        percent_of_backend_baseline,
        percent_of_http_noop,
        cpu,
        stages: None,
        aborts: None,
        replica: None,
    }
}
