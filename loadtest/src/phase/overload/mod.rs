//! The overload phase: a strategy offered a multiple of its capacity (its closed loop's
//! purchases per second) in the open loop, on a product that cannot sell out, while the app
//! instances' resident memory is watched. A service that refuses what it cannot take keeps
//! the latency of what it accepts, answers the rest `503 overloaded` at once, and holds its
//! memory; one that queues makes everyone wait longer the longer the overload lasts.
//!
//! The open loop ([`crate::drive::load`]) counts every answer and times it from its due time;
//! it tells a feed of each answer with that latency, which this phase splits by answer. The
//! requests are also timed here from their actual send, so that the wait of a request in the
//! generator (behind schedule on a busy machine) shows apart from the service's time.
//!
//! Its figures and shape are in [`schema`], its bars in [`judge`], its section of the report in
//! [`section`].

pub mod judge;
pub mod schema;
pub mod section;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::{ErrorCode, Strategy, StrategyInfo};
use testkit::metrics::series_values;
use testkit::{Answer, Api};
use tokio::sync::broadcast::{Receiver, error::RecvError};
use tokio::time::Instant;

use super::{
    About, Allotment, Measured, Measuring, Needs, Phase, Recorded, Run, Turn, connections,
    in_flight_limit,
};
use crate::drive::latency::Latencies;
use crate::drive::load::{Window, open_loop_feeding};
use crate::live::{Feed, Update};
use crate::measure::memory::{self, Watch};
use crate::measure::throughput::{Buyers, ThroughputPlan, UNLIMITED, settle};
use crate::report::section::Section;
use crate::schema::{Findings, RunReport, Settings};
use judge::EXCESS_SHARE_OF_CEILING;

pub use schema::{ByAnswer, Memory, OverloadFinding, OverloadMiss, OverloadResult, OverloadShape};

/// Its name: in the report, the settings, the findings and the errors.
pub const NAME: &str = "overload";

/// The shape the run asked of it; `None`: not asked.
pub fn shape(settings: &Settings) -> Option<&OverloadShape> {
    settings.phases.get(NAME)
}

/// The bars each strategy missed.
pub fn found(findings: &Findings) -> &[OverloadFinding] {
    findings.phases.list(NAME)
}

/// One strategy's overload.
pub struct OverloadPlan<'a> {
    pub strategy: &'a StrategyInfo,
    pub shape: &'a OverloadShape,
    /// Purchases per second its closed loop bought.
    pub capacity: f64,
    /// The product, users, quantity and request ids of its loops; the window is the shape's.
    pub buyers: ThroughputPlan,
    /// Open-loop workers: each has one request in flight at a time.
    pub connections: usize,
    /// Purchases the app instances take at once before refusing, all together.
    pub in_flight_limit: u64,
    /// The instances' latency budget (`--latency-budget-ms`; 0: none).
    pub latency_budget_ms: u64,
    /// The app instances, whose memory is read.
    pub app_pids: Vec<u32>,
    /// Sold-out refusals per second the machine answers at most, when the run measured it.
    pub refusal_ceiling: Option<f64>,
}

/// The open loop's rate: `factor` × `capacity`, unless refusing the excess over the capacity
/// would take more than [`EXCESS_SHARE_OF_CEILING`] of the machine's `ceiling`; then the
/// capacity and that much more. A strategy that sells near what the machine answers at all
/// (`batched` sold 18,000/s where the machine refused 55,000/s from memory) cannot be offered
/// three times its capacity: refusing twice it would take the whole machine, leaving nothing
/// to the purchases whatever the door does. The bars judge the door, not the machine's size.
pub fn offered(factor: f64, capacity: f64, ceiling: Option<f64>) -> f64 {
    let excess = (factor - 1.0).max(0.0) * capacity;
    let excess = match ceiling {
        Some(ceiling) if ceiling > 0.0 => excess.min(EXCESS_SHARE_OF_CEILING * ceiling),
        _ => excess,
    };
    (capacity + excess).max(1.0)
}

/// Offers the strategy `factor` × its capacity for the shape's window, then leaves its product
/// with no stock and no orders.
pub async fn run_overload(api: &Api, plan: &OverloadPlan<'_>) -> Result<OverloadResult> {
    let shape = plan.shape;
    let offered = offered(shape.factor, plan.capacity, plan.refusal_ceiling);
    let window = Window::from_secs(shape.warmup, shape.seconds);
    let buyers_plan = ThroughputPlan {
        window,
        ..plan.buyers.clone()
    };
    let home = plan.strategy.name.home();
    api.reset_product(buyers_plan.product, UNLIMITED, home)
        .await?;

    let pids = plan.app_pids.clone();
    let (before_bytes, instances) = memory::rss(&pids);
    // The peak is watched from the end of the warm-up, the memory it is held against.
    let loaded = tokio::spawn({
        let pids = pids.clone();
        async move {
            tokio::time::sleep(window.warmup).await;
            (memory::rss(&pids).0, Watch::start(pids))
        }
    });

    let split_feed = Feed::new(false);
    let updates = split_feed.subscribe().context("a feed that is on")?;
    let splitter = tokio::spawn(split(updates, buyers_plan.feed.clone()));
    let sent = Arc::new(Mutex::new(ByClass::default()));
    let measured_from = Instant::now() + window.warmup;
    let buyers = Buyers::new(api, &buyers_plan, "x".into());
    let load = open_loop_feeding(plan.connections, offered, window, &split_feed, {
        let sent = sent.clone();
        move |i| {
            let (buyers, sent) = (buyers.clone(), sent.clone());
            async move {
                let at = Instant::now();
                let answer = buyers.send(i).await;
                if at >= measured_from {
                    sent.lock()
                        .expect("not poisoned")
                        .record(&answer, at.elapsed());
                }
                answer
            }
        }
    })
    .await;
    let admission_limit = admission_limit(&api.metrics().await, plan.strategy.name);
    drop(split_feed);
    let from_due = splitter.await.context("the answers' splitter")?;
    let (loaded_bytes, watch) = loaded
        .await
        .context("the memory at the end of the warm-up")?;
    settle(api, &buyers_plan).await?;
    let (after_bytes, after_instances) = memory::rss(&pids);
    let peak_bytes = watch.stop(after_bytes);
    api.reset_product(buyers_plan.product, 0, home).await?;

    let from_due = from_due.summary();
    let split_count = from_due.accepted.count + from_due.overloaded.count + from_due.other.count;
    let from_send = sent.lock().expect("not poisoned").summary();
    Ok(OverloadResult {
        capacity_per_second: plan.capacity,
        offered_per_second: offered,
        refusal_ceiling_per_second: plan.refusal_ceiling,
        in_flight_limit: plan.in_flight_limit,
        latency_budget_ms: plan.latency_budget_ms,
        admission_limit,
        unsplit: load.outcomes.total().saturating_sub(split_count),
        load,
        from_due,
        from_send,
        memory: Memory {
            instances: instances.min(after_instances),
            before_bytes,
            loaded_bytes,
            peak_bytes,
            after_bytes,
        },
    })
}

/// The purchases of `strategy` the instances admit at once, all together, as their `/metrics`
/// (`text`, every instance's) say now; `None` when none says.
pub fn admission_limit(text: &str, strategy: Strategy) -> Option<u64> {
    let series = format!("seckill_admission_limit{{strategy=\"{strategy}\"}}");
    series_values(text, &series)
        .map(|limit| limit as u64)
        .reduce(|a, b| a + b)
}

/// Latencies by answer: accepted, `503 overloaded`, anything else.
#[derive(Default)]
struct ByClass([Latencies; 3]);

impl ByClass {
    fn record(&mut self, answer: &Answer, latency: Duration) {
        let class = match answer {
            Answer::Created { .. } => 0,
            a if a.refused_with(ErrorCode::Overloaded) => 1,
            _ => 2,
        };
        self.0[class].record(latency);
    }

    fn summary(&self) -> ByAnswer {
        ByAnswer {
            accepted: self.0[0].summary(),
            overloaded: self.0[1].summary(),
            other: self.0[2].summary(),
        }
    }
}

/// Every answer the loop tells of, by answer, passed on to `forward` (the live page) as it
/// comes; until the loop and the phase have dropped the feed.
async fn split(mut updates: Receiver<Update>, forward: Feed) -> ByClass {
    let mut by = ByClass::default();
    loop {
        match updates.recv().await {
            Ok(Update::Answer { answer, latency_us }) => {
                let latency = Duration::from_micros(latency_us);
                by.record(&answer, latency);
                forward.answer(&answer, latency);
            }
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return by,
        }
    }
}

/// The overload phase, as the registry holds it.
pub struct Overload;

impl Phase for Overload {
    fn about(&self) -> About {
        About {
            name: NAME,
            label: "overload",
            needs: Needs {
                before_sale: false,
                deployable: true,
                products: 1,
                refusal_ceiling: true,
            },
        }
    }

    fn asked(&self, settings: &Settings) -> bool {
        shape(settings).is_some()
    }

    fn doing(&self, settings: &Settings, strategy: &Measuring<'_>) -> String {
        let factor = shape(settings).map_or(0.0, |shape| shape.factor);
        let capacity = (strategy.loops.as_ref()).map_or(0.0, |l| l.closed.successes_per_sec);
        format!("overload {:.0}/s", offered(factor, capacity, None))
    }

    fn measure<'a>(&'a self, run: &'a Run<'a>, turn: Turn<'a>) -> Measured<'a> {
        let pids = turn.instances.pids();
        Box::pin(measure_one(run, turn.strategy, turn.allotment, pids))
    }

    fn judge(&self, report: &RunReport, findings: &mut Findings) {
        let found: Vec<OverloadFinding> = (report.each::<OverloadResult>(NAME).iter())
            .filter_map(judge::finding)
            .collect();
        findings.phases.put(NAME, found);
    }

    fn section(&self, r: &RunReport) -> Section {
        section::section(
            shape(&r.settings),
            &r.each::<OverloadResult>(NAME),
            found(&r.findings),
        )
    }

    fn went_wrong(&self, r: &RunReport) -> Option<String> {
        let findings = found(&r.findings);
        (!findings.is_empty()).then(|| section::went_wrong(findings))
    }
}

/// The phase on one strategy: its capacity is its closed loops' purchases per second, and
/// the instances' limits add up over the world's instances.
async fn measure_one(
    run: &Run<'_>,
    strategy: &Measuring<'_>,
    allotment: &Allotment,
    app_pids: Vec<u32>,
) -> Result<Recorded> {
    let shape = shape(run.settings).context("the run has no overload shape")?;
    let looped = strategy.looped()?;
    let in_flight_limit = in_flight_limit(run.world, run.app);
    let plan = OverloadPlan {
        strategy: strategy.info,
        shape,
        capacity: looped.closed.successes_per_sec,
        buyers: looped.buyers(allotment),
        connections: connections(in_flight_limit, run.settings.buyers),
        in_flight_limit,
        latency_budget_ms: run.app.latency_budget_ms,
        app_pids,
        refusal_ceiling: run.refusal_ceiling,
    };
    let result = run_overload(run.api, &plan).await?;
    Ok(Recorded::new(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offered_rate_is_the_factor_unless_refusing_the_excess_takes_past_a_quarter_of_the_ceiling()
     {
        // A slow strategy: three times its capacity, the ceiling far off.
        assert_eq!(offered(3.0, 2_000.0, Some(55_000.0)), 6_000.0);
        assert_eq!(offered(3.0, 2_000.0, None), 6_000.0);
        // A fast one: the excess is what a quarter of the machine refuses.
        assert_eq!(offered(3.0, 18_000.0, Some(56_000.0)), 32_000.0);
        // Unmeasured: the factor alone.
        assert_eq!(offered(3.0, 18_000.0, None), 54_000.0);
        assert_eq!(offered(3.0, 0.0, Some(1.0)), 1.0);
    }

    #[test]
    fn the_admission_limit_is_summed_over_the_instances_of_the_strategy_asked() {
        let text = "# TYPE seckill_admission_limit gauge\n\
                    seckill_admission_limit{strategy=\"conditional\"} 40\n\
                    seckill_admission_limit{strategy=\"redis-lua\"} 256\n\n\
                    seckill_admission_limit{strategy=\"conditional\"} 38\n";
        assert_eq!(admission_limit(text, Strategy::Conditional), Some(78));
        assert_eq!(admission_limit(text, Strategy::Zookeeper), None);
    }
}
