//! etcd, a single-member cluster.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::{Launch, Server};
use crate::{Error, Result, ports};

struct EtcdLaunch {
    client_port: u16,
    peer_port: u16,
}

impl Launch for EtcdLaunch {
    fn command(&self, dir: &Path) -> Command {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut c = Command::new("etcd");
        c.args(["--name", "sandbox"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("sandbox={peer}")])
            .args(["--initial-cluster-state", "new", "--logger", "zap"])
            .args(["--log-level", "warn"]);
        c
    }

    fn port(&self) -> u16 {
        self.client_port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        let body = http_get(self.client_port, "/health")?;
        if body.contains("\"health\":\"true\"") {
            Ok(())
        } else {
            Err(format!("/health answered {body:?}"))
        }
    }
}

/// A bare HTTP/1.0 GET, returning the body.
fn http_get(port: u16, path: &str) -> std::result::Result<String, String> {
    http(port, "GET", path, "", Duration::from_secs(5))
}

/// A bare HTTP/1.0 request with a JSON body, returning the response body.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> std::result::Result<String, String> {
    let mut s = crate::ports::connect(port, timeout)?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

/// One throwaway etcd server.
pub struct Etcd {
    server: Server,
    client_port: u16,
}

listening!(Etcd, client_port);

impl Etcd {
    /// Starts a single-member etcd on two free ports (client, peer).
    pub fn start() -> Result<Etcd> {
        crate::cluster::retry_port_clash(|| {
            let launch = EtcdLaunch {
                client_port: ports::free_port()?,
                peer_port: ports::free_port()?,
            };
            let client_port = launch.client_port;
            let server = Server::start("etcd", launch, |_| Ok(()))?;
            Ok(Etcd {
                server,
                client_port,
            })
        })
    }

    /// `http://127.0.0.1:<port>`, the client endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The server's version, e.g. `3.4.23`.
    pub fn version(&self) -> Result<String> {
        let body = http_get(self.client_port, "/version").map_err(|reason| Error::Control {
            server: "etcd".into(),
            action: "GET /version",
            reason,
        })?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| Error::Control {
            server: "etcd".into(),
            action: "GET /version",
            reason: e.to_string(),
        })?;
        Ok(v["etcdserver"].as_str().unwrap_or_default().to_string())
    }
}
