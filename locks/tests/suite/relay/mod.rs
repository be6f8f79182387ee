//! A TCP relay between a lock client and its server that a test can partition in the ways a
//! network does: a black hole (connections stay open, nothing arrives), requests arriving with
//! their answers lost, a server that refuses connections, and a heal that cuts the stale
//! connections as a partition outlasting TCP's patience would.
//!
//! Each direction of each connection is read only while that direction is open, so bytes sent
//! into a closed direction wait in the kernel's buffers (or in the relay's one-chunk buffer) and
//! are dropped, never delivered, when the connection is cut.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the relay does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flow {
    /// Client → server bytes are forwarded.
    requests: bool,
    /// Server → client bytes are forwarded.
    replies: bool,
    /// New connections are closed at once, as if the server were dead.
    refuse: bool,
    /// Bumped by every cut: connections of an older generation are dropped.
    generation: u64,
}

/// A TCP relay to one server, on a free loopback port.
pub struct Relay {
    port: u16,
    flow: watch::Sender<Flow>,
    /// How many connections were refused so far.
    refused: watch::Receiver<u64>,
    accept: JoinHandle<()>,
}

impl Relay {
    /// Relays a free loopback port to `target` (`host:port`, or `scheme://host:port`).
    pub async fn start(target: &str) -> Relay {
        let target = target.split_once("://").map_or(target, |(_, rest)| rest);
        let target: SocketAddr = tokio::net::lookup_host(target)
            .await
            .expect("resolve the relay's target")
            .next()
            .expect("an address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (flow, watch_flow) = watch::channel(Flow {
            requests: true,
            replies: true,
            refuse: false,
            generation: 0,
        });
        let (count_refused, refused) = watch::channel(0);
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if watch_flow.borrow().refuse {
                    count_refused.send_modify(|n| *n += 1);
                    continue; // Dropped: closed at once.
                }
                tokio::spawn(relay(inbound, target, watch_flow.clone()));
            }
        });
        Relay {
            port,
            flow,
            refused,
            accept,
        }
    }

    /// `127.0.0.1:<port>`, for ZooKeeper connect strings.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.address())
    }

    /// `http://127.0.0.1:<port>`, for etcd endpoints.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.address())
    }

    /// Nothing is forwarded any more, either way; connections (old and new) stay open and
    /// silent.
    pub fn black_hole(&self) {
        self.flow.send_modify(|f| {
            f.requests = false;
            f.replies = false;
        });
    }

    /// Requests still reach the server, its answers are held back.
    pub fn hold_replies(&self) {
        self.flow.send_modify(|f| {
            f.requests = true;
            f.replies = false;
        });
    }

    /// Every connection is cut, and new ones are closed as soon as they arrive.
    pub fn refuse(&self) {
        self.flow.send_modify(|f| {
            f.refuse = true;
            f.generation += 1;
        });
    }

    /// Resolves when the next connection is refused: the client just tried, and failed.
    pub async fn next_refusal(&self) {
        let mut refused = self.refused.clone();
        refused.borrow_and_update();
        refused.changed().await.expect("the relay is running");
    }

    /// Cuts every connection made so far (what was held back is lost) and forwards new ones
    /// both ways again.
    pub fn heal(&self) {
        self.flow.send_modify(|f| {
            *f = Flow {
                requests: true,
                replies: true,
                refuse: false,
                generation: f.generation + 1,
            }
        });
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        // Drops every connection still relayed.
        self.flow.send_modify(|f| f.generation += 1);
    }
}

async fn relay(inbound: TcpStream, target: SocketAddr, flow: watch::Receiver<Flow>) {
    let generation = flow.borrow().generation;
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let (from_client, to_client) = inbound.into_split();
    let (from_server, to_server) = outbound.into_split();
    let mut cut = flow.clone();
    tokio::select! {
        () = pump(from_client, to_server, flow.clone(), generation, |f| f.requests) => {}
        () = pump(from_server, to_client, flow.clone(), generation, |f| f.replies) => {}
        _ = cut.wait_for(|f| f.generation != generation) => {}
    }
}

/// Copies `from` to `to` while `open` says this direction flows, until the connection's
/// `generation` is cut.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut flow: watch::Receiver<Flow>,
    generation: u64,
    open: fn(&Flow) -> bool,
) {
    // Whether this direction may go on; `false` once the connection is cut.
    let mut gate = async move || {
        flow.wait_for(|f| f.generation != generation || open(f))
            .await
            .is_ok_and(|f| f.generation == generation)
    };
    let mut buf = vec![0; 64 * 1024];
    loop {
        if !gate().await {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Closed while this chunk was being read: it waits, and a cut drops it.
        if !gate().await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
