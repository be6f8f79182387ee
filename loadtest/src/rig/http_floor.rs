//! HTTP's floor: a server with nothing of the service behind its routes, for the baselines
//! `http-floor-noop` and `http-floor-refusal`.
//!
//! It runs the service's own accept loop ([`app::serve::serve`]: hyper's HTTP/1 server, its
//! header and body deadlines, `TCP_NODELAY`) in a process of its own, as an app instance runs,
//! and answers the floor's two requests ([`testkit::floor`]).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The line a floor server prints once it listens, followed by its address.
const LISTENING: &str = "http-floor listening on ";
/// How long a floor server may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the floor on `listen` (port 0: any free port) until the process is killed; prints
/// [`LISTENING`] and the address on standard output once it listens.
pub async fn serve(listen: SocketAddr) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!("{LISTENING}{}", listener.local_addr()?);
    let limits = app::serve::Limits {
        header_read: Duration::from_secs(10),
        body_read: Duration::from_secs(10),
        grace: Duration::from_secs(1),
    };
    let doors = app::serve::Doors {
        all: testkit::floor::router(),
        operators: testkit::floor::router(),
        // No bound: a baseline of HTTP alone.
        connections: std::sync::Arc::new(app::overload::Connections::new(u32::MAX, 0)),
    };
    app::serve::serve(listener, doors, limits, std::future::pending()).await?;
    Ok(())
}

/// Floor servers, one process each, killed when this is dropped.
pub struct Floor {
    _children: Vec<Child>,
    bases: Vec<String>,
}

impl Floor {
    /// Starts `instances` floor servers from `binary` (`seckill-bench`), each on a free port.
    pub async fn start(binary: &std::path::Path, instances: usize) -> Result<Floor> {
        let mut children = Vec::new();
        let mut bases = Vec::new();
        for _ in 0..instances {
            let command = sandbox::at_server_priority(std::process::Command::new(binary));
            let mut child = Command::from(command)
                .args(["http-floor", "--listen", "127.0.0.1:0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {} http-floor", binary.display()))?;
            let stdout = child.stdout.take().context("the floor server's output")?;
            let address = tokio::time::timeout(START_TIMEOUT, listening(stdout))
                .await
                .context("the floor server did not say where it listens")??;
            bases.push(format!("http://{address}"));
            children.push(child);
        }
        Ok(Floor {
            _children: children,
            bases,
        })
    }

    /// The servers' base URLs.
    pub fn bases(&self) -> Vec<String> {
        self.bases.clone()
    }
}

/// The address a floor server prints once it listens.
async fn listening(stdout: tokio::process::ChildStdout) -> Result<String> {
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some(address) = line.strip_prefix(LISTENING) {
            return Ok(address.trim().to_string());
        }
    }
    bail!("the floor server ended before it listened")
}
