//! The overload phase through the whole `seckill-bench run` path (app processes, the closed
//! loop that measures a strategy's capacity, the open loop at a multiple of it, the report):
//! every request offered is counted, what is not bought is refused `503 overloaded`, the
//! figures reach the JSON, the Markdown and the page, an unsafe strategy is left out, and the
//! product is left empty.

use crate::common;

use app::api::{Safety, Strategy};
use loadtest::phase::overload::{self, OverloadResult, OverloadShape};
use loadtest::run::run_in;
use loadtest::schema::RunReport;

const SHAPE: OverloadShape = OverloadShape {
    factor: 3.0,
    warmup: 0.3,
    seconds: 1.0,
};

/// Requests the open loop makes due within its measured window: those after the warm-up.
fn due_in_window(o: &OverloadResult) -> u64 {
    let rate = o.offered_per_second;
    let all = ((SHAPE.warmup + SHAPE.seconds) * rate).floor() as u64;
    all - (SHAPE.warmup * rate).ceil() as u64
}

/// Runs of the phase made before one in which the open loop offered more than the service
/// answers: the capacity it offers a multiple of is measured by a closed loop of a second, and
/// on a machine running other tests beside it a stall can make that second read a fraction of
/// what the service answers the next second. Then three times the reading is no crowd, the door
/// has nothing to refuse, and the run says nothing of it. A door that never refuses fails every
/// run: its excess waits inside, and is answered, late, as bought.
const RUNS: u32 = 3;

#[tokio::test(flavor = "multi_thread")]
async fn the_overload_phase_counts_every_request_refuses_the_excess_with_503_overloaded_and_reports_it()
 {
    for run in 1..=RUNS {
        match run_the_phase().await {
            Crowd::Refused => return,
            Crowd::AllAnswered(name) => eprintln!(
                "run {run} of {RUNS}: `{name}` answered every request offered at 3 × the \
                 capacity its closed loop read: no crowd to refuse"
            ),
        }
    }
    panic!(
        "in {RUNS} runs, a strategy answered everything offered at 3 × its capacity: what was \
         not bought was never refused `503 overloaded` at the door"
    );
}

/// What the open loop met in one run of the phase.
enum Crowd {
    /// Every strategy's door refused some of what it was offered.
    Refused,
    /// This strategy's door refused nothing and every request was bought.
    AllAnswered(Strategy),
}

/// One run of the phase, every property checked but that the door refused: that is returned.
async fn run_the_phase() -> Crowd {
    let strategies = [Strategy::Conditional, Strategy::RedisLua, Strategy::Naive];
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    settings.phases.put(overload::NAME, SHAPE);
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let run = run_in(&settings, &target, out.path()).await.unwrap();
    let report: &RunReport = &run.report;

    let names: Vec<Strategy> = report
        .each::<OverloadResult>(overload::NAME)
        .iter()
        .map(|o| o.strategy.name)
        .collect();
    assert_eq!(
        names,
        [Strategy::Conditional, Strategy::RedisLua],
        "the deployable strategies, and not the unsafe one"
    );
    let mut crowd = None;
    for o in report.each::<OverloadResult>(overload::NAME) {
        let name = o.strategy.name;
        eprintln!(
            "{name}: capacity {:.0}/s, offered {:.0}/s, accepted {:.0}/s, 503 {}, other {}, \
             accepted p99 {} µs, 503 p99 {} µs, memory {:?}",
            o.capacity_per_second,
            o.offered_per_second,
            o.load.successes_per_sec,
            o.overloaded(),
            o.other(),
            o.from_due.accepted.p99_us,
            o.from_due.overloaded.p99_us,
            o.memory
        );
        assert_ne!(o.strategy.safety, Safety::Unsafe);
        let closed = &report.strategy(name).unwrap().throughput.closed;
        assert_eq!(o.capacity_per_second, closed.successes_per_sec, "{name}");
        // Three times the capacity, or the capacity and a quarter of the machine's ceiling,
        // measured in the run, where that is less.
        let ceiling = o.refusal_ceiling_per_second;
        assert!(ceiling.is_some_and(|c| c > 0.0), "{name}: no ceiling");
        let expected = loadtest::phase::overload::offered(3.0, o.capacity_per_second, ceiling);
        assert!(
            (o.offered_per_second - expected).abs() < 1e-6 && expected > o.capacity_per_second,
            "{name}: offered {} for a capacity of {} and a ceiling of {ceiling:?}",
            o.offered_per_second,
            o.capacity_per_second
        );

        let outcomes = &o.load.outcomes;
        assert_eq!(
            outcomes.total() + o.load.not_sent,
            due_in_window(&o),
            "{name}: every request due in the window is answered or counted unsent"
        );
        let split =
            o.from_due.accepted.count + o.from_due.overloaded.count + o.from_due.other.count;
        assert_eq!(split + o.unsplit, outcomes.total(), "{name}");
        if outcomes.total() < 1 << 16 {
            // Fewer answers than the feed holds: none can have been passed over.
            assert_eq!(o.unsplit, 0, "{name}");
            assert_eq!(o.from_due.accepted.count, outcomes.created, "{name}");
            assert_eq!(o.from_due.overloaded.count, o.overloaded(), "{name}");
        }
        // The excess is refused at the door. A purchase admitted past it can still answer a
        // `503` of its own (`busy`, `backend_unavailable`) when this machine, running the
        // suite in parallel, stalls a backend past its timeout: the report counts those as
        // `other`, and they stay a sliver of the refusals. Nothing else may appear: no other
        // refusal, no answer outside the contract, no request unanswered.
        let refused = outcomes.total() - outcomes.created;
        for (code, n) in outcomes.refused.iter() {
            assert_eq!(
                code.status().as_u16(),
                503,
                "{name}: {n} refusal(s) `{code}`, not a `503`: {outcomes:?}"
            );
        }
        assert!(
            outcomes.unexpected.is_empty()
                && outcomes.transport_error == 0
                && outcomes.replayed == 0
                && outcomes.served == 0,
            "{name}: {outcomes:?}"
        );
        assert_eq!(o.other(), refused - o.overloaded(), "{name}");
        if refused == 0 && crowd.is_none() {
            crowd = Some(name);
        }
        assert!(
            refused == 0 || (o.overloaded() > 0 && o.other() * 100 <= refused),
            "{name}: what was not bought was refused `503 overloaded` at the door (at most 1% \
             past it): {outcomes:?}"
        );
        assert_eq!(
            o.memory.instances, settings.instances,
            "{name}: {:?}",
            o.memory
        );
        assert!(
            o.memory.before_bytes > 0 && o.memory.peak_bytes >= o.memory.loaded_bytes,
            "{name}: {:?}",
            o.memory
        );
    }

    let read = loadtest::schema::json::read(&out.path().join("latest")).unwrap();
    assert_eq!(
        read.each::<OverloadResult>(overload::NAME),
        report.each::<OverloadResult>(overload::NAME),
        "the JSON holds the figures"
    );
    assert_eq!(overload::shape(&read.settings), Some(&SHAPE));
    let md = std::fs::read_to_string(out.path().join("latest/report.md")).unwrap();
    assert!(md.contains("## Overload: 3 × capacity"), "{md}");
    for o in report.each::<OverloadResult>(overload::NAME) {
        let row = md
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "| `{}` | {:.0} |",
                    o.strategy.name, o.capacity_per_second
                ))
            })
            .unwrap_or_else(|| panic!("no overload row for {}:\n{md}", o.strategy.name));
        assert!(
            row.contains(&format!("| {:.0} |", o.offered_per_second))
                && row.contains(&format!("| {} (", o.overloaded())),
            "{row}"
        );
    }
    let html = std::fs::read_to_string(out.path().join("latest/report.html")).unwrap();
    let section = &html[html
        .find("<section id=\"overload\">")
        .expect("an overload section")..];
    for o in report.each::<OverloadResult>(overload::NAME) {
        assert!(
            section.contains(&format!("<code>{}</code>", o.strategy.name)),
            "{} has no row in the page's overload table",
            o.strategy.name
        );
    }

    let db = common::database(&target).await;
    let products: Vec<u64> = (run.allotments.iter())
        .filter(|allotment| allotment.phase == "overload")
        .map(|allotment| allotment.product())
        .collect();
    assert_eq!(
        products.len(),
        report.each::<OverloadResult>(overload::NAME).len()
    );
    for product in products {
        let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE product_id = ?")
            .bind(product)
            .fetch_one(&db)
            .await
            .unwrap();
        let stock: i64 = sqlx::query_scalar("SELECT stock FROM products WHERE id = ?")
            .bind(product)
            .fetch_one(&db)
            .await
            .unwrap();
        assert_eq!((stock, orders), (0, 0), "product {product} is left empty");
    }
    db.close().await;
    common::drop_database(&target).await;
    match crowd {
        None => Crowd::Refused,
        Some(name) => Crowd::AllAnswered(name),
    }
}
