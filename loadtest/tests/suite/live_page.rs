//! The live page in a real browser (headless Chromium over WebDriver) while a quick run goes:
//! it connects, its counters move as the run answers, and the figures it ends with are the
//! run's report's; then the screenshots `run --screenshots` saves. Every wait is for the page's state (a WebDriver wait on an element), never a
//! fixed time.

use std::time::Duration;

use app::api::Strategy;
use fantoccini::{Client, Locator};
use loadtest::analyse::compare::fields;
use loadtest::browser::Browser;
use loadtest::live::Feed;
use loadtest::live::server::Live;
use loadtest::run::run_watched;

use crate::common;

/// Longest wait for a state of the page before the test fails: a bound for a broken page,
/// far above what a quick run takes.
const PATIENCE: Duration = Duration::from_secs(300);

async fn wait_for(client: &Client, xpath: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(PATIENCE)
        .every(Duration::from_millis(100))
        .for_element(Locator::XPath(xpath))
        .await
        .unwrap_or_else(|e| panic!("the page never showed {xpath}: {e}"))
}

/// The number the page shows in the element with this id.
async fn value(client: &Client, id: &str) -> u64 {
    let element = client.find(Locator::Id(id)).await.unwrap();
    let text = element
        .attr("data-value")
        .await
        .unwrap()
        .unwrap_or_default();
    text.parse()
        .unwrap_or_else(|_| panic!("#{id} shows {text:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_live_page_follows_a_quick_run_and_ends_with_the_figures_of_its_report() {
    if !Browser::require().unwrap() {
        return;
    }
    let mut settings = common::quick(Strategy::Naive);
    settings.strategies = vec![Strategy::Naive, Strategy::Conditional];
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let feed = Feed::new(false);
    let live = Live::start("127.0.0.1:0".parse().unwrap(), &feed).unwrap();
    let browser = Browser::start(1280, 1400).await.unwrap();
    let client = browser.client();
    client.goto(&live.url()).await.unwrap();
    wait_for(client, "//*[@id='status'][@data-state='connected']").await;

    let watching = async {
        wait_for(client, "//*[@id='answers'][number(@data-value) > 0]").await;
        let first = value(client, "answers").await;
        wait_for(
            client,
            &format!("//*[@id='answers'][number(@data-value) > {first}]"),
        )
        .await;
        let later = value(client, "answers").await;
        wait_for(client, "//*[@id='status'][@data-state='finished']").await;
        (first, later)
    };
    let (output, (first, later)) =
        tokio::join!(run_watched(&settings, &target, out.path(), &feed), watching);
    let output = output.unwrap();
    assert!(later > first, "the counter moved: {first} → {later}");

    let written = loadtest::schema::json::read(&output.dir).unwrap();
    assert_eq!(written.strategies.len(), 2);
    for s in &written.strategies {
        // Every field of the accounting but the stock the sale began with.
        for (field, expected) in fields(&s.sale.as_ref().unwrap().accounting)
            .into_iter()
            .skip(1)
        {
            let cell = client
                .find(Locator::Css(&format!(
                    "#sales tr[data-strategy='{}'] td[data-field='{field}']",
                    s.strategy.name
                )))
                .await
                .unwrap_or_else(|e| panic!("no {field} of {} on the page: {e}", s.strategy.name));
            assert_eq!(
                cell.text().await.unwrap(),
                expected.to_string(),
                "{} {field}",
                s.strategy.name
            );
        }
    }
    // Every answer the run counted reached the page: the sales' and the loops'.
    let counted: u64 = written
        .strategies
        .iter()
        .map(|s| {
            s.sale.as_ref().unwrap().outcomes.total()
                + s.loops.as_ref().unwrap().throughput.closed.outcomes.total()
                + s.loops.as_ref().unwrap().throughput.open.outcomes.total()
        })
        .sum();
    assert_eq!(value(client, "answers").await, counted);
    assert_eq!(value(client, "missed").await, 0);
    let console = browser.console().await.unwrap();
    assert!(
        console.iter().all(|e| e.level != "SEVERE"),
        "console errors: {console:?}"
    );
    browser.close().await.unwrap();

    // `run --screenshots`: both pages, saved into the run's folder as PNG.
    let shots = loadtest::browser::screenshots(&live.url(), &output.dir)
        .await
        .unwrap();
    assert_eq!(
        shots,
        [output.dir.join("live.png"), output.dir.join("report.png")]
    );
    for shot in shots {
        let png = std::fs::read(&shot).unwrap();
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{} is no PNG",
            shot.display()
        );
    }
    drop(live);
    common::drop_database(&target).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_teaching_mode_a_timeline_event_waits_until_next_is_pressed_on_the_page() {
    if !Browser::require().unwrap() {
        return;
    }
    let feed = Feed::new(true);
    let live = Live::start("127.0.0.1:0".parse().unwrap(), &feed).unwrap();
    let browser = Browser::start(1280, 900).await.unwrap();
    let client = browser.client();
    client.goto(&live.url()).await.unwrap();
    wait_for(client, "//*[@id='status'][@data-state='connected']").await;
    let logging = {
        let feed = feed.clone();
        tokio::task::spawn_blocking(move || {
            for what in ["acquires the lock", "stalls past the lease"] {
                let event = loadtest::schema::Event {
                    t_ms: 1.0,
                    actor: "A".into(),
                    what: what.into(),
                };
                feed.timeline("lease-expiry", &event);
            }
        })
    };
    for shown in 1..=2 {
        wait_for(client, &format!("//*[@id='event-count'][text()='{shown}']")).await;
        let next = wait_for(client, "//button[@id='next'][not(@disabled)]").await;
        assert!(!logging.is_finished(), "event {shown} went on before Next");
        next.click().await.unwrap();
    }
    logging.await.unwrap();
    wait_for(client, "//*[@id='step'][@hidden]").await;
    browser.close().await.unwrap();
}
