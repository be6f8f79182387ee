//! `seckill-bench run`: baselines, then every strategy's phases before the sale (its flood;
//! `seckill-bench flood`: only those), then every strategy's flash sale, then the closed-loop
//! runs in rounds (every strategy once per round, so the machine's slow moments spread over
//! all of them), then each strategy's open loop and the phases of [`crate::phase`] after it
//! (for a strategy that can be deployed, its overload and what the expiry sweep costs its
//! purchases), against app instances started here; then the report, which names first what
//! fell by more than half against the best of the runs already committed from the same machine
//! (the output folder's history index and run folders), and the run's own entry in that index.
//! Every part gets its products and request ids from one [`Allocator`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::measure::baselines::{self, Targets};
use crate::rig::http_floor::Floor;
use crate::rig::{Target, ensure_running};
use app::api::{Strategy, StrategyInfo};

use crate::analyse::{falls, ratios};
use crate::drive::load::Window;
use crate::live::{Feed, Update};
use crate::measure::cpu::{self, Sampler, Span};
use crate::measure::sale::{SalePlan, run_sale};
use crate::measure::stages::StageCounters;
use crate::measure::throughput;
use crate::phase::{self, Allocator, Allotment, Looped, Measuring};
use crate::report::progress::Progress;
use crate::report::{self};
use crate::rig::distance;
use crate::rig::environment::utc_now;
use crate::scenario::{self, Selection};
use crate::schema::world::{Aborts, World};
use crate::schema::{
    Findings, LoadResult, RunReport, SCHEMA_VERSION, ScenarioReport, Settings, StrategyReport,
    ThroughputResult,
};
use testkit::Api;

/// A finished run: its report and the directory it was written to.
pub struct RunOutput {
    pub report: RunReport,
    pub dir: PathBuf,
    /// The products and request-id prefix each part of the run was handed, in order.
    pub allotments: Vec<Allotment>,
}

/// Runs everything and writes `<out>/<UTC timestamp>/` plus `<out>/latest`.
pub async fn run_in(settings: &Settings, target: &Target, out: &Path) -> Result<RunOutput> {
    run_watched(settings, target, out, &Feed::off()).await
}

/// [`run_in`], telling `feed` (the live page) of every phase, every answer the sales and the
/// loads count, each sale's ledger and the scenarios' timelines as they happen.
pub async fn run_watched(
    settings: &Settings,
    target: &Target,
    out: &Path,
    feed: &Feed,
) -> Result<RunOutput> {
    let started = Instant::now();
    let (started_at, stamp) = utc_now();
    let suffixes = [
        target.engine.folder_suffix(),
        target.topology().folder_suffix(),
    ];
    let dir_name = (suffixes.into_iter().flatten()).fold(stamp, |name, s| format!("{name}-{s}"));
    let dir = out.join(&dir_name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let db_url = target.run_database_url();
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (mut apps, api) = target
        .start_instances(
            &target.app_endpoints(),
            &dir.join("logs"),
            &format!("run{run_id}:"),
            settings.instances,
        )
        .await?;
    let (_buyers_relays, api) = distance::buyers_apart(target.buyers, api)?;
    let world = World::at(settings.instances, target.distance)
        .on(target.engine)
        .arranged(target.topology())
        .with_buyers(target.buyers);
    let strategies = if settings.only_baselines {
        Vec::new()
    } else {
        select(api.strategies().await?, &settings.strategies)?
    };

    let (db, environment) = target.connect(&db_url, &target.endpoints.redis_url).await?;

    let mut sampler = Sampler::new(
        (target.processes.iter().cloned())
            .chain(cpu::app_processes(&apps))
            .chain([cpu::Process::generator()])
            .collect(),
    );
    let window = Window::from_secs(settings.warmup, settings.seconds);
    let rounds = settings.repetitions;
    let plan = baselines::Plan {
        concurrency: settings.buyers,
        // The most connections a strategy can hold at the database at once: its buyers,
        // unless the instances' pools together hold fewer.
        db_connections: (settings.instances * app_pool_size()?).min(settings.buyers),
        sweep: baselines::SWEEP.to_vec(),
        window,
        rounds,
    };
    let per_strategy = if settings.only_before_sale {
        0
    } else {
        2 + rounds as u64
    };
    let steps = per_strategy * strategies.len() as u64
        + phase::steps(settings, &strategies)
        + if settings.baselines {
            baselines::steps(&plan)
        } else {
            0
        }
        + if settings.scenarios {
            scenario::Name::all().len() as u64
        } else {
            0
        };
    let progress = Progress::new(steps);
    let announce = |subject: &str, what: &str| {
        progress.phase(subject, what);
        feed.phase(subject, what);
    };

    let measured = if settings.baselines {
        let floor_servers = Floor::start(&target.bench_binary, settings.instances).await?;
        let (_floor_relays, floor) =
            distance::buyers_apart(target.buyers, Api::new(floor_servers.bases(), None)?)?;
        let database_server = target.database_server(&target.endpoints);
        let targets = Targets {
            api: &api,
            floor: &floor,
            database_url: &database_server,
            redis_url: &target.endpoints.redis_url,
        };
        baselines::run_all(&targets, &plan, &sampler, &|name, round, rounds| {
            announce("baseline", &format!("{name}, run {round}/{rounds}"))
        })
        .await?
    } else {
        baselines::Measured {
            baselines: Vec::new(),
            hot_row_sweep: Vec::new(),
        }
    };

    let app_settings = app_config()?;
    let mut ids = Allocator::drawn(run_id);
    let mut records: Vec<StrategyReport> = (strategies.iter().cloned())
        .map(StrategyReport::of)
        .collect();
    let logs = dir.join("logs");
    // What the run hands its phases; the refusal ceiling, once measured, to those after the
    // loops.
    let mut for_phases = phase::Run {
        world: &world,
        settings,
        api: &api,
        db: &db,
        app: &app_settings,
        refusal_ceiling: None,
        relays: target.relays.as_deref(),
        feed,
        announce: &announce,
        logs: &logs,
    };
    // The phases before the sale, every strategy's before any is sold.
    for (place, (info, record)) in strategies.iter().zip(&mut records).enumerate() {
        let measuring = Measuring {
            info,
            place,
            loops: None,
        };
        for_phases
            .measure(&measuring, &mut apps, &mut sampler, &mut ids, record)
            .await?;
    }
    let strategies = if settings.only_before_sale {
        Vec::new()
    } else {
        strategies
    };
    let mut sales = Vec::new();
    for info in &strategies {
        let name = info.name;
        announce(name.name(), "flash sale");
        let allotment = ids.allot("sale", name, 1)?;
        let sale = run_sale(
            &api,
            &db,
            &SalePlan {
                product: allotment.product(),
                strategy: name,
                stock: settings.stock,
                buyers: settings.buyers,
                requests: settings.demand,
                quantity: settings.quantity,
                id_prefix: allotment.prefix,
                feed: feed.clone(),
            },
        )
        .await
        .with_context(|| format!("flash sale of `{name}`"))?;
        sales.push(sale);
        ensure_running(&mut apps, format_args!("`{name}`"), &logs)?;
    }
    let (users, quantity, rate) = (settings.buyers, settings.quantity, settings.rate);
    let plans = ids.loop_plans(&strategies, users, quantity, window, rate, feed)?;
    // The closed loops, interleaved: every strategy once per round.
    let mut loops: Vec<ClosedLoops> = vec![ClosedLoops::default(); plans.len()];
    for (round, k) in crate::analyse::spread::interleaved(plans.len(), rounds) {
        let name = plans[k].strategy;
        announce(
            name.name(),
            &format!("closed loop, run {}/{rounds}", round + 1),
        );
        // Read outside the CPU's span: the reads are the benchmark's, not the strategy's.
        let stages_before = StageCounters::of(&api.metrics().await, name);
        let aborts_before = target.galera_aborts().await?;
        let replica = target.watch_replica().await?;
        let before = sampler.sample();
        let run = throughput::closed(&api, &plans[k], round)
            .await
            .with_context(|| format!("throughput of `{name}`"))?;
        let spent = &mut loops[k];
        spent.cpu.add(&sampler.spent(&before, &run));
        if let (Some(before), Some(after)) = (aborts_before, target.galera_aborts().await?) {
            spent
                .aborts
                .get_or_insert_default()
                .add(after.since(before));
        }
        if let Some(watch) = replica {
            spent
                .replica
                .get_or_insert_default()
                .add(watch.finish().await?);
        }
        let stages_after = StageCounters::of(&api.metrics().await, name);
        spent.stages.add_since(&stages_after, &stages_before);
        spent.runs.push(run);
        ensure_running(&mut apps, format_args!("`{name}`"), &logs)?;
    }
    let refusal_ceiling = match phase::needs_refusal_ceiling(settings, &strategies) {
        true => {
            announce("refusals", "the machine's ceiling");
            let allotment = ids.allot("ceiling", Strategy::Conditional, 1)?;
            let in_flight = phase::in_flight_limit(&world, &app_settings);
            let ceiling = crate::measure::refusals::ceiling(
                &api,
                allotment.product(),
                Strategy::Conditional,
                &allotment.prefix,
                phase::connections(in_flight, settings.buyers),
                crate::measure::refusals::window(settings.quick),
            )
            .await
            .context("the machine's refusal ceiling")?;
            Some(ceiling)
        }
        false => None,
    };
    for_phases.refusal_ceiling = refusal_ceiling;
    // The strategies' records, in the same order; a run of the phases before the sale alone
    // has sold none.
    for (place, ((record, sale), (plan, spent))) in (records.iter_mut())
        .zip(sales)
        .zip(plans.iter().zip(loops))
        .enumerate()
    {
        let info = record.strategy.clone();
        let name = info.name;
        let closed = crate::analyse::spread::combine(spent.runs).context("no closed-loop run")?;
        let rate = throughput::open_rate(plan, &closed);
        announce(name.name(), &format!("open loop {rate:.0}/s"));
        let open = throughput::open(&api, plan, rate)
            .await
            .with_context(|| format!("open loop of `{name}`"))?;
        ensure_running(&mut apps, format_args!("`{name}`"), &logs)?;
        let measuring = Measuring {
            info: &info,
            place,
            loops: Some(Looped {
                closed: &closed,
                plan,
            }),
        };
        for_phases
            .measure(&measuring, &mut apps, &mut sampler, &mut ids, record)
            .await?;
        let throughput = ThroughputResult { closed, open };
        let cpu = Some(spent.cpu.usage(&sampler.processes));
        let mut loops = ratios::loops(name, throughput, &measured.baselines, cpu);
        loops.stages = spent.stages.times();
        loops.aborts = spent.aborts;
        loops.replica = spent.replica;
        record.sale = Some(sale);
        record.loops = Some(loops);
    }
    db.close().await;
    apps.shutdown().await;

    let mut scenarios = Vec::new();
    if settings.scenarios {
        let opts = scenario::Options {
            quick: settings.quick,
            app_binary: Some(target.app_binary.clone()),
            // The scenarios' instances stand as far from their servers as the run's.
            rtt: target.distance.rtt(),
            live: feed.clone(),
        };
        for &s in scenario::Name::all() {
            announce("scenario", &s.to_string());
            // A scenario that cannot be played is a failed row of the report, not the end of
            // the run: the hour of measurements before it is kept.
            match scenario::run(Selection::One(s), &opts).await {
                Ok(played) => scenarios.extend(played),
                Err(e) => {
                    scenarios.push(ScenarioReport::unplayed(&s.to_string(), format!("{e:#}")))
                }
            }
        }
    }
    progress.finish();

    let mut report = RunReport {
        schema_version: SCHEMA_VERSION,
        started_at,
        finished_at: utc_now().0,
        duration_seconds: started.elapsed().as_secs_f64(),
        settings: Settings {
            latency_budget_ms: Some(app_settings.latency_budget_ms),
            ..settings.clone()
        },
        world: Some(world),
        environment,
        baselines: measured.baselines,
        hot_row_sweep: measured.hot_row_sweep,
        strategies: records,
        scenarios,
        findings: Findings::default(),
        falls: Vec::new(),
        other_engine: None,
    };
    report.findings = crate::phase::findings(&report);
    // A fall is judged against runs on the same servers, reached the same way: a round trip
    // added to every request would read as a fall of every strategy that makes several.
    let committed = falls::committed(out);
    report.falls = falls::against(&report, committed.iter().map(|(f, m)| (f.clone(), m)));
    report.other_engine = crate::analyse::other_engine::of(&report, committed);
    let previous = previous_run(out).filter(|p| World::same_servers(p.world, report.world));
    let compared = previous
        .as_ref()
        .map(|previous| crate::analyse::compare::compare(previous, &report));
    crate::document::write_all(&dir, &report, compared.as_ref())?;
    // `latest` is the last run on the local servers of one node each, which the README's
    // results are written from; a run in another world is beside it, not after it.
    if world.unless_local().is_none() {
        report::link_latest(out, &dir)?;
    }
    // The run is written whatever befalls the index: `seckill-bench history` rebuilds it.
    if let Err(e) = crate::history::record(out, &dir, &report) {
        tracing::warn!(
            "not in {}: {e:#}",
            out.join(crate::schema::history::FILE).display()
        );
    }
    feed.send(Update::Finished {
        report: Some(dir.join("report.html").display().to_string()),
    });
    Ok(RunOutput {
        report,
        dir,
        allotments: ids.into_handed(),
    })
}

/// The report `<out>/latest` points at, if there is one this program can read: the run a new
/// run's `report.html` is compared with.
fn previous_run(out: &Path) -> Option<RunReport> {
    let latest = out.join("latest");
    latest.join("report.json").exists().then_some(())?;
    crate::schema::json::read(&latest)
        .inspect_err(|e| tracing::warn!("not comparing with {}: {e:#}", latest.display()))
        .ok()
}

/// The database connections one app instance's pool holds: the app's own default (or
/// `SECKILL_DB_POOL_SIZE`, which the instances inherit).
pub(crate) fn app_pool_size() -> Result<usize> {
    Ok(app_config()?.db_pool_size.max(1) as usize)
}

/// The configuration every app instance of the run starts with: the app's defaults, and the
/// `SECKILL_*` variables the instances inherit from this process.
fn app_config() -> Result<app::config::Config> {
    use clap::Parser;
    app::config::Config::try_parse_from(["seckill-app"]).context("reading the app's settings")
}

/// The strategies named in `wanted` (all when empty), in the order given.
pub fn select(available: Vec<StrategyInfo>, wanted: &[Strategy]) -> Result<Vec<StrategyInfo>> {
    if wanted.is_empty() {
        return Ok(available);
    }
    wanted
        .iter()
        .map(|w| {
            available
                .iter()
                .find(|s| s.name == *w)
                .cloned()
                .with_context(|| {
                    let names: Vec<&str> = available.iter().map(|s| s.name.name()).collect();
                    format!(
                        "the app does not offer `{w}`; it offers: {}",
                        names.join(", ")
                    )
                })
        })
        .collect()
}

/// What one strategy's closed-loop rounds add up to: their runs, the CPU they spent, where
/// the service timed their purchases' time, and what the world's servers did meanwhile (a
/// Galera cluster's aborts, a replica's distance).
#[derive(Debug, Clone, Default)]
struct ClosedLoops {
    runs: Vec<LoadResult>,
    cpu: Span,
    stages: StageCounters,
    aborts: Option<Aborts>,
    replica: Option<crate::schema::ReplicaLag>,
}
