//! The flood through the whole `seckill-bench flood` path (app processes, the arriving crowd,
//! the report): safe strategies keep the stock and the per-user limit, early bots buy nothing,
//! every click is answered or counted, the same crowd asking `GET /api/noop` is timed beside
//! each flood, the units of the winners who never pay sell again exactly once while an
//! instance dies, the instance started again in its place is counted in the CPU of what follows,
//! `racy-limit` lets one account through more than once, and the same crowd sold first come is
//! served in the order it clicked.

use crate::common;

use app::api::{ErrorCode, Safety, Strategy};
use loadtest::phase::flood::{FloodResult, FloodShape, NAME as FLOOD};
use loadtest::run::run_in;
use loadtest::schema::{Of, RunReport};

pub(crate) fn shape() -> FloodShape {
    FloodShape {
        users: 800,
        units: 40,
        burst_ms: 500,
        double_click_share: 0.1,
        shared_account_bot_share: 0.03,
        early_bot_share: 0.02,
        early_by_ms: 300,
        retries: 0,
        instances: 2,
        non_payer_share: 0.3,
        payment_window_ms: 2_000,
        kill_mid_sale: true,
        first_come: false,
    }
}

async fn flood(strategies: &[Strategy]) -> (RunReport, tempfile::TempDir) {
    flood_of(strategies, shape()).await
}

async fn flood_of(strategies: &[Strategy], shape: FloodShape) -> (RunReport, tempfile::TempDir) {
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    settings.phases.put(FLOOD, shape);
    assert!(loadtest::phase::only_before_sale(&mut settings));
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    common::drop_database(&target).await;
    (output.report, out)
}

fn assert_every_click_counted(f: &Of<'_, FloodResult>) {
    assert_eq!(
        f.crowd.outcomes.total(),
        f.crowd.clicks,
        "{}: {:?}",
        f.strategy.name,
        f
    );
    let answered: u64 = (f.timeline.iter())
        .map(|s| s.bought + s.sold_out + s.rules + s.shed + s.failed)
        .sum();
    assert_eq!(
        answered, f.crowd.clicks,
        "{}: the timeline lost clicks",
        f.strategy.name
    );
}

/// The second act: the unpaid orders expired once each, an instance was killed meanwhile,
/// the returned units sold again and were paid, and the invariant held throughout.
fn assert_second_act_keeps_every_unit(f: &Of<'_, FloodResult>) {
    let name = f.strategy.name;
    let r = f.resale.expect("a second act after the clicks");
    assert_eq!(
        r.unaccounted(),
        0,
        "{name}: initial = left + reserved + paid: {r:?}"
    );
    assert_eq!(
        (
            r.accounting.oversell,
            r.accounting.stranded,
            r.payments_refused
        ),
        (0, 0, 0),
        "{name}: {r:?}"
    );
    assert!(
        r.killed_after_ms.is_some(),
        "{name}: an instance was killed mid-sale"
    );
    assert!(r.never_paid > 0, "{name}: some winners never paid: {r:?}");
    assert_eq!(
        r.returned,
        (r.never_paid + r.payments_too_late + r.payments_failed) as i64,
        "{name}: every unpaid order expired, once: {r:?}"
    );
    assert!(
        r.bought_on_return > 0,
        "{name}: returned units sold again: {r:?}"
    );
    assert_eq!(
        (r.paid, r.left, r.reserved),
        (f.crowd.accounting.initial_stock, 0, 0),
        "{name}: the sale ended with every unit paid: {r:?}"
    );
    assert!(r.ended_after_ms.is_some(), "{name}: {r:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn safe_strategies_keep_the_stock_and_one_per_customer_through_a_flood_and_refuse_early_bots()
{
    let strategies = [Strategy::Conditional, Strategy::RedisLua, Strategy::Batched];
    let (report, out) = flood(&strategies).await;
    assert_eq!(report.each::<FloodResult>(FLOOD).len(), strategies.len());
    for f in report.each::<FloodResult>(FLOOD) {
        let name = f.strategy.name;
        assert_eq!(f.strategy.safety, Safety::Safe);
        assert_every_click_counted(&f);
        let a = &f.crowd.accounting;
        assert_eq!(
            (a.oversell, f.crowd.beyond_limit, a.stranded),
            (0, 0, 0),
            "{name}: {a:?}"
        );
        assert_eq!(
            f.crowd.outcomes.refused(ErrorCode::SaleNotStarted),
            f.early_clicks,
            "{name}: every early bot is refused, and nobody else"
        );
        assert!(
            f.crowd.outcomes.refused(ErrorCode::LimitReached) > 0,
            "{name}: the shared account's bots were not refused: {:?}",
            f.crowd.outcomes
        );
        // Orders whose deadline passed before the books were read count as returned.
        assert_eq!(
            a.units_sold + a.returned,
            f.crowd.outcomes.created as i64,
            "{name}: {a:?}"
        );
        assert_second_act_keeps_every_unit(&f);
        // Every unit sold (units of unpaid orders may be back on the shelf by the time the
        // books are read, when the clicks took longer than the payment window).
        assert!(f.crowd.sold_out_after_ms.is_some(), "{name}: {a:?}");
        let refusals = f.after_sold_out.expect("refusals timed once sold out");
        assert!(refusals.refusals_per_second > 0.0 && refusals.noop_per_second > 0.0);
        let noop = f.noop_flood.expect("the same crowd asked GET /api/noop");
        assert_eq!(
            (noop.clicks, noop.served),
            (f.crowd.clicks, f.crowd.clicks),
            "{name}: the no-op flood is the flood's crowd, every request answered"
        );
        assert!(f.answered_over_noop().is_some_and(|r| r > 0.0), "{name}");
    }
    let md = std::fs::read_to_string(out.path().join("latest/report.md")).unwrap();
    assert!(md.contains("## The flood"), "{md}");
    assert!(md.contains("No strategy broke a rule in the flood"), "{md}");
    assert!(md.contains("÷ no-op flood"), "{md}");
    let html = std::fs::read_to_string(out.path().join("latest/report.html")).unwrap();
    let flood_section = &html[html
        .find("<section id=\"flood\">")
        .expect("a flood section")..];
    for f in report.each::<FloodResult>(FLOOD) {
        assert!(
            flood_section.contains(&format!("data-chart=\"flood-{}.svg\"", f.strategy.name)),
            "{}'s flood chart is drawn in the page",
            f.strategy.name
        );
    }
    assert!(
        !html.contains("flood-conditional.svg)"),
        "the page links no chart file"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_app_instance_is_counted_in_the_loops_cpu_after_the_flood_restarted_one() {
    let mut settings = common::quick(Strategy::Conditional);
    settings.phases.put(FLOOD, shape());
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let report = run_in(&settings, &target, out.path()).await.unwrap().report;
    common::drop_database(&target).await;
    let record = &report.strategies[0];
    let resale = (record.phases.get::<FloodResult>(FLOOD))
        .and_then(|f| f.resale.as_ref())
        .expect("the flood's second act");
    assert!(
        resale.killed_after_ms.is_some(),
        "an instance was killed: {resale:?}"
    );
    let cpu = (record.loops.as_ref())
        .and_then(|l| l.cpu.as_ref())
        .expect("the closed loops' CPU");
    let apps: Vec<&str> = (cpu.processes.iter())
        .filter(|p| p.group == "app")
        .map(|p| p.process.as_str())
        .collect();
    assert_eq!(apps, ["app-0", "app-1"], "{cpu:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn early_bots_are_refused_however_late_their_clicks_reach_the_service() {
    // No early window at all: the bots fire at the moment the sale was planned to open, as a
    // machine too busy to send them in time would make them. The sale opens only once every
    // early click has its answer, so each is still refused `sale_not_started`.
    let shape = FloodShape {
        users: 300,
        units: 20,
        early_bot_share: 0.05,
        early_by_ms: 0,
        non_payer_share: 0.0,
        payment_window_ms: 0,
        kill_mid_sale: false,
        ..shape()
    };
    let (report, _out) = flood_of(&[Strategy::Conditional], shape).await;
    let f = report.each::<FloodResult>(FLOOD)[0];
    assert_every_click_counted(&f);
    assert!(f.early_clicks > 0, "{f:?}");
    assert_eq!(
        f.crowd.outcomes.refused(ErrorCode::SaleNotStarted),
        f.early_clicks,
        "every early bot is refused, and nobody else: {:?}",
        f.crowd.outcomes
    );
    assert_eq!(
        (f.crowd.accounting.oversell, f.crowd.beyond_limit),
        (0, 0),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn racy_limit_lets_one_account_buy_more_than_once_in_a_flood() {
    // The shared account's bots all fire within 5 ms of the opening: their reads of "bought
    // nothing yet" overlap, so several pass. Rounds in case one flood's timing lines them up.
    for round in 1..=3 {
        let (report, out) = flood(&[Strategy::RacyLimit]).await;
        let f = report.each::<FloodResult>(FLOOD)[0];
        assert_every_click_counted(&f);
        assert_eq!(
            f.crowd.accounting.oversell, 0,
            "the stock itself stays safe"
        );
        if f.crowd.beyond_limit == 0 {
            eprintln!(
                "round {round}: no buyer past the limit this time: {:?}",
                f.crowd.outcomes
            );
            continue;
        }
        let md = std::fs::read_to_string(out.path().join("latest/report.md")).unwrap();
        assert!(
            md.contains(&format!(
                "let buyers take {} unit(s) beyond one per customer",
                f.crowd.beyond_limit
            )),
            "{md}"
        );
        return;
    }
    panic!("racy-limit never let a buyer past the limit in 3 floods");
}

#[tokio::test(flavor = "multi_thread")]
async fn sold_first_come_the_same_crowd_is_served_in_the_order_it_clicked_and_no_unit_is_lost() {
    let shape = FloodShape {
        first_come: true,
        non_payer_share: 0.0,
        payment_window_ms: 0,
        kill_mid_sale: false,
        ..shape()
    };
    let units = shape.units;
    let strategies = [Strategy::Conditional, Strategy::RedisLuaStream];
    let (report, out) = flood_of(&strategies, shape).await;
    for f in report.each::<FloodResult>(FLOOD) {
        let name = f.strategy.name;
        let fc = f
            .first_come
            .as_ref()
            .expect("the crowd sent again, first come");
        assert_eq!(fc.clicks, f.crowd.clicks, "{name}: the same crowd");
        assert_eq!(
            fc.outcomes.total(),
            fc.clicks,
            "{name}: every click counted"
        );
        let a = &fc.accounting;
        assert_eq!(
            (a.oversell, fc.beyond_limit, a.stranded),
            (0, 0, 0),
            "{name}: {a:?}"
        );
        assert_eq!(
            fc.outcomes.created as i64, units,
            "{name}: every unit sold: {:?}",
            fc.outcomes
        );
        // Places are given in the order the clicks reach Redis: a click can pass one sent a
        // moment before it only on its way there, never by finding room first.
        let share = fc
            .fairness
            .correlation_share()
            .expect("some bought, some not");
        assert!(
            share > 0.5,
            "{name}: the first to click bought: {:?}",
            fc.fairness
        );
    }
    let md = std::fs::read_to_string(out.path().join("latest/report.md")).unwrap();
    assert!(md.contains("### First come, first served"), "{md}");
    let html = std::fs::read_to_string(out.path().join("latest/report.html")).unwrap();
    assert!(
        html.contains("First come, first served"),
        "the page has it too"
    );
}
