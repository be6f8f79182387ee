//! What a relay does with one accepted connection: learns where it comes from, dials the
//! server (on a thread of its own: both may take a while), then hands the two sockets to the
//! relays' event loop, which carries the bytes both ways — each chunk when its delay is due —
//! until either side closes the connection or the relay cuts it.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};

use super::delay::{Dial, Jitter, Line};
use super::{Conn, Source, State, lock, runtime};

/// Relays one accepted connection until either side closes it or it is cut.
pub(super) fn serve(
    state: &Arc<State>,
    client: TcpStream,
    relay: SocketAddr,
    from: Source,
    to: String,
) {
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
        answered: AtomicBool::new(true),
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
        if let Ok(handle) = runtime::handle() {
            let state = state.clone();
            handle.spawn(async move {
                carry_both(&conn, client, upstream, &first, &state).await;
                end(&state, &conn);
            });
            return;
        }
    }
    end(state, &conn);
}

/// Closes `conn` and forgets it.
fn end(state: &State, conn: &Arc<Conn>) {
    conn.close();
    lock(&state.inner).conns.retain(|c| !Arc::ptr_eq(c, conn));
}

/// Carries `conn`'s bytes both ways (`first`, read before, ahead of the client's rest) until
/// either side closes it or it is cut.
async fn carry_both(
    conn: &Arc<Conn>,
    client: TcpStream,
    upstream: TcpStream,
    first: &[u8],
    state: &State,
) {
    let (Ok(mut client), Ok(mut upstream)) = (on_the_loop(client), on_the_loop(upstream)) else {
        return;
    };
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = upstream.split();
    tokio::join!(
        pump(
            conn,
            client_read,
            server_write,
            first,
            Side::ToServer,
            state
        ),
        pump(conn, server_read, client_write, &[], Side::ToClient, state),
    );
}

/// `stream`, woken by the relays' event loop.
fn on_the_loop(stream: TcpStream) -> std::io::Result<tokio::net::TcpStream> {
    stream.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(stream)
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

/// Which way a pump carries bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    ToServer,
    ToClient,
}

/// Copies `from` to `to` (`first`, read before, ahead of the rest), each chunk delayed by the
/// relay's delay for `side`, until either side fails; drops the bytes once the connection is
/// silent. The chunks on their way when `from` ends are written before the connection is
/// closed.
async fn pump(
    conn: &Arc<Conn>,
    mut from: ReadHalf<'_>,
    to: WriteHalf<'_>,
    first: &[u8],
    side: Side,
    state: &State,
) {
    let dial = match side {
        Side::ToServer => &state.delays.to_server,
        Side::ToClient => &state.delays.to_client,
    };
    let mut carrier = Carrier {
        conn,
        state,
        side,
        dial,
        out: Out::Direct(to),
        jitter: Jitter::new(),
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut open = first.is_empty() || carrier.carry(first).await;
    while open {
        open = match from.read(&mut buf).await {
            Ok(0) | Err(_) => false,
            Ok(_) if conn.is_silent() => true,
            Ok(n) => carrier.carry(&buf[..n]).await,
        };
    }
    if let Out::Delayed(line) = carrier.out {
        let _ = tokio::task::spawn_blocking(move || line.finish()).await;
    }
    conn.close();
}

/// One direction of a connection: where its chunks go, and how late.
struct Carrier<'a> {
    conn: &'a Arc<Conn>,
    state: &'a State,
    side: Side,
    /// The delay of `side`.
    dial: &'a Dial,
    out: Out<'a>,
    jitter: Jitter,
}

impl Carrier<'_> {
    /// Passes `chunk` on, now or when its delay is due; false when the connection cannot
    /// carry it. Counts an exchange when the client sends after its server answered.
    async fn carry(&mut self, chunk: &[u8]) -> bool {
        match self.side {
            Side::ToServer if self.conn.answered.swap(false, Ordering::Relaxed) => {
                self.state.exchanges.fetch_add(1, Ordering::Relaxed);
            }
            Side::ToServer => {}
            Side::ToClient => self.conn.answered.store(true, Ordering::Relaxed),
        }
        let delay = self.dial.draw(&mut self.jitter);
        let in_flight = &self.state.delays.in_flight;
        self.out.carry(chunk, delay, self.conn, in_flight).await
    }
}

/// Where a pump writes: straight to its socket until a chunk is delayed, through a delay line
/// from then on (so that no chunk overtakes the ones on their way).
enum Out<'a> {
    Direct(WriteHalf<'a>),
    Delayed(Line),
}

impl Out<'_> {
    /// Writes `chunk`, just read, now, or queues it to be written `delay` from now; false
    /// when the connection cannot carry it.
    async fn carry(
        &mut self,
        chunk: &[u8],
        delay: Duration,
        conn: &Arc<Conn>,
        in_flight: &Arc<AtomicUsize>,
    ) -> bool {
        if let Out::Direct(to) = self
            && !delay.is_zero()
        {
            // The line's thread writes through a socket of its own on the same connection.
            let Ok(fd) = to.as_ref().as_fd().try_clone_to_owned() else {
                return false;
            };
            match Line::start(TcpStream::from(fd), conn.clone(), in_flight.clone()) {
                Ok(line) => *self = Out::Delayed(line),
                Err(_) => return false,
            }
        }
        match self {
            Out::Direct(to) => to.write_all(chunk).await.is_ok(),
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
