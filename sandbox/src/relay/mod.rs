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
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lock;
use delay::{Delays, Dials};

mod carry;
pub(crate) mod delay;
pub(crate) mod runtime;

use carry::serve;

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
    /// Exchanges carried, over every connection (see [`Relay::exchanges`]).
    exchanges: AtomicU64,
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
    /// Clones of both ends, to shut them down from outside the event loop that carries them.
    ends: Mutex<Vec<TcpStream>>,
    /// Whether the server has sent something since the client last did: the client's next
    /// chunk begins a new exchange.
    answered: AtomicBool,
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

/// Connections a relay's port holds before it accepts them: the system's most. The accepting
/// thread starts a thread per connection to set it up; a client that opens hundreds at once
/// (a benchmark's pool) would find the standard library's 128 full, its connection attempts
/// dropped and retried a second later, past its connect timeout.
const BACKLOG: i32 = 4096;

/// A listening socket on a free loopback port, with a [`BACKLOG`] of its own.
fn listen_on_loopback() -> std::io::Result<TcpListener> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, bind, listen, socket,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0))?;
    listen(&fd, Backlog::new(BACKLOG)?)?;
    Ok(TcpListener::from(fd))
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
        let listener = listen_on_loopback()?;
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

    /// Exchanges carried so far, over every connection: each time a client sends after its
    /// server has answered (or first), one more — the round trips a client waited for, which a
    /// distance multiplies. Requests a client pipelines before the answer count once, as they
    /// pay one round trip; so do the requests of several callers sharing one connection at
    /// once (a multiplexed Redis connection under load): count one caller at a time to learn
    /// what one operation costs. A connection's set-up counts its own exchanges.
    pub fn exchanges(&self) -> u64 {
        self.relays.state.exchanges.load(Ordering::Relaxed)
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
