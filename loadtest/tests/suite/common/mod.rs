//! Helpers shared by the integration tests: the app binary, servers, a quick plan.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use app::accounting::Accounting;
use app::api::Strategy;
use loadtest::rig::Target;
use loadtest::run::{RunOutput, run_in};
use loadtest::schema::world::Distance;
use loadtest::schema::{ByPhase, OPEN_RATE_SHARE, Settings};
use sandbox::Endpoints;

/// The variable `cargo xtask test` sets to the `seckill-app` its workspace build just made.
pub const APP_BINARY: &str = "SECKILL_APP_BINARY";

/// The app binary the runs start: [`APP_BINARY`]'s when set, else `target/<profile>/seckill-app`
/// built (or found up to date) with `cargo build -p app --bin seckill-app` once per test
/// process, since a binary left from an older commit would answer with an older API. (Under
/// `cargo xtask test` that build is not made: `-p app` resolves the dependencies' features for
/// the app alone, unlike the workspace build, so it would compile part of the tree and the
/// app again — 30 to 80 s in a fresh clone, while the other tests waited for cargo's lock.)
pub fn app_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os(APP_BINARY) {
            return PathBuf::from(path);
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "app", "--bin", "seckill-app"])
            .status()
            .expect("running cargo build -p app");
        assert!(status.success(), "cargo build -p app failed");
        testkit::locate_app(None).expect("seckill-app after building it")
    })
    .clone()
}

/// The shared servers, and a database of the test's own.
pub fn target() -> Target {
    let endpoints = Endpoints {
        database_url: sandbox::shared::database_url(),
        redis_url: sandbox::shared::redis_url(),
        redlock_urls: sandbox::shared::redlock_urls(),
        zookeeper: sandbox::shared::zookeeper(),
        etcd: sandbox::shared::etcd(),
        memcached: sandbox::shared::memcached(),
        postgres_url: None,
    };
    Target {
        endpoints,
        distance: Distance::Local,
        buyers: Distance::Local,
        servers: "shared",
        versions: None,
        app_binary: app_binary(),
        bench_binary: env!("CARGO_BIN_EXE_seckill-bench").into(),
        database: format!(
            "bench_test_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        engine: loadtest::schema::world::Engine::MariaDb,
        processes: Vec::new(),
        relays: None,
        redis_cluster: None,
        galera: None,
        replicas: None,
    }
}

/// Small and short: one strategy, two instances, a sale of 60 units to 30 buyers.
pub fn quick(strategy: Strategy) -> Settings {
    Settings {
        strategies: vec![strategy],
        instances: 2,
        stock: 60,
        buyers: 30,
        demand: 240,
        quantity: 1,
        seconds: 1.0,
        warmup: 0.3,
        repetitions: 1,
        rate: Some(100.0),
        open_rate_share: OPEN_RATE_SHARE,
        quick: true,
        baselines: false,
        scenarios: false,
        only_baselines: false,
        only_before_sale: false,
        server_niceness: 0,
        phases: ByPhase::default(),
        latency_budget_ms: None,
    }
}

/// One connection to the test's own database (see [`target`]).
pub async fn database(target: &Target) -> sqlx::MySqlPool {
    sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&format!(
            "{}/{}",
            target.endpoints.database_url, target.database
        ))
        .await
        .unwrap()
}

/// Drops the test's own database (see [`target`]).
pub async fn drop_database(target: &Target) {
    let db = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&target.endpoints.database_url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {}",
        target.database
    )))
    .execute(&db)
    .await
    .unwrap();
}

/// Runs `strategy` with [`quick`] settings against `target`; returns the report, the
/// database's own accounting of the sale, and the directory holding the report (deleted when
/// dropped). The test's database is dropped.
pub async fn run_and_read(
    strategy: Strategy,
    target: &Target,
) -> (RunOutput, Accounting, tempfile::TempDir) {
    let settings = quick(strategy);
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, target, out.path()).await.unwrap();
    let sale = (output.allotments.iter())
        .find(|allotment| allotment.phase == "sale")
        .expect("the sale's product");
    let db = database(target).await;
    let ledger = app::inventory::ledger(&app::db::Engines::MySql(db.clone()), None, sale.product())
        .await
        .unwrap()
        .expect("the sale product");
    db.close().await;
    drop_database(target).await;
    let demand = settings.demand as i64 * settings.quantity;
    (output, Accounting::of(ledger, demand), out)
}
