//! The wires between cluster members: TCP relays that can partition one member from the others.
//!
//! Cluster members on one machine talk over loopback, which cannot be cut. So every member
//! reaches its peers through relays started here (the peer addresses in its configuration are
//! relay ports), and each relayed connection is labelled with the member it comes from and the
//! member it goes to. [`Network::isolate`] then partitions a member the way a real network
//! partition does, not the way a crash does:
//!
//! * connections between it and its peers stay open but go **silent**: bytes are read and
//!   dropped, in both directions, so each side learns of the partition only by its own timeouts
//!   (heartbeats, election timers), as it would across a broken switch;
//! * new connections between it and its peers are closed as soon as they are accepted, as a
//!   peer sees a connection attempt across a partition fail. (Holding them open and silent
//!   instead made a ZooKeeper follower that was told "3 still leads" by a peer about to notice
//!   otherwise wait a full `initLimit` for 3's answer, again and again: the two survivors took
//!   turns re-following the cut off leader for a minute and more before either led.)
//! * its clients still reach it (client ports are not relayed), so a client connected to the
//!   cut-off member sees exactly what a client on the minority side of a partition sees.
//!
//! [`Network::heal`] closes the connections that went silent (their byte streams have holes, as
//! after a real partition whose TCP state timed out) and relays new ones again; the members
//! reconnect by themselves.
//!
//! Where a connection comes from is either fixed (one relay per directed pair of members, for
//! servers such as ZooKeeper whose members may each be given their own view of the peer
//! addresses) or read from an HTTP request header (etcd stamps every peer request with
//! `X-Server-From: <member id>`, and its peer addresses are the same for every member).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Who opened a relayed connection.
#[derive(Clone)]
pub(crate) enum Source {
    /// The relay serves one member only.
    Fixed(String),
    /// The member's label is the value of this HTTP request header in the first request.
    HttpHeader(&'static str),
}

/// Relays and the partition state they obey. Dropping it closes every relayed connection.
pub(crate) struct Network {
    state: Arc<State>,
    listeners: Mutex<Vec<SocketAddr>>,
}

#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
    closing: AtomicBool,
}

#[derive(Default)]
struct Inner {
    isolated: HashSet<String>,
    conns: Vec<Arc<Conn>>,
}

struct Conn {
    from: Option<String>,
    to: String,
    /// Set once the connection crosses a partition; it never carries bytes again.
    silent: AtomicBool,
    /// Clones of both ends, to shut them down from outside the pumping threads.
    ends: Mutex<Vec<TcpStream>>,
}

impl Conn {
    fn touches(&self, isolated: &HashSet<String>) -> bool {
        isolated.contains(&self.to) || self.from.as_ref().is_some_and(|f| isolated.contains(f))
    }

    fn close(&self) {
        for end in self.ends.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = end.shutdown(Shutdown::Both);
        }
    }
}

impl Network {
    pub(crate) fn new() -> Network {
        Network {
            state: Arc::default(),
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// Starts a relay on a free loopback port to `target`, for traffic to member `to`; returns
    /// the relay's port.
    pub(crate) fn relay(&self, target: SocketAddr, from: Source, to: &str) -> std::io::Result<u16> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(addr);
        let state = self.state.clone();
        let to = to.to_string();
        std::thread::Builder::new()
            .name(format!("sandbox-relay-{}", addr.port()))
            .spawn(move || {
                for client in listener.incoming() {
                    if state.closing.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let (state, from, to) = (state.clone(), from.clone(), to.clone());
                    std::thread::spawn(move || serve(&state, client, target, from, to));
                }
            })?;
        Ok(addr.port())
    }

    /// Cuts every member labelled in `labels` off from its peers (see the module docs).
    pub(crate) fn isolate(&self, labels: &[String]) {
        let mut inner = self.state.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.isolated.extend(labels.iter().cloned());
        let Inner { isolated, conns } = &*inner;
        for conn in conns.iter().filter(|c| c.touches(isolated)) {
            conn.silent.store(true, Ordering::SeqCst);
        }
    }

    /// Ends the isolation of the members labelled in `labels`: their silent connections are
    /// closed and new ones are relayed (unless they touch another isolated member).
    pub(crate) fn heal(&self, labels: &[String]) {
        let mut inner = self.state.inner.lock().unwrap_or_else(|e| e.into_inner());
        let healed: HashSet<String> = labels.iter().cloned().collect();
        inner.isolated.retain(|l| !healed.contains(l));
        for conn in inner.conns.iter() {
            if conn.silent.load(Ordering::SeqCst) && conn.touches(&healed) {
                conn.close();
            }
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.state.closing.store(true, Ordering::SeqCst);
        for addr in self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            // Wakes the accept loop, which then sees `closing`.
            let _ = TcpStream::connect_timeout(addr, Duration::from_secs(1));
        }
        let inner = self.state.inner.lock().unwrap_or_else(|e| e.into_inner());
        for conn in &inner.conns {
            conn.close();
        }
    }
}

/// Relays one accepted connection until either side closes it or it is healed away.
fn serve(state: &State, client: TcpStream, target: SocketAddr, from: Source, to: String) {
    let mut first = Vec::new();
    let from = match from {
        Source::Fixed(label) => Some(label),
        Source::HttpHeader(name) => read_header(&client, &mut first, name),
    };
    let Ok(client_end) = client.try_clone() else {
        return;
    };
    let conn = Arc::new(Conn {
        from,
        to,
        silent: AtomicBool::new(false),
        ends: Mutex::new(vec![client_end]),
    });
    {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        if state.closing.load(Ordering::SeqCst) {
            return;
        }
        if conn.touches(&inner.isolated) {
            conn.silent.store(true, Ordering::SeqCst);
        }
        inner.conns.push(conn.clone());
    }
    if conn.silent.load(Ordering::SeqCst) {
        // Across the partition: the attempt fails.
    } else if let Some(upstream) = connect_upstream(state, &conn, target) {
        let _ = upstream.set_nodelay(true);
        let _ = client.set_nodelay(true);
        if let Ok(end) = upstream.try_clone() {
            conn.ends
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(end);
        }
        let forward = (&upstream).write_all(&first).is_ok();
        if let (true, Ok(up), Ok(down)) = (forward, upstream.try_clone(), client.try_clone()) {
            let back = conn.clone();
            let downstream = std::thread::spawn(move || pump(&back, Ok(up), down));
            pump(&conn, Ok(client), upstream);
            let _ = downstream.join();
        }
    }
    conn.close();
    let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
    inner.conns.retain(|c| !Arc::ptr_eq(c, &conn));
}

/// How long a relay keeps trying to reach a target that refuses connections.
const UPSTREAM_PATIENCE: Duration = Duration::from_secs(3);

/// Connects to `target`, retrying while it refuses for up to [`UPSTREAM_PATIENCE`].
///
/// The relay has already accepted its client, so it cannot pass a refusal on: the client would
/// see a connection that opened and then closed, which some peers treat differently from a
/// refused one (a ZooKeeper follower that reaches the new leader's quorum port a moment before
/// the leader listens on it gives up on that leader). Retrying looks like a slow connect.
fn connect_upstream(state: &State, conn: &Conn, target: SocketAddr) -> Option<TcpStream> {
    let deadline = std::time::Instant::now() + UPSTREAM_PATIENCE;
    loop {
        match TcpStream::connect(target) {
            Ok(upstream) => return Some(upstream),
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => return None,
        }
        if state.closing.load(Ordering::SeqCst) || conn.silent.load(Ordering::SeqCst) {
            return None;
        }
    }
}

/// Copies `from` to `to` until either fails; drops the bytes once the connection is silent.
fn pump(conn: &Conn, from: std::io::Result<TcpStream>, mut to: TcpStream) {
    let Ok(mut from) = from else { return };
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) if conn.silent.load(Ordering::SeqCst) => continue,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    conn.close();
}

/// Reads the first request's head into `buf` and returns the value of header `name`.
fn read_header(mut client: &TcpStream, buf: &mut Vec<u8>, name: &str) -> Option<String> {
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 64 * 1024 {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(buf);
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_string())
    })
}
