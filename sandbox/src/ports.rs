//! Free loopback ports, and connecting to a server's.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::lock;

/// A connection to `127.0.0.1:<port>` whose connect and reads give up after `timeout` (a
/// paused server never answers).
pub(crate) fn connect(port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)
        .map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    Ok(stream)
}

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback port that nothing listens on now and that this process has not handed out before.
///
/// The kernel picks it (bind to port 0); the port is free again when this returns, so another
/// process could take it before the server binds. Within one process that race is ruled out by
/// never handing out the same port twice.
pub(crate) fn free_port() -> std::io::Result<u16> {
    let mut seen = lock(&HANDED_OUT);
    let seen = seen.get_or_insert_with(HashSet::new);
    loop {
        let port = TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        if seen.insert(port) {
            return Ok(port);
        }
    }
}

/// Below Linux's default ephemeral range (32768–60999), where the kernel never picks ports for
/// outgoing connections or `bind(0)`.
const QUIET_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port outside the ephemeral range, for a port a cluster member binds late or
/// re-binds after a restart (a ZooKeeper member opens its quorum port only when it becomes
/// leader). An ephemeral port may meanwhile be taken by any outgoing connection on the machine;
/// this one by no process that picks its ports here: each holds, for as long as it lives, a
/// lock on a file named for every quiet port it picked ([`claimed_across_processes`]), so
/// another test process does not pick the port of a member that is down between a kill and
/// its restart, which would then find its port taken and could not start again.
pub(crate) fn quiet_port() -> std::io::Result<u16> {
    let mut seen = lock(&HANDED_OUT);
    let seen = seen.get_or_insert_with(HashSet::new);
    let span = u64::from(QUIET_PORTS.end - QUIET_PORTS.start);
    let mut state = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..1000 {
        // xorshift: cheap, and different in every process.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let port = QUIET_PORTS.start + (state % span) as u16;
        if !seen.contains(&port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
            && claimed_across_processes(port)?
        {
            seen.insert(port);
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        "no free port in 20000..32000",
    ))
}

/// The locks on the quiet ports this process picked, held until it exits (the kernel lets go
/// of a dead process's locks, so a crashed test leaves no port claimed).
static CLAIMS: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// The file whose lock claims quiet `port`.
fn claim_path(port: u16) -> PathBuf {
    std::env::temp_dir()
        .join("seckill-quiet-ports")
        .join(port.to_string())
}

/// Claims `port` for this process's lifetime among the processes that pick quiet ports:
/// `false` if another living one holds it.
fn claimed_across_processes(port: u16) -> std::io::Result<bool> {
    let path = claim_path(port);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => {
            lock(&CLAIMS).push(file);
            Ok(true)
        }
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_port_is_claimed_until_its_process_exits() {
        let port = quiet_port().expect("a quiet port");
        // Another open file description is what another process would hold.
        let other = File::open(claim_path(port)).expect("the claim's file");
        assert!(
            matches!(other.try_lock(), Err(TryLockError::WouldBlock)),
            "port {port} is claimed"
        );
    }
}
