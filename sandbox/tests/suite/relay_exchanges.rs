//! The relay counts the exchanges it carries — a client's request after its server's answer —
//! which is the number of round trips a distance multiplies: requests sent one after another
//! count one each, requests sent together before any answer count one together.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sandbox::{Delays, Relay};

/// A server that answers only once it holds `requests` four-byte requests, with all of them
/// at once: however the relay splits what a client sent, no answer comes between the parts.
fn answers_every(requests: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut held = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    held.extend_from_slice(&buf[..n]);
                    if held.len() >= 4 * requests {
                        if stream.write_all(&held).is_err() {
                            break;
                        }
                        held.clear();
                    }
                }
            });
        }
    });
    addr
}

fn ask(stream: &mut TcpStream, requests: usize) {
    stream.write_all(&b"ping".repeat(requests)).unwrap();
    let mut answer = vec![0u8; 4 * requests];
    stream.read_exact(&mut answer).unwrap();
}

#[test]
fn requests_sent_one_after_another_count_one_exchange_each() {
    for delays in [Delays::NONE, Delays::round_trip(Duration::from_millis(2))] {
        let relay = Relay::start_delayed(answers_every(1), delays).unwrap();
        let mut stream = TcpStream::connect(relay.addr()).unwrap();
        assert_eq!(relay.exchanges(), 0, "a connection that sent nothing");
        for _ in 0..10 {
            ask(&mut stream, 1);
        }
        assert_eq!(relay.exchanges(), 10, "{delays:?}");
        let mut second = TcpStream::connect(relay.addr()).unwrap();
        ask(&mut second, 1);
        assert_eq!(relay.exchanges(), 11, "counted over every connection");
    }
}

#[test]
fn requests_sent_together_before_an_answer_count_one_exchange() {
    let relay = Relay::start(answers_every(10)).unwrap();
    let mut stream = TcpStream::connect(relay.addr()).unwrap();
    ask(&mut stream, 10);
    assert_eq!(relay.exchanges(), 1);
    ask(&mut stream, 10);
    assert_eq!(relay.exchanges(), 2);
}

#[test]
fn a_relay_holds_thousands_of_connection_attempts_before_it_accepts_them() {
    // A benchmark opening its pool of hundreds at once must not find the port's queue full:
    // the attempts past it are dropped and retried a second later, past a client's connect
    // timeout. `ss` shows a listening socket's queue as its Send-Q.
    let relay = Relay::start(answers_every(1)).unwrap();
    let port = relay.addr().port();
    let out = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2), which `cargo xtask setup` installs");
    let text = String::from_utf8_lossy(&out.stdout);
    let queue: u32 = (text.split_whitespace().nth(2))
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("the relay's port in `ss`: {text}"));
    assert!(queue >= 1024, "the queue holds {queue}: {text}");
}
