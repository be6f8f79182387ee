//! The load's HTTP/1.1 connections: plain keep-alive connections through hyper's
//! connection-level client, one request in flight on each, as `wrk` keeps them. Every request
//! the load sends — `GET /api/noop` and every strategy's order — goes through here, so the
//! ratio of a strategy to `http-noop` compares the server's work, not two clients.
//!
//! Why not `reqwest` (the admin calls still use it): the generator shares two cores with the
//! server, and every CPU-second it spends per request is taken from the server. Per request,
//! reqwest parses a URL, checks a connection out of its pool by scheme and authority, applies
//! a redirect policy and a timeout layer, and hands the request to a connection task and the
//! answer back; the committed run of 2026-11-23 measured it at 5× `wrk`'s CPU per
//! `GET /api/noop`. Here a request takes an idle connection of its instance from a stack (or
//! opens one), and the task that sends it drives the connection itself: no task hop, no pool
//! keyed by URL.
//!
//! Idle connections are kept per thread that runs a runtime of its own
//! ([`own_runtime_thread`]): a socket is registered with the reactor of the runtime that opened
//! it, so a load thread with a current-thread runtime reuses only the connections it opened,
//! and never waits on another runtime's reactor for their answers. Every other thread shares
//! one list.
//!
//! A reused connection that the server closed while it sat idle fails before the request is
//! written; hyper hands the request back, and it goes out again on another connection — it is
//! sent, and counted, once. A request that was written and got no answer is never resent: it
//! is a transport error, as a lost click is.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{Connection, SendRequest, handshake};
use hyper::header::{HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request's body: the whole of it, known before sending.
pub type Body = Full<Bytes>;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to {authority}: {source}")]
    Connect {
        authority: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Http(#[from] hyper::Error),
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
        mut request: Request<Body>,
    ) -> Result<(StatusCode, Bytes), Error> {
        let instance = &self.instances[n % self.instances.len()];
        request.headers_mut().insert(HOST, instance.host.clone());
        loop {
            let (mut conn, reused) = match instance.take() {
                Some(conn) => (conn, true),
                None => (Conn::open(&instance.authority).await?, false),
            };
            match conn.round_trip(request).await {
                Ok(answer) => {
                    instance.put(conn);
                    return Ok(answer);
                }
                // Never written: a reused connection the server had closed; send it again.
                Err(Failed::NotSent(unsent, _)) if reused => request = *unsent,
                Err(Failed::NotSent(_, e) | Failed::Sent(e)) => return Err(e.into()),
            }
        }
    }

    /// Idle connections kept for instance `n % K` (for tests).
    pub fn idle(&self, n: usize) -> usize {
        let instance = &self.instances[n % self.instances.len()];
        (instance.idle.iter())
            .map(|list| list.lock().expect("idle list").len())
            .sum()
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
        if conn.io.is_some() && !conn.sender.is_closed() {
            self.list().lock().expect("idle list").push(conn);
        }
    }
}

/// How a round trip failed: before the request was written (it is handed back), or after.
enum Failed {
    NotSent(Box<Request<Body>>, hyper::Error),
    Sent(hyper::Error),
}

/// One HTTP/1.1 connection: hyper's sender, and the connection future that does its I/O,
/// polled by whichever task is sending on it.
struct Conn {
    sender: SendRequest<Body>,
    /// `None` once the connection future has finished: dropping it fails whatever still
    /// waits on the connection (a request not yet written comes back).
    io: Option<Io>,
}

type Io = Pin<Box<Connection<TokioIo<TcpStream>, Body>>>;

impl Conn {
    async fn open(authority: &str) -> Result<Conn, Error> {
        let connect = |source| Error::Connect {
            authority: authority.to_owned(),
            source,
        };
        let stream = TcpStream::connect(authority).await.map_err(connect)?;
        stream.set_nodelay(true).map_err(connect)?;
        let (sender, io) = handshake(TokioIo::new(stream)).await?;
        Ok(Conn {
            sender,
            io: Some(Box::pin(io)),
        })
    }

    /// One request and its whole answer, the connection driven in this task throughout.
    async fn round_trip(&mut self, request: Request<Body>) -> Result<(StatusCode, Bytes), Failed> {
        let Conn { sender, io } = self;
        if let Err(e) = drive(io, poll_fn(|cx| sender.poll_ready(cx))).await {
            return Err(Failed::NotSent(Box::new(request), e));
        }
        let response = match drive(io, sender.try_send_request(request)).await {
            Ok(response) => response,
            Err(mut e) => {
                return Err(match e.take_message() {
                    Some(request) => Failed::NotSent(Box::new(request), e.into_error()),
                    None => Failed::Sent(e.into_error()),
                });
            }
        };
        let status = response.status();
        let body = drive(io, response.into_body().collect())
            .await
            .map_err(Failed::Sent)?;
        Ok((status, body.to_bytes()))
    }
}

/// Runs `work` to completion, polling the connection future `io` alongside so that its
/// reads and writes happen in this task; `io` is dropped once it has finished.
async fn drive<T>(io: &mut Option<Io>, work: impl Future<Output = T>) -> T {
    let mut work = pin!(work);
    poll_fn(|cx| {
        if let Some(conn) = io
            && conn.as_mut().poll(cx).is_ready()
        {
            *io = None;
        }
        work.as_mut().poll(cx)
    })
    .await
}
