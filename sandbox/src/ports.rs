//! Free loopback ports.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback port that nothing listens on now and that this process has not handed out before.
///
/// The kernel picks it (bind to port 0); the port is free again when this returns, so another
/// process could take it before the server binds. Within one process that race is ruled out by
/// never handing out the same port twice.
pub(crate) fn free_port() -> std::io::Result<u16> {
    let mut seen = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashSet::new);
    loop {
        let port = TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        if seen.insert(port) {
            return Ok(port);
        }
    }
}
