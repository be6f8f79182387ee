//! The command line of `seckill-bench isolation`: which isolation level stops which failure.

use std::path::PathBuf;

use clap::Args;

use crate::isolation::failure::MAX_ATTEMPTS;
use crate::isolation::schema::IsolationSettings;

/// Settings of `seckill-bench isolation`.
#[derive(Debug, Clone, Args)]
pub struct IsolationArgs {
    /// Connections clicking at once in every cell (even, and a multiple of --clicks-per-buyer).
    #[arg(long, default_value_t = 16)]
    pub sessions: usize,
    /// Units the stock failures sell out (default 1000, 100 with --quick).
    #[arg(long)]
    pub stock: Option<i64>,
    /// Buyers of the write skew (default 250, 40 with --quick).
    #[arg(long)]
    pub buyers: Option<u64>,
    /// Clicks of one buyer at once in the write skew.
    #[arg(long, default_value_t = 4)]
    pub clicks_per_buyer: usize,
    /// Sales of 4 units in the phantom inventory (default 250, 40 with --quick).
    #[arg(long)]
    pub sales: Option<u64>,
    /// Times every cell runs, interleaved (default 3, 1 with --quick).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// A short matrix for smoke tests: smaller sales, one round.
    #[arg(long)]
    pub quick: bool,
    /// Directory under which `<UTC timestamp>-isolation/` is written.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// The niceness of the servers the matrix starts (see `run --server-niceness`).
    #[arg(long, default_value_t = 10, env = "SECKILL_SERVER_NICENESS",
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub server_niceness: i32,
}

impl IsolationArgs {
    /// The matrix's settings, every default applied.
    pub fn settings(&self) -> anyhow::Result<IsolationSettings> {
        let q = self.quick;
        let clicks = self.clicks_per_buyer;
        anyhow::ensure!(
            clicks >= 2 && self.sessions >= clicks && self.sessions.is_multiple_of(clicks),
            "--sessions must be a multiple of --clicks-per-buyer, which must be at least 2"
        );
        anyhow::ensure!(
            self.sessions.is_multiple_of(2),
            "--sessions must be even: the phantom inventory's buyers come in pairs"
        );
        let settings = IsolationSettings {
            sessions: self.sessions,
            stock: self.stock.unwrap_or(if q { 100 } else { 1_000 }),
            buyers: self.buyers.unwrap_or(if q { 40 } else { 250 }),
            clicks_per_buyer: clicks,
            sales: self.sales.unwrap_or(if q { 40 } else { 250 }),
            rounds: self.rounds.unwrap_or(if q { 1 } else { 3 }),
            max_attempts: MAX_ATTEMPTS,
            quick: q,
        };
        anyhow::ensure!(
            settings.stock > 0 && settings.rounds > 0,
            "--stock and --rounds must be at least 1"
        );
        Ok(settings)
    }
}
