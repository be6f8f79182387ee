//! MariaDB (or MySQL's `mysqld`, where that is what is installed) with a fresh data directory.

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{Launch, Server, find_program};
use crate::{Error, Result, ports};

struct MariaDbLaunch {
    port: u16,
    as_root: bool,
    /// A member of a replicated set: its `server_id`, and a binary log of row events that it
    /// keeps, as a replica too, so that it can be promoted.
    member: Option<u32>,
    /// More options (a Galera node's, [`crate::GaleraCluster`]).
    args: Vec<String>,
}

impl Launch for MariaDbLaunch {
    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new(find_program("mariadbd"));
        c.arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"]);
        match self.member {
            None => c.arg("--skip-log-bin"),
            Some(id) => c
                .arg(format!("--server-id={id}"))
                .arg(format!("--log-bin={}", dir.join("binlog").display()))
                .arg(format!("--relay-log={}", dir.join("relay").display()))
                .args(["--binlog-format=ROW", "--log-slave-updates"]),
        };
        c.args(&self.args);
        c.args(["--max-connections=2000", "--innodb-buffer-pool-size=256M"]);
        if self.as_root {
            // mariadbd refuses to run as root unless told to; CI runs as root.
            c.arg("--user=root");
        }
        c
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        greeting(self.port).map(drop)
    }
}

/// Reads the server's handshake packet and returns the version string in it. The server sends
/// it only once it is ready for connections, so it doubles as the readiness probe.
pub(crate) fn greeting(port: u16) -> std::result::Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 128];
    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
    // 3 bytes length, 1 byte sequence, then protocol version 10 and a NUL-terminated version.
    if n < 6 || buf[4] != 10 {
        return Err(format!("unexpected handshake ({n} bytes)"));
    }
    let end = buf[5..n].iter().position(|&b| b == 0).unwrap_or(n - 5);
    let version = String::from_utf8_lossy(&buf[5..5 + end]).into_owned();
    // MariaDB prefixes "5.5.5-" for old clients.
    Ok(version.trim_start_matches("5.5.5-").to_string())
}

/// One throwaway MariaDB server; connect as `root` without a password over TCP.
pub struct MariaDb {
    server: Server,
    port: u16,
}

listening!(MariaDb, port);

impl MariaDb {
    /// Initialises a data directory (`mariadb-install-db`) and starts the server on a free port.
    pub fn start() -> Result<MariaDb> {
        crate::cluster::retry_port_clash(Self::start_once)
    }

    fn start_once() -> Result<MariaDb> {
        Self::start_as(None)
    }

    /// A member of a replicated set ([`crate::ReplicatedMariaDb`]), `server_id` its id.
    pub(crate) fn start_member(server_id: u32) -> Result<MariaDb> {
        crate::cluster::retry_port_clash(|| Self::start_as(Some(server_id)))
    }

    fn start_as(member: Option<u32>) -> Result<MariaDb> {
        let port = ports::free_port()?;
        let as_root = nix::unistd::Uid::effective().is_root();
        let launch = MariaDbLaunch {
            port,
            as_root,
            member,
            args: Vec::new(),
        };
        let server = Server::start("mariadb", launch, |dir| install_db(dir, as_root))?;
        Ok(MariaDb { server, port })
    }

    /// A server named `name` on `port` with `args` besides the usual options, its directory
    /// made ready by `prepare` (told whether the server runs as root): a Galera node's.
    pub(crate) fn start_with(
        name: &str,
        port: u16,
        args: Vec<String>,
        prepare: impl FnOnce(&Path, bool) -> Result<()>,
    ) -> Result<MariaDb> {
        let as_root = nix::unistd::Uid::effective().is_root();
        let launch = MariaDbLaunch {
            port,
            as_root,
            member: None,
            args,
        };
        let server = Server::start(name, launch, |dir| prepare(dir, as_root))?;
        Ok(MariaDb { server, port })
    }

    /// `mysql://root@127.0.0.1:<port>` (no database: each user creates its own).
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// The server's version, e.g. `10.11.19-MariaDB-0+deb12u1`.
    pub fn version(&self) -> Result<String> {
        greeting(self.port).map_err(|reason| Error::Control {
            server: "mariadb".into(),
            action: "handshake",
            reason,
        })
    }
}

/// A fresh data directory in `dir`.
pub(crate) fn install_db(dir: &Path, as_root: bool) -> Result<()> {
    // A private tmpdir: concurrent installs sharing /tmp trip over each other's temp tables.
    std::fs::create_dir_all(dir.join("tmp"))?;
    let log = std::fs::File::create(dir.join("install.log"))?;
    let mut c = Command::new(find_program("mariadb-install-db"));
    c.arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg(format!("--tmpdir={}", dir.join("tmp").display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if as_root {
        c.arg("--user=root");
    }
    let status = c.status().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotInstalled {
            program: "mariadb-install-db".into(),
        },
        _ => Error::Io(e),
    })?;
    if status.success() {
        return Ok(());
    }
    Err(Error::StartFailed {
        server: "mariadb".into(),
        reason: format!("mariadb-install-db exited with {status}"),
        log: dir.join("install.log"),
        tail: std::fs::read_to_string(dir.join("install.log")).unwrap_or_default(),
    })
}

/// Runs `statements` with the `mariadb` client on the server at `port` (called `server` in an
/// error); its standard output, in `format` (`-N -B`: tab-separated without headers; `-E`:
/// each row as `name: value` lines).
pub(crate) fn client(port: u16, server: &str, statements: &str, format: &[&str]) -> Result<String> {
    let out = Command::new(find_program("mariadb"))
        .arg("--no-defaults")
        .args(["-h", "127.0.0.1", "-u", "root"])
        .arg(format!("-P{port}"))
        .args(format)
        .args(["-e", statements])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotInstalled {
                program: "mariadb".into(),
            },
            _ => Error::Io(e),
        })?;
    if !out.status.success() {
        return Err(Error::Control {
            server: server.into(),
            action: "run a statement",
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
