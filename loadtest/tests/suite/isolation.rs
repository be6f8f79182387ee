//! The isolation matrix on real engines: each failure happens wherever its engine's rules let
//! it and never where they stop it, counted from what the databases hold.

use std::sync::OnceLock;

use clap::Parser;
use loadtest::cli::{Cli, Command};
use loadtest::isolation::engine::{Engine, Level};
use loadtest::isolation::failure::Failure;
use loadtest::isolation::schema::IsolationReport;
use loadtest::isolation::verdict::{Expect, Verdict, expect};
use loadtest::isolation::{Servers, report};

/// One quick matrix for every test of this file (it runs every cell on both engines), with
/// the Markdown it wrote.
fn matrix() -> &'static (IsolationReport, String) {
    static MATRIX: OnceLock<(IsolationReport, String)> = OnceLock::new();
    MATRIX.get_or_init(|| {
        std::thread::spawn(|| {
            let Command::Isolation(args) =
                Cli::parse_from(["seckill-bench", "isolation", "--quick"]).command
            else {
                unreachable!()
            };
            let settings = args.settings().unwrap();
            let servers = Servers {
                mariadb: sandbox::shared::database_url(),
                postgres: sandbox::shared::postgres_url(),
            };
            let out = tempfile::tempdir().unwrap();
            let runtime = tokio::runtime::Runtime::new().unwrap();
            let output = runtime
                .block_on(loadtest::isolation::run(&settings, &servers, out.path()))
                .unwrap();
            let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
            (output.report, md)
        })
        .join()
        .expect("the matrix")
    })
}

#[test]
fn every_failure_shows_where_its_level_lets_it_and_never_where_its_level_stops_it() {
    let (r, md) = matrix();
    let expected_cells: usize =
        Engine::ALL.iter().map(|e| e.levels().len()).sum::<usize>() * Failure::ALL.len();
    assert_eq!(r.cells.len(), expected_cells);
    for cell in &r.cells {
        let (expected, why) = expect(cell.failure, cell.engine, cell.level);
        let verdict = Verdict::of(cell);
        assert!(
            verdict.agrees(expected),
            "{:?} on {:?} at {:?}: {verdict:?} where the rule says {expected:?} ({why}): {:?}",
            cell.failure,
            cell.engine,
            cell.level,
            cell.rounds
        );
        if expected == Expect::Stops {
            assert_eq!(cell.clicks().gave_up, 0, "{cell:?}");
        }
    }
    assert!(
        md.contains("Every cell showed what its engine's rules predict"),
        "{md}"
    );
}

#[test]
fn postgres_refuses_the_second_writer_at_repeatable_read_where_mariadb_loses_its_update() {
    let (r, md) = matrix();
    let maria = r
        .cell(Failure::LostUpdate, Engine::Mariadb, Level::RepeatableRead)
        .unwrap();
    let pg = r
        .cell(Failure::LostUpdate, Engine::Postgres, Level::RepeatableRead)
        .unwrap();
    assert!(maria.failures() > 0, "{maria:?}");
    assert_eq!(pg.failures(), 0, "{pg:?}");
    assert!(
        pg.clicks()
            .refusals
            .contains_key("40001 serialization failure"),
        "{pg:?}"
    );
    // The conditional update is safe everywhere, and retries at PostgreSQL's REPEATABLE READ.
    let conditional = r
        .cell(
            Failure::Conditional,
            Engine::Postgres,
            Level::RepeatableRead,
        )
        .unwrap();
    assert_eq!(conditional.failures(), 0);
    assert!(conditional.clicks().refusals_total() > 0, "{conditional:?}");
    assert!(
        md.contains("**Lost update, REPEATABLE READ**: MariaDB lets it through"),
        "{md}"
    );
}

#[test]
fn the_matrix_s_report_is_written_again_from_its_figures_alone() {
    let (r, md) = matrix();
    let dir = tempfile::tempdir().unwrap();
    report::write_all(dir.path(), r).unwrap();
    report::write_all(dir.path(), &report::read(dir.path()).unwrap()).unwrap();
    assert_eq!(
        &std::fs::read_to_string(dir.path().join("report.md")).unwrap(),
        md
    );
    let page = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(page.contains("<table class=\"sortable\">"), "{page}");
}
