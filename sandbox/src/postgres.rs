//! PostgreSQL 15 with a fresh cluster (`initdb`) in the server's directory.
//!
//! **Not as root.** PostgreSQL refuses to run as root (a server owned by the superuser could be
//! made to run anything as root through SQL), and so does `initdb`. Started by root — CI and
//! these machines run the tests as root — both run as the `postgres` account the Debian package
//! creates: the child's user and group are set before it executes, so the server is the child
//! itself and takes the signals the handle sends; the directory is handed to that account
//! first. Started by anyone else, they run as that user.
//!
//! **A tree of processes.** The postmaster forks a backend per connection and a few helpers
//! (checkpointer, WAL writer, …); [`crate::Server`] pauses, resumes and kills all of them, so a
//! paused server answers nothing on connections opened before the pause either.
//!
//! **Durability as packaged**, like the MariaDB sandbox's: `fsync` stays on, so a commit is on
//! disk when it returns and a killed server comes back with everything committed, and the two
//! engines are measured on the same terms. Only `initdb` skips its final sync of the new
//! cluster, which a throwaway directory does not need.
//!
//! **Nothing left behind.** A killed PostgreSQL leaves a small System V shared memory segment
//! (the interlock that stops two servers from sharing a data directory); the handle removes it
//! when dropped. Its dynamic shared memory lives in files of the data directory
//! (`dynamic_shared_memory_type = mmap`) rather than in `/dev/shm`, so it goes with the
//! directory.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{Account, Launch, Server, find_program};
use crate::{Error, Result, ports};

/// Where Debian keeps the programs of PostgreSQL 15 (off PATH: each major version has its own
/// directory). Elsewhere they are looked for on PATH.
const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// The account the server runs as when started by root; the package creates it.
const ACCOUNT: &str = "postgres";

/// The superuser `initdb` creates, whoever runs it; clients connect as it without a password.
pub(crate) const USER: &str = "postgres";

struct PostgresLaunch {
    port: u16,
    account: Option<Account>,
}

impl Launch for PostgresLaunch {
    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new(program("postgres"));
        c.arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &self.port.to_string()])
            // The Unix socket (and its lock file) in the server's own directory, not in
            // /var/run/postgresql, which belongs to the system's clusters.
            .arg("-k")
            .arg(dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            // Room for every test's pools (a process each here, a thread each in MariaDB,
            // whose sandbox allows 2000), and as much cache as MariaDB's buffer pool.
            .args(["-c", "max_connections=1000", "-c", "shared_buffers=256MB"])
            .args(["-c", "dynamic_shared_memory_type=mmap"]);
        c
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        startup(self.port).map(drop)
    }

    fn account(&self) -> Option<Account> {
        self.account
    }
}

/// Opens a session as [`USER`] and returns the server's version from the parameters it reports
/// (`server_version`), then says goodbye. The server refuses sessions until it is ready for
/// queries ("the database system is starting up"), so this doubles as the readiness probe.
pub(crate) fn startup(port: u16) -> std::result::Result<String, String> {
    let mut s = ports::connect(port, Duration::from_secs(5))?;
    // StartupMessage: length, protocol 3.0, then name/value pairs, each NUL-terminated.
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for field in ["user", USER, "database", "postgres", ""] {
        body.extend_from_slice(field.as_bytes());
        body.push(0);
    }
    let mut message = u32::try_from(body.len() + 4)
        .map_err(|e| e.to_string())?
        .to_be_bytes()
        .to_vec();
    message.extend(body);
    s.write_all(&message).map_err(|e| e.to_string())?;
    let mut version = None;
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).map_err(|e| e.to_string())?;
        let length = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if !(4..=1 << 20).contains(&length) {
            return Err(format!("unexpected message length {length}"));
        }
        let mut body = vec![0; length - 4];
        s.read_exact(&mut body).map_err(|e| e.to_string())?;
        match head[0] {
            // Authentication: 0 is "OK" (the cluster trusts its clients).
            b'R' if body.starts_with(&[0, 0, 0, 0]) => {}
            b'R' => return Err("the server asks for a password".into()),
            b'S' => {
                let mut fields = body.split(|&b| b == 0);
                if fields.next() == Some(b"server_version".as_slice()) {
                    version = fields
                        .next()
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                }
            }
            b'E' => return Err(error_message(&body)),
            b'Z' => {
                // ReadyForQuery; then Terminate, so the server logs no lost connection.
                let _ = s.write_all(&[b'X', 0, 0, 0, 4]);
                return version.ok_or_else(|| "no server_version reported".into());
            }
            // BackendKeyData, notices.
            _ => {}
        }
    }
}

/// The human-readable message (field `M`) of an ErrorResponse's fields.
fn error_message(body: &[u8]) -> String {
    body.split(|&b| b == 0)
        .find_map(|field| field.strip_prefix(b"M"))
        .map_or_else(
            || "the server refused the session".to_string(),
            |m| String::from_utf8_lossy(m).into_owned(),
        )
}

/// One throwaway PostgreSQL server; connect as `postgres` without a password over TCP.
pub struct Postgres {
    server: Server,
    port: u16,
}

listening!(Postgres, port);

impl Postgres {
    /// Initialises a cluster (`initdb`) and starts the server on a free port.
    pub fn start() -> Result<Postgres> {
        crate::cluster::retry_port_clash(Self::start_once)
    }

    fn start_once() -> Result<Postgres> {
        let port = ports::free_port()?;
        let account = account()?;
        let server = Server::start("postgres", PostgresLaunch { port, account }, |dir| {
            init_cluster(dir, account)
        })?;
        Ok(Postgres { server, port })
    }

    /// `postgres://postgres@127.0.0.1:<port>` (no database: the `postgres` database is where a
    /// client lands; each user creates its own).
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}", self.port)
    }

    /// The server's version, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub fn version(&self) -> Result<String> {
        startup(self.port).map_err(|reason| Error::Control {
            server: "postgres".into(),
            action: "start-up",
            reason,
        })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Killed first, so that no process holds the segment any more.
        let _ = self.server.kill();
        remove_interlock(self.server.dir());
    }
}

/// The account to run as: [`ACCOUNT`]'s when this process is root, else this process's own.
pub(crate) fn account() -> Result<Option<Account>> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name(ACCOUNT) {
        Ok(Some(user)) => Ok(Some(Account {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        })),
        Ok(None) => Err(Error::NoAccount {
            server: "postgres".into(),
            account: ACCOUNT.into(),
        }),
        Err(e) => Err(Error::Io(e.into())),
    }
}

/// The PostgreSQL program `name` (`pgbench`, `psql`, …) from [`BIN_DIR`], else from PATH.
pub fn program(name: &str) -> PathBuf {
    let packaged = Path::new(BIN_DIR).join(name);
    if packaged.is_file() {
        packaged
    } else {
        find_program(name)
    }
}

fn init_cluster(dir: &Path, account: Option<Account>) -> Result<()> {
    if let Some(account) = account {
        std::os::unix::fs::chown(dir, Some(account.uid), Some(account.gid))?;
    }
    let log = std::fs::File::create(dir.join("initdb.log"))?;
    let mut c = Command::new(program("initdb"));
    c.arg("-D")
        .arg(dir.join("data"))
        .arg(format!("--username={USER}"))
        .args([
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(account) = account {
        c.uid(account.uid).gid(account.gid);
    }
    let status = c.status().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotInstalled {
            program: "initdb".into(),
        },
        _ => Error::Io(e),
    })?;
    if status.success() {
        return Ok(());
    }
    Err(Error::StartFailed {
        server: "postgres".into(),
        reason: format!("initdb exited with {status}"),
        log: dir.join("initdb.log"),
        tail: std::fs::read_to_string(dir.join("initdb.log")).unwrap_or_default(),
    })
}

/// Removes the System V shared memory segment of the server last started in `dir`, if it is
/// still there: a server that shuts down removes its own, a killed one leaves it, and each
/// counts against the kernel's limit on segments (4096) until removed. Its id is on the
/// seventh line of the data directory's `postmaster.pid` (key, then id), which a clean
/// shutdown deletes.
fn remove_interlock(dir: &Path) {
    let Ok(lock) = std::fs::read_to_string(dir.join("data").join("postmaster.pid")) else {
        return;
    };
    let Some(id) = lock
        .lines()
        .nth(6)
        .and_then(|line| line.split_whitespace().nth(1))
        .filter(|id| id.parse::<u64>().is_ok())
    else {
        return;
    };
    let _ = Command::new("ipcrm")
        .args(["-m", id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
