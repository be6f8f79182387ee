//! HAProxy in front of several MariaDB servers (a Galera cluster's nodes), dealing the
//! connections made to its one address among them in turn, as deployments reach a
//! multi-primary cluster: a client never knows which node it writes to.
//!
//! It balances in TCP mode, connection by connection (`balance roundrobin`): a connection stays
//! on the node it was dealt to for its life, so a pool of connections is spread over the nodes
//! and each transaction runs on whichever node its connection holds. A node that refuses
//! connections (killed) is tried no more: a connection dealt to it is dealt again to the next
//! (`option redispatch`), and the health check (a TCP connect every 500 ms) takes it out of the
//! rotation until it accepts again. The check is only a connect: a node cut off from the
//! others' primary component still accepts connections, and refuses their statements.

use std::path::Path;
use std::process::Command;

use crate::process::{Launch, Server, find_program};
use crate::{Result, ports};

struct HaproxyLaunch {
    port: u16,
}

impl Launch for HaproxyLaunch {
    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new(find_program("haproxy"));
        // `-db`: in the foreground, not a daemon.
        c.arg("-db").arg("-f").arg(dir.join("haproxy.cfg"));
        c
    }

    fn port(&self) -> u16 {
        self.port
    }

    /// Ready once a connection through it reaches a server: its MariaDB greeting comes back.
    fn probe(&self) -> std::result::Result<(), String> {
        crate::mariadb::greeting(self.port).map(drop)
    }
}

/// One throwaway HAProxy; its clients connect to [`Haproxy::port`] as to any of its servers.
pub struct Haproxy {
    server: Server,
    port: u16,
}

listening!(Haproxy, port);

impl Haproxy {
    /// Starts HAProxy dealing the connections made to it among the MariaDB servers listening
    /// on the loopback ports `backends`, in turn.
    pub fn round_robin(backends: &[u16]) -> Result<Haproxy> {
        crate::cluster::retry_port_clash(|| {
            let port = ports::free_port()?;
            let config = config(port, backends);
            let server = Server::start("haproxy", HaproxyLaunch { port }, |dir| {
                std::fs::write(dir.join("haproxy.cfg"), &config)?;
                Ok(())
            })?;
            Ok(Haproxy { server, port })
        })
    }

    /// `mysql://root@127.0.0.1:<port>`: the servers' URL, the proxy's port in place of theirs.
    pub fn mysql_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }
}

/// The configuration: one listener on `port`, the servers on `backends` in turn.
fn config(port: u16, backends: &[u16]) -> String {
    let servers: String = (backends.iter().enumerate())
        .map(|(n, backend)| {
            format!(
                "    server node{} 127.0.0.1:{backend} check inter 500ms fall 1 rise 1\n",
                n + 1
            )
        })
        .collect();
    format!(
        "global\n\
         \x20   maxconn 4096\n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   retries 1\n\
         \x20   option redispatch\n\
         \x20   timeout connect 2s\n\
         \x20   timeout client 1h\n\
         \x20   timeout server 1h\n\
         listen nodes\n\
         \x20   bind 127.0.0.1:{port}\n\
         \x20   balance roundrobin\n\
         {servers}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_is_dealt_connections_in_turn_and_checked() {
        let cfg = config(4000, &[4001, 4002, 4003]);
        assert!(cfg.contains("bind 127.0.0.1:4000\n"), "{cfg}");
        assert!(cfg.contains("balance roundrobin\n"), "{cfg}");
        assert!(cfg.contains("option redispatch\n"), "{cfg}");
        for (n, port) in [(1, 4001), (2, 4002), (3, 4003)] {
            assert!(
                cfg.contains(&format!("server node{n} 127.0.0.1:{port} check")),
                "{cfg}"
            );
        }
    }
}
