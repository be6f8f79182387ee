//! The relay between a client and its server: it carries bytes both ways, cuts every
//! connection (and refuses new ones) until healed, goes silent without closing, and moves to
//! another server; each the same with a delay set as without.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sandbox::{Delays, Relay};

/// No delay, and one each way: every behaviour holds under both.
fn delays() -> [Delays; 2] {
    [Delays::NONE, Delays::round_trip(Duration::from_millis(20))]
}

/// A server that answers every read with `tag` followed by what it read.
fn echo(tag: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buf) {
                    // One write, so that one read of the client sees the whole answer.
                    let answer = [tag.as_bytes(), &buf[..n]].concat();
                    if n == 0 || stream.write_all(&answer).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn connect(relay: &Relay) -> TcpStream {
    let stream = TcpStream::connect(relay.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

/// Sends `ping` and reads the answer: `Ok(text)`, or the error kind when the connection was
/// closed (`UnexpectedEof`) or stayed silent (`WouldBlock`/`TimedOut`).
fn ask(stream: &mut TcpStream) -> Result<String, ErrorKind> {
    stream.write_all(b"ping").map_err(|e| e.kind())?;
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => Err(ErrorKind::UnexpectedEof),
        Ok(n) => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e) => Err(e.kind()),
    }
}

#[test]
fn a_cut_relay_closes_its_connections_and_each_new_one_until_it_is_healed() {
    for delays in delays() {
        let relay = Relay::start_delayed(echo("a:"), delays).unwrap();
        let mut before = connect(&relay);
        assert_eq!(ask(&mut before).as_deref(), Ok("a:ping"));
        relay.cut();
        assert!(ask(&mut before).is_err(), "the old connection was closed");
        let mut during = connect(&relay);
        assert!(ask(&mut during).is_err(), "a new one is closed at once");
        relay.heal();
        let mut after = connect(&relay);
        assert_eq!(ask(&mut after).as_deref(), Ok("a:ping"), "{delays:?}");
    }
}

#[test]
fn a_silenced_relay_keeps_its_connections_open_and_carries_nothing() {
    for delays in delays() {
        let relay = Relay::start_delayed(echo("a:"), delays).unwrap();
        let mut stream = connect(&relay);
        assert_eq!(ask(&mut stream).as_deref(), Ok("a:ping"));
        relay.silence();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let silent = ask(&mut stream);
        assert!(
            matches!(silent, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)),
            "{silent:?}: neither an answer nor a close ({delays:?})"
        );
        relay.heal();
        let mut again = connect(&relay);
        assert_eq!(ask(&mut again).as_deref(), Ok("a:ping"), "{delays:?}");
    }
}

#[test]
fn a_moved_relay_drops_its_connections_and_leads_new_ones_to_the_other_server() {
    for delays in delays() {
        let relay = Relay::start_delayed(echo("a:"), delays).unwrap();
        let mut old = connect(&relay);
        assert_eq!(ask(&mut old).as_deref(), Ok("a:ping"));
        relay.move_to(echo("b:"));
        assert!(ask(&mut old).is_err(), "the old connection was dropped");
        let mut new = connect(&relay);
        assert_eq!(ask(&mut new).as_deref(), Ok("b:ping"), "{delays:?}");
        assert_eq!(
            relay.delays(),
            delays,
            "the delay stays where the relay leads"
        );
    }
}

#[test]
fn the_thread_that_carried_the_bytes_is_named_and_its_cpu_time_readable() {
    let relay = Relay::start(echo("a:")).unwrap();
    assert_eq!(ask(&mut connect(&relay)), Ok("a:ping".into()));
    let id = sandbox::relay_thread_id().expect("the loop that carried them has told its id");
    let stat = std::fs::read_to_string(format!("/proc/self/task/{id}/stat")).unwrap();
    assert!(
        stat.contains("(sandbox-relay)"),
        "thread {id} is not the relays' loop: {stat}"
    );
}
