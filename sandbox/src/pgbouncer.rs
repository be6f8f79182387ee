//! PgBouncer in front of a sandbox PostgreSQL, pooling by transaction or by session.
//!
//! **Transaction pooling** is how PgBouncer is mostly deployed: a client is given a server
//! connection for one transaction (a statement outside one) and loses it at its end, so a few
//! server sessions serve many clients. Whatever a session keeps past a transaction — a
//! session advisory lock, a `SET`, a named prepared statement — stays with the server session,
//! not with the client, and the next client handed that session finds it. **Session pooling**
//! gives a client one server session for as long as it is connected.
//!
//! Like PostgreSQL it does not run as root; started by root it runs as the `postgres` account.
//! Clients connect as `postgres`, trusted, to any database, which PgBouncer opens on the server
//! under the same name. PgBouncer 1.18 (Debian 12's) keeps no prepared statements across
//! server sessions: clients behind transaction pooling turn their statement cache off (sqlx:
//! `statement_cache_capacity(0)`).

use std::path::Path;
use std::process::Command;

use crate::postgres::{USER, account, startup};
use crate::process::{Account, Launch, Server, find_program};
use crate::{Result, ports};

/// How PgBouncer hands server sessions to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// A server session per transaction (or per statement outside one).
    Transaction,
    /// A server session per client connection.
    Session,
}

impl Pooling {
    fn name(self) -> &'static str {
        match self {
            Pooling::Transaction => "transaction",
            Pooling::Session => "session",
        }
    }
}

struct PgBouncerLaunch {
    port: u16,
    account: Option<Account>,
}

impl Launch for PgBouncerLaunch {
    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new(find_program("pgbouncer"));
        c.arg(dir.join("pgbouncer.ini"));
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

/// One throwaway PgBouncer; connect as `postgres` without a password.
pub struct PgBouncer {
    server: Server,
    port: u16,
}

listening!(PgBouncer, port);

impl PgBouncer {
    /// Starts PgBouncer in front of the sandbox PostgreSQL listening on loopback port
    /// `upstream` ([`crate::Postgres::port`]), pooling by `pooling` with at most `pool_size` server
    /// sessions per database.
    pub fn start(upstream: u16, pooling: Pooling, pool_size: u32) -> Result<PgBouncer> {
        crate::cluster::retry_port_clash(|| Self::start_once(upstream, pooling, pool_size))
    }

    fn start_once(upstream: u16, pooling: Pooling, pool_size: u32) -> Result<PgBouncer> {
        let port = ports::free_port()?;
        let account = account()?;
        let server = Server::start("pgbouncer", PgBouncerLaunch { port, account }, |dir| {
            configure(dir, port, upstream, pooling, pool_size, account)
        })?;
        Ok(PgBouncer { server, port })
    }

    /// `postgres://postgres@127.0.0.1:<port>` (no database, as
    /// [`Postgres::url`](crate::Postgres::url)).
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}", self.port)
    }
}

fn configure(
    dir: &Path,
    port: u16,
    upstream: u16,
    pooling: Pooling,
    pool_size: u32,
    account: Option<Account>,
) -> Result<()> {
    // Trusted clients must still be named in the auth file.
    std::fs::write(dir.join("users.txt"), format!("\"{USER}\" \"\"\n"))?;
    let ini = format!(
        "[databases]\n\
         * = host=127.0.0.1 port={upstream}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {users}\n\
         pool_mode = {mode}\n\
         default_pool_size = {pool_size}\n\
         max_client_conn = 500\n\
         ignore_startup_parameters = extra_float_digits,options\n\
         logfile = {log}\n",
        users = dir.join("users.txt").display(),
        mode = pooling.name(),
        log = dir.join("pgbouncer.log").display(),
    );
    std::fs::write(dir.join("pgbouncer.ini"), ini)?;
    if let Some(account) = account {
        for path in [
            dir.to_path_buf(),
            dir.join("users.txt"),
            dir.join("pgbouncer.ini"),
        ] {
            std::os::unix::fs::chown(&path, Some(account.uid), Some(account.gid))?;
        }
    }
    Ok(())
}
