//! `seckill-bench isolation`: which transaction isolation level stops which flash-sale failure,
//! on MariaDB and on PostgreSQL.
//!
//! The service's unsafe strategies fail by their shape — a read, a decision in the client, a
//! write — and the classic advice is "raise the isolation level". This measures the advice. Each
//! failure ([`failure::Failure`]) is the transaction a buyer's click runs; each cell runs it
//! from many connections at once on one engine at one level ([`engine::Level`], set on each
//! session and read back), as a correct client runs it — again from the start when the engine
//! refuses it (deadlock, serialization failure, record changed), after a random pause that
//! doubles in its bound, up to [`failure::MAX_ATTEMPTS`] times — and judges it from the
//! database afterwards ([`cell::run`]): units sold against units deducted, stock below zero,
//! orders past one per customer, sales of 4 that sold 5. Beside the failures, the conditional
//! update, which needs no level to be safe, shows what each level costs a design that is
//! already right.
//!
//! The cells run in rounds, their order rotated each round; the report ([`report`]) sums the
//! rounds' counts and takes the median of their rates, and prints beside each verdict the
//! engine's rule that explains it ([`verdict`]), naming any cell where the rule and the
//! figures disagree.
//!
//! The matrix reaches the engines directly, without the service in between: the subject is
//! what the engine does with the transaction, and the service's strategies run on MariaDB
//! alone.

pub mod cell;
pub mod engine;
pub mod failure;
pub mod report;
pub mod schema;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use sqlx::migrate::MigrateDatabase as _;

use crate::rig::environment::utc_now;
use engine::{Engine, Level, Server, Session};
use failure::Failure;
use schema::{Cell, IsolationReport, IsolationSettings, SCHEMA_VERSION, ServerInfo};

/// The servers the matrix runs on, as URLs without a database: it creates its own on each.
#[derive(Debug, Clone)]
pub struct Servers {
    pub mariadb: String,
    pub postgres: String,
}

/// A finished matrix: its report and the folder it was written to.
pub struct IsolationOutput {
    pub report: IsolationReport,
    pub dir: PathBuf,
}

/// Measures the matrix and writes `<out>/<UTC timestamp>-isolation/`.
pub async fn run(
    settings: &IsolationSettings,
    servers: &Servers,
    out: &Path,
) -> Result<IsolationOutput> {
    let (started_at, stamp) = utc_now();
    let report = measure(settings, servers, started_at).await?;
    let dir = out.join(format!("{stamp}-isolation"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    report::write_all(&dir, &report)?;
    Ok(IsolationOutput { report, dir })
}

/// Every cell, every round, on databases of its own that it drops at the end; `started_at`
/// is when, in UTC.
pub async fn measure(
    settings: &IsolationSettings,
    servers: &Servers,
    started_at: String,
) -> Result<IsolationReport> {
    let started = Instant::now();
    let database = format!(
        "seckill_isolation_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut engines = Vec::new();
    for engine in Engine::ALL {
        let base = match engine {
            Engine::Mariadb => &servers.mariadb,
            Engine::Postgres => &servers.postgres,
        };
        let server = Server {
            engine,
            url: format!("{}/{database}", base.trim_end_matches('/')),
        };
        engines.push(prepare(&server).await?);
    }
    let measured = cells(settings, &engines).await;
    for (server, _) in &engines {
        let dropped = match server.engine {
            Engine::Mariadb => sqlx::MySql::drop_database(&server.url).await,
            Engine::Postgres => sqlx::Postgres::drop_database(&server.url).await,
        };
        if let Err(e) = dropped {
            tracing::warn!("{} keeps {database}: {e}", server.engine.name());
        }
    }
    Ok(IsolationReport {
        schema: SCHEMA_VERSION,
        started_at,
        duration_seconds: started.elapsed().as_secs_f64(),
        settings: settings.clone(),
        servers: engines.into_iter().map(|(_, info)| info).collect(),
        cells: measured?,
    })
}

/// Creates the matrix's database and tables on `server`.
async fn prepare(server: &Server) -> Result<(Server, ServerInfo)> {
    let name = server.engine.name();
    match server.engine {
        Engine::Mariadb => sqlx::MySql::create_database(&server.url).await,
        Engine::Postgres => sqlx::Postgres::create_database(&server.url).await,
    }
    .with_context(|| format!("creating the matrix's database on {name}"))?;
    let mut admin = Session::open(server, Level::ReadCommitted).await?;
    admin.batch(engine::schema(server.engine)).await?;
    let version = admin.version().await?;
    admin.close().await;
    let info = ServerInfo {
        engine: server.engine,
        version,
    };
    Ok((server.clone(), info))
}

/// The rounds: every cell once a round, the cells' order rotated each round so that no cell
/// always follows the same one.
async fn cells(
    settings: &IsolationSettings,
    engines: &[(Server, ServerInfo)],
) -> Result<Vec<Cell>> {
    let mut cells: Vec<(usize, Cell)> = Vec::new();
    for (e, (server, _)) in engines.iter().enumerate() {
        for failure in Failure::ALL {
            for level in server.engine.levels() {
                let cell = Cell {
                    failure,
                    engine: server.engine,
                    level: *level,
                    rounds: Vec::new(),
                };
                cells.push((e, cell));
            }
        }
    }
    let mut next_product = vec![1i64; engines.len()];
    let n = cells.len();
    for round in 0..settings.rounds {
        for k in 0..n {
            let (e, cell) = &mut cells[(k + round * n / settings.rounds.max(1)) % n];
            let server = &engines[*e].0;
            let first = next_product[*e];
            next_product[*e] += cell::products(cell.failure, settings);
            let measured = cell::run(server, cell.failure, cell.level, settings, first)
                .await
                .with_context(|| {
                    format!(
                        "{} on {} at {}",
                        cell.failure.name(),
                        server.engine.name(),
                        cell.level
                    )
                })?;
            eprintln!(
                "isolation: round {}: {} on {} at {}: {} failed ({}), {} refusals, {} purchases",
                round + 1,
                cell.failure.name(),
                server.engine.name(),
                cell.level,
                measured.failures,
                cell.failure.counted(),
                measured.clicks.refusals_total(),
                measured.clicks.bought,
            );
            cell.rounds.push(measured);
        }
    }
    Ok(cells.into_iter().map(|(_, c)| c).collect())
}
