//! Phase 3, the baselines: the same work with nothing of ours in between, at the same
//! concurrency, so that every strategy's throughput is also a ratio.
//!
//! * `http-noop`: `GET /api/noop` through the benchmark's own client and load driver — the
//!   HTTP stack's ceiling (client, server, routing, no backend), the denominator of every
//!   strategy's "% of HTTP".
//! * `goose-noop`: the same request through goose, the load tool people in this field know:
//!   a check on our own client. If goose gets much more out of the same server, the client
//!   is the ceiling of every HTTP figure, not the server.
//! * `sql-conditional`: exactly the database work of the `conditional` strategy (conditional
//!   `UPDATE`, then the order `INSERT`, one transaction) driven through sqlx directly.
//! * `sql-hot-row`: a bare `UPDATE … SET stock = stock - 1` on one row in autocommit — the
//!   database's own ceiling for a single hot row (row lock + redo log flush per commit).
//! * `redis-lua`: a check-and-decrement Lua script on one key — the ceiling of every
//!   Redis-based deduction.
//! * `http-floor-noop` and `http-floor-refusal`: `GET /api/noop` and a purchase refused
//!   `sold_out` on servers with nothing of the service behind their routes
//!   ([`crate::rig::http_floor`]), as many as the app instances: what HTTP alone makes a
//!   refusal cost beside a no-op, the floor under the flood's refusals once sold out.
//!
//! They run in a database of their own (`seckill_baseline_<8 hex digits>`, dropped after
//! them), created by the app's own migrations, so they never touch the app's rows nor another
//! run's.
//!
//! Each is measured several times, interleaved with the others (see [`crate::analyse::spread`]). The
//! database baselines run at the connection count the app instances' pools hold together:
//! a hot row serves few contenders faster than many, so a baseline at the buyers' count would
//! be handicapped against a strategy whose pools let fewer through. The hot-row sweep shows
//! that curve (1, 8, 32, 200 connections).

mod bench;

use anyhow::{Context, Result};
use app::db::Engine;

use testkit::Api;

use crate::drive::load::Window;
use crate::measure::cpu::{Sampler, Span};
use crate::measure::tools;
use crate::schema::{Baseline, BaselineName, LoadResult};
use bench::Bench;

/// Where the baselines run.
pub struct Targets<'a> {
    /// The app instances (only `GET /api/noop` is used).
    pub api: &'a Api,
    /// HTTP's floor, as many servers as app instances.
    pub floor: &'a Api,
    /// Server URL without a database.
    pub database_url: &'a str,
    pub redis_url: &'a str,
}

/// How the baselines are driven.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Workers of the HTTP and Redis baselines (the strategies' concurrent buyers).
    pub concurrency: usize,
    /// Connections (one task each) of the database baselines: as many as the app instances'
    /// pools hold together, the most a strategy can have at the database at once.
    pub db_connections: usize,
    /// Connection counts of the hot-row sweep.
    pub sweep: Vec<usize>,
    pub window: Window,
    /// Runs of each figure, interleaved (see [`crate::analyse::spread`]).
    pub rounds: usize,
}

/// The hot-row sweep's connection counts.
pub const SWEEP: [usize; 4] = [1, 8, 32, 200];

/// What the baselines measured: one entry per baseline (medians with their spread) and the
/// hot-row sweep (one result per connection count).
pub struct Measured {
    pub baselines: Vec<Baseline>,
    pub hot_row_sweep: Vec<LoadResult>,
}

/// One thing measured in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Ours(BaselineName),
    /// The bare hot-row UPDATE at this many connections.
    Sweep(usize),
    /// The standard tool on the same work as this baseline (see [`crate::measure::tools`]).
    Tool(BaselineName),
}

impl Item {
    /// What it is, its standard tool the one of `engine`'s server.
    fn label(self, engine: Engine) -> String {
        match self {
            Item::Ours(name) => name.to_string(),
            Item::Sweep(n) => format!("hot-row sweep, {n} connection(s)"),
            Item::Tool(name) => format!("{name} through {}", tool_of(name, engine).unwrap_or("?")),
        }
    }
}

/// The baselines of the servers alone, with no HTTP: what the network sweep measures at each
/// round trip beside the strategies.
pub const BACKENDS: [BaselineName; 3] = [
    BaselineName::SqlConditional,
    BaselineName::SqlHotRow,
    BaselineName::RedisLua,
];

/// The [`BACKENDS`] baselines' connections, opened once, each baseline measured when asked:
/// for a sweep that measures them between other things.
pub struct Backends<'a>(Bench<'a>);

impl<'a> Backends<'a> {
    pub async fn connect(targets: &'a Targets<'a>, plan: &'a Plan) -> Result<Backends<'a>> {
        Ok(Backends(Bench::connect(targets, plan).await?))
    }

    /// One run of `name`, one of [`BACKENDS`].
    pub async fn measure(&self, name: BaselineName) -> Result<LoadResult> {
        anyhow::ensure!(BACKENDS.contains(&name), "{name} is no server's baseline");
        self.0.measure(Item::Ours(name)).await
    }

    pub async fn close(self) -> Result<()> {
        self.0.close().await
    }
}

/// The standard tool that does a baseline's work on `engine`'s server, if one does.
pub fn tool_of(name: BaselineName, engine: Engine) -> Option<&'static str> {
    match name {
        BaselineName::HttpNoop => Some(tools::wrk::TOOL),
        BaselineName::SqlConditional | BaselineName::SqlHotRow => Some(match engine {
            Engine::MySql => tools::mysqlslap::TOOL,
            Engine::Postgres => tools::pgbench::TOOL,
        }),
        BaselineName::RedisLua => Some(tools::redis_benchmark::TOOL),
        BaselineName::GooseNoop | BaselineName::HttpFloorNoop | BaselineName::HttpFloorRefusal => {
            None
        }
    }
}

/// Every baseline followed by its standard tool, then the sweep: one round.
fn items(plan: &Plan) -> Vec<Item> {
    BaselineName::ALL
        .iter()
        .flat_map(|n| {
            // A baseline with a tool has one on either engine.
            let tool = tool_of(*n, Engine::MySql).map(|_| Item::Tool(*n));
            [Some(Item::Ours(*n)), tool]
        })
        .flatten()
        .chain(plan.sweep.iter().map(|n| Item::Sweep(*n)))
        .collect()
}

/// A hook called before each measurement, with its label, the round (from 1) and the rounds.
pub type OnPhase<'a> = &'a (dyn Fn(&str, usize, usize) + Sync);

/// How many measurements [`run_all`] makes (for progress).
pub fn steps(plan: &Plan) -> u64 {
    (plan.rounds * items(plan).len()) as u64
}

/// Runs every baseline and sweep point `plan.rounds` times, interleaved, and keeps each one's
/// median run with the spread.
pub async fn run_all(
    targets: &Targets<'_>,
    plan: &Plan,
    sampler: &Sampler,
    on_phase: OnPhase<'_>,
) -> Result<Measured> {
    let items = items(plan);
    let bench = Bench::connect(targets, plan).await?;
    let mut runs: Vec<Vec<LoadResult>> = vec![Vec::new(); items.len()];
    let mut tool_runs: Vec<tools::Runs> = vec![tools::Runs::default(); items.len()];
    let mut spans: Vec<Span> = vec![Span::default(); items.len()];
    for (round, i) in crate::analyse::spread::interleaved(items.len(), plan.rounds) {
        on_phase(&items[i].label(bench.engine()), round + 1, plan.rounds);
        let before = sampler.sample();
        if let Item::Tool(name) = items[i] {
            // Sized from our own run of the same work just before, to last about as long.
            let ours = items.iter().position(|x| *x == Item::Ours(name));
            let rate = ours
                .and_then(|o| runs[o].last())
                .map_or(1000.0, LoadResult::headline);
            let (command, outcome) = bench.tool(name, rate).await?;
            let mut span = sampler.between(&before, &sampler.sample());
            if let tools::Outcome::Measured { operations, .. } = &outcome {
                span.successes = *operations;
                spans[i].add(&span);
            }
            let tool = tool_of(name, bench.engine()).unwrap_or_default();
            tool_runs[i].push(tool, command, outcome);
            continue;
        }
        let result = bench
            .measure(items[i])
            .await
            .with_context(|| format!("baseline {}", items[i].label(bench.engine())))?;
        spans[i].add(&sampler.spent(&before, &result));
        runs[i].push(result);
    }
    bench.close().await?;
    let floor_paired = floor_paired_percent(&items, &runs);
    let mut measured = Measured {
        baselines: Vec::new(),
        hot_row_sweep: Vec::new(),
    };
    for (k, (item, runs)) in items.iter().zip(runs).enumerate() {
        let Some(result) = crate::analyse::spread::combine(runs) else {
            continue;
        };
        match *item {
            Item::Ours(name) => {
                let tool = items.iter().position(|x| *x == Item::Tool(name));
                let standard_tool = tool.and_then(|t| {
                    let mut s = tool_runs[t].summary(result.headline())?;
                    s.cpu = (!spans[t].cpu_seconds.is_empty())
                        .then(|| spans[t].usage(&sampler.processes));
                    Some(s)
                });
                measured.baselines.push(Baseline {
                    name,
                    what: describe(name, plan),
                    result,
                    cpu: Some(spans[k].usage(&sampler.processes)),
                    standard_tool,
                    paired_percent: floor_paired.filter(|_| name == BaselineName::HttpFloorRefusal),
                });
            }
            Item::Sweep(_) => measured.hot_row_sweep.push(result),
            Item::Tool(_) => {}
        }
    }
    Ok(measured)
}

/// HTTP's floor as the flood's refusals are judged: each round's `http-floor-refusal` over the
/// `http-floor-noop` measured right before it ([`BaselineName::ALL`] lists them together),
/// the median of those ratios.
fn floor_paired_percent(items: &[Item], runs: &[Vec<LoadResult>]) -> Option<f64> {
    let rates = |name| {
        let at = items.iter().position(|x| *x == Item::Ours(name))?;
        Some(
            runs[at]
                .iter()
                .map(|r| r.attempts_per_sec)
                .collect::<Vec<_>>(),
        )
    };
    let refusals = rates(BaselineName::HttpFloorRefusal)?;
    crate::analyse::spread::paired_percent(&refusals, &rates(BaselineName::HttpFloorNoop)?)
}

fn describe(name: BaselineName, plan: &Plan) -> String {
    let (c, db) = (plan.concurrency, plan.db_connections);
    match name {
        BaselineName::HttpNoop => format!(
            "GET /api/noop through the benchmark's client ({c} workers): the HTTP stack alone"
        ),
        BaselineName::GooseNoop => format!(
            "the same GET /api/noop through goose ({c} users): a check on the benchmark's own \
             client"
        ),
        BaselineName::SqlConditional => format!(
            "conditional UPDATE + order INSERT in one transaction, through sqlx, no HTTP ({db} \
             connections, one task each: the app instances' pools together)"
        ),
        BaselineName::SqlHotRow => format!(
            "bare UPDATE stock = stock - 1 on one row, autocommit ({db} connections): the \
             database's hot-row ceiling"
        ),
        BaselineName::RedisLua => format!(
            "check-and-decrement Lua script on one key ({c} connections): the Redis ceiling"
        ),
        BaselineName::HttpFloorNoop => format!(
            "GET /api/noop on servers with nothing of the service behind their routes, through \
             the benchmark's client ({c} workers)"
        ),
        BaselineName::HttpFloorRefusal => format!(
            "a purchase's POST answered the service's 409 sold_out by the same servers, its \
             body read and nothing else ({c} workers): HTTP's own cost of a refusal"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floors_share_pairs_each_rounds_refusals_with_the_no_ops_of_the_same_round() {
        let items = [
            Item::Ours(BaselineName::HttpNoop),
            Item::Ours(BaselineName::HttpFloorNoop),
            Item::Ours(BaselineName::HttpFloorRefusal),
        ];
        let run = |rate| {
            let mut r = crate::sample::baseline().result;
            r.attempts_per_sec = rate;
            r
        };
        // The machine ran twice as fast in the second round; each round's ratio is 80%, 75%,
        // 90%, while the medians (90 over 100) would say 90%.
        let runs = vec![
            vec![run(1.0)],
            vec![run(100.0), run(200.0), run(100.0)],
            vec![run(80.0), run(150.0), run(90.0)],
        ];
        let paired = floor_paired_percent(&items, &runs).unwrap();
        assert!((paired - 80.0).abs() < 1e-9, "{paired}");
        assert_eq!(floor_paired_percent(&items[..2], &runs[..2]), None);
    }
}
