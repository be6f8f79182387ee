//! The command line of `seckill-bench`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::scenario::Selection;

mod isolation;
mod lock;
mod network;
mod run;

pub use isolation::IsolationArgs;
pub use lock::{HoldArgs, LockArgs, LockCommand, MatrixArgs, PeersArgs};
pub use network::NetworkArgs;
pub use run::{FloodArgs, RunArgs};

#[derive(Debug, Parser)]
#[command(
    name = "seckill-bench",
    about = "Flash-sale benchmark: correctness and throughput of every stock strategy, and a lock benchmark",
    long_about = "Flash-sale benchmark: correctness and throughput of every stock strategy, and a lock \
                  benchmark.\n\nBy default it starts throwaway servers (MariaDB, Redis, ZooKeeper, etcd) \
                  with the harness; SECKILL_EXTERNAL=1 uses the servers named in DATABASE_URL, REDIS_URL, \
                  REDLOCK_URLS, ZOOKEEPER_CONNECT and ETCD_ENDPOINTS instead."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Flash sale, throughput and baselines for every strategy; writes a report.
    Run(RunArgs),
    /// W workers contend for one lock and count mutual-exclusion violations; `lock matrix`
    /// measures every backend against every requirement.
    Lock(LockArgs),
    /// Only the flood: thousands of buyers within a second for far fewer units, one per
    /// customer, through every strategy (takes `run`'s flags); writes a report.
    Flood(RunArgs),
    /// Every strategy with its servers at several distances (relays adding 0.2 to 2 ms to
    /// every round trip): rates, round trips counted, a model checked; writes its own report.
    Network(NetworkArgs),
    /// Which transaction isolation level stops which failure (lost update, negative stock,
    /// one-per-customer write skew, phantom inventory) on MariaDB and PostgreSQL, under load,
    /// with what a correct client's retries cost; writes its own report.
    Isolation(IsolationArgs),
    /// Reproduces a classic failure (or `all`) and reports expected against observed.
    Scenario(ScenarioArgs),
    /// What changed from one run to another: throughput, p99 and accounting per strategy and
    /// baseline, marked where beyond the runs' noise or where a safe strategy began to oversell.
    Compare(CompareArgs),
    /// Writes a run's renderings again from its report.json (left as it is): report.md, the
    /// charts and report.html (compared with another run, when named).
    Report(ReportArgs),
    /// Writes the README's results section from a run's report (the committed run's, by
    /// default), or checks that it holds what would be written.
    Readme(ReadmeArgs),
    /// Rebuilds the results folder's history index (`history.json`: every run ever committed,
    /// the deleted ones kept) from the run folders present, and its `README.md`'s list of the
    /// runs no longer there, each with the commit that holds it.
    History(HistoryArgs),
    /// Serves HTTP's floor: `GET /api/noop` and a purchase refused `sold_out`, with nothing of
    /// the service behind them (the baselines start it themselves; see `rig::http_floor`).
    HttpFloor(FloorArgs),
}

/// Settings of `seckill-bench http-floor`.
#[derive(Debug, Clone, Args)]
pub struct FloorArgs {
    /// Where to listen (port 0: any free port, printed once listening).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
}

/// Settings of `seckill-bench report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The run: a results directory (or its report.json); a network sweep's directory is
    /// rendered from its network.json, an isolation matrix's from its isolation.json, the lock
    /// peers' from their peers.json.
    #[arg(default_value = "results/latest")]
    pub run: PathBuf,
    /// An earlier run to compare with in report.html.
    #[arg(long)]
    pub compare_with: Option<PathBuf>,
}

/// Settings of `seckill-bench readme`.
#[derive(Debug, Clone, Args)]
pub struct ReadmeArgs {
    /// The run: a results directory (or its report.json); a network sweep's directory is
    /// rendered from its network.json.
    #[arg(long, default_value = "results/latest")]
    pub report: PathBuf,
    /// The README whose results section is written.
    #[arg(long, default_value = "README.md")]
    pub readme: PathBuf,
    /// Write nothing: fail if the README's section differs from what would be written.
    #[arg(long)]
    pub check: bool,
}

/// Settings of `seckill-bench history`.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// The results folder.
    #[arg(default_value = "results")]
    pub results: PathBuf,
}

/// Settings of `seckill-bench compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The earlier run: a results directory (or its report.json).
    pub run_a: PathBuf,
    /// The later run.
    pub run_b: PathBuf,
    /// Also write the comparison (Markdown) to this file, and as a page beside it (the same
    /// name ending in `.html`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Where the live page is served (`--live`, `--live ADDR`).
#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    /// Serve a live page of the run at this address (default when the flag is given alone:
    /// 127.0.0.1 on a free port; the address is printed): the sale's figures, answers per
    /// second by code, latency percentiles over time, the scenarios' timelines as they unfold.
    #[arg(
        long,
        env = "SECKILL_LIVE",
        num_args = 0..=1,
        default_missing_value = "127.0.0.1:0",
        value_name = "ADDR"
    )]
    pub live: Option<std::net::SocketAddr>,
}

/// Settings of `seckill-bench scenario`.
#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// The scenario, or `all`.
    pub name: Selection,
    #[command(flatten)]
    pub live: LiveArgs,
    /// Teaching mode: hold the scenario after every timeline event until "Next" on the live
    /// page (or Enter here). Its timings then include the pauses: figures for a class, not for
    /// a comparison.
    #[arg(long, env = "SECKILL_STEP")]
    pub step: bool,
    /// Short leases and few rounds: seconds per scenario.
    #[arg(long)]
    pub quick: bool,
    /// Put the servers the scenario's app instances reach (MariaDB or the Galera nodes,
    /// Redis, ZooKeeper) behind relays that add this round trip to every request: `0.5ms`,
    /// `2ms`. The scenarios whose clients reach their servers themselves (the lock
    /// scenarios), those on clusters whose members announce their own addresses, and
    /// `lease-distance` (which sets its own distances) play over loopback; each report says
    /// which it was.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub rtt: Option<Duration>,
    /// Print the reports as JSON instead of markdown.
    #[arg(long)]
    pub json: bool,
    /// The `seckill-app` binary (default: next to this executable).
    #[arg(long, env = "SECKILL_APP_BIN")]
    pub app_bin: Option<PathBuf>,
}

/// How far the servers stand from whoever reaches them (`--rtt`).
#[derive(Debug, Clone, Args)]
pub struct DistanceArgs {
    /// Put every server (MariaDB, Redis, the Redlock set, ZooKeeper, etcd, memcached) behind a
    /// relay that adds this round trip to every request made to it: `0.5ms` (two machines of
    /// one zone), `2ms` (of two zones), `500us`; `0` keeps the relays and adds nothing (what
    /// the relays cost). Without it the servers are reached directly, over loopback.
    #[arg(long, env = "SECKILL_BENCH_RTT", value_parser = duration, value_name = "DURATION")]
    pub rtt: Option<Duration>,
}

/// A duration as `0.5ms`, `2ms`, `500us` (or `500µs`), `1s`; `0` alone is zero.
pub fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let unit_at = (text.find(|c: char| !c.is_ascii_digit() && c != '.'))
        .ok_or_else(|| format!("`{text}` needs a unit: us, ms or s"))?;
    let (number, unit) = text.split_at(unit_at);
    let number: f64 = (number.parse().ok())
        .filter(|n: &f64| n.is_finite())
        .ok_or_else(|| format!("`{text}` is no duration"))?;
    let nanos_per_unit = match unit.trim() {
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => return Err(format!("`{other}` in `{text}` is no unit: us, ms or s")),
    };
    let nanos = (number * nanos_per_unit).round();
    if nanos >= u64::MAX as f64 {
        return Err(format!("`{text}` is too long"));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::schema::Settings;

    fn settings(args: &[&str]) -> anyhow::Result<Settings> {
        let cli = Cli::try_parse_from([&["seckill-bench", "run"], args].concat())?;
        let Command::Run(run) = cli.command else {
            unreachable!("parsed as `run`");
        };
        run.settings()
    }

    #[test]
    fn the_expiry_phases_non_payers_are_the_floods_share_unless_told_otherwise() {
        let defaults = settings(&[]).unwrap();
        let expiry = crate::phase::expiry::shape(&defaults).unwrap();
        let flood = crate::phase::flood::shape(&defaults).unwrap();
        assert_eq!(expiry.non_payer_share, flood.non_payer_share);
        let worst = settings(&["--expiry-non-payers", "1"]).unwrap();
        let worst = crate::phase::expiry::shape(&worst).unwrap();
        assert_eq!(worst.non_payer_share, 1.0);
        assert!(settings(&["--expiry-non-payers", "1.5"]).is_err());
    }

    #[test]
    fn round_trips_are_read_in_microseconds_milliseconds_or_seconds() {
        let us = Duration::from_micros;
        assert_eq!(duration("0.5ms"), Ok(us(500)));
        assert_eq!(duration("2ms"), Ok(us(2_000)));
        assert_eq!(duration("500us"), Ok(us(500)));
        assert_eq!(duration("200µs"), Ok(us(200)));
        assert_eq!(duration("1s"), Ok(us(1_000_000)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        for wrong in ["", "2", "ms", "1.2.3ms", "-1ms", "2 hours"] {
            assert!(duration(wrong).is_err(), "`{wrong}` was read");
        }
        let cli = Cli::try_parse_from(["seckill-bench", "run", "--rtt", "0.5ms"]).unwrap();
        let Command::Run(run) = cli.command else {
            unreachable!("parsed as `run`");
        };
        assert_eq!(run.distance.rtt, Some(us(500)));
        let cli = Cli::try_parse_from(["seckill-bench", "scenario", "all", "--rtt", "2ms"]);
        let Command::Scenario(scenario) = cli.unwrap().command else {
            unreachable!("parsed as `scenario`");
        };
        assert_eq!(scenario.rtt, Some(us(2_000)));
    }

    #[test]
    fn the_buyers_round_trip_is_a_setting_apart_from_the_servers_and_goes_with_any_world() {
        let run = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["seckill-bench", "run"], args].concat()).unwrap();
            let Command::Run(run) = cli.command else {
                unreachable!("parsed as `run`");
            };
            run
        };
        let both = run(&["--client-rtt", "20ms", "--rtt", "1ms"]);
        assert_eq!(both.client_rtt, Some(Duration::from_millis(20)));
        assert_eq!(both.distance.rtt, Some(Duration::from_millis(1)));
        assert_eq!(run(&[]).client_rtt, None);
        assert_eq!(
            run(&["--galera", "all-writers", "--client-rtt", "1ms"]).client_rtt,
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn a_cluster_the_run_starts_is_not_put_at_a_distance_it_would_not_be_measured_at() {
        let run = |args: &[&str]| Cli::try_parse_from([&["seckill-bench", "run"], args].concat());
        assert!(run(&["--galera", "all-writers", "--rtt", "1ms"]).is_err());
        assert!(run(&["--redis-cluster", "--rtt", "1ms"]).is_err());
        assert!(run(&["--galera", "one-writer"]).is_ok());
        assert!(run(&["--replicas", "semi-sync", "--galera", "one-writer"]).is_err());
        assert!(run(&["--replicas", "async", "--rtt", "1ms"]).is_err());
        assert!(run(&["--replicas", "semi-sync"]).is_ok());
        assert!(run(&["--redis-cluster"]).is_ok());
    }
}
