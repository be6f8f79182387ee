//! `seckill-bench`: see the library docs (`loadtest`) and `seckill-bench --help`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use loadtest::cli::{
    Cli, Command, CompareArgs, FloorArgs, HistoryArgs, HoldArgs, IsolationArgs, LiveArgs, LockArgs,
    LockCommand, MatrixArgs, NetworkArgs, PeersArgs, ReadmeArgs, ReportArgs, RunArgs, ScenarioArgs,
};
use loadtest::live::{Feed, Update, server::Live};
use loadtest::lock::LockReport;
use loadtest::rig::{
    GaleraRows, Stand, Target, cluster_processes, server_processes, servers, servers_with_postgres,
};
use loadtest::run::run_watched;
use loadtest::schema::world::{Distance, Engine};
use loadtest::{lock, report};
use sandbox::Endpoints;

/// The allocator the service runs with ([`app`]'s `seckill-app`), so that HTTP's floor
/// (`http-floor`, served from this binary) allocates as the service does; the load's client
/// runs on it too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Run(args) => run(&args, false),
        Command::Flood(args) => run(&args, true),
        Command::Lock(args) => match &args.action {
            None => lock(&args),
            Some(LockCommand::Matrix(matrix)) => lock_matrix(matrix),
            Some(LockCommand::Hold(hold)) => lock_hold(hold),
            Some(LockCommand::Peers(peers)) => lock_peers(peers),
        },
        Command::Network(args) => network(&args),
        Command::Isolation(args) => isolation(&args),
        Command::Scenario(args) => scenario(&args),
        Command::Compare(args) => compare(&args),
        Command::Report(args) => rerender(&args),
        Command::Readme(args) => readme(&args),
        Command::History(args) => history(&args),
        Command::HttpFloor(args) => http_floor(&args),
    }
}

/// The feed and its page, when `--live` is given (and the teaching mode's gate, with `step`).
fn live(args: &LiveArgs, step: bool) -> Result<(Feed, Option<Live>)> {
    let Some(addr) = args.live else {
        anyhow::ensure!(
            !step,
            "--step shows the scenario on the live page: add --live"
        );
        return Ok((Feed::off(), None));
    };
    let feed = Feed::new(step);
    let page = Live::start(addr, &feed)?;
    eprintln!("live page: {}", page.url());
    if let Some(step) = feed.step() {
        step.from_stdin();
    }
    Ok((feed, Some(page)))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// `run`, or with `only_flood` the flood alone.
fn run(args: &RunArgs, only_flood: bool) -> Result<()> {
    let mut settings = args.settings()?;
    if only_flood {
        anyhow::ensure!(
            loadtest::phase::only_before_sale(&mut settings),
            "`flood` with --no-flood runs nothing"
        );
    }
    sandbox::set_server_niceness(settings.server_niceness);
    let stand = match args.engine {
        Engine::MariaDb => servers(args.distance.rtt)?,
        Engine::Postgres => servers_with_postgres(args.distance.rtt)?,
    };
    let mut target = target_on(&stand, args.app_bin.as_deref(), "seckill_bench")?;
    target.buyers = Distance::of(args.client_rtt);
    target.engine = args.engine;
    if args.engine == Engine::Postgres {
        // MariaDB stands idle beside it: the rows, the reads and the baselines are PostgreSQL's.
        target.processes.retain(|p| p.group != "mariadbd");
    }
    if let Some(pg) = &stand.postgres {
        target.processes.push(loadtest::rig::Process::with_children(
            "postgres",
            "postgres",
            pg.server()
                .pid()
                .context("the throwaway PostgreSQL has a pid")?,
        ));
    }
    let cluster = match args.redis_cluster {
        true => {
            eprintln!("starting a Redis Cluster (3 masters, a replica each)…");
            let cluster = sandbox::RedisCluster::start().context("starting the Redis Cluster")?;
            target.redis_cluster = Some(cluster.url());
            target.processes.extend(cluster_processes(&cluster));
            Some(cluster)
        }
        false => None,
    };
    if let Some(writers) = args.galera {
        eprintln!("starting a Galera cluster (3 MariaDB nodes)…");
        let cluster = sandbox::GaleraCluster::start().context("starting the Galera cluster")?;
        let rows = GaleraRows::on(cluster, writers)?;
        target.processes.extend(rows.processes());
        target.galera = Some(rows);
    }
    if let Some(replicas) = args.replicas {
        eprintln!("starting a MariaDB primary and its replica…");
        let rows = loadtest::rig::replicas::ReplicaRows::start(replicas)
            .context("starting the primary and its replica")?;
        target.processes.extend(rows.processes());
        target.replicas = Some(rows);
    }
    let mut live_args = args.live.clone();
    if args.screenshots && live_args.live.is_none() {
        live_args.live = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    }
    let (feed, page) = live(&live_args, false)?;
    let runtime = runtime()?;
    let output = runtime.block_on(run_watched(&settings, &target, &args.out, &feed))?;
    if let (true, Some(page)) = (args.screenshots, &page) {
        for shot in runtime.block_on(loadtest::browser::screenshots(&page.url(), &output.dir))? {
            eprintln!("screenshot: {}", shot.display());
        }
    }
    drop(page);
    drop(cluster);
    drop(target);
    drop(stand);
    if args.json {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{}",
            loadtest::schema::json::to_string(&output.report)?
        )?;
    } else {
        if !only_flood {
            println!("{}", report::tables::summary(&output.report).render());
        }
        println!("report: {}", output.dir.join("report.md").display());
    }
    Ok(())
}

/// What a command runs on `stand`: the app binary at `app_bin` (or beside this one), in the
/// database `database`.
fn target_on(stand: &Stand, app_bin: Option<&std::path::Path>, database: &str) -> Result<Target> {
    let spawned = stand.servers.as_ref();
    Ok(Target {
        endpoints: stand.endpoints.clone(),
        distance: stand.distance,
        buyers: Distance::Local,
        servers: if spawned.is_some() {
            "spawned"
        } else {
            "external"
        },
        versions: spawned.and_then(|s| s.versions().ok()),
        app_binary: testkit::locate_app(app_bin)?,
        bench_binary: std::env::current_exe().context("locating seckill-bench itself")?,
        database: database.into(),
        engine: loadtest::schema::world::Engine::MariaDb,
        processes: spawned.map(server_processes).unwrap_or_default(),
        relays: stand.relays.clone(),
        redis_cluster: None,
        galera: None,
        replicas: None,
    })
}

/// `network`: the sweep, on servers behind relays.
fn network(args: &NetworkArgs) -> Result<()> {
    let settings = args.settings()?;
    sandbox::set_server_niceness(settings.server_niceness);
    let stand = servers(Some(Duration::ZERO))?;
    let target = target_on(&stand, args.app_bin.as_deref(), "seckill_network")?;
    let output = runtime()?.block_on(loadtest::network::sweep(
        &settings, &stand, &target, &args.out,
    ))?;
    drop(target);
    drop(stand);
    // The sweep is written whatever befalls the index: `seckill-bench history` rebuilds it.
    if let Err(e) = loadtest::history::update(&args.out) {
        tracing::warn!("the results' index is not updated: {e:#}");
    }
    println!("report: {}", output.dir.join("report.md").display());
    Ok(())
}

/// `isolation`: the matrix, on a MariaDB and a PostgreSQL of its own.
fn isolation(args: &IsolationArgs) -> Result<()> {
    let settings = args.settings()?;
    sandbox::set_server_niceness(args.server_niceness);
    let mariadb = sandbox::MariaDb::start().context("starting MariaDB")?;
    let postgres = sandbox::Postgres::start().context("starting PostgreSQL")?;
    let servers = loadtest::isolation::Servers {
        mariadb: mariadb.url(),
        postgres: postgres.url(),
    };
    let output = runtime()?.block_on(loadtest::isolation::run(&settings, &servers, &args.out))?;
    drop((mariadb, postgres));
    if let Err(e) = loadtest::history::update(&args.out) {
        tracing::warn!("the results' index is not updated: {e:#}");
    }
    println!("report: {}", output.dir.join("report.md").display());
    Ok(())
}

fn compare(args: &CompareArgs) -> Result<()> {
    let (a, b) = (
        loadtest::schema::json::read(&args.run_a)?,
        loadtest::schema::json::read(&args.run_b)?,
    );
    let comparison = loadtest::analyse::compare::compare(&a, &b);
    let md = report::comparison::render(&comparison);
    if let Some(out) = &args.out {
        std::fs::write(out, &md).with_context(|| format!("writing {}", out.display()))?;
        let page = out.with_extension("html");
        std::fs::write(&page, report::html::render_comparison(&comparison))
            .with_context(|| format!("writing {}", page.display()))?;
    }
    print!("{md}");
    Ok(())
}

fn rerender(args: &ReportArgs) -> Result<()> {
    if args.run.join(loadtest::network::report::JSON).is_file() {
        // A network sweep: its renderings again from its own figures.
        let report = loadtest::network::report::read(&args.run)?;
        loadtest::network::report::write_all(&args.run, &report)?;
        println!("report: {}", args.run.join("report.html").display());
        return Ok(());
    }
    if args.run.join("peers.json").is_file() {
        // The lock peers: their Markdown and their page again from their own figures.
        let json = std::fs::read_to_string(args.run.join("peers.json"))?;
        let report: lock::peers::PeersReport = serde_json::from_str(&json)?;
        std::fs::write(args.run.join("peers.md"), report.markdown())?;
        let html = loadtest::report::html::page::of(lock::peers::TITLE, &report.body());
        std::fs::write(args.run.join("peers.html"), html)?;
        println!("report: {}", args.run.join("peers.html").display());
        return Ok(());
    }
    if args.run.join(loadtest::isolation::report::JSON).is_file() {
        let report = loadtest::isolation::report::read(&args.run)?;
        loadtest::isolation::report::write_all(&args.run, &report)?;
        println!("report: {}", args.run.join("report.html").display());
        return Ok(());
    }
    let run = loadtest::schema::json::read(&args.run)?;
    let compared = match &args.compare_with {
        Some(earlier) => Some(loadtest::analyse::compare::compare(
            &loadtest::schema::json::read(earlier)?,
            &run,
        )),
        None => None,
    };
    let dir = if args.run.is_dir() {
        args.run.clone()
    } else {
        args.run.parent().map(PathBuf::from).unwrap_or_default()
    };
    loadtest::document::write_renderings(&dir, &run, compared.as_ref())?;
    println!("report: {}", dir.join("report.html").display());
    Ok(())
}

fn readme(args: &ReadmeArgs) -> Result<()> {
    let run = loadtest::schema::json::read(&args.report)?;
    let text = std::fs::read_to_string(&args.readme)
        .with_context(|| format!("reading {}", args.readme.display()))?;
    let link = report::readme::link(&args.readme, &args.report)?;
    let picture = report::readme::picture(&args.readme, &link);
    let written = report::readme::replace(
        &text,
        &report::readme::section(
            &run,
            &link,
            &loadtest::phase::readme(&run),
            picture.as_deref(),
        ),
    )?;
    if args.check {
        anyhow::ensure!(
            written == text,
            "{}'s results section is not what `seckill-bench readme` writes from {}; run it",
            args.readme.display(),
            args.report.display()
        );
        return Ok(());
    }
    std::fs::write(&args.readme, written)
        .with_context(|| format!("writing {}", args.readme.display()))
}

fn history(args: &HistoryArgs) -> Result<()> {
    let history = loadtest::history::update(&args.results)?;
    let here = (history.runs.iter())
        .filter(|r| args.results.join(&r.folder).is_dir())
        .count();
    println!(
        "{}: {} runs, {here} of them in the folder",
        args.results.join(loadtest::schema::history::FILE).display(),
        history.runs.len()
    );
    Ok(())
}

fn scenario(args: &ScenarioArgs) -> Result<()> {
    let (feed, page) = live(&args.live, args.step)?;
    let opts = loadtest::scenario::Options {
        quick: args.quick,
        app_binary: Some(testkit::locate_app(args.app_bin.as_deref())?),
        rtt: args.rtt,
        live: feed.clone(),
    };
    let reports = runtime()?.block_on(loadtest::scenario::run(args.name, &opts))?;
    if args.rtt.is_some() {
        let loopback: Vec<&str> = (reports.iter())
            .filter(|r| r.servers.is_local())
            .map(|r| r.scenario.as_str())
            .collect();
        if !loopback.is_empty() {
            eprintln!(
                "played over loopback whatever --rtt says (their clients reach their servers \
                 themselves, or they set their own distances): {}",
                loopback.join(", ")
            );
        }
    }
    feed.send(Update::Finished { report: None });
    drop(page);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            println!("{}\n", report::scenarios::markdown(r));
        }
    }
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.scenario.to_string())
        .collect();
    anyhow::ensure!(
        failed.is_empty(),
        "expectations not met in: {}",
        failed.join(", ")
    );
    Ok(())
}

fn lock(args: &LockArgs) -> Result<()> {
    let backend = args.backend.context("--backend is required")?;
    let stand = match backend.uses_postgres() {
        true => loadtest::rig::servers_with_postgres(args.distance.rtt)?,
        false => servers(args.distance.rtt)?,
    };
    let endpoints = &stand.endpoints;
    let result = runtime()?.block_on(async {
        let clients = lock::connect_clients(backend, endpoints, args.clients).await?;
        lock::bench(
            backend,
            clients,
            endpoints,
            args.workers,
            args.seconds,
            Duration::from_micros(args.hold_us),
            args.check,
        )
        .await
    })?;
    drop(stand);
    let result = LockReport {
        round_trip_added_us: (args.distance.rtt)
            .map(|rtt| u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX)),
        ..result
    };
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        println!("{result}");
    }
    Ok(())
}

fn lock_matrix(args: &MatrixArgs) -> Result<()> {
    let opts = lock::matrix::Options {
        settings: lock::matrix::Settings::new(args.quick),
        backends: if args.backends.is_empty() {
            lock::matrix::BACKENDS.to_vec()
        } else {
            args.backends.clone()
        },
        hold_binary: std::env::current_exe().context("locating seckill-bench itself")?,
    };
    let matrix = runtime()?.block_on(lock::matrix::run(&opts))?;
    let dir = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!("{}-lock-matrix", matrix.dir_name()))
    });
    lock::matrix::write(&dir, &matrix)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&matrix)?);
    } else {
        println!("{}", lock::matrix::markdown(&matrix));
    }
    eprintln!("matrix: {}", dir.join("matrix.md").display());
    Ok(())
}

fn http_floor(args: &FloorArgs) -> Result<()> {
    runtime()?.block_on(loadtest::rig::http_floor::serve(args.listen))
}

fn lock_hold(args: &HoldArgs) -> Result<()> {
    let endpoints = Endpoints::from_env()?;
    runtime()?.block_on(lock::matrix::hold(
        args.backend,
        &endpoints,
        &args.key,
        Duration::from_millis(args.lease_ms),
    ))
}

fn lock_peers(args: &PeersArgs) -> Result<()> {
    let options = lock::peers::PeersOptions {
        workers: args.workers,
        seconds: args.seconds,
        rounds: args.rounds,
        python: (args.python.clone()).unwrap_or_else(lock::peers::PeersOptions::default_python),
        script: (args.script.clone()).unwrap_or_else(lock::peers::PeersOptions::default_script),
    };
    let stand = servers(None)?;
    let report = runtime()?.block_on(lock::peers::run(&stand.endpoints, &options))?;
    drop(stand);
    let md = report.markdown();
    if let Some(out) = &args.out {
        std::fs::write(out, &md).with_context(|| format!("writing {}", out.display()))?;
        let page = out.with_extension("html");
        let html = loadtest::report::html::page::of(lock::peers::TITLE, &report.body());
        std::fs::write(&page, html).with_context(|| format!("writing {}", page.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{md}");
    }
    Ok(())
}
