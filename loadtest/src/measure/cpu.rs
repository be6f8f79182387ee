//! CPU accounting: how much processor time each process of the run (app instances, servers,
//! the load generator) spent on a measurement, from `/proc/<pid>/stat` (user + system time,
//! every thread) read before and after; and the machine's total from `/proc/stat`, so that
//! what other programs on a shared machine took shows as "rest of the machine".
//!
//! A process that used about one core for the whole measurement was saturated: a single
//! thread at its limit (Redis, the InnoDB row-lock holder, …), or a multi-threaded process
//! that took a core from the others on a small machine. That, not latency, says where the time
//! went.
//!
//! Beside the time each process ran, the time its threads were ready to run and waited for a
//! core (the kernel's run-queue time, `/proc/<pid>/task/<tid>/schedstat`): a machine whose
//! cores are not all busy on average may still make a single-threaded server wait its turn at
//! every burst, and every purchase waits with it.

use std::time::Instant;

use testkit::Apps;

pub use crate::rig::Process;
use crate::schema::{CpuUse, LoadResult, ProcessCpu, SATURATED_CORES};

/// The app instances as the sampler counts them, `app-<n>` in the group `app`.
pub fn app_processes(apps: &Apps) -> impl Iterator<Item = Process> + use<> {
    (apps.pids().into_iter().enumerate())
        .map(|(n, pid)| Process::new(format!("app-{n}"), "app", pid))
}

/// User + system clock ticks of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted from the
/// last `)`: utime and stime are fields 14 and 15.
pub fn parse_stat(line: &str) -> Option<u64> {
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state): field n is fields[n - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The user + system clock ticks of a process's waited-for children (fields 16 and 17 of its
/// `/proc/<pid>/stat` line): what a finished child process cost.
pub fn parse_children(line: &str) -> Option<u64> {
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let cutime: u64 = fields.get(13)?.parse().ok()?;
    let cstime: u64 = fields.get(14)?.parse().ok()?;
    Some(cutime + cstime)
}

/// The user + system clock ticks `p` has used; with its children, those of its living child
/// processes and of those it has waited for (an ended one's time moves from the one to the
/// other, so the sum only grows).
fn ticks_of(p: &Process) -> Option<u64> {
    let read = |path: String| std::fs::read_to_string(path).ok();
    let line = read(p.stat_path())?;
    let own = parse_stat(&line)?;
    if !p.with_children {
        return Some(own);
    }
    let living: u64 = (read(p.children_path())
        .unwrap_or_default()
        .split_whitespace())
    .filter_map(|child| parse_stat(&read(format!("/proc/{child}/stat"))?))
    .sum();
    Some(own + parse_children(&line).unwrap_or(0) + living)
}

/// Nanoseconds a thread waited on a run queue, ready to run, from its `schedstat` line (time
/// on a core, time waiting, time slices).
pub fn parse_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Nanoseconds `p`'s threads (one thread's, for a thread; with its living child processes',
/// when their time is counted with its own) waited for a core. Threads that ended took their
/// waits with them: a server's threads live as long as it does.
fn waited_of(p: &Process) -> Option<u64> {
    let task = |pid: &str, tid: &str| {
        parse_schedstat(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
    };
    let threads_of = |pid: &str| -> Option<u64> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        Some(
            tasks
                .filter_map(|t| task(pid, t.ok()?.file_name().to_str()?))
                .sum(),
        )
    };
    let pid = p.pid.to_string();
    if let Some(tid) = p.thread {
        return task(&pid, &tid.to_string());
    }
    let own = threads_of(&pid)?;
    if !p.with_children {
        return Some(own);
    }
    let children = std::fs::read_to_string(p.children_path()).unwrap_or_default();
    Some(
        own + children
            .split_whitespace()
            .filter_map(threads_of)
            .sum::<u64>(),
    )
}

/// Busy and total clock ticks of all CPUs from `/proc/stat`'s first line (busy: everything
/// but idle and iowait).
pub fn parse_machine(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// Clock ticks per second of `/proc` times (`CLK_TCK`, 100 where it cannot be read).
pub fn ticks_per_sec() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

/// Reads the CPU times of a fixed set of processes.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub processes: Vec<Process>,
    ticks_per_sec: f64,
}

/// The CPU times at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    /// Per process, in ticks; `None` where it could not be read (the process is gone).
    ticks: Vec<Option<u64>>,
    /// Per process, nanoseconds its threads waited for a core.
    waited_ns: Vec<Option<u64>>,
    machine_busy: Option<u64>,
}

impl Sampler {
    pub fn new(processes: Vec<Process>) -> Sampler {
        Sampler {
            processes,
            ticks_per_sec: ticks_per_sec(),
        }
    }

    /// Follows a group whose processes were started again (an app instance killed and
    /// started in its place): `processes` take the places of the group's, in order, so that
    /// the samples from now on read the new ones. A sampler left on a dead process would leave
    /// its successor out of every figure and count its time as other programs'.
    pub fn follow(&mut self, group: &str, processes: impl IntoIterator<Item = Process>) {
        let places = self.processes.iter_mut().filter(|p| p.group == group);
        for (place, process) in places.zip(processes) {
            *place = process;
        }
    }

    /// Follows the app instances as `apps` holds them now (see [`Sampler::follow`]).
    pub fn follow_apps(&mut self, apps: &Apps) {
        self.follow("app", app_processes(apps));
    }

    pub fn sample(&self) -> Sample {
        Sample {
            at: Instant::now(),
            ticks: self.processes.iter().map(ticks_of).collect(),
            waited_ns: self.processes.iter().map(waited_of).collect(),
            machine_busy: std::fs::read_to_string("/proc/stat")
                .ok()
                .as_deref()
                .and_then(parse_machine)
                .map(|(busy, _)| busy),
        }
    }

    /// What every process spent from `before` until now on the measurement `result`: its
    /// successes over that time are estimated from its rate (a run's warm-up included, as in
    /// the CPU times).
    pub fn spent(&self, before: &Sample, result: &LoadResult) -> Span {
        let mut span = self.between(before, &self.sample());
        span.successes = result.headline() * span.wall_seconds;
        span
    }

    /// CPU-seconds each process spent between `a` and `b`, and the wall time.
    pub fn between(&self, a: &Sample, b: &Sample) -> Span {
        Span {
            wall_seconds: b.at.duration_since(a.at).as_secs_f64(),
            cpu_seconds: each_seconds(&a.ticks, &b.ticks, self.ticks_per_sec),
            waited_seconds: each_seconds(&a.waited_ns, &b.waited_ns, 1e9),
            machine_cpu_seconds: seconds(a.machine_busy, b.machine_busy, self.ticks_per_sec),
            successes: 0.0,
        }
    }
}

/// Seconds from one reading of a counter to the next, the counter in units `per_second`.
fn seconds(x: Option<u64>, y: Option<u64>, per_second: f64) -> Option<f64> {
    x.zip(y)
        .map(|(x, y)| y.saturating_sub(x) as f64 / per_second)
}

/// [`seconds`] for each process's two readings.
fn each_seconds(a: &[Option<u64>], b: &[Option<u64>], per_second: f64) -> Vec<Option<f64>> {
    (a.iter().zip(b))
        .map(|(x, y)| seconds(*x, *y, per_second))
        .collect()
}

/// CPU used over one or more measurements, summed.
#[derive(Debug, Clone, Default)]
pub struct Span {
    pub wall_seconds: f64,
    /// Per process of the sampler, in its order.
    pub cpu_seconds: Vec<Option<f64>>,
    /// Per process of the sampler: the seconds its threads waited for a core.
    pub waited_seconds: Vec<Option<f64>>,
    pub machine_cpu_seconds: Option<f64>,
    /// Successful operations in the span (deductions; requests for work without any).
    pub successes: f64,
}

impl Span {
    /// Adds another span of the same sampler.
    pub fn add(&mut self, other: &Span) {
        if self.cpu_seconds.is_empty() {
            *self = other.clone();
            return;
        }
        // A figure summed is known only where both were.
        let sum = |x: &mut Option<f64>, y: Option<f64>| *x = x.zip(y).map(|(x, y)| x + y);
        self.wall_seconds += other.wall_seconds;
        for (x, y) in (self.cpu_seconds.iter_mut()).zip(&other.cpu_seconds) {
            sum(x, *y);
        }
        for (x, y) in (self.waited_seconds.iter_mut()).zip(&other.waited_seconds) {
            sum(x, *y);
        }
        sum(&mut self.machine_cpu_seconds, other.machine_cpu_seconds);
        self.successes += other.successes;
    }

    /// The report's figures for `processes` (the sampler's).
    pub fn usage(&self, processes: &[Process]) -> CpuUse {
        let per_1000 = |cpu: f64| (self.successes > 0.0).then(|| 1000.0 * cpu / self.successes);
        let wall = self.wall_seconds.max(f64::EPSILON);
        let rows: Vec<ProcessCpu> = processes
            .iter()
            .zip(&self.cpu_seconds)
            .enumerate()
            .filter_map(|(i, (p, cpu))| {
                let cpu = (*cpu)?;
                let waited = self.waited_seconds.get(i).copied().flatten();
                Some(ProcessCpu {
                    process: p.name.clone(),
                    group: p.group.clone(),
                    cpu_seconds: cpu,
                    busy_cores: cpu / wall,
                    per_1000_successes: per_1000(cpu),
                    waiting_cores: waited.map(|w| w / wall),
                })
            })
            .collect();
        let unread = (processes.iter().zip(&self.cpu_seconds))
            .filter(|(_, cpu)| cpu.is_none())
            .map(|(p, _)| p.name.clone())
            .collect();
        let ours: f64 = rows.iter().map(|r| r.cpu_seconds).sum();
        let saturated = rows
            .iter()
            .filter(|r| r.busy_cores >= SATURATED_CORES)
            .max_by(|a, b| a.busy_cores.total_cmp(&b.busy_cores))
            .map(|r| r.process.clone());
        CpuUse {
            wall_seconds: self.wall_seconds,
            successes: self.successes,
            machine_busy_cores: self.machine_cpu_seconds.map(|m| m / wall),
            rest_of_machine_cores: self.machine_cpu_seconds.map(|m| (m - ours).max(0.0) / wall),
            processes: rows,
            saturated,
            unread,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real lines: a redis-server and a process whose name holds a space and a parenthesis.
    const REDIS: &str = "2713 (redis-server) S 1 2713 2713 0 -1 4194560 1371 0 0 0 1520 973 0 0 20 0 5 0 97312 64409600 2573 18446744073709551615 1 1 0 0 0 0 0 4097 17635 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
    const ODD: &str = "4242 (tokio (x) 1) R 1 1 1 0 -1 4194304 10 0 0 0 7 3 0 0 20 0 2 0 5 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1";

    #[test]
    fn a_threads_own_time_is_counted_apart_from_its_process() {
        let (told, tid) = std::sync::mpsc::channel();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let idle = std::thread::spawn(move || {
            told.send(nix::unistd::gettid().as_raw().unsigned_abs())
                .unwrap();
            let _ = wait.recv();
        });
        let tid = tid.recv().unwrap();
        let sampler = Sampler::new(vec![
            Process::generator(),
            Process::thread_of_generator("idle", "idle", tid),
        ]);
        let before = sampler.sample();
        // Busy until the process has spent a few ticks, while the other thread waits.
        let spent = |s: &Span| s.cpu_seconds[0].unwrap();
        let mut sink = 0u64;
        while spent(&sampler.between(&before, &sampler.sample())) < 0.05 {
            sink = (0..100_000u64).fold(sink, |a, x| a.wrapping_mul(31).wrapping_add(x));
        }
        let span = sampler.between(&before, &sampler.sample());
        release.send(()).unwrap();
        idle.join().unwrap();
        let (process, thread) = (spent(&span), span.cpu_seconds[1].unwrap());
        assert!(
            thread < process,
            "the waiting thread counted {thread} s, its busy process {process} s ({sink})"
        );
    }

    #[test]
    fn user_and_system_ticks_are_read_past_the_command_name() {
        assert_eq!(parse_stat(REDIS), Some(1520 + 973));
        assert_eq!(parse_stat(ODD), Some(10));
        assert_eq!(parse_stat("12 (cut) S 1 2"), None);
        assert_eq!(parse_stat("garbage"), None);
        let parent = "77 (sh) S 1 77 77 0 -1 0 0 0 0 0 4 2 5 6 20 0 1 0 5 1 1";
        assert_eq!(parse_children(parent), Some(11));
        assert_eq!(parse_children(REDIS), Some(0));
    }

    #[test]
    fn a_threads_wait_for_a_core_is_read_from_its_schedstat_line() {
        assert_eq!(parse_schedstat("236076645 8887797 521"), Some(8_887_797));
        assert_eq!(parse_schedstat("236076645"), None);
    }

    #[test]
    fn threads_more_than_the_cores_are_counted_waiting_for_one() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let sampler = Sampler::new(vec![Process::generator()]);
        let before = sampler.sample();
        // Twice as many threads as cores, all ready at once, each with the same work: some
        // of them wait their turn on a run queue whatever the scheduler does. They live on
        // until the second sample: a thread's waits end with it.
        let threads = 2 * cores;
        let barrier = |n| std::sync::Arc::new(std::sync::Barrier::new(n));
        let (start, done, release) = (barrier(threads), barrier(threads + 1), barrier(threads + 1));
        let busy: Vec<_> = (0..threads)
            .map(|_| {
                let [start, done, release] = [&start, &done, &release].map(std::sync::Arc::clone);
                std::thread::spawn(move || {
                    start.wait();
                    let work =
                        (0..50_000_000u64).fold(0u64, |a, x| a.wrapping_mul(31).wrapping_add(x));
                    done.wait();
                    release.wait();
                    work
                })
            })
            .collect();
        done.wait();
        let after = sampler.sample();
        release.wait();
        for thread in busy {
            std::hint::black_box(thread.join().unwrap());
        }
        let span = sampler.between(&before, &after);
        let waited = span.waited_seconds[0].expect("the generator's threads read");
        assert!(waited > 0.0, "{span:?}");
        let usage = span.usage(&sampler.processes);
        assert!(usage.processes[0].waiting_cores.is_some_and(|w| w > 0.0));
    }

    #[test]
    fn the_machine_line_counts_everything_but_idle_and_iowait_as_busy() {
        let text = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n";
        assert_eq!(parse_machine(text), Some((170, 990)));
        assert_eq!(parse_machine("intr 1 2 3"), None);
    }

    #[test]
    fn usage_divides_by_the_successes_and_names_the_saturated_process() {
        let processes = vec![
            Process::new("app-0", "app", 1),
            Process::new("app-1", "app", 2),
            Process::new("mariadbd", "mariadbd", 3),
            Process::new("gone", "redis-server", 4),
        ];
        let mut span = Span {
            wall_seconds: 5.0,
            cpu_seconds: vec![Some(1.0), Some(1.5), Some(4.75), None],
            machine_cpu_seconds: Some(9.0),
            successes: 5000.0,
            ..Span::default()
        };
        span.add(&span.clone());
        let u = span.usage(&processes);
        assert_eq!(
            u.processes.len(),
            3,
            "a process that could not be read is left out"
        );
        assert_eq!(u.saturated.as_deref(), Some("mariadbd"));
        let (per_1000, cores) = u.group("app").unwrap();
        assert!((per_1000.unwrap() - 0.5).abs() < 1e-9, "{per_1000:?}");
        assert!((cores - 0.5).abs() < 1e-9, "{cores}");
        assert!(
            (u.rest_of_machine_cores.unwrap() - 0.35).abs() < 1e-9,
            "{u:?}"
        );
        assert_eq!(u.busiest(), Some(("mariadbd", 0.95)));
        assert!(u.group("etcd").is_none());
    }

    #[test]
    fn this_process_can_be_sampled() {
        let sampler = Sampler::new(vec![Process::generator()]);
        let a = sampler.sample();
        let b = sampler.sample();
        let span = sampler.between(&a, &b);
        assert!(span.cpu_seconds[0].is_some(), "{span:?}");
    }

    #[test]
    fn a_group_followed_after_a_restart_is_read_at_its_new_process() {
        let mut sampler = Sampler::new(vec![
            Process::new("app-0", "app", ended()),
            Process::generator(),
        ]);
        assert_eq!(
            sampler.sample().ticks[0],
            None,
            "an ended process reads nothing"
        );
        sampler.follow("app", [Process::new("app-0", "app", std::process::id())]);
        assert!(sampler.sample().ticks[0].is_some());
        assert_eq!(
            sampler.processes[1].name, "generator",
            "other groups keep their places"
        );
    }

    /// The id of a process that has ended.
    fn ended() -> u32 {
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        gone.id()
    }

    #[test]
    fn a_process_that_cannot_be_read_is_named_not_left_out_in_silence() {
        let sampler = Sampler::new(vec![
            Process::new("app-0", "app", ended()),
            Process::generator(),
        ]);
        let (a, b) = (sampler.sample(), sampler.sample());
        let usage = sampler.between(&a, &b).usage(&sampler.processes);
        assert_eq!(usage.unread, ["app-0"]);
        let read: Vec<&str> = usage.processes.iter().map(|p| p.process.as_str()).collect();
        assert_eq!(read, ["generator"]);
    }

    #[test]
    fn a_server_counted_with_its_children_is_charged_their_time_too() {
        // A shell whose child spins, as PostgreSQL's postmaster has a process per connection.
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done & wait"])
            .spawn()
            .unwrap();
        let (pid, read) = (shell.id(), |path: String| {
            std::fs::read_to_string(path).ok()
        });
        let server = Process::with_children("sh", "sh", pid);
        // Wait for the child to exist and to have run a tick (its state, not a time).
        let child_ticks = loop {
            let child = read(server.children_path()).unwrap_or_default();
            let ticks = (child.split_whitespace().next())
                .and_then(|c| parse_stat(&read(format!("/proc/{c}/stat"))?));
            if let Some(ticks) = ticks.filter(|&t| t > 0) {
                break ticks;
            }
            std::thread::yield_now();
        };
        let alone = ticks_of(&Process::new("sh", "sh", pid)).unwrap();
        let with_children = ticks_of(&server).unwrap();
        let _ = std::process::Command::new("pkill")
            .args(["-P", &pid.to_string()])
            .status();
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(
            with_children >= alone + child_ticks,
            "{with_children} < {alone} + {child_ticks}"
        );
    }
}
