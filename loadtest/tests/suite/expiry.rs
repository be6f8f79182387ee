//! The expiry phase through the whole `seckill-bench run` path: for each deployable strategy,
//! loops whose buyers pay at once or never, with every instance's sweep running and with every
//! sweep paused; the sweeps expire orders only when they run, each round is compared, the
//! payers' payments are taken, an unsafe strategy is left out, and the figures reach the JSON and the Markdown; and no other
//! phase leaves orders behind that would fall due beside it.

use crate::common;

use app::api::Strategy;
use loadtest::phase::expiry::{self, ExpiryCost, ExpiryShape};
use loadtest::run::run_in;

const SHAPE: ExpiryShape = ExpiryShape {
    payment_window_ms: 500,
    non_payer_share: 0.3,
    // Longer than the window and the app's sweep interval (1 s): a sweep resumed before the
    // loop runs at least one round over due orders.
    warmup: 1.5,
    seconds: 1.5,
    rounds: 2,
};

#[tokio::test(flavor = "multi_thread")]
async fn the_expiry_phase_expires_unpaid_orders_only_while_the_sweeps_run_and_compares_each_round()
{
    let strategies = [Strategy::Conditional, Strategy::RedisLua, Strategy::Naive];
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    settings.phases.put(expiry::NAME, SHAPE);
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let run = run_in(&settings, &target, out.path()).await.unwrap();
    let report = &run.report;

    let names: Vec<Strategy> = (report.each::<ExpiryCost>(expiry::NAME).iter())
        .map(|c| c.strategy.name)
        .collect();
    assert_eq!(
        names,
        [Strategy::Conditional, Strategy::RedisLua],
        "the deployable strategies, and not the unsafe one"
    );
    for c in report.each::<ExpiryCost>(expiry::NAME) {
        let name = c.strategy.name;
        eprintln!(
            "{name}: p99 with {} µs, without {} µs, ratios {:?}, expired {} in {:.1} s, {:?}",
            c.with_sweep.latency.p99_us,
            c.without_sweep.latency.p99_us,
            c.p99_ratios,
            c.expired,
            c.swept_seconds,
            c.payments
        );
        assert!(c.expired > 0, "{name}: the running sweeps expired orders");
        let paid = &c.payments;
        assert!(
            paid.paid > 0 && paid.never_paid > 0,
            "{name}: some buyers paid and some never did: {paid:?}"
        );
        assert_eq!(
            paid.refused, 0,
            "{name}: every payment was taken or came too late: {paid:?}"
        );
        assert_eq!(c.expired_unswept, 0, "{name}: paused sweeps expired none");
        assert_eq!(
            c.others_due, 0,
            "{name}: no other product's orders fell due"
        );
        assert_eq!(c.p99_ratios.len(), SHAPE.rounds, "{name}");
        assert!(c.with_sweep.outcomes.created > 0, "{name}");
        assert!(c.without_sweep.outcomes.created > 0, "{name}");
        assert!(c.p99_added().is_some(), "{name}");
    }

    let read = loadtest::schema::json::read(&out.path().join("latest")).unwrap();
    assert_eq!(
        read.each::<ExpiryCost>(expiry::NAME),
        report.each::<ExpiryCost>(expiry::NAME),
        "the JSON holds the figures"
    );
    assert_eq!(expiry::shape(&read.settings), Some(&SHAPE));
    let md = std::fs::read_to_string(out.path().join("latest/report.md")).unwrap();
    assert!(md.contains("## The expiry sweep beside purchases"), "{md}");
    for c in report.each::<ExpiryCost>(expiry::NAME) {
        assert!(
            md.lines()
                .any(|l| l.starts_with(&format!("| `{}` |", c.strategy.name))
                    && l.contains(&format!("{:.0}", c.expired_per_second()))),
            "no expiry row for {}:\n{md}",
            c.strategy.name
        );
    }
    common::drop_database(&target).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_order_a_phase_leaves_behind_falls_due_while_the_run_goes_on() {
    // The sale's orders stay in the database (the accounting is read from them); were they
    // reservations with the app's deadline, 15 minutes, they would fall due in the middle of
    // a full run, and every sweep would spend a later phase expiring them.
    let settings = common::quick(Strategy::Conditional);
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    run_in(&settings, &target, out.path()).await.unwrap();
    let db = common::database(&target).await;
    let (reserved, due_within_a_day): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(CASE WHEN pay_by < NOW(6) + INTERVAL 1 DAY THEN 1 END) \
         FROM orders WHERE state = 'reserved'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(reserved > 0, "the sale's orders are left, as reservations");
    assert_eq!(due_within_a_day, 0, "of {reserved} reserved orders left");
    db.close().await;
    common::drop_database(&target).await;
}
