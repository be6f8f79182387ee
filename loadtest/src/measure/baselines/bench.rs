//! The baselines' connections, opened once and reused by every measurement: one connection per
//! worker to a database of their own, and the Redis script's connections.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use app::api::Strategy;
use app::db::engine::Sql;
use app::db::{Db, Engine, Engines};
use deadpool_redis::redis;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, MySqlConnection};
use testkit::{Answer, Api, order_request};

use super::{Item, Plan, Targets};
use crate::drive::dedicated::Dedicated;
use crate::drive::goose;
use crate::drive::load::{Window, closed_loop, closed_loop_by_worker};
use crate::measure::tools;
use crate::schema::{BaselineName, LoadResult};

const UNLIMITED: i64 = 1_000_000_000;
/// A baseline's successful deduction counts as a created order.
const DEDUCTED: Answer = Answer::Created {
    fencing_token: None,
};

/// Connections of the run's engine, one per worker.
type Connections = Engines<Dedicated<MySqlConnection>, Dedicated<PgConnection>>;

/// The connections every measurement reuses, opened once.
pub(super) struct Bench<'a> {
    targets: &'a Targets<'a>,
    plan: &'a Plan,
    /// The database of their own: `seckill_baseline_<8 hex digits>`, made for these
    /// measurements and dropped after them, so that two runs on one server never share rows.
    database: String,
    /// Resets rows between runs.
    admin: Db,
    /// One set of connections per connection count used (fair count, sweep points), one
    /// connection per worker.
    sets: Vec<(usize, Connections)>,
    redis: RedisLua,
}

impl<'a> Bench<'a> {
    pub(super) async fn connect(targets: &'a Targets<'a>, plan: &'a Plan) -> Result<Bench<'a>> {
        let mut counts = vec![plan.db_connections];
        counts.extend(&plan.sweep);
        counts.sort_unstable();
        counts.dedup();
        let database = format!(
            "seckill_baseline_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let admin = baseline_database(targets.database_url, &database).await?;
        let url = format!("{}/{database}", targets.database_url.trim_end_matches('/'));
        let mut sets = Vec::new();
        for n in counts {
            let set = match admin.engine() {
                Engine::MySql => Dedicated::open(&url, n).await.map(Engines::MySql),
                Engine::Postgres => Dedicated::open(&url, n).await.map(Engines::Postgres),
            };
            let set =
                set.with_context(|| format!("opening {n} connections to the baselines' database"))?;
            sets.push((n, set));
        }
        reset_row(&admin, 2).await?;
        let redis = (RedisLua::connect(targets.redis_url, plan.concurrency).await)
            .with_context(|| format!("opening {} connections to Redis", plan.concurrency))?;
        Ok(Bench {
            targets,
            plan,
            database,
            admin,
            sets,
            redis,
        })
    }

    /// The engine of the database the SQL baselines run on.
    pub(super) fn engine(&self) -> Engine {
        self.admin.engine()
    }

    fn connections(&self, n: usize) -> Connections {
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
                        (conditional_purchase(&set, w, &request_id).await)
                            .unwrap_or(Answer::Transport)
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
                    tools::Work::HotRow
                } else {
                    reset_row(&self.admin, 1).await?;
                    tools::Work::ConditionalTransaction
                };
                let url = self.targets.database_url;
                match self.engine() {
                    Engine::MySql => {
                        tools::mysqlslap::measure(url, &self.database, work, db, operations, limit)
                            .await
                    }
                    Engine::Postgres => {
                        let seconds = window.measure.as_secs_f64();
                        tools::pgbench::measure(url, &self.database, work, db, seconds, limit).await
                    }
                }
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
            app::each_engine!(set, |s, _e| s.close().await);
        }
        self.admin.close().await;
        drop_database(self.targets.database_url, &self.database).await?;
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
async fn hot_row(set: Connections, budget: Window) -> LoadResult {
    const HOT_ROW: Sql = app::sql!("UPDATE products SET stock = stock - 1 WHERE id = 2");
    let workers = app::each_engine!(&set, |s, _e| s.len());
    closed_loop_by_worker(workers, budget, move |w, _| {
        let set = set.clone();
        async move {
            let done = app::each_engine!(&set, |s, e| {
                let mut conn = s.take(w);
                let done = sqlx::query(e.sql(HOT_ROW)).execute(&mut conn).await;
                s.put(w, conn);
                done.map(drop)
            });
            match done {
                Ok(()) => DEDUCTED,
                Err(_) => Answer::Transport,
            }
        }
    })
    .await
}

/// Creates the database `name` afresh on the server at `server_url` and migrates it; a small
/// pool on it for resets.
async fn baseline_database(server_url: &str, name: &str) -> Result<Db> {
    on_server(server_url, format!("CREATE DATABASE {name}")).await?;
    let db = app::db::open(&format!("{}/{name}", server_url.trim_end_matches('/'))).await?;
    // The app's own migrations: both pay for the same rows and indexes.
    app::db::migrate(&db)
        .await
        .context("migrating the baseline database")?;
    Ok(db)
}

/// Drops the database `name` from the server at `server_url`, its connections closed.
async fn drop_database(server_url: &str, name: &str) -> Result<()> {
    on_server(server_url, format!("DROP DATABASE IF EXISTS {name}")).await
}

/// Runs `statement` (no parameters) on the server at `server_url`, outside any database.
async fn on_server(server_url: &str, statement: String) -> Result<()> {
    let server =
        (app::db::open(server_url).await).with_context(|| format!("connecting to {server_url}"))?;
    let done = app::each_engine!(&server, |pool, e| sqlx::query(e.text(statement.clone()))
        .execute(pool)
        .await
        .map(drop));
    server.close().await;
    done.with_context(|| format!("running `{statement}` on {server_url}"))
}

async fn reset_row(db: &Db, id: i64) -> Result<()> {
    const PUT: Sql = app::sql!(
        mysql: "INSERT INTO products (id, stock, initial_stock) VALUES (?, ?, ?) \
                ON DUPLICATE KEY UPDATE stock = VALUES(stock), initial_stock = VALUES(initial_stock)",
        postgres: "INSERT INTO products (id, stock, initial_stock) VALUES (?, ?, ?) \
                   ON CONFLICT (id) DO UPDATE \
                   SET stock = EXCLUDED.stock, initial_stock = EXCLUDED.initial_stock",
    );
    const FORGET: Sql = app::sql!("DELETE FROM orders WHERE product_id = ?");
    app::execute!(db, PUT, id, UNLIMITED, UNLIMITED)?;
    app::execute!(db, FORGET, id)?;
    Ok(())
}

/// The `conditional` strategy's statements (app/src/strategy/conditional.rs): the guarded
/// decrement, then the order INSERT, in one transaction, on worker `w`'s connection of `set`.
async fn conditional_purchase(
    set: &Connections,
    w: usize,
    request_id: &str,
) -> Result<Answer, sqlx::Error> {
    const DEDUCT: Sql =
        app::sql!("UPDATE products SET stock = stock - ? WHERE id = ? AND stock >= ?");
    const PLACE: Sql = app::sql!(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, fencing_token) \
         VALUES (?, ?, ?, ?, ?, ?)"
    );
    app::each_engine!(set, |s, e| {
        let mut conn = s.take(w);
        let answer: Result<Answer, sqlx::Error> = async {
            let mut tx = conn.begin().await?;
            let updated = (sqlx::query(e.sql(DEDUCT))
                .bind(1_i64)
                .bind(1_i64)
                .bind(1_i64))
            .execute(&mut *tx)
            .await?;
            if updated.rows_affected() == 0 {
                tx.rollback().await?;
                return Ok(Answer::SOLD_OUT);
            }
            sqlx::query(e.sql(PLACE))
                .bind(1_i64)
                .bind("baseline")
                .bind(1_i64)
                .bind(Strategy::Conditional.name())
                .bind(request_id)
                .bind(None::<i64>)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(DEDUCTED)
        }
        .await;
        s.put(w, conn);
        answer
    })
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
