//! What is committed reads as the program writes it: the latest committed run through the
//! report's schema, and an older one refused with its version.

use std::path::PathBuf;

use loadtest::report::json;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

#[test]
fn the_committed_run_reads_through_the_report_schema() {
    let run = json::read(&workspace().join("results/latest")).unwrap();
    assert!(!run.strategies.is_empty());
    assert!(
        run.strategies
            .iter()
            .all(|s| s.sale.accounting.initial_stock > 0)
    );
}

#[test]
fn a_run_written_before_the_schema_it_follows_is_refused_with_a_clear_message() {
    let e = json::read(&workspace().join("results/2026-11-21T22-35-25Z")).unwrap_err();
    let message = format!("{e:#}");
    assert!(message.contains("schema version"), "{message}");
}
