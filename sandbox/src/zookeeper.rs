//! ZooKeeper standalone, run straight from Debian's `zookeeper` package with Java.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::{Launch, Server};
use crate::{Error, Result, ports};

/// Debian's layout: the jar's manifest names its dependencies, the conf dir holds log4j's setup.
/// slf4j-simple (where installed; Java skips a missing entry) sends ZooKeeper's own log to
/// `server.log`, which is what tells why an ensemble did not elect.
const CLASSPATH: &str =
    "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// Short ticks so that session-expiry scenarios take seconds, not minutes; the session timeout
/// bounds are set explicitly so clients may still ask for anything from 0.4 s to 30 s.
pub(crate) const TICK_MS: u32 = 200;

struct ZooKeeperLaunch {
    port: u16,
}

impl Launch for ZooKeeperLaunch {
    fn command(&self, dir: &Path) -> Command {
        java_command(dir, "org.apache.zookeeper.server.ZooKeeperServerMain", &[])
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        let answer = four_letter(self.port, "srvr", PROBE_TIMEOUT)?;
        if answer.contains("Mode: standalone") {
            Ok(())
        } else {
            Err(format!("srvr answered {answer:?}"))
        }
    }
}

/// How long a four-letter command may take to answer before the server counts as silent.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The JVM running `main_class` with `<dir>/zoo.cfg`, and the system `properties` given
/// (`-Dname=value`).
pub(crate) fn java_command(dir: &Path, main_class: &str, properties: &[&str]) -> Command {
    let mut c = Command::new("java");
    c.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Dzookeeper.log.dir={}", dir.display()))
        .args(properties)
        .args(["-cp", CLASSPATH, main_class])
        .arg(dir.join("zoo.cfg"));
    c
}

/// Sends a four-letter admin command and returns the whole answer.
pub(crate) fn four_letter(
    port: u16,
    word: &str,
    timeout: Duration,
) -> std::result::Result<String, String> {
    let mut s = crate::ports::connect(port, timeout)?;
    s.write_all(word.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer)
}

/// One throwaway ZooKeeper server.
pub struct ZooKeeper {
    server: Server,
    port: u16,
}

listening!(ZooKeeper, port);

impl ZooKeeper {
    /// Writes a `zoo.cfg` and starts the server on a free port.
    pub fn start() -> Result<ZooKeeper> {
        crate::cluster::retry_port_clash(Self::start_on_free_port)
    }

    fn start_on_free_port() -> Result<ZooKeeper> {
        let port = ports::free_port()?;
        let server = Server::start("zookeeper", ZooKeeperLaunch { port }, |dir| {
            let cfg = format!(
                "tickTime={TICK_MS}\n\
                 dataDir={data}\n\
                 clientPort={port}\n\
                 clientPortAddress=127.0.0.1\n\
                 minSessionTimeout={min}\n\
                 maxSessionTimeout=30000\n\
                 maxClientCnxns=0\n\
                 admin.enableServer=false\n\
                 4lw.commands.whitelist=ruok,srvr,stat,mntr\n",
                data = dir.join("data").display(),
                min = 2 * TICK_MS,
            );
            std::fs::write(dir.join("zoo.cfg"), cfg)?;
            Ok(())
        })?;
        Ok(ZooKeeper { server, port })
    }

    /// `127.0.0.1:<port>`, the connect string ZooKeeper clients take.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's version, e.g. `3.8.0-...`.
    pub fn version(&self) -> Result<String> {
        let answer =
            four_letter(self.port, "srvr", PROBE_TIMEOUT).map_err(|reason| Error::Control {
                server: "zookeeper".into(),
                action: "srvr",
                reason,
            })?;
        Ok(answer
            .lines()
            .find_map(|l| l.strip_prefix("Zookeeper version: "))
            .map(|v| v.split(',').next().unwrap_or(v).trim().to_string())
            .unwrap_or_default())
    }
}
