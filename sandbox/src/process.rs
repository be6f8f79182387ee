//! One server process: start, wait until it serves, kill, pause, resume, restart, clean up.
//!
//! A server may be a tree of processes — PostgreSQL's postmaster forks a backend for every
//! connection, each in a session of its own — so kill, pause and resume act on the process and
//! on every process under it: a paused postmaster whose backends went on would still answer
//! every connection already open.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Error, Result, lock};

/// How long a server may take to become ready. Generous: CI machines are slow and cold JVMs too.
const START_TIMEOUT: Duration = Duration::from_secs(90);
const PROBE_INTERVAL: Duration = Duration::from_millis(40);
/// How long the processes of a server may take to stop (SIGSTOP) or to die (SIGKILL): signals
/// are delivered asynchronously, to every thread.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// An unprivileged account (user and group ids) a server runs as, for a server that refuses to
/// run as root when the harness does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// What a kind of server needs to be run by [`Server`].
pub(crate) trait Launch: Send + Sync + 'static {
    /// The command line that runs the server in the foreground, inside `dir`.
    fn command(&self, dir: &Path) -> Command;
    /// The port [`Launch::probe`] talks to.
    fn port(&self) -> u16;
    /// One readiness probe: `Ok(())` once the server answers requests.
    fn probe(&self) -> std::result::Result<(), String>;
    /// The account the server runs as; `None`: the harness's own.
    fn account(&self) -> Option<Account> {
        None
    }
}

/// A running (or deliberately stopped) server process with its own temporary directory.
///
/// The process and the directory live exactly as long as this value; a guardian shell process
/// removes both if the owning process exits without dropping it.
pub struct Server {
    name: String,
    dir: tempfile::TempDir,
    launch: Box<dyn Launch>,
    child: Mutex<Option<Child>>,
    guardian: Mutex<Child>,
}

impl Server {
    /// Creates the directory, lets `prepare` fill it (config files, an initialised data
    /// directory), then starts the server and waits until it serves.
    pub(crate) fn start(
        name: &str,
        launch: impl Launch,
        prepare: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Server> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("seckill-sandbox-{name}-"))
            .tempdir()?;
        let guardian = spawn_guardian(dir.path())?;
        let server = Server {
            name: name.to_string(),
            dir,
            launch: Box::new(launch),
            child: Mutex::new(None),
            guardian: Mutex::new(guardian),
        };
        prepare(server.dir())?;
        server.spawn_and_wait()?;
        Ok(server)
    }

    /// The server's name, e.g. `redis` or `mariadb`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's private directory (data, configuration, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the server's standard output and error go.
    pub fn log_path(&self) -> PathBuf {
        self.dir().join("server.log")
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The operating-system process id, while the process exists.
    pub fn pid(&self) -> Option<u32> {
        lock(&self.child).as_ref().map(Child::id)
    }

    /// Whether the process exists (a paused process does).
    pub fn is_running(&self) -> bool {
        let mut child = lock(&self.child);
        match child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL: the server dies at once, every process of it, with no chance to flush or say
    /// goodbye. Returns once they are gone (a server started again finds none of them still
    /// holding its files or its shared memory).
    pub fn kill(&self) -> Result<()> {
        let mut child = lock(&self.child);
        if let Some(mut c) = child.take() {
            // Frozen first, so that no process of it starts another while they are listed. A
            // process that already exited can be neither frozen nor killed; that is fine.
            let tree = freeze(c.id()).unwrap_or_else(|(tree, _)| tree);
            for &pid in &tree[1..] {
                let _ = send(pid, Signal::SIGKILL);
            }
            let _ = c.kill();
            c.wait().map_err(|e| self.control_error("kill", e))?;
            await_gone(&tree[1..]);
        }
        // The guardian must never signal a pid that the kernel may have handed to someone else.
        let _ = fs::remove_file(self.dir().join("server.pid"));
        Ok(())
    }

    /// SIGSTOP: every process of the server freezes; its sockets stay open but nothing answers.
    /// Returns once every thread of them has stopped (a signal is delivered to each thread
    /// asynchronously).
    pub fn pause(&self) -> Result<()> {
        let pid = self.running_pid("pause")?;
        freeze(pid)
            .map(drop)
            .map_err(|(_, reason)| self.control_error("pause", reason))
    }

    /// SIGCONT: a paused server carries on where it stopped, every process of it.
    pub fn resume(&self) -> Result<()> {
        let pid = self.running_pid("resume")?;
        // A paused server's tree stands still, so this lists all of it; the processes under
        // the first go on before it does, so that it finds them running.
        let tree = tree(pid);
        for &under in &tree[1..] {
            let _ = send(under, Signal::SIGCONT);
        }
        send(pid, Signal::SIGCONT).map_err(|e| self.control_error("resume", e))
    }

    /// Kills the process if it runs, then starts it again on the same port and data directory
    /// and waits until it serves.
    pub fn restart(&self) -> Result<()> {
        self.kill()?;
        self.spawn_and_wait()
    }

    /// Starts a server that was killed, without killing anything first.
    pub fn start_again(&self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        self.spawn_and_wait()
    }

    fn running_pid(&self, action: &'static str) -> Result<u32> {
        self.pid().ok_or_else(|| Error::Control {
            server: self.name.clone(),
            action,
            reason: "the process is not running".into(),
        })
    }

    fn control_error(&self, action: &'static str, e: impl std::fmt::Display) -> Error {
        Error::Control {
            server: self.name.clone(),
            action,
            reason: e.to_string(),
        }
    }

    fn spawn_and_wait(&self) -> Result<()> {
        let command = self.launch.command(self.dir());
        let program = command.get_program().to_string_lossy().into_owned();
        let mut command = crate::at_server_priority(command);
        if let Some(account) = self.launch.account() {
            // Set in the child before it executes the server, so the server is the child itself
            // (`su` or `runuser` would stay in between, and signals would stop at them).
            command.uid(account.uid).gid(account.gid);
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let child = command
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::NotInstalled { program },
                _ => Error::Io(e),
            })?;
        File::create(self.dir().join("server.pid"))?
            .write_all(child.id().to_string().as_bytes())?;
        *lock(&self.child) = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // A probe answered by another process that took the port first (the port was free
            // when it was picked, see `ports`) does not count: this server will fail to bind.
            let last = match self.launch.probe() {
                Ok(())
                    if self
                        .pid()
                        .is_some_and(|pid| listens_on(pid, self.launch.port())) =>
                {
                    return Ok(());
                }
                Ok(()) => format!(
                    "port {} answers, but another process listens on it",
                    self.launch.port()
                ),
                Err(e) => e,
            };
            if let Some(status) = self.exit_status() {
                return Err(self.start_failed(format!("exited with {status} during start-up")));
            }
            if Instant::now() > deadline {
                let _ = self.kill();
                return Err(self.start_failed(format!(
                    "not ready after {START_TIMEOUT:?}; last probe: {last}"
                )));
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
    }

    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        let mut child = lock(&self.child);
        child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    fn start_failed(&self, reason: String) -> Error {
        Error::StartFailed {
            server: self.name.clone(),
            reason,
            log: self.log_path(),
            tail: self.log_tail(40),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.kill();
        let mut guardian = lock(&self.guardian);
        let _ = guardian.kill();
        let _ = guardian.wait();
        // The TempDir field removes the directory after this.
    }
}

/// A shell that waits for this process to exit, then kills the server (whose pid is in
/// `server.pid`) and removes its directory. Dropping a [`Server`] kills the guardian first, so it
/// only acts when the owner died without cleaning up.
fn spawn_guardian(dir: &Path) -> Result<Child> {
    const SCRIPT: &str = r#"
owner=$1; dir=$2
while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
if [ -f "$dir/server.pid" ]; then kill -9 "$(cat "$dir/server.pid")" 2>/dev/null; fi
sleep 0.2
rm -rf "$dir"
"#;
    Ok(Command::new("sh")
        .args(["-c", SCRIPT, "sandbox-guardian"])
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?)
}

/// Kills one process (SIGKILL) if this process exits while it still runs: for children that
/// are not servers of this crate, such as the app instances a benchmark starts, so that a
/// benchmark stopped by Ctrl-C or SIGKILL leaves nothing running. Dropping the guardian stops
/// it (after you have stopped the process yourself).
pub struct Guardian(Child);

impl Guardian {
    pub fn watch(pid: u32) -> std::io::Result<Guardian> {
        const SCRIPT: &str = r#"
owner=$1; pid=$2
while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
kill -9 "$pid" 2>/dev/null
"#;
        Ok(Guardian(
            Command::new("sh")
                .args(["-c", SCRIPT, "sandbox-guardian"])
                .arg(std::process::id().to_string())
                .arg(pid.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        ))
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Finds `program` on PATH or in the sbin directories, where Debian puts daemons such as
/// `mariadbd` and which a non-login PATH may lack. Falls back to the bare name, so the spawn
/// error names the missing program.
pub(crate) fn find_program(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(program))
}

/// Sends `signal` to process `pid`.
fn send(pid: u32, signal: Signal) -> std::result::Result<(), String> {
    let pid = i32::try_from(pid).map_err(|e| e.to_string())?;
    kill(Pid::from_raw(pid), signal).map_err(|e| e.to_string())
}

/// Stops (SIGSTOP) process `root` and every process under it, each before its children (a
/// stopped process starts no more), and waits until every thread of them has stopped. Returns
/// them, `root` first; on a process still running after [`SIGNAL_TIMEOUT`], those found so far
/// and why.
fn freeze(root: u32) -> std::result::Result<Vec<u32>, (Vec<u32>, String)> {
    let deadline = Instant::now() + SIGNAL_TIMEOUT;
    let mut tree = vec![root];
    let mut next = 0;
    while let Some(&pid) = tree.get(next) {
        next += 1;
        // A process that is gone has nothing to stop.
        let _ = send(pid, Signal::SIGSTOP);
        while !all_threads_stopped(pid) {
            if Instant::now() > deadline {
                let reason =
                    format!("process {pid}'s threads still running after {SIGNAL_TIMEOUT:?}");
                return Err((tree, reason));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        tree.extend(children(pid));
    }
    Ok(tree)
}

/// Process `root` and every process under it, `root` first.
fn tree(root: u32) -> Vec<u32> {
    let mut tree = vec![root];
    let mut next = 0;
    while let Some(&pid) = tree.get(next) {
        next += 1;
        tree.extend(children(pid));
    }
    tree
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat(p).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// Waits (up to [`SIGNAL_TIMEOUT`]) until each of `pids` has exited: gone, or a zombie that
/// no longer holds anything (whose parent, after the server's first process died, is init).
fn await_gone(pids: &[u32]) {
    let deadline = Instant::now() + SIGNAL_TIMEOUT;
    let alive = |pid: &u32| stat(*pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'));
    while pids.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Process `pid`'s state letter and parent, from `/proc/<pid>/stat`; `None` if it is gone.
fn stat(pid: u32) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold spaces.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Whether every thread of process `pid` is stopped (state `T`, or `t` under a tracer), or the
/// process is gone.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            // The state follows the command name, which is in parentheses and may hold spaces.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            matches!(state, Some("T" | "t" | "Z" | "X") | None)
        })
    })
}

/// Whether process `pid` holds the socket listening on TCP port `port`: one of its file
/// descriptors is the socket whose inode `/proc/net/tcp` (or `tcp6`) lists in state LISTEN on
/// that port.
fn listens_on(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| {
            let target = target.to_string_lossy();
            inodes
                .iter()
                .any(|inode| target == format!("socket:[{inode}]"))
        })
    })
}

/// The inodes of the sockets listening on `port`.
fn listening_inodes(port: u16) -> Vec<String> {
    const LISTEN: &str = "0A";
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let local_port = fields.get(1)?.rsplit(':').next()?;
                    let listening = *fields.get(3)? == LISTEN;
                    (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                        .then(|| fields.get(9).map(|inode| inode.to_string()))
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_belongs_to_the_process_that_bound_it_and_to_no_other() {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        assert!(!listens_on(1, port), "pid 1 does not hold our socket");
        drop(listener);
        assert!(!listens_on(std::process::id(), port));
    }

    #[test]
    fn freezing_a_process_stops_the_processes_it_started_and_killing_its_tree_ends_them() {
        let mut shell = Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300 & wait"])
            .spawn()
            .unwrap();
        let root = shell.id();
        while tree(root).len() < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let frozen = freeze(root).expect("every process stops");
        assert_eq!(frozen.len(), 3, "{frozen:?}");
        for &pid in &frozen {
            assert!(all_threads_stopped(pid), "process {pid} still runs");
        }
        for &pid in &frozen[1..] {
            send(pid, Signal::SIGKILL).unwrap();
        }
        shell.kill().unwrap();
        shell.wait().unwrap();
        await_gone(&frozen[1..]);
        for &pid in &frozen[1..] {
            assert!(
                stat(pid).is_none_or(|(state, _)| matches!(state, 'Z' | 'X')),
                "process {pid} outlived the kill"
            );
        }
    }
}
