//! The phases that measure each strategy beside its sale and loops: before them, a flash sale
//! as it arrives, thousands of buyers within a second for far fewer units ([`flood`]); after
//! them, what one purchase costs in round trips to each server ([`round_trips`], when the
//! servers stand behind relays), the service offered a multiple of what it bears
//! ([`overload`]), and what the expiry sweep costs the purchases beside it ([`expiry`]).
//!
//! A phase has the shape of a fault scenario (see [`crate::scenario`]): one folder of this
//! folder holding only what differs from the others behind the [`Phase`] trait — what it is
//! and needs from the run ([`About`]), how it measures one strategy's [`Turn`], how it is
//! judged, its section of the report and its line of the README — with its own types (its
//! shape, its figures, its findings, and a sample of them for the tests). One driver
//! ([`Run::measure`]) takes each strategy through the phases the run asks for, in the order of
//! the registry ([`REGISTRY`]) — those measured before the sale (for every strategy, before
//! any is sold), then, once its loops are done, those after them — and hands each the run's
//! [`World`], the app instances, products of its own and a request-id prefix of its own
//! ([`allocate`]): no phase picks a product or an id by hand, and no phase meets another's
//! orders. The findings and the renderers reach a phase's verdict and section through the
//! registry. The report keeps what a phase put under its name — its figures in the strategy's
//! record (`phases`, [`Recorded`]), its shape in the run's settings, its findings in the
//! run's — as JSON the schema does not read ([`crate::schema::ByPhase`]); the phase reads its
//! own with its own types. So nothing outside a phase's folder names it but the registry and
//! the command line that asks for it.
//!
//! Not phases, and why: the sale, the closed loops and the open loop. Their figures are fields
//! of the strategy's record (`StrategyReport`: `sale`, `loops`) that every page reads, not an
//! entry of its `phases`; the closed loops run in rounds that interleave the strategies, which
//! a driver taking one strategy at a time does not express; the open loop runs on the closed
//! loops' product and leaves it empty for the strategies after it.
//!
//! The run's products and request ids of those parts come from the same [`Allocator`].

pub mod allocate;
pub mod expiry;
pub mod flood;
pub mod overload;
pub mod round_trips;

use std::path::Path;

use anyhow::{Context, Result};
use app::api::{Safety, StrategyInfo};
use app::db::Db;
use futures::future::LocalBoxFuture;
use testkit::{Api, Apps};

pub use allocate::{Allocator, Allotment};

use crate::live::Feed;
use crate::measure::cpu::Sampler;
use crate::measure::throughput::ThroughputPlan;
use crate::report::charts::Chart;
use crate::report::section::Section;
use crate::rig::distance::Relays;
use crate::schema::world::World;
use crate::schema::{
    ByPhase, Findings, LoadResult, RunReport, Settings, StrategyReport, Unmeasured,
};

/// The registry: every phase, in the order each strategy goes through them (those before the
/// sale, then those after its open loop) and the order of their sections in the report.
pub static REGISTRY: &[&(dyn Phase + Sync)] = &[
    &flood::Flood,
    &round_trips::RoundTripCount,
    &overload::Overload,
    &expiry::Expiry,
];

/// What one phase of a run is made of; the driver does the rest.
pub trait Phase {
    /// What it is: its name, its label, what it needs.
    fn about(&self) -> About;

    /// Its name: in the errors, and the anchor of its section on the page (`#overload`).
    fn name(&self) -> &'static str {
        self.about().name
    }

    /// Its entry in the page's list of sections.
    fn label(&self) -> &'static str {
        self.about().label
    }

    /// What it needs from the run.
    fn needs(&self) -> Needs {
        self.about().needs
    }

    /// Whether the run's settings ask for it.
    fn asked(&self, settings: &Settings) -> bool;

    /// What the progress line and the live page say while it measures `strategy`.
    fn doing(&self, settings: &Settings, strategy: &Measuring<'_>) -> String;

    /// Measures the turn's strategy on its allotment's products, with request ids beginning with
    /// its prefix; what it measured, to be put in the report.
    fn measure<'a>(&'a self, run: &'a Run<'a>, turn: Turn<'a>) -> Measured<'a>;

    /// Its findings, from `report`'s figures, into `findings`.
    fn judge(&self, report: &RunReport, findings: &mut Findings);

    /// Whether `report` holds figures of it: its section is on the page.
    fn measured(&self, report: &RunReport) -> bool {
        report.measured(self.name())
    }

    /// Its section of the report; empty when `report` holds none of it.
    fn section(&self, report: &RunReport) -> Section;

    /// The charts its section places, drawn from `report`.
    fn charts(&self, _report: &RunReport) -> Result<Vec<Chart>> {
        Ok(Vec::new())
    }

    /// What went wrong in it, in words, from `report`'s findings; `None` when nothing did.
    fn went_wrong(&self, report: &RunReport) -> Option<String>;

    /// Its line of the README's results section, from `report`; `None`: it has none there.
    fn readme(&self, _report: &RunReport) -> Option<String> {
        None
    }

    /// The shape `settings` asked of it, in a few words for the list of runs (`2000 people
    /// for 100 units`); `None`: nothing to say.
    fn shape_words(&self, _settings: &Settings) -> Option<String> {
        None
    }
}

/// What a phase is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    /// In the errors, and the anchor of its section on the page.
    pub name: &'static str,
    /// Its entry in the page's list of sections.
    pub label: &'static str,
    pub needs: Needs,
}

/// One strategy's turn at a phase: the strategy and what its loops found, the products and
/// request ids the phase was handed for it, and the app instances.
pub struct Turn<'a> {
    pub strategy: &'a Measuring<'a>,
    pub allotment: &'a Allotment,
    /// The app instances, every purchase to instance `i % K`: a phase may watch their
    /// processes, or kill one and start it again on its port.
    pub instances: &'a mut Apps,
    /// The CPU counters of the run's processes (they follow an instance started again once the
    /// phase is done).
    pub sampler: &'a Sampler,
}

/// What [`Phase::measure`] returns.
pub type Measured<'a> = LocalBoxFuture<'a, Result<Recorded>>;

/// What a phase needs from the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Measured before the sale, for every strategy before any is sold (and alone in
    /// `seckill-bench flood`); otherwise after the strategy's loops, whose figures it reads.
    pub before_sale: bool,
    /// Only the strategies one would deploy: an unsafe one exists to show its race, and how it
    /// bears the phase says nothing about a design to choose.
    pub deployable: bool,
    /// Products of its own, per strategy.
    pub products: u64,
    /// The machine's ceiling of sold-out refusals per second ([`Run::refusal_ceiling`]).
    pub refusal_ceiling: bool,
}

/// What the run hands every phase.
pub struct Run<'a> {
    /// What the rig started and how the app reaches it.
    pub world: &'a World,
    pub settings: &'a Settings,
    /// The app instances' addresses, every purchase to instance `i % K`.
    pub api: &'a Api,
    /// The run's database, to read what the app wrote.
    pub db: &'a Db,
    /// The settings every app instance started with.
    pub app: &'a app::config::Config,
    /// Sold-out refusals per second the machine answers at most, measured once for the run
    /// when a phase needs it (see [`crate::measure::refusals::ceiling`]).
    pub refusal_ceiling: Option<f64>,
    /// The relays in front of the servers, when they stand at a distance: they count the round
    /// trips made to each.
    pub relays: Option<&'a Relays>,
    /// The live page.
    pub feed: &'a Feed,
    /// Tells the progress line and the live page what is measured: a subject and what of it.
    pub announce: &'a dyn Fn(&str, &str),
    /// The app instances' logs, where an instance that exited says why.
    pub logs: &'a Path,
}

/// The strategy a phase measures, and what its loops found.
pub struct Measuring<'a> {
    pub info: &'a StrategyInfo,
    /// Its place in the run's order, from 0: the seed of what a phase draws for it.
    pub place: usize,
    /// Its loops, to a phase measured after them; `None` before the sale.
    pub loops: Option<Looped<'a>>,
}

/// What a strategy's loops found.
pub struct Looped<'a> {
    /// Its closed loops, combined: what it bears.
    pub closed: &'a LoadResult,
    /// Its loops' buyers: users, quantity, window, rate and the live page's feed.
    pub plan: &'a ThroughputPlan,
}

impl Run<'_> {
    /// The driver: takes `strategy` through every phase the run asks for at this point of its
    /// turn — without its loops yet, the phases before the sale; with them, the phases after —
    /// in the registry's order, each on what `ids` hands it, and puts what each measured in
    /// `record`'s phases; announces each, and when each is done checks that every app instance
    /// still runs and has `sampler` follow an instance started again. A phase that fails is
    /// written in `record` as unmeasured, with its error, and the run goes on: as a scenario that
    /// cannot be played is a failed row, not the end of an hour of measurements.
    pub async fn measure(
        &self,
        strategy: &Measuring<'_>,
        instances: &mut Apps,
        sampler: &mut Sampler,
        ids: &mut Allocator,
        record: &mut StrategyReport,
    ) -> Result<()> {
        let name = strategy.info.name;
        let before_sale = strategy.loops.is_none();
        for phase in REGISTRY {
            if phase.needs().before_sale != before_sale
                || !wanted(*phase, self.settings, strategy.info)
            {
                continue;
            }
            let allotment = ids.allot(phase.name(), name, phase.needs().products)?;
            (self.announce)(name.name(), &phase.doing(self.settings, strategy));
            let turn = Turn {
                strategy,
                allotment: &allotment,
                instances: &mut *instances,
                sampler,
            };
            match phase.measure(self, turn).await {
                Ok(measured) => (measured.0)(&mut record.phases, phase.name()),
                Err(e) => {
                    let error = format!("{e:#}");
                    tracing::warn!(phase = phase.name(), strategy = %name, %error, "phase failed");
                    record.unmeasured.push(Unmeasured {
                        phase: phase.name().to_owned(),
                        error,
                    });
                }
            }
            let during = format_args!("`{name}`'s {} phase", phase.name());
            crate::rig::ensure_running(instances, during, self.logs)?;
            sampler.follow_apps(instances);
        }
        Ok(())
    }
}

impl<'a> Measuring<'a> {
    /// Its loops, to a phase measured after them.
    pub fn looped(&self) -> Result<&Looped<'a>> {
        (self.loops.as_ref()).with_context(|| format!("`{}` has no loops yet", self.info.name))
    }
}

impl Looped<'_> {
    /// The loops' buyers on `allotment`'s product, with `allotment`'s request ids.
    pub fn buyers(&self, allotment: &Allotment) -> ThroughputPlan {
        ThroughputPlan {
            product: allotment.product(),
            id_prefix: allotment.prefix.clone(),
            ..self.plan.clone()
        }
    }
}

/// What a phase measured of one strategy, to be put under the phase's name among the
/// strategy's phases.
pub struct Recorded(Box<Put>);

/// Puts a phase's result under its name.
type Put = dyn FnOnce(&mut ByPhase, &str);

impl Recorded {
    pub fn new<T>(result: T) -> Recorded
    where
        T: serde::Serialize + std::any::Any + Send + Sync,
    {
        Recorded(Box::new(move |phases, name| phases.put(name, result)))
    }
}

/// Purchases the world's app instances take at once before refusing, all together.
pub fn in_flight_limit(world: &World, app: &app::config::Config) -> u64 {
    world.instances as u64 * u64::from(app.max_in_flight)
}

/// The open-loop workers for instances that refuse past `in_flight_limit`: enough that the
/// service's limit, not the number of workers, decides what waits, with `buyers` more to
/// carry the refusals while the limit is full.
pub fn connections(in_flight_limit: u64, buyers: usize) -> usize {
    usize::try_from(in_flight_limit).unwrap_or(usize::MAX) + buyers
}

/// Whether a phase the run measures needs the machine's refusal ceiling (measured after the
/// loops: a phase before the sale has none).
pub fn needs_refusal_ceiling(settings: &Settings, strategies: &[StrategyInfo]) -> bool {
    (REGISTRY.iter()).any(|phase| {
        phase.needs().refusal_ceiling && strategies.iter().any(|s| wanted(*phase, settings, s))
    })
}

/// The lines the phases add to the README's results section, in the registry's order.
pub fn readme(report: &RunReport) -> Vec<String> {
    REGISTRY
        .iter()
        .filter_map(|phase| phase.readme(report))
        .collect()
}

/// The run's findings: what `analyse` finds in its sale, loops and baselines, then each
/// registered phase's verdicts.
pub fn findings(report: &RunReport) -> Findings {
    let mut findings = crate::analyse::findings::of(report);
    judge(report, &mut findings);
    findings
}

/// `settings` made a run of the phases before the sale alone: no sale, no loops, no phase
/// after them, no baselines, no scenarios. `false`: it asked for none of them.
pub fn only_before_sale(settings: &mut Settings) -> bool {
    let before_sale = |name: &str| {
        (REGISTRY.iter()).any(|phase| phase.name() == name && phase.needs().before_sale)
    };
    settings.phases.retain(before_sale);
    settings.only_before_sale = true;
    settings.baselines = false;
    settings.scenarios = false;
    !settings.phases.is_empty()
}

/// Whether the run measures `phase` on `strategy`.
pub fn wanted(phase: &dyn Phase, settings: &Settings, strategy: &StrategyInfo) -> bool {
    let needs = phase.needs();
    phase.asked(settings)
        && (needs.before_sale || !settings.only_before_sale)
        && !(needs.deployable && strategy.safety == Safety::Unsafe)
}

/// The steps of the progress line the phases take for `strategies`: one per phase measured.
pub fn steps(settings: &Settings, strategies: &[StrategyInfo]) -> u64 {
    let measured: usize = (strategies.iter())
        .map(|s| REGISTRY.iter().filter(|p| wanted(**p, settings, s)).count())
        .sum();
    measured as u64
}

/// Every phase's findings, from `report`'s figures, into `findings`.
pub fn judge(report: &RunReport, findings: &mut Findings) {
    for phase in REGISTRY {
        phase.judge(report, findings);
    }
}

/// Each registered phase's part of the sample run ([`crate::sample::report`]): its shape in the
/// settings and its figures of `conditional`, in the registry's order.
#[cfg(test)]
pub static SAMPLES: &[fn(&mut RunReport)] = &[
    flood::schema::sample::put,
    round_trips::schema::sample::put,
    overload::schema::sample::put,
    expiry::schema::sample::put,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_phase_is_in_the_sample_run_and_reads_back_from_its_json() {
        assert_eq!(SAMPLES.len(), REGISTRY.len(), "a sample for each phase");
        let report = crate::sample::report();
        let text = crate::schema::json::to_string(&report).unwrap();
        let read = crate::schema::json::parse(&text).unwrap();
        assert_eq!(read, report);
        for phase in REGISTRY {
            let name = phase.name();
            assert!(
                phase.asked(&read.settings),
                "{name}: its shape in the settings"
            );
            assert!(phase.measured(&read), "{name}: its figures in a record");
            assert!(
                text.contains(&format!("\"{name}\": {{")),
                "{name}: under its name"
            );
            let section = phase.section(&read).markdown();
            assert!(!section.is_empty(), "{name}: its section");
            assert_eq!(section, phase.section(&report).markdown(), "{name}");
        }
    }

    #[test]
    fn a_run_of_the_phases_before_the_sale_alone_keeps_their_shapes_only_and_reads_as_before() {
        let mut settings = crate::sample::report().settings;
        assert!(only_before_sale(&mut settings));
        for phase in REGISTRY {
            let alone = phase.needs().before_sale;
            assert_eq!(phase.asked(&settings), alone, "{}", phase.name());
        }
        assert!(!settings.baselines && !settings.scenarios);
        let json = serde_json::to_string(&settings).unwrap();
        let written_before = json.replace("\"only_before_sale\"", "\"only_flood\"");
        let read: Settings = serde_json::from_str(&written_before).unwrap();
        assert_eq!(read, settings, "the key runs were written with");

        let mut none = crate::sample::report().settings;
        none.phases.retain(|name| name != flood::NAME);
        assert!(!only_before_sale(&mut none), "nothing to run alone");
    }
}
