//! What a reader needs to reproduce a run: machine, commit, server versions and the
//! durability settings that decide what a commit costs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub memory_total: Option<String>,
    pub os: String,
    pub git_commit: Option<String>,
    /// The working tree had uncommitted changes.
    pub git_dirty: Option<bool>,
    /// `spawned` (throwaway servers started by the harness), `external` or `shared`.
    pub servers: String,
    /// How the load generator (this binary) was compiled: `release` or `debug`. A debug
    /// generator spends several times the CPU per request, which shows beside the tools.
    pub generator_build: String,
    pub versions: BTreeMap<String, String>,
    /// MariaDB variables that decide durability and concurrency.
    pub mariadb: BTreeMap<String, String>,
    /// PostgreSQL settings that decide durability and concurrency, on a run whose rows it
    /// holds (`run --engine postgres`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub postgres: BTreeMap<String, String>,
    /// Redis persistence settings.
    pub redis: BTreeMap<String, String>,
    /// The app's settings its instances read from the run's environment (`SECKILL_…`) instead
    /// of their defaults, by flag (`--rollback-retries` → `3`): a run with any measured another
    /// service than the default one. Secrets and addresses are left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub app: BTreeMap<String, String>,
    /// What one flush of the disk the throwaway servers write to takes: the floor under every
    /// durable commit (`innodb_flush_log_at_trx_commit` 1 flushes the log once per commit,
    /// or once per group of commits that arrive together). Measured when the harness started
    /// the servers; absent for servers elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_flush: Option<DiskFlush>,
}

/// `fdatasync` after a 4 KiB write, [`DiskFlush::FLUSHES`] times in a row, in the directory the
/// throwaway servers keep their data in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiskFlush {
    pub flushes: usize,
    pub p50_us: u64,
    pub p90_us: u64,
}

impl DiskFlush {
    pub const FLUSHES: usize = 100;
}
