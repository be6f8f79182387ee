//! The command line of `seckill-bench lock`: one backend's contention benchmark, the matrix of
//! every backend, a lock held for a scenario, and the peers beside ours.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use locks::Backend;

use super::DistanceArgs;

/// Settings of `seckill-bench lock`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct LockArgs {
    /// Instead of the contention benchmark of one backend.
    #[command(subcommand)]
    pub action: Option<LockCommand>,
    /// Lock backend.
    #[arg(long, required = true)]
    pub backend: Option<Backend>,
    /// Tasks contending for the one lock.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Lock clients (each with its own connections) the workers are spread over; 1: all share
    /// one client. Fairness across processes shows with as many clients as workers.
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// Duration of the run in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Time each holder keeps the lock after its probe write, in microseconds.
    #[arg(long, default_value_t = 0)]
    pub hold_us: u64,
    /// Record every worker's steps (attempt, grant with its fencing token, fenced write,
    /// release) and run the lock-history checker over them; violations are printed as the
    /// offending slices of history.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub distance: DistanceArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `seckill-bench lock` runs instead of the contention benchmark of one backend.
#[derive(Debug, Clone, Subcommand)]
pub enum LockCommand {
    /// Every lock backend against every requirement of a lock service (mutual exclusion, expiry,
    /// reentrancy, try, availability, performance, fairness, herd, notification), each cell
    /// measured against throwaway servers; writes `matrix.md` and `matrix.json`.
    Matrix(MatrixArgs),
    /// Acquires one lock, prints `granted <token>` and holds it until killed (or until its
    /// stdin closes): the crashed holder of `lock matrix` (servers from the environment, as
    /// with SECKILL_EXTERNAL=1).
    #[command(hide = true)]
    Hold(HoldArgs),
    /// Our locks beside the Python lock libraries people use (python-redis-lock, redis-py's
    /// `Lock`, kazoo's `Lock`), on the same workload in one run: interleaved rounds, medians,
    /// and whether ours hold their targets against them.
    Peers(PeersArgs),
}

/// Settings of `seckill-bench lock matrix`.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// Short runs and leases: seconds per backend instead of about half a minute.
    #[arg(long)]
    pub quick: bool,
    /// Backends, comma-separated (default: every row: the databases' locks, MariaDB's and
    /// PostgreSQL's, then the caches' and the coordination services').
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<Backend>,
    /// Directory for `matrix.md` and `matrix.json` (default: `results/<UTC timestamp>-lock-matrix/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the JSON instead of the Markdown.
    #[arg(long)]
    pub json: bool,
}

/// Settings of the hidden `seckill-bench lock hold`.
#[derive(Debug, Clone, Args)]
pub struct HoldArgs {
    #[arg(long)]
    pub backend: Backend,
    /// The lock's name.
    #[arg(long)]
    pub key: String,
    /// The lease (ZooKeeper: the session timeout), in milliseconds.
    #[arg(long)]
    pub lease_ms: u64,
}

/// Settings of `seckill-bench lock peers`.
#[derive(Debug, Clone, Args)]
pub struct PeersArgs {
    /// Workers contending for the one lock (threads on the Python side).
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Duration of each run in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Rounds; each measures every lock once, and the report gives the medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The Python with the pinned libraries (default: the venv `cargo xtask setup` makes,
    /// `~/.cache/seckill-bench/venv/bin/python`).
    #[arg(long, env = "SECKILL_PEERS_PYTHON")]
    pub python: Option<PathBuf>,
    /// `lock_peers.py` (default: `loadtest/peers/lock_peers.py` of this source tree).
    #[arg(long, env = "SECKILL_PEERS_SCRIPT")]
    pub script: Option<PathBuf>,
    /// Print one JSON object instead of the Markdown table.
    #[arg(long)]
    pub json: bool,
    /// Also write the comparison (Markdown) to this file, and as a page beside it (the same
    /// name ending in `.html`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}
