//! `seckill-bench network`: every strategy with its servers at several distances, and a model
//! that predicts what a distance does to it.
//!
//! One set of servers, two sets of app instances on it: one reaching every server directly,
//! one through relays ([`crate::rig::distance`]) whose added round trip the sweep sets in turn
//! (0, then each `--rtts`). For each strategy, first its purchases are counted in round trips
//! with the relays adding nothing ([`crate::phase::round_trips::count`]); then, in rounds,
//! every distance in turn — the order rotated each round, so a slow moment of the machine does
//! not fall on one distance — the server baselines (the database's and Redis's work alone) and
//! every strategy's closed loop; last, at each distance, every strategy's flash sale, judged
//! from the database. The medians, the round trips and the sales make the report
//! ([`report`]), and the model reads them ([`model`]).
//!
//! Both sets of instances stay up throughout: the loops switch between them rather than
//! starting instances anew, so every distance is measured by warm instances with their pools
//! open. The idle set costs the machine its sweeps and heartbeats.

pub mod model;
pub mod report;
pub mod schema;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use testkit::{Api, Apps};

use crate::drive::load::Window;
use crate::live::Feed;
use crate::measure::baselines::{self, BACKENDS, Backends, Targets};
use crate::measure::cpu::{Sampler, Span};
use crate::measure::sale::{SalePlan, run_sale};
use crate::measure::throughput;
use crate::phase::Allocator;
use crate::rig::environment::utc_now;
use crate::rig::{Process, Stand, Target};
use crate::schema::LoadResult;
use crate::schema::world::Distance;
use schema::{
    BaselineSweep, NetworkReport, NetworkSettings, RELAYS_LOOP, SCHEMA_VERSION, StrategySweep,
};

/// The round trips swept past zero by default, in µs: inside one zone (0.2, 0.5 ms), across
/// zones (1, 2 ms).
pub const RTTS_US: [u64; 4] = [200, 500, 1_000, 2_000];

/// A finished sweep: its report and the folder it was written to.
pub struct NetworkOutput {
    pub report: NetworkReport,
    pub dir: PathBuf,
}

/// One set of app instances and a client for it.
struct Fleet {
    apps: Apps,
    api: Api,
}

/// Runs the sweep on `stand`'s servers (which must stand behind relays) with `target`'s app
/// binary; writes `<out>/<UTC timestamp>-network/`.
pub async fn sweep(
    settings: &NetworkSettings,
    stand: &Stand,
    target: &Target,
    out: &Path,
) -> Result<NetworkOutput> {
    let relays = (stand.relays.as_deref()).context("the sweep needs its servers behind relays")?;
    let started = Instant::now();
    let (started_at, stamp) = utc_now();
    let dir = out.join(format!("{stamp}-network"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let run = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let start = async |endpoints: &sandbox::Endpoints, name: &str| -> Result<Fleet> {
        let logs = dir.join("logs").join(name);
        let prefix = format!("net{run}{name}:");
        let (apps, api) =
            (target.start_instances(endpoints, &logs, &prefix, settings.instances)).await?;
        Ok(Fleet { apps, api })
    };
    relays.set_rtt(Duration::ZERO);
    // The relayed set first: the first instance creates and migrates the database alone.
    let relayed = start(&stand.endpoints, "relayed").await?;
    let direct = start(&stand.direct, "direct").await?;
    let strategies = crate::run::select(relayed.api.strategies().await?, &settings.strategies)?;
    let db_url = target.database_url(&stand.direct);
    let (db, environment) = target.connect(&db_url, &stand.direct.redis_url).await?;

    let points: Vec<Distance> = std::iter::once(Distance::Local)
        .chain(
            std::iter::once(0)
                .chain(settings.rtts_us.iter().copied())
                .map(|rtt_us| Distance::Relayed { rtt_us }),
        )
        .collect();
    let mut fleets = [direct, relayed];
    // The fleet that stands at `p`, the relays set to it first.
    let at = |p: Distance| -> usize {
        match p {
            Distance::Local => 0,
            Distance::Relayed { rtt_us } => {
                relays.set_rtt(Duration::from_micros(rtt_us));
                1
            }
        }
    };
    let mut ids = Allocator::drawn(run);

    let mut counts = Vec::new();
    let warm_up = (crate::run::app_pool_size()? * settings.instances) as u64;
    for info in &strategies {
        eprintln!("counting the round trips of `{}`", info.name);
        let allotment = ids.allot("round-trips", info.name, 1)?;
        let api = &fleets[at(Distance::Relayed { rtt_us: 0 })].api;
        counts.push(
            crate::phase::round_trips::count(
                api,
                relays,
                info,
                &allotment,
                settings.purchases_counted,
                warm_up,
            )
            .await
            .with_context(|| format!("counting the round trips of `{}`", info.name))?,
        );
    }

    let window = Window::from_secs(settings.warmup, settings.seconds);
    let db_connections = crate::run::app_pool_size()? * settings.instances;
    let plan = baselines::Plan {
        concurrency: settings.buyers,
        db_connections,
        sweep: Vec::new(),
        window,
        rounds: settings.rounds,
    };
    let apis = [fleets[0].api.clone(), fleets[1].api.clone()];
    let (direct_targets, relayed_targets) = (
        targets(&apis[0], &stand.direct),
        targets(&apis[1], &stand.endpoints),
    );
    let direct_backends = (Backends::connect(&direct_targets, &plan).await)
        .context("the server baselines, reached directly")?;
    let relayed_backends = (Backends::connect(&relayed_targets, &plan).await)
        .context("the server baselines, through the relays")?;
    let plans = ids.loop_plans(&strategies, settings.buyers, 1, window, None, &Feed::off())?;
    let steps = settings.rounds * points.len() * (BACKENDS.len() + plans.len());
    let mut step = 0;
    let cpu = Sampler::new(processes(target));
    let mut baseline_cpu = vec![vec![Span::default(); points.len()]; BACKENDS.len()];
    let mut baseline_runs = vec![vec![Vec::new(); points.len()]; BACKENDS.len()];
    let mut closed_runs = vec![vec![Vec::<LoadResult>::new(); points.len()]; plans.len()];
    for round in 0..settings.rounds {
        for turn in 0..points.len() {
            let p = (turn + round) % points.len();
            let fleet = &mut fleets[at(points[p])];
            let backends = match points[p] {
                Distance::Local => &direct_backends,
                Distance::Relayed { .. } => &relayed_backends,
            };
            for (b, name) in BACKENDS.iter().enumerate() {
                step += 1;
                eprintln!(
                    "[{step}/{steps}] round {} at {:?}: [{name}]",
                    round + 1,
                    points[p]
                );
                let before = cpu.sample();
                let result = backends.measure(*name).await?;
                baseline_cpu[b][p].add(&cpu.spent(&before, &result));
                baseline_runs[b][p].push(result);
            }
            for (k, plan) in plans.iter().enumerate() {
                step += 1;
                eprintln!(
                    "[{step}/{steps}] round {} at {:?}: {}",
                    round + 1,
                    points[p],
                    plan.strategy
                );
                let loop_id = round * points.len() + p;
                closed_runs[k][p].push(
                    throughput::closed(&fleet.api, plan, loop_id)
                        .await
                        .with_context(|| format!("closed loop of `{}`", plan.strategy))?,
                );
                ensure_running(&mut fleet.apps, &dir)?;
            }
        }
    }
    direct_backends.close().await?;
    relayed_backends.close().await?;

    let mut sales = vec![Vec::new(); strategies.len()];
    for point in &points {
        let fleet = &mut fleets[at(*point)];
        for (k, info) in strategies.iter().enumerate() {
            eprintln!("flash sale of `{}` at {point:?}", info.name);
            let allotment = ids.allot("sale", info.name, 1)?;
            let sale = run_sale(
                &fleet.api,
                &db,
                &SalePlan {
                    product: allotment.product(),
                    strategy: info.name,
                    stock: settings.sale_stock,
                    buyers: settings.buyers,
                    requests: settings.sale_clicks,
                    quantity: 1,
                    id_prefix: allotment.prefix,
                    feed: Feed::off(),
                },
            )
            .await
            .with_context(|| format!("flash sale of `{}` at {point:?}", info.name))?;
            sales[k].push(sale.accounting);
            ensure_running(&mut fleet.apps, &dir)?;
        }
    }
    relays.set_rtt(Duration::ZERO);
    for fleet in fleets {
        fleet.apps.shutdown().await;
    }

    let combined = |runs: Vec<Vec<LoadResult>>| -> Result<Vec<LoadResult>> {
        (runs.into_iter())
            .map(|r| crate::analyse::spread::combine(r).context("a point with no run"))
            .collect()
    };
    let mut baselines = Vec::new();
    for ((name, runs), spans) in BACKENDS.iter().zip(baseline_runs).zip(baseline_cpu) {
        baselines.push(BaselineSweep {
            name: *name,
            at: combined(runs)?,
            cpu: spans.iter().map(|s| s.usage(&cpu.processes)).collect(),
        });
    }
    let mut swept = Vec::new();
    for (((info, round_trips), runs), sales) in strategies
        .into_iter()
        .zip(counts)
        .zip(closed_runs)
        .zip(sales)
    {
        swept.push(StrategySweep {
            strategy: info,
            round_trips,
            closed: combined(runs)?,
            sales,
        });
    }
    let report = NetworkReport {
        schema_version: SCHEMA_VERSION,
        started_at,
        finished_at: utc_now().0,
        duration_seconds: started.elapsed().as_secs_f64(),
        settings: settings.clone(),
        environment,
        points,
        baselines,
        strategies: swept,
    };
    report::write_all(&dir, &report)?;
    Ok(NetworkOutput { report, dir })
}

/// The server baselines' targets: `endpoints`, and `api` where an HTTP baseline would ask
/// (the sweep measures none).
fn targets<'a>(api: &'a Api, endpoints: &'a sandbox::Endpoints) -> Targets<'a> {
    Targets {
        api,
        floor: api,
        database_url: &endpoints.database_url,
        redis_url: &endpoints.redis_url,
    }
}

/// The processes whose CPU the baselines are measured with: the servers (when the sweep
/// started them), the load generator, and within it the relays' loop (once it carried a
/// connection) — what the relays cost is that thread's time.
fn processes(target: &Target) -> Vec<Process> {
    let mut all = target.processes.clone();
    all.push(Process::generator());
    if let Some(thread) = sandbox::relay_thread_id() {
        all.push(Process::thread_of_generator(RELAYS_LOOP, "relays", thread));
    }
    all
}

/// Fails when an app instance exited.
fn ensure_running(apps: &mut Apps, dir: &Path) -> Result<()> {
    anyhow::ensure!(
        apps.all_running(),
        "an app instance exited; see {}",
        dir.join("logs").display()
    );
    Ok(())
}
