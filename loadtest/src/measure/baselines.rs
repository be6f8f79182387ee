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
//!
//! They run in their own database (`seckill_baseline`), created by the app's own migrations,
//! so they never touch the app's rows.
//!
//! Each is measured several times, interleaved with the others (see [`crate::analyse::spread`]). The
//! database baselines run at the connection count the app instances' pools hold together:
//! a hot row serves few contenders faster than many, so a baseline at the buyers' count would
//! be handicapped against a strategy whose pools let fewer through. The hot-row sweep shows
//! that curve (1, 8, 32, 200 connections).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use deadpool_redis::redis;
use serde::Serialize;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{Connection, MySqlConnection, MySqlPool};

use app::api::Strategy;
use app::strategy::Kind;

use crate::drive::dedicated::Dedicated;
use crate::drive::goose;
use crate::drive::load::{LoadResult, Window, closed_loop, closed_loop_by_worker};
use crate::measure::cpu::{CpuUse, Sampler, Span};
use crate::measure::tools;
use testkit::{Answer, Api};

/// Every baseline, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BaselineName {
    HttpNoop,
    GooseNoop,
    SqlConditional,
    SqlHotRow,
    RedisLua,
}

impl BaselineName {
    pub const ALL: [BaselineName; 5] = [
        BaselineName::HttpNoop,
        BaselineName::GooseNoop,
        BaselineName::SqlConditional,
        BaselineName::SqlHotRow,
        BaselineName::RedisLua,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BaselineName::HttpNoop => "http-noop",
            BaselineName::GooseNoop => "goose-noop",
            BaselineName::SqlConditional => "sql-conditional",
            BaselineName::SqlHotRow => "sql-hot-row",
            BaselineName::RedisLua => "redis-lua",
        }
    }
}

impl std::fmt::Display for BaselineName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Must match the `CREATE DATABASE` statement below.
const DATABASE: &str = "seckill_baseline";
const UNLIMITED: i64 = 1_000_000_000;
/// A baseline's successful deduction counts as a created order.
const DEDUCTED: Answer = Answer::Created {
    fencing_token: None,
};

/// One baseline's measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub name: BaselineName,
    pub what: String,
    pub result: LoadResult,
    /// CPU of every process over its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// The same work through the standard tool, in the same rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standard_tool: Option<tools::StandardTool>,
}

/// Which baseline a strategy is compared with: the one of the store that holds its stock.
/// Every kind of strategy in the catalogue keeps the stock in MariaDB — its own strategies,
/// and the locked ones too, whose lock only guards a database read-modify-write — so each is
/// compared with `sql-conditional`. A kind that kept the stock elsewhere (a Redis counter,
/// compared with `redis-lua`) would have to say so here: the match is exhaustive.
pub fn for_strategy(strategy: Strategy) -> BaselineName {
    match strategy.spec().kind {
        Kind::Own { .. } | Kind::Locked { .. } => BaselineName::SqlConditional,
    }
}

/// Where the baselines run.
pub struct Targets<'a> {
    /// The app instances (only `GET /api/noop` is used).
    pub api: &'a Api,
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
    fn label(self) -> String {
        match self {
            Item::Ours(name) => name.to_string(),
            Item::Sweep(n) => format!("hot-row sweep, {n} connection(s)"),
            Item::Tool(name) => format!("{name} through {}", tool_of(name).unwrap_or("?")),
        }
    }
}

/// The standard tool that does a baseline's work, if one does.
pub fn tool_of(name: BaselineName) -> Option<&'static str> {
    match name {
        BaselineName::HttpNoop => Some(tools::wrk::TOOL),
        BaselineName::SqlConditional | BaselineName::SqlHotRow => Some(tools::mysqlslap::TOOL),
        BaselineName::RedisLua => Some(tools::redis_benchmark::TOOL),
        BaselineName::GooseNoop => None,
    }
}

/// Every baseline followed by its standard tool, then the sweep: one round.
fn items(plan: &Plan) -> Vec<Item> {
    BaselineName::ALL
        .iter()
        .flat_map(|n| [Some(Item::Ours(*n)), tool_of(*n).map(|_| Item::Tool(*n))])
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
        on_phase(&items[i].label(), round + 1, plan.rounds);
        let before = sampler.sample();
        if let Item::Tool(name) = items[i] {
            // Sized from our own run of the same work just before, to last about as long.
            let ours = items.iter().position(|x| *x == Item::Ours(name));
            let rate = ours
                .and_then(|o| runs[o].last())
                .map_or(1000.0, crate::analyse::spread::headline);
            let (command, outcome) = bench.tool(name, rate).await?;
            let mut span = sampler.between(&before, &sampler.sample());
            if let tools::Outcome::Measured { operations, .. } = &outcome {
                span.successes = *operations;
                spans[i].add(&span);
            }
            tool_runs[i].push(tool_of(name).unwrap_or_default(), command, outcome);
            continue;
        }
        let result = bench
            .measure(items[i])
            .await
            .with_context(|| format!("baseline {}", items[i].label()))?;
        spans[i].add(&sampler.spent(&before, &result));
        runs[i].push(result);
    }
    bench.close().await?;
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
                    let mut s = tool_runs[t].summary(crate::analyse::spread::headline(&result))?;
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
                });
            }
            Item::Sweep(_) => measured.hot_row_sweep.push(result),
            Item::Tool(_) => {}
        }
    }
    Ok(measured)
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
    }
}

/// The connections every measurement reuses, opened once.
struct Bench<'a> {
    targets: &'a Targets<'a>,
    plan: &'a Plan,
    /// Resets rows between runs.
    admin: MySqlPool,
    /// One set of connections per connection count used (fair count, sweep points), one
    /// connection per worker.
    sets: Vec<(usize, Dedicated)>,
    redis: RedisLua,
}

impl<'a> Bench<'a> {
    async fn connect(targets: &'a Targets<'a>, plan: &'a Plan) -> Result<Bench<'a>> {
        let mut counts = vec![plan.db_connections];
        counts.extend(&plan.sweep);
        counts.sort_unstable();
        counts.dedup();
        let admin = baseline_database(targets.database_url).await?;
        let url = format!("{}/{DATABASE}", targets.database_url.trim_end_matches('/'));
        let mut sets = Vec::new();
        for n in counts {
            sets.push((n, Dedicated::open(&url, n).await?));
        }
        reset_row(&admin, 2).await?;
        Ok(Bench {
            targets,
            plan,
            admin,
            sets,
            redis: RedisLua::connect(targets.redis_url, plan.concurrency).await?,
        })
    }

    fn connections(&self, n: usize) -> Dedicated {
        self.sets
            .iter()
            .find(|(count, _)| *count == n)
            .map(|(_, set)| set.clone())
            .expect("a set of connections per connection count")
    }

    async fn measure(&self, item: Item) -> Result<LoadResult> {
        let budget = self.plan.window;
        let (c, db) = (self.plan.concurrency, self.plan.db_connections);
        Ok(match item {
            Item::Ours(BaselineName::HttpNoop) => {
                let api = self.targets.api.clone();
                closed_loop(c, budget, move |i| {
                    let api = api.clone();
                    async move { api.noop(i as usize).await }
                })
                .await
            }
            Item::Ours(BaselineName::GooseNoop) => {
                goose::closed_loop(&self.targets.api.bases, c, self.plan.window).await?
            }
            Item::Ours(BaselineName::SqlConditional) => {
                reset_row(&self.admin, 1).await?;
                let set = self.connections(db);
                let run = uuid::Uuid::new_v4().simple().to_string();
                closed_loop_by_worker(db, budget, move |w, i| {
                    let (set, request_id) = (set.clone(), format!("{run}-{i}"));
                    async move {
                        let mut conn = set.take(w);
                        let answer = conditional_purchase(&mut conn, &request_id)
                            .await
                            .unwrap_or(Answer::Transport);
                        set.put(w, conn);
                        answer
                    }
                })
                .await
            }
            Item::Ours(BaselineName::SqlHotRow) => hot_row(self.connections(db), budget).await,
            Item::Sweep(n) => hot_row(self.connections(n), budget).await,
            Item::Ours(BaselineName::RedisLua) => self.redis.run(c, self.plan.window).await,
            Item::Tool(name) => bail!("{name}'s tool is run by `Bench::tool`"),
        })
    }

    /// `name`'s work through its standard tool, for about as long as our run at `rate` took.
    async fn tool(&self, name: BaselineName, rate: f64) -> Result<(String, tools::Outcome)> {
        let window = self.plan.window;
        let operations = rate * window.measure.as_secs_f64();
        let limit = window.measure * 4 + Duration::from_secs(30);
        let db = self.plan.db_connections;
        Ok(match name {
            BaselineName::HttpNoop => {
                let bases = &self.targets.api.bases;
                let secs = window.measure.as_secs_f64();
                tools::wrk::measure(bases, self.plan.concurrency, secs, limit).await
            }
            BaselineName::SqlHotRow | BaselineName::SqlConditional => {
                let work = if name == BaselineName::SqlHotRow {
                    tools::mysqlslap::Work::HotRow
                } else {
                    reset_row(&self.admin, 1).await?;
                    tools::mysqlslap::Work::ConditionalTransaction
                };
                let url = self.targets.database_url;
                tools::mysqlslap::measure(url, DATABASE, work, db, operations, limit).await
            }
            BaselineName::RedisLua => {
                let (url, c) = (self.targets.redis_url, self.plan.concurrency);
                let (sha, key) = (self.redis.script.get_hash(), &*self.redis.key);
                tools::redis_benchmark::measure(url, sha, key, c, operations, limit).await
            }
            BaselineName::GooseNoop => bail!("goose-noop has no standard tool beside it"),
        })
    }

    async fn close(self) -> Result<()> {
        for (_, set) in &self.sets {
            set.close().await;
        }
        self.admin.close().await;
        self.redis.close().await
    }
}

/// The bare hot-row UPDATE from one task per connection of `set`.
async fn hot_row(set: Dedicated, budget: Window) -> LoadResult {
    closed_loop_by_worker(set.len(), budget, move |w, _| {
        let set = set.clone();
        async move {
            let mut conn = set.take(w);
            let done = sqlx::query("UPDATE products SET stock = stock - 1 WHERE id = 2")
                .execute(&mut conn)
                .await;
            set.put(w, conn);
            match done {
                Ok(_) => DEDUCTED,
                Err(_) => Answer::Transport,
            }
        }
    })
    .await
}

/// Creates the baseline database afresh and migrates it; a small pool on it for resets.
async fn baseline_database(server_url: &str) -> Result<MySqlPool> {
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(server_url)
        .await
        .with_context(|| format!("connecting to {server_url}"))?;
    // Fresh each run: the migrations create every table, and no row of a previous run stays.
    for sql in [
        "DROP DATABASE IF EXISTS seckill_baseline",
        "CREATE DATABASE seckill_baseline",
    ] {
        sqlx::query(sql).execute(&admin).await?;
    }
    admin.close().await;
    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&format!("{}/{DATABASE}", server_url.trim_end_matches('/')))
        .await?;
    // The app's own migrations: both pay for the same rows and indexes.
    app::db::migrate(&db)
        .await
        .context("migrating the baseline database")?;
    Ok(db)
}

async fn reset_row(db: &MySqlPool, id: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO products (id, stock, initial_stock) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE stock = VALUES(stock), initial_stock = VALUES(initial_stock)",
    )
    .bind(id)
    .bind(UNLIMITED)
    .bind(UNLIMITED)
    .execute(db)
    .await?;
    sqlx::query("DELETE FROM orders WHERE product_id = ?")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// The `conditional` strategy's statements (app/src/strategy/conditional.rs): the guarded
/// decrement, then the order INSERT, in one transaction.
async fn conditional_purchase(
    conn: &mut MySqlConnection,
    request_id: &str,
) -> Result<Answer, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let updated = sqlx::query("UPDATE products SET stock = stock - ? WHERE id = ? AND stock >= ?")
        .bind(1_i64)
        .bind(1_u64)
        .bind(1_i64)
        .execute(&mut *tx)
        .await?;
    if updated.rows_affected() == 0 {
        tx.rollback().await?;
        return Ok(Answer::SOLD_OUT);
    }
    sqlx::query(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, fencing_token) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(1_u64)
    .bind("baseline")
    .bind(1_i64)
    .bind(Strategy::Conditional.name())
    .bind(request_id)
    .bind(None::<u64>)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(DEDUCTED)
}

const DECREMENT: &str = r"
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
local q = tonumber(ARGV[1])
if stock >= q then
  return redis.call('DECRBY', KEYS[1], q)
end
return -1
";

/// The `redis-lua` baseline's connections and key, set up once for every run. Each worker
/// has a connection of its own and sends one prepared `EVALSHA` command on it — what
/// `redis-benchmark` does (a pool checkout and a script invocation built per request cost
/// the generator more CPU than the server spends on the script).
struct RedisLua {
    connections: Arc<[redis::aio::MultiplexedConnection]>,
    key: Arc<str>,
    script: Arc<redis::Script>,
}

impl RedisLua {
    async fn connect(url: &str, concurrency: usize) -> Result<RedisLua> {
        let client = redis::Client::open(url)?;
        let connections = futures::future::try_join_all(
            (0..concurrency).map(|_| client.get_multiplexed_async_connection()),
        )
        .await?;
        let key = format!("seckill-bench:baseline:{}", uuid::Uuid::new_v4().simple());
        let mut conn = connections[0].clone();
        redis::cmd("SET")
            .arg(&key)
            .arg(UNLIMITED)
            .query_async::<()>(&mut conn)
            .await?;
        // Loaded before any run: both our EVALSHA and redis-benchmark's find it.
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(DECREMENT)
            .query_async::<String>(&mut conn)
            .await?;
        Ok(RedisLua {
            connections: connections.into(),
            key: key.into(),
            script: Arc::new(redis::Script::new(DECREMENT)),
        })
    }

    async fn run(&self, concurrency: usize, window: Window) -> LoadResult {
        let connections = self.connections.clone();
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(self.script.get_hash())
            .arg(1)
            .arg(&*self.key)
            .arg(1);
        let evalsha = Arc::new(evalsha);
        closed_loop_by_worker(concurrency, window, move |worker, _| {
            let mut conn = connections[worker % connections.len()].clone();
            let evalsha = evalsha.clone();
            async move {
                match evalsha.query_async::<i64>(&mut conn).await {
                    Ok(left) if left >= 0 => DEDUCTED,
                    Ok(_) => Answer::SOLD_OUT,
                    Err(_) => Answer::Transport,
                }
            }
        })
        .await
    }

    async fn close(self) -> Result<()> {
        let mut conn = self.connections[0].clone();
        redis::cmd("DEL")
            .arg(&*self.key)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }
}
