//! Every fault scenario in its quick form: the verdict of each row must be the expected one —
//! the broken variant's failure observed *and* the fix holding, in the same run.

use crate::common;

use app::api::Strategy;
use clap::Parser;
use loadtest::cli::{Cli, Command};
use loadtest::scenario::{self, Name, Options, Selection, shard_cut_off, split_undersell};
use loadtest::schema::{ScenarioReport, Verdict};
use locks::Backend;

pub(crate) async fn quick(name: Name) -> ScenarioReport {
    let opts = Options {
        quick: true,
        app_binary: Some(common::app_binary()),
        ..Options::default()
    };
    let mut reports = scenario::run(Selection::One(name), &opts)
        .await
        .unwrap_or_else(|e| panic!("scenario {name}: {e:#}"));
    let report = reports.pop().expect("one report");
    eprintln!("{}", loadtest::report::scenarios::markdown(&report));
    report
}

/// The figures of `subject`'s row, as the scenario's own figures type.
macro_rules! row {
    ($report:expr, $subject:expr, $scenario:ident) => {
        $report
            .row(&$subject.to_string())
            .unwrap_or_else(|| panic!("no row `{}`", $subject))
            .figures::<loadtest::scenario::$scenario::Figures>()
            .unwrap_or_else(|e| panic!("row `{}`: {e}", $subject))
    };
}
pub(crate) use row;

pub(crate) fn assert_all_pass(report: &ScenarioReport) {
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
    let report = quick(Name::UnsafeRelease).await;
    assert_all_pass(&report);
    let broken = row!(report, Backend::RedisUnsafeRelease, unsafe_release);
    let correct = row!(report, Backend::Redis, unsafe_release);
    assert_eq!(broken.holders_at_once, 2);
    assert_eq!(correct.holders_at_once, 1);
    assert!(report.why.contains("deleted B's lock"), "{}", report.why);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_advisory_lock_behind_transaction_pooling_is_granted_to_two_clients_on_one_session()
 {
    use loadtest::scenario::advisory_behind_pgbouncer::Subject;
    sandbox::require_faults!();
    let report = quick(Name::AdvisoryBehindPgbouncer).await;
    assert_all_pass(&report);
    let broken = row!(
        report,
        Subject::SessionLockTransactionPooling,
        advisory_behind_pgbouncer
    );
    assert_eq!(broken.clients_holding, 2);
    assert_eq!(broken.server_sessions_holding, 1);
    assert_eq!(broken.session_a, broken.session_b);
    for fixed in [
        Subject::SessionLockSessionPooling,
        Subject::TransactionLockTransactionPooling,
    ] {
        let f = row!(report, fixed, advisory_behind_pgbouncer);
        assert_eq!(f.clients_holding, 1, "{fixed}");
        assert_eq!(f.left_held, 0, "{fixed}");
    }
    assert!(
        report.why.contains("handed B the server session"),
        "{}",
        report.why
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_loses_answered_orders_asynchronously_read_ones_after_commit_and_none_after_sync()
 {
    use loadtest::scenario::primary_failover::Subject;
    sandbox::require_faults!();
    let report = quick(Name::PrimaryFailover).await;
    assert_all_pass(&report);
    let lost = |s: Subject| row!(report, s, primary_failover).lost_orders;
    assert!(lost(Subject::Async) > 0);
    assert_eq!(lost(Subject::SemiSyncAfterSync), 0);
    assert!(lost(Subject::SemiSyncFallback) > 0);
    let after_commit = row!(report, Subject::SemiSyncAfterCommit, primary_failover);
    assert!(after_commit.seen_then_lost > 0, "{after_commit:?}");
    assert_eq!(
        row!(report, Subject::SemiSyncAfterSync, primary_failover).seen_unanswered,
        0
    );
    let fallback = row!(report, Subject::SemiSyncFallback, primary_failover);
    assert!(!fallback.semi_sync_on_at_kill, "{fallback:?}");
    assert_eq!(fallback.oversold, fallback.lost_orders);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_under_the_service_loses_answered_orders_unless_replicated_or_refused() {
    use loadtest::scenario::app_failover::Subject;
    sandbox::require_faults!();
    let report = quick(Name::AppFailover).await;
    assert_all_pass(&report);
    let lost = row!(report, Subject::Async, app_failover);
    assert!(lost.lost_orders > 0, "{lost:?}");
    assert_eq!(lost.oversold, lost.lost_orders as i64, "{lost:?}");
    assert_eq!(
        lost.oversell_in_database, 0,
        "the new primary balances: {lost:?}"
    );
    let kept = row!(report, Subject::SemiSyncAfterSync, app_failover);
    assert_eq!(kept.answered_after_cut, 0, "{kept:?}");
    assert!(kept.placed_on_retry > 0, "{kept:?}");
    assert_eq!((kept.lost_orders, kept.oversold), (0, 0), "{kept:?}");
    let trusted = row!(report, Subject::FellBack, app_failover);
    let refused = row!(report, Subject::FellBackRefused, app_failover);
    assert!(
        trusted.lost_orders > 1,
        "a fallen-back primary answers what a failover loses: {trusted:?}"
    );
    assert_eq!(
        (refused.lost_orders, refused.refused_while_async),
        (1, trusted.answered_after_cut - 1),
        "--require-semi-sync loses only the commit that waited out the timeout: {refused:?}"
    );
    assert_eq!(refused.placed_on_retry, refused.refused_while_async);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stock_check_on_a_lagging_replica_oversells_an_unconditional_deduction_only() {
    use loadtest::scenario::replica_stock_read::Subject;
    sandbox::require_faults!();
    let report = quick(Name::ReplicaStockRead).await;
    assert_all_pass(&report);
    let trusted = row!(report, Subject::Unconditional, replica_stock_read);
    let checked = row!(report, Subject::Conditional, replica_stock_read);
    assert!(trusted.oversold > 0, "{trusted:?}");
    assert_eq!(checked.oversold, 0, "{checked:?}");
    assert_eq!(
        checked.passed_check, trusted.passed_check,
        "the replica said yes alike"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_before_replication_double_grants_and_wait_1_prevents_acting_on_it() {
    sandbox::require_faults!();
    let report = quick(Name::RedisFailover).await;
    assert_all_pass(&report);
    let double = |subject: &str| row!(report, subject, redis_failover).double_grant;
    assert!(double("redis, no WAIT, link cut"));
    assert!(!double("redis + WAIT 1, link cut"));
    assert!(!double("redis + WAIT 1, link intact"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_zookeeper_session_fires_lost_and_the_fence_rejects_the_stale_write() {
    sandbox::require_faults!();
    let report = quick(Name::ZkSessionExpiry).await;
    assert_all_pass(&report);
    assert!(row!(report, Strategy::Zookeeper, zk_session_expiry).stale_write_accepted);
    assert!(!row!(report, Strategy::ZookeeperFenced, zk_session_expiry).stale_write_accepted);
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_costs_more_requests_per_grant_than_pub_sub_or_predecessor_watches() {
    sandbox::require_faults!();
    let report = quick(Name::Herd).await;
    assert_all_pass(&report);
    let per_grant = |b: Backend| row!(report, b, herd).requests_per_grant;
    let polling = per_grant(Backend::Redis);
    assert!(polling > per_grant(Backend::RedisWatchdog));
    assert!(polling > per_grant(Backend::ZooKeeper));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_lease_oversells_redis_lock_but_not_the_watchdog_or_the_fenced_lock() {
    sandbox::require_faults!();
    let report = quick(Name::LeaseExpiry).await;
    assert_all_pass(&report);
    let f = |s: Strategy| row!(report, s, lease_expiry);
    assert!(f(Strategy::RedisLock).oversell > 0);
    assert_eq!(f(Strategy::RedisWatchdog).oversell, 0);
    assert_eq!(f(Strategy::RedisLockFenced).oversell, 0);
    assert!(f(Strategy::RedisLockFenced).stale_write_rejected);
    assert!(report.why.contains("both sold it"), "{}", report.why);
    assert!(report.why.contains("fence refused it"), "{}", report.why);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_holder_defeats_the_watchdog_and_fencing_rejects_its_late_write() {
    sandbox::require_faults!();
    let report = quick(Name::ProcessPause).await;
    assert_all_pass(&report);
    let f = |s: Strategy| row!(report, s, process_pause);
    assert!(f(Strategy::RedisWatchdog).oversell > 0);
    assert_eq!(f(Strategy::RedisWatchdogFenced).oversell, 0);
    assert!(f(Strategy::RedisWatchdogFenced).stale_write_rejected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_mutex_holds_with_one_instance_and_oversells_with_three() {
    sandbox::require_faults!();
    let report = quick(Name::LocalMutex).await;
    assert_all_pass(&report);
    let f = |n: usize| {
        row!(
            report,
            format!("{} × {n}", Strategy::LocalMutex),
            local_mutex
        )
    };
    assert_eq!(f(1).oversell, 0);
    assert!(f(3).oversell > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_waiters_on_the_purchases_pool_starve_lock_free_buyers_and_a_pool_of_their_own_does_not()
 {
    use scenario::connection_cost::Deployment;
    sandbox::require_faults!();
    let report = quick(Name::ConnectionCost).await;
    assert_all_pass(&report);
    let f = |d: Deployment| row!(report, d, connection_cost);
    assert!(f(Deployment::OnePool).lock_free_starved());
    assert_eq!(f(Deployment::OwnPool).lock_free.no_connection, 0);
    let bounded = f(Deployment::BoundedWait);
    assert_eq!(bounded.locked.waited_out_pool, 0);
    assert_eq!(bounded.lock_free.no_connection, 0);
}

#[test]
fn every_scenario_and_all_are_accepted_by_name_and_an_unknown_one_is_refused_with_the_known_names()
{
    let parse = |name: &str| Cli::try_parse_from(["seckill-bench", "scenario", name]);
    for &s in Name::all() {
        let Ok(Cli {
            command: Command::Scenario(args),
        }) = parse(&s.to_string())
        else {
            panic!("`{s}` is not accepted");
        };
        assert_eq!(args.name, Selection::One(s));
    }
    assert!(matches!(
        parse("all").map(|c| c.command),
        Ok(Command::Scenario(args)) if args.name == Selection::All
    ));
    let text = parse("no-such-scenario").unwrap_err().to_string();
    assert!(
        Name::all().iter().all(|s| text.contains(&s.to_string())),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_holder_blocks_a_setnx_lock_for_good_and_every_other_lock_comes_back() {
    sandbox::require_faults!();
    let report = quick(Name::HolderCrash).await;
    assert_all_pass(&report);
    let f = |s: Strategy| row!(report, s, holder_crash);
    assert!(!f(Strategy::RedisSetnxNoTtl).recovered);
    for s in [
        Strategy::RedisLock,
        Strategy::Zookeeper,
        Strategy::DbLock,
        Strategy::Pessimistic,
    ] {
        assert!(f(s).recovered, "{s}");
    }
    for row in &report.rows {
        let f: scenario::holder_crash::Figures = row.figures().unwrap();
        assert_eq!(f.orders_lost_or_duplicated, 0, "{}", row.subject);
    }
    assert!(
        report.why.contains("no order was lost or doubled"),
        "{}",
        report.why
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_lua_deduction_and_the_insert_undersells_until_reconcile_puts_the_unit_back()
 {
    sandbox::require_faults!();
    let report = quick(Name::LuaCrashBeforeOrder).await;
    assert_all_pass(&report);
    let f = row!(report, "redis-lua, after the crash", lua_crash_before_order);
    assert_eq!(f.undersell_after_crash, 1);
    assert_eq!((f.counter_found, f.counter_after), (9, 10));
    assert!(
        f.retry_after_reconcile_voided && f.new_click_created,
        "{f:?}"
    );
    assert_eq!((f.units_sold, f.orders, f.oversell), (10, 10, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn stock_split_over_counters_undersells_without_the_fallback_and_sells_every_unit_with_it() {
    sandbox::require_faults!();
    let report = quick(Name::SplitUndersell).await;
    assert_all_pass(&report);
    let without = row!(
        report,
        split_undersell::Form::WithoutFallback,
        split_undersell
    );
    assert!(
        without.undersell > 0 && without.refused_sold_out > 0,
        "{without:?}"
    );
    assert_eq!(without.oversell, 0);
    let with = row!(report, split_undersell::Form::WithFallback, split_undersell);
    assert_eq!((with.sold, with.undersell, with.oversell), (40, 0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_read_by_a_killed_consumer_is_claimed_by_a_live_one_and_placed_exactly_once() {
    sandbox::require_faults!();
    let report = quick(Name::StreamConsumerCrash).await;
    assert_all_pass(&report);
    let f = row!(
        report,
        "redis-lua-stream, after the claim",
        stream_consumer_crash
    );
    assert!(f.held_by_dead_consumer > 0, "{f:?}");
    assert_eq!((f.orders, f.still_pending, f.oversell), (f.accepted, 0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_killed_while_a_batch_commits_fails_the_whole_batch_and_the_sale_completes_after_restart()
 {
    sandbox::require_faults!();
    let report = quick(Name::BatchedDbKill).await;
    assert_all_pass(&report);
    let f = row!(report, "batched: the killed batch", batched_db_kill);
    assert!(f.written_before_kill, "{f:?}");
    assert_eq!(
        (f.batch_503, f.batch_orders, f.batch_units_taken),
        (f.batch, 0, 0)
    );
    let f = row!(
        report,
        "batched: the sale after the restart",
        batched_db_kill
    );
    assert_eq!((f.oversell, f.undersell, f.lost_updates), (0, 0, 0));
    assert!(f.created_after_restart > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_failover_that_lost_deductions_oversells_and_wait_1_refuses_them_instead() {
    sandbox::require_faults!();
    let report = quick(Name::RedisFailoverStock).await;
    assert_all_pass(&report);
    let f = row!(report, "redis-lua, no WAIT", redis_failover_stock);
    assert_eq!((f.sold_during, f.refused_during), (5, 0), "{f:?}");
    assert_eq!(f.oversell, 5, "{f:?}");
    let f = row!(report, "redis-lua + WAIT 1", redis_failover_stock);
    assert_eq!((f.sold_during, f.refused_during), (0, 5), "{f:?}");
    assert_eq!((f.units_sold, f.orders, f.oversell), (20, 20, 0), "{f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_master_failover_that_lost_decrements_oversells_them_and_reconcile_repairs_the_counter()
 {
    sandbox::require_faults!();
    let report = quick(Name::ClusterFailoverStock).await;
    assert_all_pass(&report);
    let f = row!(
        report,
        "redis-lua on a cluster, no reconcile",
        cluster_failover_stock
    );
    assert_eq!(
        (f.sold_during, f.offered_again, f.oversell),
        (5, 5, 5),
        "{f:?}"
    );
    let f = row!(
        report,
        "redis-lua on a cluster, reconcile after the failover",
        cluster_failover_stock
    );
    assert_eq!(f.offered_again, 5, "{f:?}");
    assert_eq!(
        f.counter_after_reconcile,
        Some(f.counter_before_kill),
        "{f:?}"
    );
    assert_eq!((f.units_sold, f.orders, f.oversell), (20, 20, 0), "{f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_cut_off_from_the_app_refuses_its_product_503_while_another_shard_sells() {
    sandbox::require_faults!();
    let report = quick(Name::ShardCutOff).await;
    assert_all_pass(&report);
    let f = row!(report, shard_cut_off::Product::CutOff, shard_cut_off);
    assert_eq!((f.created_during, f.unavailable_during), (0, 5), "{f:?}");
    assert_eq!((f.units_sold, f.oversell, f.stranded), (20, 0, 0), "{f:?}");
    let f = row!(report, shard_cut_off::Product::OtherShard, shard_cut_off);
    assert_eq!((f.created_during, f.units_sold), (5, 20), "{f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_sized_on_loopback_runs_out_far_away_and_only_renewal_or_a_fence_keeps_the_stock() {
    sandbox::require_faults!();
    let report = quick(Name::LeaseDistance).await;
    assert_all_pass(&report);
    let far = row!(report, "redis-lock, 380 ms away", lease_distance);
    assert!(far.oversell > 0, "{far:?}");
    let near = row!(report, "redis-lock, 0 ms away", lease_distance);
    assert_eq!(
        (near.oversell, near.units_sold),
        (0, near.stock),
        "{near:?}"
    );
    let renewed = row!(report, "redis-watchdog, 380 ms away", lease_distance);
    assert_eq!(renewed.oversell, 0, "{renewed:?}");
    let fenced = row!(report, "redis-lock-fenced, 380 ms away", lease_distance);
    assert_eq!(fenced.oversell, 0, "{fenced:?}");
    assert!(fenced.lock_lost > 0, "{fenced:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_path_to_redis_goes_silent_loses_its_watchdog_lease_and_only_the_fence_stops_its_write()
 {
    sandbox::require_faults!();
    let report = quick(Name::SilentPath).await;
    assert_all_pass(&report);
    let f = row!(report, Strategy::RedisWatchdog, silent_path);
    assert_eq!((f.orders, f.oversell), (2, 1), "{f:?}");
    let f = row!(report, Strategy::RedisWatchdogFenced, silent_path);
    assert_eq!((f.orders, f.oversell), (1, 0), "{f:?}");
    assert!(f.stale_write_rejected, "{f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zookeeper_leader_killed_under_contention_leaves_a_clean_lock_history_and_grants_resume_before_it_is_back()
 {
    sandbox::require_faults!();
    let report = quick(Name::ZkLeaderLoss).await;
    assert_all_pass(&report);
    let f = row!(report, "zookeeper, leader killed", zk_leader_loss);
    assert_eq!(f.violations, 0);
    assert!(f.grants_before > 0 && f.grants_after > 0, "{f:?}");
    // Liveness: two of three members are a majority; the lock must not wait for the third.
    assert!(f.regained_while_down_ms.is_some(), "{f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_etcd_leader_killed_under_contention_leaves_a_clean_lock_history_and_grants_resume_before_it_is_back()
 {
    sandbox::require_faults!();
    let report = quick(Name::EtcdLeaderLoss).await;
    assert_all_pass(&report);
    let f = row!(report, "etcd, leader killed", etcd_leader_loss);
    assert_eq!(f.violations, 0);
    assert!(f.grants_before > 0 && f.grants_after > 0, "{f:?}");
    // Liveness: two of three members are a majority; the lock must not wait for the third.
    assert!(f.regained_while_down_ms.is_some(), "{f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zookeeper_holder_cut_off_with_its_member_is_fenced_off_and_told_it_lost() {
    sandbox::require_faults!();
    let report = quick(Name::ZkPartition).await;
    assert_all_pass(&report);
    let f = row!(
        report,
        "zookeeper-fenced, holder's member cut off",
        zk_partition
    );
    assert!(f.token_b > f.token_a && f.stale_write_refused, "{f:?}");
    assert!(f.a_lost_after_cut_ms.is_some(), "{f:?}");
    assert_eq!(
        (
            f.checked.tokens_not_increasing,
            f.checked.stale_writes_accepted
        ),
        (0, 0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_failover_to_a_replica_that_missed_the_grant_makes_two_holders_and_wait_1_tells_the_holder()
 {
    sandbox::require_faults!();
    let report = quick(Name::SentinelFailover).await;
    assert_all_pass(&report);
    let f = row!(
        report,
        "redis-watchdog via Sentinel, no WAIT",
        sentinel_failover
    );
    assert!(!f.promoted_had_grant && f.checked.overlaps > 0, "{f:?}");
    assert!(f.token_a.is_some() && f.token_b.is_some(), "{f:?}");
    let f = row!(
        report,
        "redis-watchdog via Sentinel + WAIT 1",
        sentinel_failover
    );
    assert_eq!((f.a_unreplicated_acks, f.token_a), (Some(0), None), "{f:?}");
    assert_eq!(
        f.checked.overlaps + f.checked.tokens_not_increasing + f.checked.stale_writes_accepted,
        0,
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flash_sale_on_the_clusters_with_the_leader_killed_mid_sale_never_oversells_a_fenced_strategy()
 {
    sandbox::require_faults!();
    let report = quick(Name::ClusterSale).await;
    assert_all_pass(&report);
    for s in [
        Strategy::ZookeeperFenced,
        Strategy::EtcdFenced,
        Strategy::RedisWatchdogFenced,
    ] {
        let f = row!(report, format!("{s}, leader killed"), cluster_sale);
        assert!(f.fenced, "{s}: {f:?}");
        assert_eq!((f.oversell, f.units_sold), (0, f.stock), "{s}: {f:?}");
        assert!(f.sold_before_kill > 0, "{s}: {f:?}");
    }
}

/// The full form (real leases and timeouts, several minutes): `cargo nextest run -p loadtest
/// --run-ignored only scenarios::`. Prints every report. `SECKILL_SCENARIO=<name>` runs
/// one scenario instead of all.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "minutes long; the quick forms above run in CI"]
async fn every_scenario_in_its_full_form_meets_its_expectations() {
    sandbox::require_faults!();
    let opts = Options {
        quick: false,
        app_binary: Some(common::app_binary()),
        ..Options::default()
    };
    let selection = match std::env::var("SECKILL_SCENARIO") {
        Ok(name) => clap::ValueEnum::from_str(&name, false).expect("a scenario name or `all`"),
        Err(_) => Selection::All,
    };
    let reports = scenario::run(selection, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    for report in &reports {
        println!("{}", loadtest::report::scenarios::markdown(report));
    }
    for report in &reports {
        assert_all_pass(report);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_lock_on_galera_holds_on_one_node_only_and_a_certification_abort_is_answered_busy() {
    sandbox::require_faults!();
    let report = quick(Name::GaleraForUpdate).await;
    assert_all_pass(&report);
    let one = row!(
        report,
        "pessimistic, every instance writing to node 1",
        galera_for_update
    );
    assert_eq!((one.cert_failures, one.bf_aborts), (0, 0), "{one:?}");
    assert!(!one.second_answered_first, "{one:?}");
    for strategy in ["pessimistic", "conditional"] {
        let each = row!(
            report,
            format!("{strategy}, each instance writing to a node of its own"),
            galera_for_update
        );
        assert!(each.cert_failures + each.bf_aborts >= 1, "{each:?}");
        assert_eq!(each.unavailable, 0, "{each:?}");
        assert_eq!(
            (each.units_sold, each.oversell),
            (each.stock, 0),
            "{each:?}"
        );
    }
    let retried = row!(
        report,
        "pessimistic, each instance writing to a node of its own, a rolled-back purchase run \
         again (up to 5 times)",
        galera_for_update
    );
    let answers = [&retried.first_holder, &retried.second_buyer];
    assert!(
        answers.iter().any(|a| a.ends_with("sold_out")),
        "{retried:?}"
    );
    assert!(!answers.iter().any(|a| a.ends_with("busy")), "{retried:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_galera_node_cut_off_or_killed_mid_sale_answers_503_and_the_majority_keeps_every_order() {
    sandbox::require_faults!();
    let report = quick(Name::GaleraPartition).await;
    assert_all_pass(&report);
    for loss in ["cut off", "killed"] {
        let lost = row!(
            report,
            format!("conditional, node 2 {loss}"),
            galera_partition
        );
        assert!(lost.unavailable > 0, "{lost:?}");
        assert_eq!(lost.broken, 0, "{lost:?}");
        assert_eq!(lost.health_while_cut, "503 backend_unavailable", "{lost:?}");
        assert_eq!(lost.oversell, 0, "{lost:?}");
        // Every answered order is kept; an order beyond the answers only where a buyer was
        // told `503`: a commit that reached the majority while its answer was lost with the
        // node (seen once in a full run: 60 orders for 59 answered).
        let unanswered = -lost.acknowledged_minus_orders;
        assert!(
            (0..=lost.unavailable as i64).contains(&unanswered),
            "{lost:?}"
        );
        assert_eq!(lost.orders_on_node_2_after, lost.orders, "{lost:?}");
    }
}
