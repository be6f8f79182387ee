//! `seckill-bench run`'s settings (and `flood`'s, which takes the same): what a run measures,
//! and the shapes of its flood, overload and expiry phases, with their defaults.

use std::path::PathBuf;
use std::time::Duration;

use app::api::Strategy;
use clap::Args;

use super::{DistanceArgs, LiveArgs, duration};
use crate::phase::expiry::{
    self, ExpiryShape, PAYMENT_WINDOW_MS as EXPIRY_PAYMENT_WINDOW_MS,
    WARMUP_SECONDS as EXPIRY_WARMUP,
};
use crate::phase::flood::{self, FloodShape};
use crate::phase::overload::{self, OverloadShape};
use crate::phase::round_trips::{self, RoundTripShape};
use crate::schema::{ByPhase, OPEN_RATE_SHARE, Settings};

/// Share of buyers who never pay what they bought, by default: the flood's winners and the
/// expiry phase's buyers.
const NON_PAYERS: f64 = 0.3;

/// Settings of `seckill-bench run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub live: LiveArgs,
    /// Strategies to run, comma-separated (default: every strategy the app lists).
    #[arg(long, value_delimiter = ',', env = "SECKILL_BENCH_STRATEGIES")]
    pub strategies: Vec<Strategy>,
    /// App instances started as separate processes; load is spread over them.
    #[arg(long, default_value_t = 2)]
    pub instances: usize,
    /// Units on sale in the flash-sale phase (S; default 1000, 100 with --quick).
    #[arg(long)]
    pub stock: Option<i64>,
    /// Concurrent buyers / closed-loop users (U; default 200, 50 with --quick); also the
    /// concurrency of the HTTP and Redis baselines (the database baselines use as many
    /// connections as the app instances' pools hold together, at most U).
    #[arg(long)]
    pub buyers: Option<usize>,
    /// Purchase requests in the flash sale (D; default 3 × stock).
    #[arg(long)]
    pub demand: Option<u64>,
    /// Units per order.
    #[arg(long, default_value_t = 1)]
    pub quantity: i64,
    /// Measured duration of each throughput run, in seconds (T; default 7, 1 with --quick).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Uncounted warm-up before each throughput run, in seconds (default 1, 0.5 with --quick).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Runs of every closed-loop and baseline figure, interleaved across strategies and
    /// baselines; the report gives their median and min–max.
    #[arg(long, default_value_t = 3, env = "SECKILL_BENCH_REPETITIONS")]
    pub repetitions: usize,
    /// Open-loop arrival rate in requests/s (default: 70% of the strategy's closed-loop attempts/s).
    #[arg(long)]
    pub rate: Option<f64>,
    /// A reduced matrix for smoke tests (a few minutes): stock 100, 50 buyers, demand 3 × stock,
    /// 1 s runs after 0.5 s warm-up.
    #[arg(long)]
    pub quick: bool,
    /// Skip the baselines (no-op HTTP, direct SQL, hot-row UPDATE and its sweep, Redis Lua, and
    /// the standard tools beside them).
    #[arg(long)]
    pub no_baselines: bool,
    /// Skip the fault scenarios (run in their quick form with `--quick`).
    #[arg(long)]
    pub no_scenarios: bool,
    /// Measure only the baselines and the standard tools beside them: no strategy, no
    /// scenario (a check of the load generator against the tools).
    #[arg(long, conflicts_with = "no_baselines")]
    pub only_baselines: bool,
    #[command(flatten)]
    pub flood: FloodArgs,
    /// After each deployable strategy's open loop, offer it this many times its closed-loop
    /// purchases per second in an open loop (3 s after 2.5 s of warm-up, long enough for an
    /// instance to see the crowd stay and narrow the purchases it admits; 1 s after 0.3 s with
    /// --quick): what it accepts, how fast it refuses the rest, and the app instances' memory
    /// meanwhile.
    #[arg(long, default_value_t = 3.0)]
    pub overload_factor: f64,
    /// Skip the overload phase.
    #[arg(long)]
    pub no_overload: bool,
    /// Skip the expiry phase: after each deployable strategy's overload, closed loops on a
    /// product whose unpaid orders expire 500 ms after they were placed (`--expiry-non-payers`
    /// never pay, the others pay right after buying), with every instance's expiry sweep
    /// running and with every sweep paused, `--expiry-rounds` rounds of each (2 s after 1.5 s
    /// of warm-up; 1.5 s with --quick): what the sweep adds to the purchases' p99.
    #[arg(long)]
    pub no_expiry: bool,
    /// Share of the expiry phase's buyers who never pay, as in the flood; the others pay right
    /// after buying. 1 is the sweep's worst case: every order expires.
    #[arg(long, default_value_t = NON_PAYERS, env = "SECKILL_BENCH_EXPIRY_NON_PAYERS")]
    pub expiry_non_payers: f64,
    /// Rounds of the expiry phase per strategy, each with and without the sweep (`--repetitions`
    /// with --quick). The p99 of a 2 s round of a strategy serving a few hundred purchases a
    /// second swings by a third from one round to the next on a machine this size: the median
    /// of four or five rounds' ratios resolves a 10% cost better than that of three. Each round
    /// costs about 7 s per strategy, some 4 minutes of the whole run: a fourth took the
    /// default run past 75 minutes on two cores on a slow day, so ask for more when the
    /// sweep's cost is the question.
    #[arg(long, default_value_t = 3, env = "SECKILL_BENCH_EXPIRY_ROUNDS")]
    pub expiry_rounds: usize,
    /// Print the machine-readable result to stdout (progress goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Save screenshots of the live page (`live.png`) and of `report.html` (`report.png`) into
    /// the run's directory, taken in headless Chromium (Debian's `chromium` and
    /// `chromium-driver`); serves the live page on a free loopback port unless `--live` names
    /// one.
    #[arg(long, env = "SECKILL_SCREENSHOTS")]
    pub screenshots: bool,
    #[command(flatten)]
    pub distance: DistanceArgs,
    /// Put every app instance behind a relay that adds this round trip to every request the
    /// buyers make (`1ms`, `20ms`, `500us`): the buyers' own network, apart from the servers'
    /// (`--rtt`). It holds no lock, so it lengthens each purchase's answer without lowering
    /// what one product can sell, as long as there are buyers enough to keep the instances
    /// busy. The HTTP baselines (`http-noop`, `wrk`, `goose`, the HTTP floor) reach their
    /// servers through such relays too. A run with it does not move `latest`.
    #[arg(long, env = "SECKILL_BENCH_CLIENT_RTT", value_parser = duration, value_name = "DURATION")]
    pub client_rtt: Option<Duration>,
    /// Keep the app instances' Redis-held stock (`redis-lua*`) on a throwaway Redis Cluster of
    /// three masters, each with an asynchronous replica, started for the run; the lock
    /// services and the baselines stay on their lone servers (the Redis locks take no
    /// cluster: their strategies answer `503`, so name the strategies, e.g.
    /// `--strategies redis-lua,redis-lua-stream`). The CPU table gives each shard its column.
    /// Not with `--rtt`: the cluster is reached directly, not through the relays.
    #[arg(long, conflicts_with = "rtt")]
    pub redis_cluster: bool,
    /// Keep the rows on a throwaway Galera cluster of three MariaDB nodes started for the run:
    /// every app instance writing to node 1 (`one-writer`), each to a node of its own in
    /// turn (`all-writers`, with `--instances 3`), or every instance through HAProxy, which
    /// deals each new connection to the next node (`haproxy`). The lock services and the baselines stay on
    /// their lone servers; each strategy's certification aborts are counted. Name the SQL
    /// strategies, e.g. `--strategies conditional,pessimistic,batched`. Not with `--rtt`: the
    /// nodes are reached directly, not through the relays.
    #[arg(long, value_enum, conflicts_with_all = ["redis_cluster", "rtt"])]
    pub galera: Option<crate::schema::world::GaleraWriters>,
    /// Keep the rows on a throwaway MariaDB primary with one replica started for the run:
    /// every app instance writes to the primary and reads the products' pages on the replica
    /// (`--database-replica-url`). `async`: commits return once the primary has them;
    /// `semi-sync`: each waits for the replica's acknowledgement (AFTER_SYNC). After each
    /// closed-loop round the replica's distance is read (transactions behind, time to catch
    /// up). The lock services and the baselines stay on their lone servers. Not with `--rtt`.
    #[arg(long, value_enum, conflicts_with_all = ["redis_cluster", "galera", "rtt"])]
    pub replicas: Option<crate::rig::replicas::Replicas>,
    /// The database the app instances keep their rows in: `mariadb`, or `postgres` — a
    /// throwaway PostgreSQL started for the run (or `POSTGRES_URL` with `SECKILL_EXTERNAL=1`),
    /// on which the run reads what they wrote and measures the SQL baselines, beside
    /// `pgbench`. The app offers the strategies each engine runs: on PostgreSQL its advisory
    /// locks (`pg-advisory…`) and not the lock tables (`db-lock…`, whose locks are written in
    /// MariaDB's SQL), on MariaDB the other way round. The fault scenarios, which stand on
    /// MariaDB, are left out. Not with `--galera` or `--replicas`.
    #[arg(long, value_enum, default_value = "mariadb", conflicts_with_all = ["galera", "replicas"])]
    pub engine: crate::schema::world::Engine,
    /// Directory under which `<UTC timestamp>/` and the `latest` link are written.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// The `seckill-app` binary (default: next to this executable).
    #[arg(long, env = "SECKILL_APP_BIN")]
    pub app_bin: Option<PathBuf>,
    /// The niceness (`nice(1)`, 0–19) of the servers the run starts: the database, Redis, the
    /// lock services, the app instances. The load generator stays at its own, so the kernel
    /// gives it a core first: it stands in for buyers on their own machines, and an open loop
    /// would otherwise charge its wait for a core to the service. 0: the run's own niceness.
    #[arg(long, default_value_t = 10, env = "SECKILL_SERVER_NICENESS",
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub server_niceness: i32,
}

/// How the flood arrives.
#[derive(Debug, Clone, Args)]
pub struct FloodArgs {
    /// People who click in the flood (default 20,000; 2,000 with --quick).
    #[arg(long = "flood-users")]
    pub users: Option<usize>,
    /// Units on sale in the flood, one per customer (default 1,000; 100 with --quick).
    #[arg(long = "flood-units")]
    pub units: Option<i64>,
    /// The regular clicks arrive uniformly within this many ms of the opening.
    #[arg(long = "flood-burst-ms", default_value_t = 1_000)]
    pub burst_ms: u64,
    /// Share of people who double-click.
    #[arg(long = "flood-double-click", default_value_t = 0.1)]
    pub double_click: f64,
    /// Share of people who are bots behind one shared account, firing at the opening.
    #[arg(long = "flood-shared-account-bots", default_value_t = 0.02)]
    pub shared_account_bots: f64,
    /// Share of people who are bots firing before the opening.
    #[arg(long = "flood-early-bots", default_value_t = 0.02)]
    pub early_bots: f64,
    /// How early the early bots fire, in ms, at least: the sale opens once each is answered.
    #[arg(long = "flood-early-ms", default_value_t = 300)]
    pub early_ms: u64,
    /// Retries of a `503` per click, 1–4 s apart (0: nobody retries).
    #[arg(long = "flood-retries", default_value_t = 0)]
    pub retries: u32,
    /// Share of the winners who never pay: their orders expire at the payment deadline and
    /// the units go back on sale to buyers who come back.
    #[arg(long = "flood-non-payers", default_value_t = NON_PAYERS)]
    pub non_payers: f64,
    /// The product's payment window in the flood, in ms (0: no second act, orders are left
    /// reserved).
    #[arg(long = "flood-payment-window-ms", default_value_t = 2_000)]
    pub payment_window_ms: u64,
    /// Keep every app instance alive through the flood's second act (by default one is
    /// SIGKILLed once the first unpaid order is due, and started again afterwards).
    #[arg(long = "flood-no-kill")]
    pub no_kill: bool,
    /// Send each strategy's flood a second time, its product sold first come, first served
    /// (each click given its place in one queue as it comes), beside the random door's.
    #[arg(long = "flood-first-come")]
    pub first_come: bool,
    /// Skip the flood.
    #[arg(long)]
    pub no_flood: bool,
}

impl FloodArgs {
    /// The flood's shape, the `--quick` sizes where `quick`.
    pub fn shape(&self, quick: bool, instances: usize) -> anyhow::Result<FloodShape> {
        let (users, units) = if quick { (2_000, 100) } else { (20_000, 1_000) };
        let shape = FloodShape {
            users: self.users.unwrap_or(users),
            units: self.units.unwrap_or(units),
            burst_ms: self.burst_ms,
            double_click_share: self.double_click,
            shared_account_bot_share: self.shared_account_bots,
            early_bot_share: self.early_bots,
            early_by_ms: self.early_ms,
            retries: self.retries,
            instances,
            non_payer_share: self.non_payers,
            payment_window_ms: self.payment_window_ms,
            kill_mid_sale: !self.no_kill && instances > 1,
            first_come: self.first_come,
        };
        anyhow::ensure!(shape.users >= 1, "--flood-users must be at least 1");
        anyhow::ensure!(shape.units >= 1, "--flood-units must be at least 1");
        for (name, share) in [
            ("--flood-double-click", shape.double_click_share),
            (
                "--flood-shared-account-bots",
                shape.shared_account_bot_share,
            ),
            ("--flood-early-bots", shape.early_bot_share),
            ("--flood-non-payers", shape.non_payer_share),
        ] {
            anyhow::ensure!((0.0..=1.0).contains(&share), "{name} is a share: 0 to 1");
        }
        anyhow::ensure!(
            shape.shared_account_bot_share + shape.early_bot_share <= 1.0,
            "the bots' shares add up to more than everyone"
        );
        Ok(shape)
    }
}

impl RunArgs {
    /// Applies the defaults (the `--quick` ones where `--quick` is given).
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let (stock, buyers, demand_factor, seconds, warmup) = if self.quick {
            (100, 50, 3, 1.0, 0.5)
        } else {
            (1_000, 200, 3, 7.0, 1.0)
        };
        let stock = self.stock.unwrap_or(stock);
        let settings = Settings {
            strategies: self.strategies.clone(),
            instances: self.instances,
            stock,
            buyers: self.buyers.unwrap_or(buyers),
            demand: self.demand.unwrap_or(demand_factor * stock.max(0) as u64),
            quantity: self.quantity,
            seconds: self.seconds.unwrap_or(seconds),
            warmup: self.warmup.unwrap_or(warmup),
            repetitions: self.repetitions,
            rate: self.rate,
            open_rate_share: OPEN_RATE_SHARE,
            quick: self.quick,
            baselines: !self.no_baselines,
            scenarios: !self.no_scenarios
                && !self.only_baselines
                && self.engine == crate::schema::world::Engine::MariaDb,
            only_baselines: self.only_baselines,
            only_before_sale: false,
            server_niceness: self.server_niceness,
            phases: self.phases()?,
            // What the app instances read from their environment, written once they start.
            latency_budget_ms: None,
        };
        anyhow::ensure!(
            self.overload_factor > 0.0,
            "--overload-factor must be positive"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.expiry_non_payers),
            "--expiry-non-payers is a share: 0 to 1"
        );
        anyhow::ensure!(settings.instances >= 1, "--instances must be at least 1");
        anyhow::ensure!(settings.buyers >= 1, "--buyers must be at least 1");
        anyhow::ensure!(settings.stock >= 1, "--stock must be at least 1");
        anyhow::ensure!(settings.quantity >= 1, "--quantity must be at least 1");
        anyhow::ensure!(
            settings.repetitions >= 1,
            "--repetitions must be at least 1"
        );
        anyhow::ensure!(
            self.expiry_rounds >= 1,
            "--expiry-rounds must be at least 1"
        );
        anyhow::ensure!(settings.seconds > 0.0, "--seconds must be positive");
        anyhow::ensure!(settings.warmup >= 0.0, "--warmup must not be negative");
        anyhow::ensure!(
            settings.rate.is_none_or(|r| r > 0.0),
            "--rate must be positive"
        );
        Ok(settings)
    }

    /// The shapes of the phases asked for, each under its phase's name.
    fn phases(&self) -> anyhow::Result<ByPhase> {
        let mut phases = ByPhase::default();
        if self.only_baselines {
            return Ok(phases);
        }
        if !self.flood.no_flood {
            let shape = self.flood.shape(self.quick, self.instances)?;
            phases.put(flood::NAME, shape);
        }
        if !self.no_overload {
            let shape = OverloadShape {
                factor: self.overload_factor,
                warmup: if self.quick { 0.3 } else { 2.5 },
                seconds: if self.quick { 1.0 } else { 3.0 },
            };
            phases.put(overload::NAME, shape);
        }
        if !self.no_expiry {
            let shape = ExpiryShape {
                payment_window_ms: EXPIRY_PAYMENT_WINDOW_MS,
                non_payer_share: self.expiry_non_payers,
                warmup: EXPIRY_WARMUP,
                seconds: if self.quick { 1.5 } else { 2.0 },
                rounds: match self.quick {
                    true => self.repetitions,
                    false => self.expiry_rounds,
                },
            };
            phases.put(expiry::NAME, shape);
        }
        // Counted where relays stand to count them.
        if self.distance.rtt.is_some() {
            let purchases = if self.quick { 20 } else { 100 };
            phases.put(round_trips::NAME, RoundTripShape { purchases });
        }
        Ok(phases)
    }
}
