//! The threads every relay's connections are carried on: one event loop for the whole
//! process, woken by the kernel for every socket with bytes ready, many at a wake-up.
//!
//! A thread per connection and direction would cost each request a reading thread woken and
//! put back to sleep on each side: with hundreds of pooled connections, a relay's time goes to
//! scheduling. An event loop pays a read and a write per chunk and nothing per connection;
//! what is left is the kernel's, a relayed request crossing loopback TCP twice. (Delayed
//! chunks are still written by a thread of their own, [`super::delay::Line`]: it sleeps to the
//! microsecond, where the loop's timers tick in milliseconds.)

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

/// The loop's threads. One: every read and write on it is non-blocking (a full socket parks its
/// direction, not the loop), and one thread batches the most ready sockets per wake-up —
/// redis-benchmark's `EVALSHA` from 200 connections through a relay kept 55% of its direct
/// rate on one thread and 52% on two, medians of four interleaved rounds (41% through a
/// thread per connection and direction).
const THREADS: usize = 1;

/// The kernel's id of the loop's thread, once it has run.
static THREAD: OnceLock<u32> = OnceLock::new();

/// The kernel's id of the thread that carries every relay's bytes in this process, once a
/// relay has carried a connection: `/proc/self/task/<id>/stat` holds the CPU time carrying
/// them cost. (Not `/proc/<id>/stat`: for a thread that is its whole process's.)
pub fn thread_id() -> Option<u32> {
    THREAD.get().copied()
}

/// The loop, started the first time a relay carries a connection; it lives as long as the
/// process. (If it cannot start, no relay can carry anything: each connection is closed once
/// set up, as a relay that cannot reach its server closes it.)
pub(super) fn handle() -> std::io::Result<&'static Handle> {
    static LOOP: OnceLock<std::io::Result<Runtime>> = OnceLock::new();
    let started = LOOP.get_or_init(|| {
        let runtime = Builder::new_multi_thread()
            .worker_threads(THREADS)
            .thread_name("sandbox-relay")
            .enable_io()
            .build()?;
        // Tasks run on the loop's one worker: the first learns its id.
        runtime.spawn(async {
            let _ = THREAD.set(nix::unistd::gettid().as_raw().unsigned_abs());
        });
        Ok(runtime)
    });
    match started {
        Ok(runtime) => Ok(runtime.handle()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    }
}
