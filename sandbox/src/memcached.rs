//! memcached: one instance, memory only, with a configurable memory limit (a small one makes it
//! evict, which is what the memcached lock's hazard test needs).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::{Launch, Server, find_program};
use crate::{Error, Result, ports};

/// memcached's own default item memory, in megabytes.
pub const DEFAULT_MEMORY_MB: u32 = 64;

struct MemcachedLaunch {
    port: u16,
    memory_mb: u32,
}

impl Launch for MemcachedLaunch {
    fn command(&self, _dir: &Path) -> Command {
        let mut c = Command::new(find_program("memcached"));
        c.args(["--listen", "127.0.0.1", "--udp-port", "0"])
            .args(["--port", &self.port.to_string()])
            .args(["--memory-limit", &self.memory_mb.to_string()])
            .args(["--threads", "2", "--conn-limit", "4096"]);
        // memcached refuses to run as root unless told which user to run as.
        if nix::unistd::geteuid().is_root() {
            c.args(["--user", "root"]);
        }
        c
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        let version = command(self.port, "version")?;
        if !version.starts_with("VERSION ") {
            return Err(format!("version answered {version}"));
        }
        Ok(())
    }
}

/// One throwaway memcached. It keeps everything in memory: a restart comes back empty.
pub struct Memcached {
    server: Server,
    port: u16,
}

listening!(Memcached, port);

impl Memcached {
    /// Starts a memcached with the default memory limit on a free port.
    pub fn start() -> Result<Memcached> {
        Self::with_memory_limit(DEFAULT_MEMORY_MB)
    }

    /// Starts a memcached that keeps at most `megabytes` of items and evicts the least recently
    /// used ones beyond that (per slab class: items of similar size compete with each other).
    pub fn with_memory_limit(megabytes: u32) -> Result<Memcached> {
        crate::cluster::retry_port_clash(|| {
            let port = ports::free_port()?;
            let launch = MemcachedLaunch {
                port,
                memory_mb: megabytes,
            };
            let server = Server::start("memcached", launch, |_| Ok(()))?;
            Ok(Memcached { server, port })
        })
    }

    /// `127.0.0.1:<port>`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's version, e.g. `1.6.18`.
    pub fn version(&self) -> Result<String> {
        let reply = command(self.port, "version").map_err(|reason| Error::Control {
            server: "memcached".into(),
            action: "version",
            reason,
        })?;
        Ok(reply.trim_start_matches("VERSION ").to_string())
    }
}

/// Sends one text-protocol command and returns the first line of the reply.
fn command(port: u16, line: &str) -> std::result::Result<String, String> {
    let timeout = Duration::from_secs(5);
    let stream = crate::ports::connect(port, timeout)?;
    (&stream)
        .write_all(format!("{line}\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    BufReader::new(stream)
        .read_line(&mut reply)
        .map_err(|e| e.to_string())?;
    Ok(reply.trim_end().to_string())
}
