//! The one TCP relay: a loopback port in front of a server whose connections can be made to
//! go silent or be cut, as a network partition would, and moved to another server, as a
//! virtual IP or a proxy moves.
//!
//! Two things on one machine are connected through it:
//!
//! * **A client and its server** ([`Relay`]): a fault scenario connects a client (an app
//!   instance, a lock client, a replica) to the relay instead of the server, then
//!   [`Relay::cut`]s it (every connection closed, new ones closed as soon as accepted: the
//!   server looks dead to this client only), [`Relay::silence`]s it (connections stay open
//!   and carry nothing either way: a black hole), [`Relay::heal`]s it, or
//!   [`Relay::move_to`]s another server.
//! * **The members of a cluster** ([`Relays`], used by [`crate::ZooKeeperEnsemble`] and
//!   [`crate::EtcdCluster`]): cluster members on one machine talk over loopback, which cannot
//!   be cut, so every member reaches its peers through relays, and each relayed connection is
//!   labelled with the member it comes from and the member it goes to. [`Relays::isolate`]
//!   then partitions a member the way a real network partition does, not the way a crash
//!   does:
//!   * connections between it and its peers stay open but go **silent**: bytes are read and
//!     dropped, in both directions, so each side learns of the partition only by its own
//!     timeouts (heartbeats, election timers), as it would across a broken switch;
//!   * new connections between it and its peers are closed as soon as they are accepted, as a
//!     peer sees a connection attempt across a partition fail. (Holding them open and silent
//!     instead made a ZooKeeper follower that was told "3 still leads" by a peer about to
//!     notice otherwise wait a full `initLimit` for 3's answer, again and again: the two
//!     survivors took turns re-following the cut off leader for a minute and more before
//!     either led.)
//!   * its clients still reach it (client ports are not relayed), so a client connected to
//!     the cut-off member sees exactly what a client on the minority side of a partition sees.
//!
//! Healing closes the connections that went silent (their byte streams have holes, as after a
//! real partition whose TCP state timed out) and relays new ones again; the peers reconnect by
//! themselves.
//!
//! Either kind can also delay what it carries, each direction by its own one-way delay
//! ([`Relay::set_delays`], see [`crate::Delays`]): a client and its server then stand as far
//! apart as two machines of one zone, or of two. Cutting, silencing, healing and moving work
//! as they do without delay.
//!
//! Where a connection comes from is either fixed (one relay per directed pair of members, for
//! servers such as ZooKeeper whose members may each be given their own view of the peer
//! addresses) or read from an HTTP request header (etcd stamps every peer request with
//! `X-Server-From: <member id>`, and its peer addresses are the same for every member).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::delay::{Delays, Dial, Dials, Jitter, Line};

/// Who opened a relayed connection.
#[derive(Clone)]
pub(crate) enum Source {
    /// Whoever connects: a client of one server.
    Anyone,
    /// The relay serves one member only.
    Fixed(String),
    /// The member's label is the value of this HTTP request header in the first request.
    HttpHeader(&'static str),
}

/// How a label is cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isolation {
    /// Its connections stay open and carry nothing.
    Silent,
    /// Its connections are closed.
    Cut,
}

/// A set of relays sharing one partition state. Dropping it closes every relayed connection.
pub(crate) struct Relays {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
    closing: AtomicBool,
    /// What every connection's bytes are delayed by, each way.
    delays: Dials,
}

#[derive(Default)]
struct Inner {
    isolated: HashMap<String, Isolation>,
    conns: Vec<Arc<Conn>>,
    /// Each relay's listening address and where it leads now.
    relays: Vec<(SocketAddr, SocketAddr)>,
}

impl Inner {
    fn target(&self, relay: SocketAddr) -> Option<SocketAddr> {
        self.relays
            .iter()
            .find(|(at, _)| *at == relay)
            .map(|(_, to)| *to)
    }

    /// How the connection from `from` to `to` is cut off, if it is.
    fn isolation(&self, from: Option<&String>, to: &str) -> Option<Isolation> {
        let of = |label: &str| self.isolated.get(label).copied();
        match (of(to), from.and_then(|f| of(f))) {
            (Some(Isolation::Cut), _) | (_, Some(Isolation::Cut)) => Some(Isolation::Cut),
            (a, b) => a.or(b),
        }
    }
}

pub(crate) struct Conn {
    /// The relay it came through.
    relay: SocketAddr,
    from: Option<String>,
    to: String,
    /// Set once the connection crosses a partition; it never carries bytes again.
    silent: AtomicBool,
    /// Set once it is closed: the bytes still on their way are dropped.
    closed: AtomicBool,
    /// Clones of both ends, to shut them down from outside the pumping threads.
    ends: Mutex<Vec<TcpStream>>,
}

impl Conn {
    fn touches(&self, labels: &[String]) -> bool {
        labels
            .iter()
            .any(|l| *l == self.to || self.from.as_ref() == Some(l))
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for end in lock(&self.ends).iter() {
            let _ = end.shutdown(Shutdown::Both);
        }
    }

    /// Whether it crossed a partition: its bytes are dropped.
    fn is_silent(&self) -> bool {
        self.silent.load(Ordering::SeqCst)
    }

    /// Whether it still carries bytes: neither silent nor closed.
    pub(crate) fn carries(&self) -> bool {
        !self.is_silent() && !self.closed.load(Ordering::SeqCst)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Relays {
    pub(crate) fn new() -> Relays {
        Relays {
            state: Arc::default(),
        }
    }

    /// Starts a relay on a free loopback port to `target`, for traffic to `to`; returns the
    /// relay's address.
    pub(crate) fn relay(
        &self,
        target: SocketAddr,
        from: Source,
        to: &str,
    ) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        lock(&self.state.inner).relays.push((addr, target));
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
                    std::thread::spawn(move || serve(&state, client, addr, from, to));
                }
            })?;
        Ok(addr)
    }

    /// Cuts every member labelled in `labels` off from its peers, silently (see the module
    /// docs).
    pub(crate) fn isolate(&self, labels: &[String]) {
        self.cut_off(labels, Isolation::Silent);
    }

    fn cut_off(&self, labels: &[String], how: Isolation) {
        let mut inner = lock(&self.state.inner);
        for label in labels {
            inner.isolated.insert(label.clone(), how);
        }
        for conn in inner.conns.iter().filter(|c| c.touches(labels)) {
            conn.silent.store(true, Ordering::SeqCst);
            if how == Isolation::Cut {
                conn.close();
            }
        }
    }

    /// Ends the isolation of `labels`: their silent connections are closed and new ones are
    /// relayed (unless they touch another isolated label).
    pub(crate) fn heal(&self, labels: &[String]) {
        let mut inner = lock(&self.state.inner);
        inner.isolated.retain(|l, _| !labels.contains(l));
        for conn in inner.conns.iter() {
            if conn.silent.load(Ordering::SeqCst) && conn.touches(labels) {
                conn.close();
            }
        }
    }

    /// Delays every connection's bytes by `delays`, open connections' from their next chunk.
    pub(crate) fn set_delays(&self, delays: Delays) {
        self.state.delays.set(delays);
    }

    /// What every connection's bytes are delayed by.
    pub(crate) fn delays(&self) -> Delays {
        self.state.delays.get()
    }

    /// Chunks read and not yet written, held by the delays: more than one means many are on
    /// their way at once, as on a long wire.
    pub(crate) fn in_flight(&self) -> usize {
        self.state.delays.in_flight.load(Ordering::SeqCst)
    }

    /// Points the relay at `relay` to `target`: its connections are closed, new ones lead
    /// there.
    fn retarget(&self, relay: SocketAddr, target: SocketAddr) {
        let mut inner = lock(&self.state.inner);
        for (at, to) in inner.relays.iter_mut() {
            if *at == relay {
                *to = target;
            }
        }
        for conn in inner.conns.iter().filter(|c| c.relay == relay) {
            conn.close();
        }
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.state.closing.store(true, Ordering::SeqCst);
        let inner = lock(&self.state.inner);
        for (addr, _) in &inner.relays {
            // Wakes the accept loop, which then sees `closing`.
            let _ = TcpStream::connect_timeout(addr, Duration::from_secs(1));
        }
        for conn in &inner.conns {
            conn.close();
        }
    }
}

/// A relay to one server on a free loopback port: what a client connects to instead of the
/// server, so that a scenario can cut it off, black-hole it, or move it to another server.
/// Dropping it closes every connection.
pub struct Relay {
    relays: Relays,
    addr: SocketAddr,
}

/// The label of a single relay's server.
const SERVER: &str = "server";

impl Relay {
    /// Relays a free loopback port to `target`.
    pub fn start(target: SocketAddr) -> crate::Result<Relay> {
        Relay::start_delayed(target, Delays::NONE)
    }

    /// Relays a free loopback port to `target`, each direction delayed by `delays`.
    pub fn start_delayed(target: SocketAddr, delays: Delays) -> crate::Result<Relay> {
        let relays = Relays::new();
        relays.set_delays(delays);
        let addr = relays.relay(target, Source::Anyone, SERVER)?;
        Ok(Relay { relays, addr })
    }

    /// Delays each direction by `delays` from now on: new connections, and open ones from
    /// their next chunk (the chunks already on their way keep the time they are due at).
    pub fn set_delays(&self, delays: Delays) {
        self.relays.set_delays(delays);
    }

    /// What each direction is delayed by.
    pub fn delays(&self) -> Delays {
        self.relays.delays()
    }

    /// Chunks read and not yet written, held by the delays, over every connection: more than
    /// one means many are on their way at once, as on a long wire.
    pub fn in_flight(&self) -> usize {
        self.relays.in_flight()
    }

    /// `127.0.0.1:<port>`, to connect to instead of the server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every relayed connection and each new one as soon as it is accepted: to its
    /// clients, the server is gone.
    pub fn cut(&self) {
        self.relays.cut_off(&[SERVER.into()], Isolation::Cut);
    }

    /// Connections stay open and carry nothing either way; new ones are closed at once.
    pub fn silence(&self) {
        self.relays.cut_off(&[SERVER.into()], Isolation::Silent);
    }

    /// Relays new connections again (the silenced ones are closed).
    pub fn heal(&self) {
        self.relays.heal(&[SERVER.into()]);
    }

    /// Closes every relayed connection; new ones go to `target`, as clients of a virtual IP
    /// that moved to another server see it.
    pub fn move_to(&self, target: SocketAddr) {
        self.relays.retarget(self.addr, target);
    }
}

/// Relays one accepted connection until either side closes it or it is cut.
fn serve(state: &Arc<State>, client: TcpStream, relay: SocketAddr, from: Source, to: String) {
    let mut first = Vec::new();
    let from = match from {
        Source::Anyone => None,
        Source::Fixed(label) => Some(label),
        Source::HttpHeader(name) => read_header(&client, &mut first, name),
    };
    let Ok(client_end) = client.try_clone() else {
        return;
    };
    let conn = Arc::new(Conn {
        relay,
        from,
        to,
        silent: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        ends: Mutex::new(vec![client_end]),
    });
    {
        let mut inner = lock(&state.inner);
        if state.closing.load(Ordering::SeqCst) {
            return;
        }
        if inner.isolation(conn.from.as_ref(), &conn.to).is_some() {
            conn.silent.store(true, Ordering::SeqCst);
        }
        inner.conns.push(conn.clone());
    }
    if conn.silent.load(Ordering::SeqCst) {
        // Across the partition: the attempt fails.
    } else if let Some(upstream) = connect_upstream(state, &conn) {
        let _ = upstream.set_nodelay(true);
        let _ = client.set_nodelay(true);
        if let Ok(end) = upstream.try_clone() {
            lock(&conn.ends).push(end);
        }
        if let (Ok(up), Ok(down)) = (upstream.try_clone(), client.try_clone()) {
            let (back, state_back) = (conn.clone(), state.clone());
            let downstream = std::thread::spawn(move || {
                let delays = &state_back.delays;
                pump(&back, up, down, &[], &delays.to_client, &delays.in_flight)
            });
            let delays = &state.delays;
            pump(
                &conn,
                client,
                upstream,
                &first,
                &delays.to_server,
                &delays.in_flight,
            );
            let _ = downstream.join();
        }
    }
    conn.close();
    lock(&state.inner).conns.retain(|c| !Arc::ptr_eq(c, &conn));
}

/// How long a relay keeps trying to reach a target that refuses connections.
const UPSTREAM_PATIENCE: Duration = Duration::from_secs(3);

/// Connects to the relay's target (read anew at every attempt: it may move meanwhile),
/// retrying while it refuses for up to [`UPSTREAM_PATIENCE`].
///
/// The relay has already accepted its client, so it cannot pass a refusal on: the client would
/// see a connection that opened and then closed, which some peers treat differently from a
/// refused one (a ZooKeeper follower that reaches the new leader's quorum port a moment before
/// the leader listens on it gives up on that leader). Retrying looks like a slow connect.
fn connect_upstream(state: &State, conn: &Conn) -> Option<TcpStream> {
    let deadline = std::time::Instant::now() + UPSTREAM_PATIENCE;
    loop {
        let target = lock(&state.inner).target(conn.relay)?;
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

/// Copies `from` to `to` (`first`, read before, ahead of the rest), each chunk `dial`'s delay
/// later, until either side fails; drops the bytes once the connection is silent. The chunks
/// on their way when `from` ends are written before the connection is closed.
fn pump(
    conn: &Arc<Conn>,
    mut from: TcpStream,
    to: TcpStream,
    first: &[u8],
    dial: &Dial,
    in_flight: &Arc<AtomicUsize>,
) {
    let mut out = Out::Direct(to);
    let mut jitter = Jitter::new();
    let mut carry = |chunk: &[u8]| out.carry(chunk, dial.draw(&mut jitter), conn, in_flight);
    let mut buf = [0u8; 16 * 1024];
    let mut open = first.is_empty() || carry(first);
    while open {
        open = match from.read(&mut buf) {
            Ok(0) | Err(_) => false,
            Ok(_) if conn.is_silent() => true,
            Ok(n) => carry(&buf[..n]),
        };
    }
    if let Out::Delayed(line) = out {
        line.finish();
    }
    conn.close();
}

/// Where a pump writes: straight to its socket until a chunk is delayed, through a delay line
/// from then on (so that no chunk overtakes the ones on their way).
enum Out {
    Direct(TcpStream),
    Delayed(Line),
}

impl Out {
    /// Writes `chunk`, just read, now, or queues it to be written `delay` from now; false
    /// when the connection cannot carry it.
    fn carry(
        &mut self,
        chunk: &[u8],
        delay: Duration,
        conn: &Arc<Conn>,
        in_flight: &Arc<AtomicUsize>,
    ) -> bool {
        if let Out::Direct(to) = self
            && !delay.is_zero()
        {
            let Ok(to) = to.try_clone() else {
                return false;
            };
            match Line::start(to, conn.clone(), in_flight.clone()) {
                Ok(line) => *self = Out::Delayed(line),
                Err(_) => return false,
            }
        }
        match self {
            Out::Direct(to) => to.write_all(chunk).is_ok(),
            Out::Delayed(line) => line.send(Instant::now() + delay, chunk),
        }
    }
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
