//! `run --engine postgres`: the app instances keep their rows on PostgreSQL, the run reads what
//! they wrote there (the sale's ledger, the flood's limit, the expiry's due orders) and measures
//! the SQL baselines on it beside `pgbench`.

use crate::common;

use app::api::Strategy;
use loadtest::phase::expiry::{self, ExpiryCost, ExpiryShape};
use loadtest::phase::flood::{FloodResult, FloodShape, NAME as FLOOD};
use loadtest::run::run_in;
use loadtest::schema::world::Engine;
use loadtest::schema::{BaselineName, ToolStatus};

#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_postgres_sells_exactly_the_stock_and_measures_its_baselines_beside_pgbench() {
    let mut target = common::target();
    target.endpoints.postgres_url = Some(sandbox::shared::postgres_url());
    target.engine = Engine::Postgres;
    let mut settings = common::quick(Strategy::Conditional);
    settings.baselines = true;
    settings.phases.put(
        FLOOD,
        FloodShape {
            users: 400,
            units: 20,
            payment_window_ms: 1_000,
            kill_mid_sale: false,
            ..crate::flood::shape()
        },
    );
    let shape = ExpiryShape {
        payment_window_ms: 500,
        non_payer_share: 0.3,
        warmup: 1.5,
        seconds: 1.5,
        rounds: 1,
    };
    settings.phases.put(expiry::NAME, shape);
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    drop_database(&target).await;
    let report = &output.report;

    assert_eq!(report.world.map(|w| w.engine), Some(Engine::Postgres));
    let folder = output
        .dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(folder.ends_with("-postgres"), "{folder}");
    let record = &report.strategies[0];
    let sale = &record.sale.as_ref().expect("the sale").accounting;
    assert_eq!(
        (
            sale.oversell,
            sale.undersell,
            sale.lost_updates,
            sale.units_sold
        ),
        (0, 0, 0, settings.stock),
        "{sale:?}"
    );
    let flood = record.phases.get::<FloodResult>(FLOOD).expect("the flood");
    assert_eq!(flood.crowd.beyond_limit, 0, "{flood:?}");
    let expiry: &ExpiryCost = (record.phases.get(expiry::NAME)).expect("the expiry sweep");
    assert!(expiry.expired > 0, "{expiry:?}");

    // The SQL baselines on PostgreSQL, each beside pgbench running the same statements.
    for name in [BaselineName::SqlHotRow, BaselineName::SqlConditional] {
        let baseline = (report.baselines.iter()).find(|b| b.name == name).unwrap();
        let tool = baseline.standard_tool.as_ref().expect("a standard tool");
        assert_eq!(
            (tool.tool.as_str(), tool.status),
            ("pgbench", ToolStatus::Measured),
            "{name}: {tool:?}"
        );
    }
    // The report names PostgreSQL's settings.
    assert!(
        report
            .environment
            .postgres
            .contains_key("synchronous_commit")
    );
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("PostgreSQL holds the rows"), "{md}");
}

/// Drops the test's own database from the shared PostgreSQL.
async fn drop_database(target: &loadtest::rig::Target) {
    let server = app::db::open(&sandbox::shared::postgres_url())
        .await
        .unwrap();
    let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", target.database);
    app::each_engine!(&server, |pool, _e| {
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(pool)
            .await
            .unwrap();
    });
    server.close().await;
}
