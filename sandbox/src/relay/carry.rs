//! What a relay does with one accepted connection: learns where it comes from, dials the
//! server, and carries its bytes both ways — each chunk when its delay is due — until either
//! side closes it or the relay cuts it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::delay::{Jitter, Line};
use super::{Conn, Source, State, lock};

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
        if let (Ok(up), Ok(down)) = (upstream.try_clone(), client.try_clone()) {
            let (back, state_back) = (conn.clone(), state.clone());
            let downstream =
                std::thread::spawn(move || pump(&back, up, down, &[], Side::ToClient, &state_back));
            pump(&conn, client, upstream, &first, Side::ToServer, state);
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

/// Which way a pump carries bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    ToServer,
    ToClient,
}

/// Copies `from` to `to` (`first`, read before, ahead of the rest), each chunk delayed by the
/// relay's delay for `side`, until either side fails; drops the bytes once the connection is
/// silent. The chunks on their way when `from` ends are written before the connection is
/// closed. Counts an exchange when the client sends after its server answered.
fn pump(
    conn: &Arc<Conn>,
    mut from: TcpStream,
    to: TcpStream,
    first: &[u8],
    side: Side,
    state: &State,
) {
    let dial = match side {
        Side::ToServer => &state.delays.to_server,
        Side::ToClient => &state.delays.to_client,
    };
    let in_flight = &state.delays.in_flight;
    let mut out = Out::Direct(to);
    let mut jitter = Jitter::new();
    let mut carry = |chunk: &[u8]| {
        match side {
            Side::ToServer if conn.answered.swap(false, Ordering::Relaxed) => {
                state.exchanges.fetch_add(1, Ordering::Relaxed);
            }
            Side::ToServer => {}
            Side::ToClient => conn.answered.store(true, Ordering::Relaxed),
        }
        out.carry(chunk, dial.draw(&mut jitter), conn, in_flight)
    };
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
