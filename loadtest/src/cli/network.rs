//! The command line of `seckill-bench network`: the sweep of every strategy across distances.

use std::path::PathBuf;
use std::time::Duration;

use app::api::Strategy;
use clap::Args;

use super::duration;
use crate::network::RTTS_US;
use crate::network::schema::NetworkSettings;

/// Settings of `seckill-bench network`.
#[derive(Debug, Clone, Args)]
pub struct NetworkArgs {
    /// Strategies to sweep, comma-separated (default: every strategy the app lists).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<Strategy>,
    /// The round trips the relays add, past the servers reached directly and the relays
    /// adding nothing (default 0.2ms,0.5ms,1ms,2ms).
    #[arg(long, value_delimiter = ',', value_parser = duration, value_name = "DURATIONS")]
    pub rtts: Vec<Duration>,
    /// App instances of each kind (reaching the servers directly, and through the relays).
    #[arg(long, default_value_t = 2)]
    pub instances: usize,
    /// Concurrent buyers of each closed loop (default 200, 50 with --quick).
    #[arg(long)]
    pub buyers: Option<usize>,
    /// Measured seconds of each closed loop (default 2, 0.5 with --quick).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Closed loops of each strategy at each distance, interleaved (default 3, 1 with --quick).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Purchases counted in round trips, one at a time (default 100, 20 with --quick).
    #[arg(long)]
    pub purchases: Option<u64>,
    /// A short sweep for smoke tests: fewer buyers, shorter loops, one round, 0.5 ms and 2 ms.
    #[arg(long)]
    pub quick: bool,
    /// Directory under which `<UTC timestamp>-network/` is written.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// The `seckill-app` binary (default: next to this executable).
    #[arg(long, env = "SECKILL_APP_BIN")]
    pub app_bin: Option<PathBuf>,
    /// The niceness of the servers the sweep starts (see `run --server-niceness`).
    #[arg(long, default_value_t = 10, env = "SECKILL_SERVER_NICENESS",
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub server_niceness: i32,
}

impl NetworkArgs {
    /// The sweep's settings, every default applied.
    pub fn settings(&self) -> anyhow::Result<NetworkSettings> {
        let q = self.quick;
        let rtts_us: Vec<u64> = match (self.rtts.is_empty(), q) {
            (false, _) => (self.rtts.iter())
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
                .collect(),
            (true, false) => RTTS_US.to_vec(),
            (true, true) => vec![500, 2_000],
        };
        anyhow::ensure!(
            rtts_us.iter().all(|us| *us > 0),
            "--rtts are the round trips past zero: the relays adding nothing are always swept"
        );
        let stock = if q { 40 } else { 200 };
        Ok(NetworkSettings {
            strategies: self.strategies.clone(),
            instances: self.instances,
            buyers: self.buyers.unwrap_or(if q { 50 } else { 200 }),
            rtts_us,
            warmup: if q { 0.2 } else { 0.5 },
            seconds: self.seconds.unwrap_or(if q { 0.5 } else { 2.0 }),
            rounds: self.rounds.unwrap_or(if q { 1 } else { 3 }),
            purchases_counted: self.purchases.unwrap_or(if q { 20 } else { 100 }),
            sale_stock: stock,
            sale_clicks: 3 * stock as u64,
            quick: q,
            server_niceness: self.server_niceness,
        })
    }
}
