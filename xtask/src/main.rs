//! `cargo xtask`: set-up and orchestration for seckill-bench.
//!
//! ```text
//! cargo xtask setup        # install or check the servers (MariaDB, PostgreSQL, PgBouncer, Redis,
//!                          # ZooKeeper, etcd, protoc)
//!                          # and the browser the page tests drive (chromium, chromedriver)
//! cargo xtask test         # setup, fmt --check, clippy -D warnings, cargo doc -D warnings,
//!                          # the whole test suite, the OpenAPI contract test (schemathesis)
//! cargo xtask contract     # setup, then only the OpenAPI contract test
//! cargo xtask bench [ARGS] # setup, then `seckill-bench ARGS` in release mode; a `run` ends by
//!                          # comparing with the previous results/latest (comparison.md) and,
//!                          # when it wrote to results/, rewriting README.md's results section
//! ```

mod contract;
mod lint;
mod setup;
mod shared;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};

use crate::shared::Shared;

#[derive(Parser)]
#[command(about = "Set-up and orchestration for seckill-bench")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check for the server programs; install Debian packages where missing (as root with apt).
    Setup,
    /// Setup, then `cargo fmt --check`, clippy and `cargo doc` with warnings denied, every test
    /// against throwaway real servers, and the OpenAPI contract test.
    Test {
        /// Extra arguments for `cargo nextest run` (e.g. a test name filter).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Setup, then only the contract test: schemathesis checks the app against its OpenAPI
    /// document.
    Contract,
    /// Setup, then run the benchmark (`seckill-bench`) in release mode with ARGS;
    /// `--micro` runs the criterion micro-benchmarks (`cargo bench -p benches`) instead, with ARGS.
    Bench {
        #[arg(long)]
        micro: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Setup => setup::run(),
        Cmd::Test { args } => setup::run().and_then(|()| test(&args)),
        Cmd::Contract => setup::run().and_then(|()| contract_only()),
        Cmd::Bench { micro: false, args } => setup::run().and_then(|()| bench(&args)),
        Cmd::Bench { micro: true, args } => setup::run().and_then(|()| micro_bench(&args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn test(args: &[String]) -> Result<()> {
    cargo(&["fmt", "--all", "--check"])?;
    // Clippy lints while the build compiles (see `lint`); without clippy-driver beside cargo,
    // the separate `cargo clippy` pass fails with cargo's own message about the component.
    let driver = lint::driver();
    if driver.is_none() {
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])?;
    }
    docs()?;
    let linted = |mut c: Command| {
        if let Some(driver) = &driver {
            lint::apply(&mut c, driver);
        }
        c
    };
    // The shared servers start while the workspace compiles, so the suite does not wait for
    // the JVMs after it.
    let starting = std::thread::spawn(Shared::start);
    let built = run(linted(cargo_command()).args(["build", "--workspace", "--all-targets"]));
    let shared = starting
        .join()
        .map_err(|_| anyhow!("starting the shared servers panicked"))??;
    built?;
    compose_config()?;

    let mut nextest = linted(test_runner());
    nextest.args(args);
    shared.apply(&mut nextest);
    // Setup installed the browser: its tests run, and fail if it is missing, never skip.
    nextest.env("SECKILL_REQUIRE_BROWSER", "1");
    // The app binary the build above made, for the tests that start it as a process (see
    // `loadtest/tests/suite/common`): building it there would resolve features differently.
    let target = target_dir()?;
    nextest.env(
        "SECKILL_APP_BINARY",
        target.join("debug").join("seckill-app"),
    );
    // The contract test runs beside the suite, on the same servers: the suite leaves most of
    // the cores idle while its tests wait on leases and elections. Its output goes to a file,
    // printed when it ends, so it does not interleave with the suite's.
    let endpoints = shared.endpoints()?;
    let contract = std::thread::spawn(move || {
        contract::run(
            &setup::schemathesis()?,
            &target,
            &endpoints,
            contract::Output::Quiet,
        )
    });
    let suite = run(&mut nextest);
    let contract = contract
        .join()
        .map_err(|_| anyhow!("the contract test panicked"))?;
    suite?;
    contract?;

    let mut doc = linted(cargo_command());
    doc.args(["test", "--workspace", "--doc"]);
    run(&mut doc)?;
    drop(shared);
    // The micro-benchmarks were compiled by the `--all-targets` build above, in the dev
    // profile: that keeps them from rotting without a third, optimised compile of the whole
    // dependency tree. Running them (optimised) is `cargo xtask bench --micro`.
    Ok(())
}

/// `cargo doc` of the workspace, private items too, with rustdoc's warnings denied: a broken
/// intra-doc link makes the docs a reader follows lead nowhere, and rustdoc only warns of it.
fn docs() -> Result<()> {
    let mut flags = std::env::var("RUSTDOCFLAGS").unwrap_or_default();
    flags.push_str(" -D warnings");
    let mut doc = cargo_command();
    doc.env("RUSTDOCFLAGS", flags.trim_start());
    doc.args([
        "doc",
        "--workspace",
        "--no-deps",
        "--document-private-items",
    ]);
    run(&mut doc).context("the docs have rustdoc warnings (a broken intra-doc link?), shown above")
}

/// `cargo nextest run` (every test in a process of its own, in parallel across binaries) where
/// cargo-nextest is installed, otherwise `cargo test`, which runs the same tests binary after
/// binary: slower, but a machine with only rustup and this repository passes too.
fn test_runner() -> Command {
    let nextest = cargo_command()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut c = cargo_command();
    if nextest {
        c.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
        // Two slots per core: most tests wait rather than compute. The ones that keep the
        // cores busy take two slots each (`.config/nextest.toml`).
        if std::env::var_os("NEXTEST_TEST_THREADS").is_none() {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            c.env("NEXTEST_TEST_THREADS", (2 * cores).to_string());
        }
    } else {
        println!(
            "xtask: cargo-nextest is not installed; running `cargo test` instead \
             (`cargo install --locked cargo-nextest` makes this step faster)"
        );
        c.args([
            "test",
            "--workspace",
            "--no-fail-fast",
            "--lib",
            "--bins",
            "--tests",
        ]);
    }
    c
}

/// Builds the app, starts the servers, runs the contract test.
fn contract_only() -> Result<()> {
    // The same build as `test`'s, so features unify the same way and nothing rebuilds.
    let mut build = cargo_command();
    if let Some(driver) = lint::driver() {
        lint::apply(&mut build, &driver);
    }
    run(build.args(["build", "--workspace", "--all-targets"]))?;
    contract(Shared::start_servers()?.as_ref())
}

/// The contract test against the shared servers, or (external mode) the environment's.
fn contract(shared: Option<&sandbox::Servers>) -> Result<()> {
    let endpoints = match shared {
        Some(servers) => servers.endpoints(),
        None => sandbox::Endpoints::from_env()?,
    };
    contract::run(
        &setup::schemathesis()?,
        &target_dir()?,
        &endpoints,
        contract::Output::Live,
    )
}

fn bench(args: &[String]) -> Result<()> {
    // The benchmark starts app instances as processes. Build both binaries in one cargo call
    // (so features unify once) and run the one just built: `cargo run -p loadtest` alone would
    // resolve features anew and rebuild half the tree.
    cargo(&[
        "build",
        "--release",
        "--package",
        "app",
        "--bin",
        "seckill-app",
        "--package",
        "loadtest",
        "--bin",
        "seckill-bench",
    ])?;
    let bench = target_dir()?.join("release").join("seckill-bench");
    let mut c = Command::new(&bench);
    // `cargo xtask bench` and `cargo xtask bench --quick` mean `seckill-bench run [--quick]`.
    // A run in another world (servers at a distance, stock on a Redis Cluster, rows on Galera,
    // on a primary and its replica or on PostgreSQL) is its own committed run beside the local
    // one: no comparison with it, no README rewritten from it.
    let other_world = args.iter().any(|a| {
        ["--redis-cluster", "--rtt", "--galera", "--replicas"].contains(&a.as_str())
            || ["--rtt=", "--galera=", "--replicas="]
                .iter()
                .any(|flag| a.starts_with(flag))
    }) || flag_value(args, "--engine").is_some_and(|engine| engine != "mariadb");
    let is_run = !other_world
        && args
            .first()
            .is_none_or(|a| a.starts_with('-') || a == "run");
    if args.first().is_none_or(|a| a.starts_with('-')) {
        c.arg("run");
    }
    c.args(args);
    // The run before this one, to compare with at the end.
    let out = std::path::PathBuf::from(flag_value(args, "--out").unwrap_or("results"));
    let latest = out.join("latest");
    let previous = std::fs::read_link(&latest).ok().map(|t| out.join(t));
    run(&mut c)?;
    let now = std::fs::read_link(&latest).ok().map(|t| out.join(t));
    if let (true, Some(previous), Some(now)) = (is_run, previous, now)
        && previous != now
    {
        run(Command::new(&bench)
            .arg("compare")
            .arg(&previous)
            .arg(&now)
            .arg("--out")
            .arg(now.join("comparison.md")))?;
    }
    // A run into the committed results rewrites the README's results section from it.
    if is_run && out == std::path::Path::new("results") {
        run(Command::new(&bench).args(["readme", "--report", "results/latest"]))?;
    }
    Ok(())
}

/// The value of `--flag value` or `--flag=value` in `args`.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let at = args
        .iter()
        .position(|a| a == flag || a.starts_with(&format!("{flag}=")))?;
    match args[at].split_once('=') {
        Some((_, v)) => Some(v),
        None => args.get(at + 1).map(String::as_str),
    }
}

/// Where cargo puts build output (honours `CARGO_TARGET_DIR` and `.cargo/config.toml`).
fn target_dir() -> Result<std::path::PathBuf> {
    let out = cargo_command()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let dir = metadata["target_directory"]
        .as_str()
        .context("no target_directory in cargo metadata")?;
    Ok(dir.into())
}

/// Validates docker-compose.yml where a Compose client is installed (no engine is needed).
/// Validates `docker-compose.yml`, alone and with `docker-compose.servers.yml`. The secrets it
/// requires from the environment are given placeholders for the check only.
fn compose_config() -> Result<()> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let client: &[&str] = if works("docker", &["compose", "version"]) {
        &["docker", "compose"]
    } else if works("docker-compose", &["version"]) {
        &["docker-compose"]
    } else {
        println!("xtask: no Compose client installed; docker-compose.yml not validated");
        return Ok(());
    };
    let files: [&[&str]; 2] = [
        &["-f", "docker-compose.yml"],
        &[
            "-f",
            "docker-compose.yml",
            "-f",
            "docker-compose.servers.yml",
        ],
    ];
    for files in files {
        let mut check = Command::new(client[0]);
        check.args(&client[1..]).args(files).args(["config", "-q"]);
        for secret in [
            "SECKILL_ADMIN_TOKEN",
            "SECKILL_DB_ROOT_PASSWORD",
            "SECKILL_DB_PASSWORD",
            "SECKILL_REDIS_PASSWORD",
            "SECKILL_BUYER_KEY",
        ] {
            check.env(secret, "placeholder-for-validation");
        }
        run(&mut check)?;
    }
    Ok(())
}

/// The cargo that runs us (`$CARGO`), so toolchain overrides carry through.
fn cargo_command() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn micro_bench(args: &[String]) -> Result<()> {
    let mut c = cargo_command();
    c.args(["bench", "--package", "benches", "--"]);
    c.args(args);
    run(&mut c)
}

fn cargo(args: &[&str]) -> Result<()> {
    run(cargo_command().args(args))
}

fn run(c: &mut Command) -> Result<()> {
    let shown = format!("{c:?}");
    println!("xtask: running {shown}");
    let status = c
        .status()
        .with_context(|| format!("could not run {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}
