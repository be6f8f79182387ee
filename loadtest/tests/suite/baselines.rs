//! A run with baselines measures each of them, the standard tool beside it and the hot-row
//! sweep, and relates the strategy to them.

use crate::common;

use app::api::Strategy;
use loadtest::run::run_in;
use loadtest::schema::{BaselineName, ToolStatus};

#[tokio::test(flavor = "multi_thread")]
async fn every_baseline_is_measured_and_the_strategy_is_compared_with_its_own() {
    let mut settings = common::quick(Strategy::Conditional);
    settings.baselines = true;
    settings.seconds = 0.5;
    settings.warmup = 0.2;
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    let report = &output.report;
    let measured: Vec<BaselineName> = report.baselines.iter().map(|b| b.name).collect();
    assert_eq!(measured, BaselineName::ALL);
    for b in &report.baselines {
        assert!(
            b.result.attempts_per_sec > 0.0,
            "{}: {:?}",
            b.name,
            b.result
        );
    }
    for b in &report.baselines {
        let Some(tool) = loadtest::measure::baselines::tool_of(b.name, app::db::Engine::MySql)
        else {
            assert!(b.standard_tool.is_none(), "{}", b.name);
            continue;
        };
        let t = b
            .standard_tool
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no standard tool beside it", b.name));
        assert_eq!(t.tool, tool);
        match t.status {
            ToolStatus::Measured => assert!(
                t.per_sec.as_ref().is_some_and(|s| s.median > 0.0) && t.ours_percent.is_some(),
                "{}: {t:?}",
                b.name
            ),
            ToolStatus::NotInstalled => assert!(t.per_sec.is_none(), "{}: {t:?}", b.name),
            ToolStatus::Failed => panic!("{}: {tool} failed: {t:?}", b.name),
        }
    }
    let sweep: Vec<usize> = report.hot_row_sweep.iter().map(|l| l.concurrency).collect();
    assert_eq!(sweep, loadtest::measure::baselines::SWEEP);
    assert!(
        report
            .hot_row_sweep
            .iter()
            .all(|l| l.successes_per_sec > 0.0)
    );
    let strategy = &report.strategies[0];
    assert_eq!(
        strategy.loops.as_ref().unwrap().baseline,
        BaselineName::SqlConditional
    );
    assert!(
        strategy
            .loops
            .as_ref()
            .unwrap()
            .percent_of_backend_baseline
            .is_some()
    );
    assert!(
        strategy
            .loops
            .as_ref()
            .unwrap()
            .percent_of_http_noop
            .is_some()
    );
    let check = report
        .findings
        .client
        .as_ref()
        .expect("both no-op baselines");
    let peers: Vec<&str> = check.peers.iter().map(|p| p.name.as_str()).collect();
    assert!(peers.contains(&"goose"), "{check:?}");
    let wrk_measured = report.baselines.iter().any(|b| {
        b.name == BaselineName::HttpNoop
            && b.standard_tool
                .as_ref()
                .is_some_and(|t| t.status == ToolStatus::Measured)
    });
    // The verdict must weigh the faster peer, not only goose.
    assert_eq!(peers.contains(&"wrk"), wrk_measured, "{check:?}");
    common::drop_database(&target).await;
}
