//! The load's HTTP/1.1 connections: plain keep-alive connections, one request in flight on
//! each, the request written as bytes and the answer read with `httparse`
//! ([`crate::wire`]), as `wrk` keeps them. Every request
//! the load sends — `GET /api/noop` and every strategy's order — goes through here, so the
//! ratio of a strategy to `http-noop` compares the server's work, not two clients.
//!
//! Why not `reqwest` (the admin calls still use it): the generator shares two cores with the
//! server, and every CPU-second it spends per request is taken from the server. Per request,
//! reqwest parses a URL, checks a connection out of its pool by scheme and authority, applies
//! a redirect policy and a timeout layer, and hands the request to a connection task and the
//! answer back; the committed run of 2026-11-23 measured it at 5× `wrk`'s CPU per
//! `GET /api/noop`. Here a request takes an idle connection of its instance from a stack (or
//! opens one), and the task that sends it writes and reads the socket itself: no task hop, no
//! pool keyed by URL, no header map built for the answer.
//!
//! Idle connections are kept per thread that runs a runtime of its own
//! ([`own_runtime_thread`]): a socket is registered with the reactor of the runtime that opened
//! it, so a load thread with a current-thread runtime reuses only the connections it opened,
//! and never waits on another runtime's reactor for their answers. Every other thread shares
//! one list.
//!
//! A reused connection is first checked for a close the server sent while it sat idle (a
//! non-blocking peek: the reactor may not have seen the close yet); a closed one is dropped
//! and the request goes out on another connection — it is sent, and counted, once. A request
//! that was written and got no complete answer is never resent — it is a transport error, as a
//! lost click is — but for one case browsers resend too: a reused connection the server
//! closed before a byte of the answer (its idle timeout ran out as the request crossed it;
//! the server never read the request) carries the request again once, on a new connection.
//! A connection whose answer said `Connection: close`, or whose read failed, is not kept.

use std::cell::Cell;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use hyper::header::HeaderValue;
use hyper::{Request, StatusCode};
use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, recv};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::{self, Framing, Malformed};

/// A request's body: the whole of it, known before sending.
pub type Body = Bytes;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to {authority}: {source}")]
    Connect {
        authority: String,
        source: std::io::Error,
    },
    #[error("on the connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server closed the connection before the answer was complete")]
    Closed,
    #[error(transparent)]
    Malformed(#[from] Malformed),
}

/// Keep-alive connections to each of a set of instances.
pub struct Connections {
    instances: Box<[Instance]>,
}

/// One instance's address and its connections not in use, a list per runtime thread.
struct Instance {
    /// `127.0.0.1:PORT`.
    authority: String,
    host: HeaderValue,
    idle: Box<[Mutex<Vec<Conn>>]>,
}

/// Lists of idle connections per instance: one shared, and one each for up to `LISTS - 1`
/// threads with runtimes of their own (beyond that, such threads share lists: still correct,
/// their answers only travel through another runtime's reactor).
const LISTS: usize = 64;

static NEXT_LIST: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The list of idle connections this thread takes from and gives back to.
    static LIST: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as one that runs a runtime of its own for its whole life (a load
/// thread): the connections it opens are kept for it alone.
pub fn own_runtime_thread() {
    let list = 1 + NEXT_LIST.fetch_add(1, Ordering::Relaxed) % (LISTS - 1);
    LIST.with(|l| l.set(list));
}

impl Connections {
    /// Connections to the instances at `authorities` (`host:port`); none is opened yet.
    pub fn new(authorities: &[String]) -> Result<Connections, hyper::header::InvalidHeaderValue> {
        let instances = authorities
            .iter()
            .map(|a| {
                Ok(Instance {
                    authority: a.clone(),
                    host: HeaderValue::from_str(a)?,
                    idle: (0..LISTS).map(|_| Mutex::default()).collect(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Connections { instances })
    }

    /// Sends `request` (origin-form URI, no `Host`: it is added here) to instance `n % K`
    /// and reads the whole answer.
    pub async fn send(
        &self,
        n: usize,
        request: &Request<Body>,
    ) -> Result<(StatusCode, Bytes), Error> {
        self.exchange(n, |host, out| wire::encode(request, host, out))
            .await
    }

    /// Sends a request written once ([`wire::Prepared`]) to instance `n % K` and reads the
    /// whole answer.
    pub async fn send_prepared(
        &self,
        n: usize,
        request: &wire::Prepared,
    ) -> Result<(StatusCode, Bytes), Error> {
        self.exchange(n, |host, out| request.write(host, out)).await
    }

    /// Writes a request with `write` (given the instance's `Host`) on a connection to
    /// instance `n % K` and reads its answer.
    async fn exchange(
        &self,
        n: usize,
        write: impl FnOnce(&HeaderValue, &mut Vec<u8>),
    ) -> Result<(StatusCode, Bytes), Error> {
        let instance = &self.instances[n % self.instances.len()];
        let (mut conn, reused) = loop {
            match instance.take() {
                Some(conn) if conn.closed_while_idle() => continue,
                Some(conn) => break (conn, true),
                None => break (Conn::open(&instance.authority).await?, false),
            }
        };
        conn.out.clear();
        write(&instance.host, &mut conn.out);
        let answer = match conn.round_trip().await {
            Err(e) if reused && conn.read.is_empty() && closed_on_arrival(&e) => {
                // The server closed the idle connection as the request crossed it.
                let out = std::mem::take(&mut conn.out);
                conn = Conn::open(&instance.authority).await?;
                conn.out = out;
                conn.round_trip().await
            }
            answer => answer,
        };
        let (status, body, keep) = answer?;
        if keep {
            instance.put(conn);
        }
        Ok((status, body))
    }

    /// Idle connections kept for instance `n % K` (for tests).
    pub fn idle(&self, n: usize) -> usize {
        let instance = &self.instances[n % self.instances.len()];
        (instance.idle.iter())
            .map(|list| list.lock().expect("idle list").len())
            .sum()
    }
}

/// Whether `e` is the server closing the connection (an end of stream, a reset, a broken
/// pipe), as opposed to an answer that could not be read.
fn closed_on_arrival(e: &Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    match e {
        Error::Closed => true,
        Error::Io(io) => matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted),
        _ => false,
    }
}

impl Instance {
    fn list(&self) -> &Mutex<Vec<Conn>> {
        &self.idle[LIST.with(Cell::get)]
    }

    fn take(&self) -> Option<Conn> {
        self.list().lock().expect("idle list").pop()
    }

    fn put(&self, conn: Conn) {
        self.list().lock().expect("idle list").push(conn);
    }
}

/// One HTTP/1.1 connection, with its buffers kept from one request to the next.
struct Conn {
    stream: TcpStream,
    /// The request being written.
    out: Vec<u8>,
    /// What was read and not yet taken as an answer.
    read: BytesMut,
}

/// Read buffer room made before each read.
const READ_ROOM: usize = 4096;

impl Conn {
    async fn open(authority: &str) -> Result<Conn, Error> {
        let connect = |source| Error::Connect {
            authority: authority.to_owned(),
            source,
        };
        let stream = TcpStream::connect(authority).await.map_err(connect)?;
        stream.set_nodelay(true).map_err(connect)?;
        Ok(Conn {
            stream,
            out: Vec::with_capacity(256),
            read: BytesMut::with_capacity(READ_ROOM),
        })
    }

    /// Whether the server closed (or wrote to) this connection while it was idle: a peek that
    /// does not wait. Anything but "nothing to read yet" makes it unusable.
    fn closed_while_idle(&self) -> bool {
        let mut byte = [0u8; 1];
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        !matches!(
            recv(self.stream.as_raw_fd(), &mut byte, flags),
            Err(Errno::EAGAIN)
        )
    }

    /// Writes the request in `out`, reads its whole answer: status, body, and whether the
    /// connection can carry another request.
    async fn round_trip(&mut self) -> Result<(StatusCode, Bytes, bool), Error> {
        self.stream.write_all(&self.out).await?;
        let head = loop {
            match wire::head(&self.read)? {
                Some(head) if head.status.is_informational() => {
                    let _ = wire::take(&mut self.read, head.len, 0);
                }
                Some(head) => break head,
                None => self.fill().await?,
            }
        };
        let body = match head.framing {
            Framing::Length(n) => {
                while self.read.len() < head.len + n {
                    self.fill().await?;
                }
                wire::take(&mut self.read, head.len, n)
            }
            Framing::Chunked => loop {
                let after_head = self.read.split_off(head.len);
                let found = wire::chunked(&after_head);
                self.read.unsplit(after_head);
                match found? {
                    Some((body, used)) => {
                        let _ = wire::take(&mut self.read, head.len + used, 0);
                        break body;
                    }
                    None => self.fill().await?,
                }
            },
            Framing::UntilClose => {
                while self.read_more().await? > 0 {}
                let n = self.read.len() - head.len;
                return Ok((head.status, wire::take(&mut self.read, head.len, n), false));
            }
        };
        Ok((head.status, body, !head.close))
    }

    /// Reads more of the answer; the server closing first is an error.
    async fn fill(&mut self) -> Result<(), Error> {
        match self.read_more().await? {
            0 => Err(Error::Closed),
            _ => Ok(()),
        }
    }

    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.read.reserve(READ_ROOM);
        self.stream.read_buf(&mut self.read).await
    }
}
