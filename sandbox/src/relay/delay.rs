//! What a relay adds to each direction of its connections: a one-way delay, as the network
//! between two machines adds it. (This kernel has no `netem` queueing discipline, so the delay
//! comes from user space, as Toxiproxy's latency toxic adds it.)
//!
//! A chunk read at t is written at t + d. The relays' event loop, which reads every direction,
//! stamps each chunk with the time it is due and queues it; a thread of the direction's own
//! writes each chunk when it is due.
//! So a delay adds latency and never caps throughput: while one chunk waits, the next ones are
//! read and queued behind it, many on their way at once as on a long wire. A connection's bytes
//! leave in the order they came: a chunk that jitter made due before the one ahead of it waits
//! for that one, as TCP delivers in order.
//!
//! At zero delay nothing of this runs: the event loop that read a chunk writes it itself, as a
//! relay without delay does, and pays two atomic loads per chunk to learn that the delay is still
//! zero. A delay set while a connection is open applies from its next chunk; from the first
//! chunk it delays on, the connection keeps its queue (a chunk written straight past the queue
//! would overtake the ones in it).
//!
//! What is not delayed: a connection's set-up (the client's connect returns at once and the
//! relay connects to the server at once), since the pools the app keeps open make it rare. A
//! delay is a lower bound: the writing thread wakes a few microseconds after a chunk is due.

use std::hash::{BuildHasher, RandomState};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Conn;

/// One direction's delay: `base`, plus up to `jitter` more, drawn afresh for every chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delay {
    pub base: Duration,
    pub jitter: Duration,
}

impl Delay {
    /// No delay: the relay copies bytes as they come.
    pub const NONE: Delay = Delay {
        base: Duration::ZERO,
        jitter: Duration::ZERO,
    };

    /// `base` for every chunk, no jitter.
    pub fn fixed(base: Duration) -> Delay {
        Delay {
            base,
            jitter: Duration::ZERO,
        }
    }

    /// This delay, each chunk's drawn up to `jitter` longer.
    pub fn with_jitter(self, jitter: Duration) -> Delay {
        Delay { jitter, ..self }
    }
}

/// What a relay adds to each direction of its connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    /// From the client to the server.
    pub to_server: Delay,
    /// From the server back to the client.
    pub to_client: Delay,
}

impl Delays {
    /// No delay either way.
    pub const NONE: Delays = Delays {
        to_server: Delay::NONE,
        to_client: Delay::NONE,
    };

    /// `one_way` in each direction.
    pub fn each_way(one_way: Delay) -> Delays {
        Delays {
            to_server: one_way,
            to_client: one_way,
        }
    }

    /// Half of `rtt` each way: a request and its answer take `rtt` more than without the
    /// relay.
    pub fn round_trip(rtt: Duration) -> Delays {
        Delays::each_way(Delay::fixed(rtt / 2))
    }
}

/// One direction's delay as the event loop reads it, chunk by chunk: atomics, so that
/// a relay without delay pays two loads per chunk and takes no lock. (Its base and jitter are
/// set one after the other: a chunk read in between gets the new base and the old jitter.)
#[derive(Default)]
pub(crate) struct Dial {
    base_ns: AtomicU64,
    jitter_ns: AtomicU64,
}

impl Dial {
    fn set(&self, delay: Delay) {
        self.base_ns.store(nanos(delay.base), Ordering::Relaxed);
        self.jitter_ns.store(nanos(delay.jitter), Ordering::Relaxed);
    }

    fn get(&self) -> Delay {
        Delay {
            base: Duration::from_nanos(self.base_ns.load(Ordering::Relaxed)),
            jitter: Duration::from_nanos(self.jitter_ns.load(Ordering::Relaxed)),
        }
    }

    /// The delay of the next chunk.
    pub(crate) fn draw(&self, jitter: &mut Jitter) -> Duration {
        let base = self.base_ns.load(Ordering::Relaxed);
        let spread = self.jitter_ns.load(Ordering::Relaxed);
        let extra = match spread {
            0 => 0,
            _ => jitter.below(spread.saturating_add(1)),
        };
        Duration::from_nanos(base.saturating_add(extra))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A set of relays' delays, one dial per direction, and the chunks they hold on their way.
#[derive(Default)]
pub(crate) struct Dials {
    pub(crate) to_server: Dial,
    pub(crate) to_client: Dial,
    /// Chunks read and not yet written, over every connection.
    pub(crate) in_flight: Arc<AtomicUsize>,
}

impl Dials {
    pub(crate) fn set(&self, delays: Delays) {
        self.to_server.set(delays.to_server);
        self.to_client.set(delays.to_client);
    }

    pub(crate) fn get(&self) -> Delays {
        Delays {
            to_server: self.to_server.get(),
            to_client: self.to_client.get(),
        }
    }
}

/// Draws jitter: splitmix64, seeded from the standard library's random hash keys. Spreading
/// delays needs no better randomness than that, nor a dependency.
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new() -> Jitter {
        Jitter(RandomState::new().hash_one(Instant::now()))
    }

    /// A number in `0..n` (`n` > 0); the modulo's bias is far below what a delay resolves.
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// One direction of a connection on its way: the chunks queued with the time each is due, and
/// the thread that writes them.
pub(crate) struct Line {
    queue: mpsc::Sender<(Instant, Vec<u8>)>,
    writer: JoinHandle<()>,
    in_flight: Arc<AtomicUsize>,
}

impl Line {
    /// Starts the writing thread: it writes each chunk to `to` when due, drops it instead once
    /// `conn` is silent or closed, and closes `conn` when a write fails (as a relay without
    /// delay does).
    pub(crate) fn start(
        to: TcpStream,
        conn: Arc<Conn>,
        in_flight: Arc<AtomicUsize>,
    ) -> std::io::Result<Line> {
        let (queue, chunks) = mpsc::channel::<(Instant, Vec<u8>)>();
        let counted = Arc::clone(&in_flight);
        let writer = std::thread::Builder::new()
            .name("sandbox-relay-delay".into())
            .spawn(move || write_when_due(to, &conn, &chunks, &counted))?;
        Ok(Line {
            queue,
            writer,
            in_flight,
        })
    }

    /// Queues `chunk`, due at `due`; false if the writing thread is gone.
    pub(crate) fn send(&self, due: Instant, chunk: &[u8]) -> bool {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let sent = self.queue.send((due, chunk.to_vec())).is_ok();
        if !sent {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    }

    /// Waits until every queued chunk is written (or dropped).
    pub(crate) fn finish(self) {
        drop(self.queue);
        let _ = self.writer.join();
    }
}

/// How long a writing thread sleeps at a time while a chunk is not due: a connection closed
/// meanwhile then frees its thread soon, not at the end of a long delay.
const NAP: Duration = Duration::from_millis(50);

fn write_when_due(
    to: TcpStream,
    conn: &Conn,
    chunks: &mpsc::Receiver<(Instant, Vec<u8>)>,
    in_flight: &AtomicUsize,
) {
    // The kernel wakes a sleeping thread up to its timer slack late (50 µs by default): a
    // tenth of a 0.5 ms round trip, each way. One nanosecond asks for the timer's own
    // precision. Where it cannot be set, delays are that much longer: still lower bounds.
    let _ = nix::sys::prctl::set_timerslack(1);
    for (due, chunk) in chunks {
        loop {
            let now = Instant::now();
            if now >= due || !conn.carries() {
                break;
            }
            std::thread::sleep((due - now).min(NAP));
        }
        if conn.carries() && write_all(&to, &chunk, conn).is_err() {
            conn.close();
        }
        in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes `chunk` to `to`, a socket the relays' event loop reads and so left non-blocking:
/// while the kernel has no room for it, waits for room a [`NAP`] at a time. The rest is
/// dropped once `conn` no longer carries bytes (silent or closed).
fn write_all(mut to: &TcpStream, mut chunk: &[u8], conn: &Conn) -> std::io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::io::{ErrorKind, Write};
    use std::os::fd::AsFd;
    while !chunk.is_empty() && conn.carries() {
        match to.write(chunk) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => chunk = &chunk[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let mut room = [PollFd::new(to.as_fd(), PollFlags::POLLOUT)];
                let nap = PollTimeout::try_from(NAP).unwrap_or(PollTimeout::MAX);
                poll(&mut room, nap)?;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
