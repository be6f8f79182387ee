//! `seckill-bench run`: baselines, then every strategy's flood (`seckill-bench flood`: only
//! that), then every strategy's flash sale, then the closed-loop runs
//! in rounds (every strategy once per round, so the machine's slow moments spread over all of
//! them), then each strategy's open loop and, for a strategy that can be deployed, its
//! overload and what the expiry sweep costs its purchases, against app instances started here;
//! then the report, which names first what fell by more than half against the best of the runs
//! already committed from the same machine (the output folder's history index and run folders),
//! and the run's own entry in that index.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use sqlx::mysql::MySqlPoolOptions;

use crate::measure::baselines::{self, Targets};
use crate::rig::Target;
use crate::rig::http_floor::Floor;
use app::api::{Safety, Strategy, StrategyInfo};
use testkit::{Apps, Launch};

use crate::analyse::{falls, findings, ratios};
use crate::drive::load::Window;
use crate::live::{Feed, Update};
use crate::measure::cpu::{self, Sampler, Span};
use crate::measure::expiry::{ExpiryPlan, run_expiry};
use crate::measure::flood::{FloodPlan, run_flood};
use crate::measure::overload::{self, OverloadPlan, run_overload};
use crate::measure::sale::{SalePlan, run_sale};
use crate::measure::throughput::{self, ThroughputPlan};
use crate::report::progress::Progress;
use crate::report::schema::{
    Findings, LoadResult, RunReport, SCHEMA_VERSION, ScenarioReport, Settings, ThroughputResult,
};
use crate::report::{self};
use crate::rig::environment::{self, utc_now};
use crate::scenario::{self, Selection};
use testkit::Api;

/// A finished run: its report and the directory it was written to.
pub struct RunOutput {
    pub report: RunReport,
    pub dir: PathBuf,
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
    let (started_at, dir_name) = utc_now();
    let dir = out.join(&dir_name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let admin_token = uuid::Uuid::new_v4().simple().to_string();
    // The benchmark's buyers authenticate as a real sale's would, with tokens it signs itself.
    let buyer_key = uuid::Uuid::new_v4().simple().to_string();
    let db_url = format!(
        "{}/{}",
        target.endpoints.database_url.trim_end_matches('/'),
        target.database
    );
    let launch = Launch::new(&target.app_binary, &dir.join("logs"))
        .endpoints(&target.endpoints)
        .arg("--database-url", &db_url)
        .arg("--admin-token", &admin_token)
        .arg("--buyer-key", &buyer_key);
    let mut apps = Apps::start(launch, settings.instances).await?;
    let api = Api::new(apps.bases(), Some(admin_token))?
        .with_buyer_key(app::buyer::BuyerKey::new(buyer_key.as_bytes()));
    let strategies = if settings.only_baselines {
        Vec::new()
    } else {
        select(api.strategies().await?, &settings.strategies)?
    };

    let db = MySqlPoolOptions::new()
        .max_connections(4)
        .connect(&db_url)
        .await
        .with_context(|| format!("connecting to {db_url}"))?;
    let environment = environment::gather(
        target.servers,
        target.versions.clone(),
        &db,
        &target.endpoints.redis_url,
    )
    .await;

    let sampler = Sampler::new(
        target
            .processes
            .iter()
            .cloned()
            .chain(
                apps.pids()
                    .into_iter()
                    .enumerate()
                    .map(|(n, pid)| cpu::Process::new(format!("app-{n}"), "app", pid)),
            )
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
    let per_strategy = if settings.only_flood {
        0
    } else {
        2 + rounds as u64
    } + u64::from(settings.flood.is_some());
    // The overload phase is for the strategies one would deploy: an unsafe one exists to show
    // its race, and how it bears an overload says nothing about a design to choose.
    let overloaded = |info: &StrategyInfo| {
        settings.overload.is_some() && !settings.only_flood && info.safety != Safety::Unsafe
    };
    let expired = |info: &StrategyInfo| {
        settings.expiry.is_some() && !settings.only_flood && info.safety != Safety::Unsafe
    };
    let steps = per_strategy * strategies.len() as u64
        + strategies.iter().filter(|s| overloaded(s)).count() as u64
        + strategies.iter().filter(|s| expired(s)).count() as u64
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
    let phase = |subject: &str, what: &str| {
        progress.phase(subject, what);
        feed.phase(subject, what);
    };

    let measured = if settings.baselines {
        let floor_servers = Floor::start(&target.bench_binary, settings.instances).await?;
        let floor = Api::new(floor_servers.bases(), None)?;
        let targets = Targets {
            api: &api,
            floor: &floor,
            database_url: &target.endpoints.database_url,
            redis_url: &target.endpoints.redis_url,
        };
        baselines::run_all(&targets, &plan, &sampler, &|name, round, rounds| {
            phase("baseline", &format!("{name}, run {round}/{rounds}"))
        })
        .await?
    } else {
        baselines::Measured {
            baselines: Vec::new(),
            hot_row_sweep: Vec::new(),
        }
    };

    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let mut floods = Vec::new();
    if let Some(shape) = &settings.flood {
        let refusals = if settings.quick {
            Window::from_secs(0.1, 0.3)
        } else {
            Window::from_secs(0.5, 1.0)
        };
        for (k, info) in strategies.iter().enumerate() {
            progress.phase(info.name.name(), "flood");
            let plan = FloodPlan {
                product: 5_000 + k as u64,
                strategy: info,
                shape,
                seed: k as u64,
                id_prefix: format!("{run_id}-{k}-f"),
                refusal_window: Some(refusals),
                refusal_connections: settings.buyers,
                feed: feed.clone(),
            };
            let flood = run_flood(&api, &db, &sampler, &plan, Some(&mut apps))
                .await
                .with_context(|| format!("flood of `{}`", info.name))?;
            floods.push(flood);
            ensure_running(&mut apps, info.name, &dir)?;
        }
    }
    let strategies = if settings.only_flood {
        Vec::new()
    } else {
        strategies
    };
    let mut sales = Vec::new();
    for (k, info) in strategies.iter().enumerate() {
        let name = info.name;
        phase(name.name(), "flash sale");
        let sale = run_sale(
            &api,
            &db,
            &SalePlan {
                product: 10 + 2 * k as u64,
                strategy: name,
                stock: settings.stock,
                buyers: settings.buyers,
                requests: settings.demand,
                quantity: settings.quantity,
                id_prefix: format!("{run_id}-{k}-s"),
                feed: feed.clone(),
            },
        )
        .await
        .with_context(|| format!("flash sale of `{name}`"))?;
        sales.push(sale);
        ensure_running(&mut apps, name, &dir)?;
    }
    let plans: Vec<ThroughputPlan> = strategies
        .iter()
        .enumerate()
        .map(|(k, info)| ThroughputPlan {
            product: 11 + 2 * k as u64,
            strategy: info.name,
            users: settings.buyers,
            quantity: settings.quantity,
            window,
            rate: settings.rate,
            id_prefix: format!("{run_id}-{k}"),
            feed: feed.clone(),
        })
        .collect();
    // The closed loops, interleaved: every strategy once per round.
    let mut closed_runs: Vec<Vec<LoadResult>> = vec![Vec::new(); plans.len()];
    let mut cpu_spans: Vec<Span> = vec![Span::default(); plans.len()];
    for (round, k) in crate::analyse::spread::interleaved(plans.len(), rounds) {
        let name = plans[k].strategy;
        phase(
            name.name(),
            &format!("closed loop, run {}/{rounds}", round + 1),
        );
        let before = sampler.sample();
        let run = throughput::closed(&api, &plans[k], round)
            .await
            .with_context(|| format!("throughput of `{name}`"))?;
        cpu_spans[k].add(&sampler.spent(&before, &run));
        closed_runs[k].push(run);
        ensure_running(&mut apps, name, &dir)?;
    }
    let mut reports = Vec::new();
    let mut overloads = Vec::new();
    let mut expiry_costs = Vec::new();
    let app_settings = app_config()?;
    let in_flight_limit = settings.instances as u64 * u64::from(app_settings.max_in_flight);
    let app_pids = apps.pids();
    for (k, ((info, sale), ((plan, runs), span))) in strategies
        .into_iter()
        .zip(sales)
        .zip(plans.iter().zip(closed_runs).zip(cpu_spans))
        .enumerate()
    {
        let name = info.name;
        let closed = crate::analyse::spread::combine(runs).context("no closed-loop run")?;
        let rate = throughput::open_rate(plan, &closed);
        phase(name.name(), &format!("open loop {rate:.0}/s"));
        let open = throughput::open(&api, plan, rate)
            .await
            .with_context(|| format!("open loop of `{name}`"))?;
        ensure_running(&mut apps, name, &dir)?;
        if let Some(shape) = settings.overload.as_ref().filter(|_| overloaded(&info)) {
            let capacity = closed.successes_per_sec;
            phase(
                name.name(),
                &format!("overload {:.0}/s", shape.factor * capacity),
            );
            let plan = OverloadPlan {
                strategy: &info,
                shape,
                capacity,
                buyers: ThroughputPlan {
                    product: 20_000 + k as u64,
                    ..plan.clone()
                },
                connections: overload::connections(in_flight_limit, settings.buyers),
                in_flight_limit,
                latency_budget_ms: app_settings.latency_budget_ms,
                app_pids: app_pids.clone(),
            };
            let result = run_overload(&api, &plan)
                .await
                .with_context(|| format!("overload of `{name}`"))?;
            overloads.push(result);
            ensure_running(&mut apps, name, &dir)?;
        }
        if let Some(shape) = settings.expiry.as_ref().filter(|_| expired(&info)) {
            phase(name.name(), "expiry sweep, with and without");
            let plan = ExpiryPlan {
                strategy: &info,
                shape,
                buyers: ThroughputPlan {
                    product: 25_000 + k as u64,
                    id_prefix: format!("{run_id}-{k}-x"),
                    ..plan.clone()
                },
            };
            let cost = run_expiry(&api, &db, &plan)
                .await
                .with_context(|| format!("expiry phase of `{name}`"))?;
            expiry_costs.push(cost);
            ensure_running(&mut apps, name, &dir)?;
        }
        let throughput = ThroughputResult { closed, open };
        let cpu = Some(span.usage(&sampler.processes));
        reports.push(ratios::strategy_report(
            info,
            sale,
            throughput,
            &measured.baselines,
            cpu,
        ));
    }
    db.close().await;
    apps.shutdown().await;

    let mut scenarios = Vec::new();
    if settings.scenarios {
        let opts = scenario::Options {
            quick: settings.quick,
            app_binary: Some(target.app_binary.clone()),
            live: feed.clone(),
        };
        for &s in scenario::Name::all() {
            phase("scenario", &s.to_string());
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
        settings: settings.clone(),
        environment,
        baselines: measured.baselines,
        hot_row_sweep: measured.hot_row_sweep,
        strategies: reports,
        scenarios,
        floods,
        overloads,
        expiry_costs,
        findings: Findings::default(),
        falls: Vec::new(),
    };
    report.findings = findings::of(&report);
    report.falls = falls::against(&report, falls::committed(out));
    let previous = previous_run(out);
    let compared = previous
        .as_ref()
        .map(|previous| crate::analyse::compare::compare(previous, &report));
    report::write_all(&dir, &report, compared.as_ref())?;
    report::link_latest(out, &dir)?;
    // The run is written whatever befalls the index: `seckill-bench history` rebuilds it.
    if let Err(e) = crate::history::record(out, &dir, &report) {
        tracing::warn!(
            "not in {}: {e:#}",
            out.join(report::run_history::FILE).display()
        );
    }
    feed.send(Update::Finished {
        report: Some(dir.join("report.html").display().to_string()),
    });
    Ok(RunOutput { report, dir })
}

/// The report `<out>/latest` points at, if there is one this program can read: the run a new
/// run's `report.html` is compared with.
fn previous_run(out: &Path) -> Option<RunReport> {
    let latest = out.join("latest");
    latest.join("report.json").exists().then_some(())?;
    report::json::read(&latest)
        .inspect_err(|e| tracing::warn!("not comparing with {}: {e:#}", latest.display()))
        .ok()
}

/// Fails when an app instance exited (during `strategy`'s phase).
fn ensure_running(apps: &mut Apps, strategy: Strategy, dir: &Path) -> Result<()> {
    if !apps.all_running() {
        bail!(
            "an app instance exited during `{strategy}`; see {}",
            dir.join("logs").display()
        );
    }
    Ok(())
}

/// The database connections one app instance's pool holds: the app's own default (or
/// `SECKILL_DB_POOL_SIZE`, which the instances inherit).
fn app_pool_size() -> Result<usize> {
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
