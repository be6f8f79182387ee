//! Every fault scenario in its quick form: the verdict of each row must be the expected one —
//! the broken variant's failure observed *and* the fix holding, in the same run.

// Compiled in here until `loadtest::scenario` is part of the library.
use loadtest::scenario;

#[allow(dead_code)]
mod common;

use scenario::{ScenarioOptions, ScenarioReport, Verdict};

async fn quick(name: &str) -> ScenarioReport {
    let opts = ScenarioOptions {
        quick: true,
        app_binary: Some(common::app_binary()),
    };
    let mut reports = scenario::run(name, &opts)
        .await
        .unwrap_or_else(|e| panic!("scenario {name}: {e:#}"));
    let report = reports.pop().expect("one report");
    eprintln!("{}", report.markdown());
    report
}

fn figure(report: &ScenarioReport, subject: &str, name: &str) -> f64 {
    report
        .row(subject)
        .unwrap_or_else(|| panic!("no row `{subject}`"))
        .get(name)
        .unwrap_or_else(|| panic!("row `{subject}` has no figure `{name}`"))
}

fn assert_all_pass(report: &ScenarioReport) {
    for row in &report.rows {
        assert_eq!(
            row.verdict,
            Verdict::Pass,
            "{}: `{}` expected {}, observed {}",
            report.scenario,
            row.subject,
            row.expected,
            row.observed
        );
    }
    assert!(report.passed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_del_release_frees_the_next_holders_lock_and_compare_and_delete_does_not() {
    sandbox::require_faults!();
    let report = quick("unsafe-release").await;
    assert_all_pass(&report);
    assert_eq!(
        figure(&report, "redis-unsafe-release", "holders_at_once"),
        2.0
    );
    assert_eq!(figure(&report, "redis", "holders_at_once"), 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_before_replication_double_grants_and_wait_1_prevents_acting_on_it() {
    sandbox::require_faults!();
    let report = quick("redis-failover").await;
    assert_all_pass(&report);
    assert_eq!(
        figure(&report, "redis, no WAIT, link cut", "double_grants"),
        1.0
    );
    assert_eq!(
        figure(&report, "redis + WAIT 1, link cut", "double_grants"),
        0.0
    );
    assert_eq!(
        figure(&report, "redis + WAIT 1, link intact", "double_grants"),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_zookeeper_session_fires_lost_and_the_fence_rejects_the_stale_write() {
    sandbox::require_faults!();
    let report = quick("zk-session-expiry").await;
    assert_all_pass(&report);
    assert_eq!(figure(&report, "zookeeper", "stale_writes_accepted"), 1.0);
    assert_eq!(
        figure(&report, "zookeeper-fenced", "stale_writes_rejected"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_costs_more_requests_per_grant_than_pub_sub_or_predecessor_watches() {
    sandbox::require_faults!();
    let report = quick("herd").await;
    assert_all_pass(&report);
    let polling = figure(&report, "redis", "requests_per_grant");
    assert!(polling > figure(&report, "redis-watchdog", "requests_per_grant"));
    assert!(polling > figure(&report, "zookeeper", "requests_per_grant"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_lease_oversells_redis_lock_but_not_the_watchdog_or_the_fenced_lock() {
    sandbox::require_faults!();
    let report = quick("lease-expiry").await;
    assert_all_pass(&report);
    assert!(figure(&report, "redis-lock", "oversell") > 0.0);
    assert_eq!(figure(&report, "redis-watchdog", "oversell"), 0.0);
    assert_eq!(figure(&report, "redis-lock-fenced", "oversell"), 0.0);
    assert_eq!(
        figure(&report, "redis-lock-fenced", "stale_writes_rejected"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_holder_defeats_the_watchdog_and_fencing_rejects_its_late_write() {
    sandbox::require_faults!();
    let report = quick("process-pause").await;
    assert_all_pass(&report);
    assert!(figure(&report, "redis-watchdog", "oversell") > 0.0);
    assert_eq!(figure(&report, "redis-watchdog-fenced", "oversell"), 0.0);
    assert_eq!(
        figure(&report, "redis-watchdog-fenced", "stale_writes_rejected"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_mutex_holds_with_one_instance_and_oversells_with_three() {
    sandbox::require_faults!();
    let report = quick("local-mutex").await;
    assert_all_pass(&report);
    assert_eq!(figure(&report, "local-mutex × 1", "oversell"), 0.0);
    assert!(figure(&report, "local-mutex × 3", "oversell") > 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_scenario_is_refused_with_the_known_names() {
    let err = scenario::run("no-such-scenario", &ScenarioOptions::default())
        .await
        .expect_err("unknown scenario");
    let text = err.to_string();
    assert!(text.contains("unknown scenario"), "{text}");
    assert!(
        scenario::NAMES.iter().all(|name| text.contains(name)),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_holder_blocks_a_setnx_lock_for_good_and_every_other_lock_comes_back() {
    sandbox::require_faults!();
    let report = quick("holder-crash").await;
    assert_all_pass(&report);
    assert_eq!(figure(&report, "redis-setnx-no-ttl", "recovered"), 0.0);
    for subject in ["redis-lock", "zookeeper", "db-lock", "pessimistic"] {
        assert_eq!(figure(&report, subject, "recovered"), 1.0, "{subject}");
    }
    for row in &report.rows {
        assert_eq!(
            row.get("orders_lost_or_duplicated"),
            Some(0.0),
            "{}",
            row.subject
        );
    }
}

/// The full form (real leases and timeouts, several minutes): `cargo nextest run -p loadtest
/// --test scenarios --run-ignored only`. Prints every report. `SECKILL_SCENARIO=<name>` runs
/// one scenario instead of all.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "minutes long; the quick forms above run in CI"]
async fn every_scenario_in_its_full_form_meets_its_expectations() {
    sandbox::require_faults!();
    let opts = ScenarioOptions {
        quick: false,
        app_binary: Some(common::app_binary()),
    };
    let name = std::env::var("SECKILL_SCENARIO").unwrap_or_else(|_| "all".into());
    let reports = scenario::run(&name, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    for report in &reports {
        println!("{}", report.markdown());
    }
    for report in &reports {
        assert_all_pass(report);
    }
}
