//! A holder cut off from its server loses the lock once its session (ZooKeeper) or lease (etcd)
//! runs out: a waiter on the other side is granted it with a larger fencing token, and the cut
//! off holder's `lost()` fires.
//!
//! The cut is a TCP relay between the holder and the server that stops forwarding, in both
//! directions, while the connections stay open: the holder's heartbeats and renewals vanish
//! as they would in a partition or a long process pause, and the server, which keeps running
//! for everyone else, expires what the holder no longer renews.

use std::net::SocketAddr;
use std::time::Duration;

use locks::etcd::EtcdLock;
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock, Guard};
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Long enough for any expiry in these tests, short enough to fail a broken one promptly.
const PATIENCE: Duration = Duration::from_secs(30);

/// A TCP relay to one server that can be frozen.
struct Relay {
    port: u16,
    frozen: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Relay {
    async fn start(target: &str) -> Relay {
        let target: SocketAddr = tokio::net::lookup_host(target)
            .await
            .expect("resolve")
            .next()
            .expect("an address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (frozen, watch_frozen) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(relay(inbound, target, watch_frozen.clone()));
            }
        });
        Relay {
            port,
            frozen,
            accept,
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops forwarding; connections stay open and silent.
    fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Cuts the silent connections (as a healed partition whose TCP state timed out) and
    /// forwards new ones again.
    fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(mut inbound: TcpStream, target: SocketAddr, mut frozen: watch::Receiver<bool>) {
    if *frozen.borrow() {
        let _ = frozen.wait_for(|f| !*f).await;
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    let cut = tokio::select! {
        _ = copy_bidirectional(&mut inbound, &mut outbound) => false,
        _ = frozen.wait_for(|f| *f) => true,
    };
    if cut {
        // Hold both ends open and silent until thawed, then drop them.
        let _ = frozen.wait_for(|f| !*f).await;
    }
}

fn key(test: &str) -> String {
    format!("partition-test:{test}:{}", locks::new_owner_id())
}

/// Cuts the holder off, then checks what the module docs promise.
async fn holder_loses_the_lock_when_cut_off(
    relay: &Relay,
    holder: &dyn DistributedLock,
    waiter: &dyn DistributedLock,
    lease: Duration,
) {
    let key = key(holder.backend());
    let guard: Guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    relay.freeze();
    let next = waiter
        .acquire(&key, AcquireOptions::new(lease).wait(PATIENCE))
        .await
        .expect("the cut-off holder's lock was never released");
    assert!(
        next.fencing_token() > guard.fencing_token(),
        "the new holder's token {} does not fence off the old one {}",
        next.fencing_token(),
        guard.fencing_token()
    );
    relay.thaw();
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the cut-off holder's guard never reported the loss");
    assert!(
        !matches!(guard.release().await, Ok(true)),
        "a guard claimed a lock that was granted to someone else"
    );
    assert!(next.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_holder_cut_off_beyond_its_session_timeout_loses_the_lock() {
    let relay = Relay::start(&sandbox::shared::zookeeper()).await;
    // The session timeout is the ZooKeeper lock's lease; the waiter's must outlast the test.
    let holder = ZooKeeperLock::connect(&relay.address(), Duration::from_secs(1))
        .await
        .expect("holder");
    let waiter = ZooKeeperLock::connect(&sandbox::shared::zookeeper(), PATIENCE)
        .await
        .expect("waiter");
    holder_loses_the_lock_when_cut_off(&relay, &holder, &waiter, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_holder_whose_renewals_stop_loses_the_lock_when_its_lease_expires() {
    let endpoint = sandbox::shared::etcd().remove(0);
    let server = endpoint
        .split_once("://")
        .map_or(endpoint.as_str(), |(_, rest)| rest);
    let relay = Relay::start(server).await;
    let holder = EtcdLock::connect(&[format!("http://{}", relay.address())])
        .await
        .expect("holder");
    let waiter = EtcdLock::connect(&sandbox::shared::etcd())
        .await
        .expect("waiter");
    holder_loses_the_lock_when_cut_off(&relay, &holder, &waiter, Duration::from_secs(1)).await;
}
