//! The standard tools beside the baselines: the same work, on the same server, in the same
//! run, driven by the tool people already trust for it — `mysqlslap` for the SQL baselines on
//! MariaDB and `pgbench` on PostgreSQL, `redis-benchmark` for the Lua script, `wrk` for
//! `GET /api/noop`. Each baseline is then a pair of figures, ours and theirs, and their ratio
//! says whether our load generator, not the server, is the ceiling of a figure.
//!
//! A tool that is not installed is reported as such, never replaced by a guess. Each tool runs
//! as a child process; its CPU time is read from this process's waited-for-children times
//! (`/proc/self/stat`), so the report can set the tool's cost per operation beside our
//! generator's.

pub mod mysqlslap;
pub mod pgbench;
pub mod redis_benchmark;
pub mod wrk;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::schema::{Spread, StandardTool, ToolStatus};

/// The SQL baselines' work, which `mysqlslap` and `pgbench` run in the statements of the
/// `sql-hot-row` and `sql-conditional` baselines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    HotRow,
    ConditionalTransaction,
}

/// One run of a tool.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Measured {
        per_sec: f64,
        /// Operations it completed.
        operations: f64,
        /// The tool's own CPU time.
        cpu_seconds: Option<f64>,
    },
    NotInstalled,
    Failed(String),
}

impl Outcome {
    /// What one run of a tool measured: `rate` reads (operations/s, operations) from its
    /// standard output; a run that failed, or printed no positive rate, is `Failed` with what
    /// the tool printed.
    pub fn of_run(
        run: Result<Output, String>,
        rate: impl FnOnce(&str) -> Option<(f64, f64)>,
    ) -> Outcome {
        let out = match run {
            Ok(out) => out,
            Err(e) => return Outcome::Failed(e),
        };
        match rate(&out.stdout) {
            Some((per_sec, operations)) if out.success && per_sec > 0.0 => Outcome::Measured {
                per_sec,
                operations,
                cpu_seconds: out.cpu_seconds,
            },
            _ => Outcome::Failed(format!("{}{}", out.stdout.trim(), out.stderr.trim())),
        }
    }
}

/// Runs of one tool for one baseline, gathered into [`StandardTool`].
#[derive(Debug, Clone, Default)]
pub struct Runs {
    tool: String,
    command: String,
    outcomes: Vec<Outcome>,
}

impl Runs {
    pub fn push(&mut self, tool: &str, command: String, outcome: Outcome) {
        self.tool = tool.to_owned();
        self.command = command;
        self.outcomes.push(outcome);
    }

    /// The tool's median with its spread, and ours as a share of it; `None` if never run.
    pub fn summary(&self, ours_median: f64) -> Option<StandardTool> {
        if self.outcomes.is_empty() {
            return None;
        }
        let mut rates = Vec::new();
        let (mut operations, mut cpu) = (0.0, Some(0.0));
        let mut failure = None;
        let mut missing = false;
        for o in &self.outcomes {
            match o {
                Outcome::Measured {
                    per_sec,
                    operations: n,
                    cpu_seconds,
                } => {
                    rates.push(*per_sec);
                    operations += n;
                    cpu = cpu.zip(*cpu_seconds).map(|(a, b)| a + b);
                }
                Outcome::NotInstalled => missing = true,
                Outcome::Failed(e) => failure = Some(e.clone()),
            }
        }
        let per_sec = Spread::of(&rates);
        let status = match (&per_sec, missing) {
            (Some(_), _) => ToolStatus::Measured,
            (None, true) => ToolStatus::NotInstalled,
            (None, false) => ToolStatus::Failed,
        };
        Some(StandardTool {
            tool: self.tool.clone(),
            command: self.command.clone(),
            status,
            ours_percent: per_sec
                .as_ref()
                .filter(|s| s.median > 0.0)
                .map(|s| 100.0 * ours_median / s.median),
            per_sec,
            tool_cpu_per_1000: cpu
                .filter(|_| operations > 0.0)
                .map(|c| 1000.0 * c / operations),
            error: failure.filter(|_| status != ToolStatus::Measured),
            cpu: None,
        })
    }
}

/// Where `program` is on the `PATH`, if anywhere.
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What a finished child printed, and the CPU time it used.
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
    pub cpu_seconds: Option<f64>,
}

/// Runs `program` with `args` (and `env`) to completion, killed after `limit`.
pub async fn run(
    program: &Path,
    args: &[String],
    env: &[(&str, String)],
    limit: Duration,
) -> Result<Output, String> {
    let before = children_cpu();
    let child = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| format!("{} did not finish within {limit:?}", program.display()))?
        .map_err(|e| e.to_string())?;
    let after = children_cpu();
    Ok(Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        success: out.status.success(),
        cpu_seconds: before.zip(after).map(|(b, a)| (a - b).max(0.0)),
    })
}

/// The CPU time of this process's waited-for children, in seconds.
fn children_cpu() -> Option<f64> {
    let line = std::fs::read_to_string("/proc/self/stat").ok()?;
    crate::measure::cpu::parse_children(&line)
        .map(|ticks| ticks as f64 / crate::measure::cpu::ticks_per_sec())
}

/// `command arg arg …` for the report.
pub fn shown(program: &str, args: &[String]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| {
            if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect();
    format!("{program} {}", quoted.join(" "))
}

/// Host, port, user and password of a `scheme://[user[:password]@]host[:port][/…]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub host: String,
    pub port: Option<u16>,
    pub user: Option<String>,
    pub password: Option<String>,
}

pub fn address(url: &str) -> Option<Address> {
    let rest = url.split_once("://")?.1;
    let rest = rest.split('/').next()?;
    let (auth, hostport) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, Some(p.parse().ok()?)),
        None => (hostport, None),
    };
    let (user, password) = match auth.map(|a| a.split_once(':').unwrap_or((a, ""))) {
        Some((u, p)) => (
            (!u.is_empty()).then(|| u.to_owned()),
            (!p.is_empty()).then(|| p.to_owned()),
        ),
        None => (None, None),
    };
    Some(Address {
        host: host.to_owned(),
        port,
        user,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_gives_host_port_and_credentials() {
        assert_eq!(
            address("mysql://root@127.0.0.1:3306"),
            Some(Address {
                host: "127.0.0.1".into(),
                port: Some(3306),
                user: Some("root".into()),
                password: None
            })
        );
        let a = address("redis://:secret@localhost:6380/2").unwrap();
        assert_eq!(a.host, "localhost");
        assert_eq!(a.port, Some(6380));
        assert_eq!(a.user, None);
        assert_eq!(a.password.as_deref(), Some("secret"));
        assert_eq!(address("not a url"), None);
    }

    #[test]
    fn a_missing_tool_is_reported_as_not_installed_never_as_a_figure() {
        let mut runs = Runs::default();
        for _ in 0..3 {
            runs.push("wrk", "wrk …".into(), Outcome::NotInstalled);
        }
        let s = runs.summary(1000.0).unwrap();
        assert_eq!(s.status, ToolStatus::NotInstalled);
        assert_eq!(s.per_sec, None);
        assert_eq!(s.ours_percent, None);
        assert!(find("surely-no-such-program-here").is_none());
        assert!(Runs::default().summary(1.0).is_none());
    }

    #[test]
    fn ours_is_a_share_of_the_tools_median_and_its_cpu_is_per_operation() {
        let mut runs = Runs::default();
        for (rate, cpu) in [(900.0, 0.5), (1000.0, 0.5), (1100.0, 1.0)] {
            let o = Outcome::Measured {
                per_sec: rate,
                operations: rate * 2.0,
                cpu_seconds: Some(cpu),
            };
            runs.push("redis-benchmark", "redis-benchmark …".into(), o);
        }
        let s = runs.summary(800.0).unwrap();
        assert_eq!(s.status, ToolStatus::Measured);
        assert_eq!(s.ours_percent, Some(80.0));
        assert_eq!(
            crate::report::tables::spread(&s.per_sec.unwrap()),
            "1000 (900–1100)"
        );
        assert!((s.tool_cpu_per_1000.unwrap() - 1000.0 * 2.0 / 6000.0).abs() < 1e-9);
    }
}
