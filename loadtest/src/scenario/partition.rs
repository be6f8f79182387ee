//! A TCP relay that can cut a client off from its server: a network partition on loopback.
//!
//! Pausing the server would freeze every client at once; the ZooKeeper scenario needs one
//! client cut off while another keeps talking. Clients of the partitioned side connect to the
//! relay; [`Partition::cut`] drops every relayed connection and refuses new ones until
//! [`Partition::heal`]. [`Partition::move_to`] makes it a moving service address (a virtual IP,
//! a proxy) instead: connections are dropped and new ones reach another server.

use std::net::SocketAddr;

use anyhow::Result;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Partition {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    upstream: watch::Sender<SocketAddr>,
    task: JoinHandle<()>,
}

impl Partition {
    /// Relays a free loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Partition> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let (upstream, upstream_rx) = watch::channel(upstream);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *cut_rx.borrow() {
                    continue; // dropped: connection refused, in effect
                }
                tokio::spawn(relay(client, cut_rx.clone(), upstream_rx.clone()));
            }
        });
        Ok(Partition {
            addr,
            cut,
            upstream,
            task,
        })
    }

    /// `127.0.0.1:<port>` to connect to instead of the server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// Drops every relayed connection; new ones go to `upstream`, as clients of a virtual IP
    /// that moved to another server see it.
    pub fn move_to(&self, upstream: SocketAddr) {
        self.upstream.send_replace(upstream);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.cut.send_replace(true);
        self.task.abort();
    }
}

async fn relay(
    mut client: TcpStream,
    mut cut: watch::Receiver<bool>,
    mut upstream: watch::Receiver<SocketAddr>,
) {
    let to = *upstream.borrow_and_update();
    let Ok(mut server) = TcpStream::connect(to).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.wait_for(|cut| *cut) => {}
        _ = upstream.changed() => {}
    }
}
