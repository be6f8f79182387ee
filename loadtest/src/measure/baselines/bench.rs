//! The baselines' connections, opened once and reused by every measurement: one connection per
//! worker to a database of their own, and the Redis script's connections.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use app::api::Strategy;
use deadpool_redis::redis;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use testkit::{Answer, Api, order_request};

use super::{Item, Plan, Targets};
use crate::drive::dedicated::Dedicated;
use crate::drive::goose;
use crate::drive::load::{Window, closed_loop, closed_loop_by_worker};
use crate::measure::tools;
use crate::schema::{BaselineName, LoadResult};

/// Must match the `CREATE DATABASE` statement below.
const DATABASE: &str = "seckill_baseline";
const UNLIMITED: i64 = 1_000_000_000;
/// A baseline's successful deduction counts as a created order.
const DEDUCTED: Answer = Answer::Created {
    fencing_token: None,
};

/// The connections every measurement reuses, opened once.
pub(super) struct Bench<'a> {
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
    pub(super) async fn connect(targets: &'a Targets<'a>, plan: &'a Plan) -> Result<Bench<'a>> {
        let mut counts = vec![plan.db_connections];
        counts.extend(&plan.sweep);
        counts.sort_unstable();
        counts.dedup();
        let admin = baseline_database(targets.database_url).await?;
        let url = format!("{}/{DATABASE}", targets.database_url.trim_end_matches('/'));
        let mut sets = Vec::new();
        for n in counts {
            let set = (Dedicated::open(&url, n).await)
                .with_context(|| format!("opening {n} connections to the baselines' database"))?;
            sets.push((n, set));
        }
        reset_row(&admin, 2).await?;
        let redis = (RedisLua::connect(targets.redis_url, plan.concurrency).await)
            .with_context(|| format!("opening {} connections to Redis", plan.concurrency))?;
        Ok(Bench {
            targets,
            plan,
            admin,
            sets,
            redis,
        })
    }

    fn connections(&self, n: usize) -> Dedicated {
        self.sets
            .iter()
            .find(|(count, _)| *count == n)
            .map(|(_, set)| set.clone())
            .expect("a set of connections per connection count")
    }

    pub(super) async fn measure(&self, item: Item) -> Result<LoadResult> {
        let budget = self.plan.window;
        let (c, db) = (self.plan.concurrency, self.plan.db_connections);
        Ok(match item {
            Item::Ours(BaselineName::HttpNoop) => noops(self.targets.api, c, budget).await,
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
            Item::Ours(BaselineName::HttpFloorNoop) => noops(self.targets.floor, c, budget).await,
            Item::Ours(BaselineName::HttpFloorRefusal) => {
                // The same request the flood's refusals repeat, built once.
                let order = Arc::new(self.targets.floor.prepare_order(
                    1,
                    &order_request("late".into(), Strategy::Conditional, "floor".into(), 1),
                )?);
                let api = Arc::new(self.targets.floor.clone());
                closed_loop(c, budget, move |i| {
                    let (api, order) = (api.clone(), order.clone());
                    async move { api.send_prepared(i as usize, &order).await }
                })
                .await
            }
            Item::Tool(name) => bail!("{name}'s tool is run by `Bench::tool`"),
        })
    }

    /// `name`'s work through its standard tool, for about as long as our run at `rate` took.
    pub(super) async fn tool(
        &self,
        name: BaselineName,
        rate: f64,
    ) -> Result<(String, tools::Outcome)> {
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
            BaselineName::GooseNoop
            | BaselineName::HttpFloorNoop
            | BaselineName::HttpFloorRefusal => {
                bail!("{name} has no standard tool beside it")
            }
        })
    }

    pub(super) async fn close(self) -> Result<()> {
        for (_, set) in &self.sets {
            set.close().await;
        }
        self.admin.close().await;
        self.redis.close().await
    }
}

/// `GET /api/noop` on `api`'s servers from `workers` workers in a closed loop.
async fn noops(api: &Api, workers: usize, budget: Window) -> LoadResult {
    // One shared count per request, not one per field of the client.
    let api = Arc::new(api.clone());
    closed_loop(workers, budget, move |i| {
        let api = api.clone();
        async move { api.noop(i as usize).await }
    })
    .await
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
    app::db::migrate(&app::db::Engines::MySql(db.clone()))
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

    pub(super) async fn close(self) -> Result<()> {
        let mut conn = self.connections[0].clone();
        redis::cmd("DEL")
            .arg(&*self.key)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }
}
