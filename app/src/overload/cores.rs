//! How busy the machine's cores are: their busy time and their whole time, read as often as
//! wanted.
//!
//! The kernel counts the busy time of every core in the root control group's `cpu.stat`
//! (`usage_usec`, microseconds; cgroup v2, at `/sys/fs/cgroup` or, beside v1, under
//! `unified`); where that is not to be read, `/proc/stat` counts it in the kernel's ticks
//! (a hundredth of a second), too coarse to read a tenth of a second on two cores to better
//! than a few percent.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::metrics::micros;

const CPU_STAT: [&str; 2] = ["/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/unified/cpu.stat"];

/// Where the cores' busy time is read.
#[derive(Debug)]
pub enum Cores {
    /// A control group's `cpu.stat`; its whole time is the wall clock's times the cores.
    CpuStat {
        path: PathBuf,
        cores: u64,
        epoch: Instant,
    },
    /// `/proc/stat`, busy and whole time in the kernel's ticks.
    ProcStat,
}

impl Cores {
    /// The finest source this machine has, or `None` where none is readable.
    pub fn find() -> Option<Cores> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let found = CPU_STAT
            .iter()
            .map(Path::new)
            .find(|path| usage_usec(path).is_some())
            .map(|path| Cores::CpuStat {
                path: path.to_path_buf(),
                cores,
                epoch: Instant::now(),
            });
        found.or_else(|| {
            let stat = std::fs::read_to_string("/proc/stat").ok()?;
            parse_stat(&stat).map(|_| Cores::ProcStat)
        })
    }

    /// The cores' busy time and whole time since some instant, in one unit.
    pub fn read(&self) -> Option<(u64, u64)> {
        match self {
            Cores::CpuStat { path, cores, epoch } => {
                Some((usage_usec(path)?, micros(epoch.elapsed()) * cores))
            }
            Cores::ProcStat => parse_stat(&std::fs::read_to_string("/proc/stat").ok()?),
        }
    }
}

fn usage_usec(path: &Path) -> Option<u64> {
    parse_cpu_stat(&std::fs::read_to_string(path).ok()?)
}

fn parse_cpu_stat(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("usage_usec "))
        .and_then(|n| n.trim().parse().ok())
}

/// Busy and whole ticks from the first line of `/proc/stat` (`cpu user nice system idle
/// iowait irq softirq steal ...`).
fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    // Guest time is already counted in user and nice.
    let ticks: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_of_proc_stat_gives_busy_and_total_ticks() {
        let stat = "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n";
        assert_eq!(parse_stat(stat), Some((160, 980)));
        assert_eq!(parse_stat("intr 1 2 3"), None);
    }

    #[test]
    fn a_cpu_stat_gives_its_busy_microseconds() {
        let stat = "usage_usec 26286956560\nuser_usec 15730948551\nsystem_usec 10556008009\n";
        assert_eq!(parse_cpu_stat(stat), Some(26_286_956_560));
        assert_eq!(parse_cpu_stat("user_usec 1\n"), None);
    }

    #[test]
    fn this_machine_s_cores_are_read_and_their_busy_time_never_passes_their_whole_time() {
        let cores = Cores::find().expect("a Linux machine has /proc/stat");
        let (busy_before, total_before) = cores.read().expect("a reading");
        let spin = Instant::now();
        while spin.elapsed().as_millis() < 50 {
            std::hint::black_box(spin.elapsed());
        }
        let (busy, total) = cores.read().expect("a reading");
        assert!(busy >= busy_before && total > total_before);
    }
}
