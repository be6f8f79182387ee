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

use std::sync::Arc;

use anyhow::{Context, Result};
use deadpool_redis::redis;
use serde::Serialize;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

use app::api::Strategy;
use app::strategy::Kind;

use crate::client::{Answer, Api};
use crate::goose_noop;
use crate::load::{Budget, LoadResult, Window, closed_loop};

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

/// A hook called before each baseline, with its name (progress display).
pub type OnPhase<'a> = &'a (dyn Fn(BaselineName) + Sync);

/// Runs the baselines one after the other, each with `concurrency` workers.
pub async fn run_all(
    targets: &Targets<'_>,
    concurrency: usize,
    window: Window,
    on_phase: OnPhase<'_>,
) -> Result<Vec<Baseline>> {
    let mut out = Vec::new();
    let budget = Budget::Window(window);

    on_phase(BaselineName::HttpNoop);
    let noop = {
        let api = targets.api.clone();
        closed_loop(concurrency, budget, move |i| {
            let api = api.clone();
            async move { api.noop(i as usize).await }
        })
        .await
    };
    out.push(Baseline {
        name: BaselineName::HttpNoop,
        what: format!(
            "GET /api/noop through the benchmark's client ({concurrency} workers): the HTTP \
             stack alone"
        ),
        result: noop,
    });

    on_phase(BaselineName::GooseNoop);
    out.push(Baseline {
        name: BaselineName::GooseNoop,
        what: format!(
            "the same GET /api/noop through goose ({concurrency} users): a check on the \
             benchmark's own client"
        ),
        result: goose_noop::closed_loop(&targets.api.bases, concurrency, window).await?,
    });

    let db = baseline_database(targets.database_url, concurrency).await?;
    on_phase(BaselineName::SqlConditional);
    reset_row(&db, 1).await?;
    let conditional = {
        let db = db.clone();
        let run = uuid::Uuid::new_v4().simple().to_string();
        closed_loop(concurrency, budget, move |i| {
            let (db, request_id) = (db.clone(), format!("{run}-{i}"));
            async move {
                conditional_purchase(&db, &request_id)
                    .await
                    .unwrap_or(Answer::Transport)
            }
        })
        .await
    };
    out.push(Baseline {
        name: BaselineName::SqlConditional,
        what: format!(
            "conditional UPDATE + order INSERT in one transaction, through sqlx, no HTTP \
             ({concurrency} tasks, {concurrency} connections)"
        ),
        result: conditional,
    });

    on_phase(BaselineName::SqlHotRow);
    reset_row(&db, 2).await?;
    let hot_row = {
        let db = db.clone();
        closed_loop(concurrency, budget, move |_| {
            let db = db.clone();
            async move {
                match sqlx::query("UPDATE products SET stock = stock - 1 WHERE id = 2")
                    .execute(&db)
                    .await
                {
                    Ok(_) => DEDUCTED,
                    Err(_) => Answer::Transport,
                }
            }
        })
        .await
    };
    out.push(Baseline {
        name: BaselineName::SqlHotRow,
        what: format!(
            "bare UPDATE stock = stock - 1 on one row, autocommit ({concurrency} connections): \
             the database's hot-row ceiling"
        ),
        result: hot_row,
    });
    db.close().await;

    on_phase(BaselineName::RedisLua);
    out.push(Baseline {
        name: BaselineName::RedisLua,
        what: format!(
            "check-and-decrement Lua script on one key ({concurrency} connections): the Redis \
             ceiling"
        ),
        result: redis_lua(targets.redis_url, concurrency, window).await?,
    });
    Ok(out)
}

async fn baseline_database(server_url: &str, pool: usize) -> Result<MySqlPool> {
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
        .max_connections(u32::try_from(pool).unwrap_or(u32::MAX))
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
async fn conditional_purchase(db: &MySqlPool, request_id: &str) -> Result<Answer, sqlx::Error> {
    let mut tx = db.begin().await?;
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

async fn redis_lua(url: &str, concurrency: usize, window: Window) -> Result<LoadResult> {
    let mut config = deadpool_redis::Config::from_url(url);
    config.pool = Some(deadpool_redis::PoolConfig::new(concurrency));
    let pool = config.create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
    let key = format!("seckill-bench:baseline:{}", uuid::Uuid::new_v4().simple());
    {
        let mut conn = pool.get().await?;
        redis::cmd("SET")
            .arg(&key)
            .arg(UNLIMITED)
            .query_async::<()>(&mut conn)
            .await?;
    }
    let script = Arc::new(redis::Script::new(DECREMENT));
    let result = {
        let (pool, key) = (pool.clone(), key.clone());
        closed_loop(concurrency, Budget::Window(window), move |_| {
            let (pool, key, script) = (pool.clone(), key.clone(), script.clone());
            async move {
                let Ok(mut conn) = pool.get().await else {
                    return Answer::Transport;
                };
                match script.key(&key).arg(1).invoke_async::<i64>(&mut conn).await {
                    Ok(left) if left >= 0 => DEDUCTED,
                    Ok(_) => Answer::SOLD_OUT,
                    Err(_) => Answer::Transport,
                }
            }
        })
        .await
    };
    let mut conn = pool.get().await?;
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut conn)
        .await?;
    Ok(result)
}
