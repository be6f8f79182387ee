//! Gathers what a reader needs to reproduce a run ([`Environment`]): machine, commit, server
//! versions and the durability settings that decide what a commit costs.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use app::db::{Db, Engines};
use deadpool_redis::redis;

use crate::schema::{DiskFlush, Environment};

const MARIADB_VARIABLES: &str = "SHOW GLOBAL VARIABLES WHERE Variable_name IN (\
    'version', 'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', \
    'innodb_buffer_pool_size', 'innodb_doublewrite', 'innodb_flush_method', \
    'transaction_isolation', 'tx_isolation', 'max_connections')";

const POSTGRES_SETTINGS: &str = "SELECT name, setting FROM pg_settings WHERE name IN (\
    'server_version', 'synchronous_commit', 'fsync', 'wal_sync_method', 'full_page_writes', \
    'shared_buffers', 'commit_delay', 'default_transaction_isolation', 'max_connections')";

/// Gathers everything; what cannot be read is left out rather than failing the run.
pub async fn gather(
    servers: &'static str,
    versions: Option<sandbox::Versions>,
    db: &Db,
    redis_url: &str,
) -> Environment {
    let mut v = BTreeMap::new();
    if let Some(s) = versions {
        v.insert("mariadb".into(), s.mariadb);
        v.insert("redis".into(), s.redis);
        v.insert("zookeeper".into(), s.zookeeper);
        v.insert("etcd".into(), s.etcd);
        v.insert("memcached".into(), s.memcached);
    }
    let (mariadb, postgres) = match db {
        Engines::MySql(_) => (settings(db, MARIADB_VARIABLES).await, BTreeMap::new()),
        Engines::Postgres(_) => (BTreeMap::new(), settings(db, POSTGRES_SETTINGS).await),
    };
    if let Some(version) = mariadb.get("version") {
        v.entry("mariadb".into()).or_insert_with(|| version.clone());
    }
    if let Some(version) = postgres.get("server_version") {
        v.insert("postgresql".into(), version.clone());
    }
    let redis = redis_settings(redis_url).await;
    if let Some(version) = redis.get("redis_version") {
        v.entry("redis".into()).or_insert_with(|| version.clone());
    }
    let (git_commit, git_dirty) = git();
    // Where the sandbox keeps its servers' data (a directory under the system's temporary one).
    let disk_flush = match servers {
        "spawned" => tokio::task::spawn_blocking(|| disk_flush(&std::env::temp_dir()))
            .await
            .ok()
            .flatten(),
        _ => None,
    };
    Environment {
        generator_build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_string(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model: proc_field("/proc/cpuinfo", "model name"),
        memory_total: proc_field("/proc/meminfo", "MemTotal"),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        git_commit,
        git_dirty,
        servers: servers.to_string(),
        versions: v,
        mariadb,
        postgres,
        redis,
        app: app_settings(|name| std::env::var(name).ok()),
        disk_flush,
    }
}

/// Times [`DiskFlush::FLUSHES`] flushes of a 4 KiB write to a file of its own in `dir`, as a
/// database's log is written and flushed at each commit; `None` if the file cannot be made.
fn disk_flush(dir: &std::path::Path) -> Option<DiskFlush> {
    let path = dir.join(format!("seckill-bench-flush-{}", std::process::id()));
    let took = flushes(&path);
    let _ = std::fs::remove_file(&path);
    let mut took = took?;
    took.sort_unstable();
    let at = |share: usize| took[(took.len() - 1) * share / 100];
    Some(DiskFlush {
        flushes: took.len(),
        p50_us: at(50),
        p90_us: at(90),
    })
}

/// The µs of each flush of a 4 KiB page rewritten in place at `path`.
fn flushes(path: &std::path::Path) -> Option<Vec<u64>> {
    use std::io::{Seek, Write};
    let mut file = std::fs::File::create(path).ok()?;
    let page = [0x5a_u8; 4096];
    let mut took = Vec::with_capacity(DiskFlush::FLUSHES);
    for _ in 0..DiskFlush::FLUSHES {
        file.seek(std::io::SeekFrom::Start(0)).ok()?;
        file.write_all(&page).ok()?;
        let began = std::time::Instant::now();
        file.sync_data().ok()?;
        took.push(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    Some(took)
}

/// The app settings set in the environment the instances inherit (read by `var`), by flag;
/// secrets and addresses left out (the run sets the addresses itself).
fn app_settings(var: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
    use clap::CommandFactory;
    let command = app::config::Config::command();
    (command.get_arguments())
        .filter_map(|arg| {
            let env = arg.get_env()?.to_str()?;
            let kept = !["TOKEN", "KEY", "SECRET", "URL", "LISTEN", "PREFIX"]
                .iter()
                .any(|word| env.contains(word));
            Some((format!("--{}", arg.get_long()?), var(env).filter(|_| kept)?))
        })
        .collect()
}

/// The settings a statement of two text columns (name, value) lists; none if it fails.
async fn settings(db: &Db, sql: &'static str) -> BTreeMap<String, String> {
    app::each_engine!(db, |pool, _e| sqlx::query_as::<_, (String, String)>(sql)
        .fetch_all(pool)
        .await)
    .map(|rows| rows.into_iter().collect())
    .unwrap_or_default()
}

async fn redis_settings(url: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(client) = redis::Client::open(url) else {
        return out;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return out;
    };
    if let Ok(info) = redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(&mut conn)
        .await
        && let Some(version) = info.lines().find_map(|l| l.strip_prefix("redis_version:"))
    {
        out.insert("redis_version".into(), version.trim().to_string());
    }
    for name in ["appendonly", "appendfsync", "save"] {
        if let Ok(pair) = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async::<Vec<String>>(&mut conn)
            .await
            && let [k, v] = pair.as_slice()
        {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

fn proc_field(path: &str, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn git() -> (Option<String>, Option<bool>) {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = run(&["rev-parse", "HEAD"]);
    let dirty = commit
        .as_ref()
        .and_then(|_| run(&["status", "--porcelain", "--untracked-files=no"]))
        .map(|s| !s.is_empty());
    (commit, dirty)
}

/// Now in UTC: (`2026-11-21T21:30:05Z`, `2026-11-21T21-30-05Z` for a directory name).
pub fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stamp = utc_stamp(secs);
    let dir = stamp.replace(':', "-");
    (stamp, dir)
}

/// RFC 3339 in UTC of a Unix time (civil-from-days, proleptic Gregorian).
pub fn utc_stamp(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_flush_is_timed_once_per_flush_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let flush = disk_flush(dir.path()).unwrap();
        assert_eq!(flush.flushes, DiskFlush::FLUSHES);
        assert!(flush.p50_us <= flush.p90_us, "{flush:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(disk_flush(&dir.path().join("missing")), None);
    }

    #[test]
    fn utc_stamps_match_known_dates() {
        assert_eq!(utc_stamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_stamp(1_795_555_805), "2026-11-24T21:30:05Z");
    }

    #[test]
    fn the_app_settings_a_run_changed_are_named_by_flag_without_secrets_or_addresses() {
        let set = |name: &str| match name {
            "SECKILL_ROLLBACK_RETRIES" => Some("3".to_string()),
            "SECKILL_ADMIN_TOKEN" | "SECKILL_BUYER_KEY" => Some("secret".to_string()),
            "SECKILL_DATABASE_REPLICA_URL" => Some("mysql://root:pw@db/shop".to_string()),
            _ => None,
        };
        let changed = app_settings(set);
        assert_eq!(
            changed,
            BTreeMap::from([("--rollback-retries".to_string(), "3".to_string())])
        );
        assert!(app_settings(|_| None).is_empty());
    }
}
