//! The relay with a delay: each direction delayed by its own one-way delay, set at start or
//! while connections are open; bytes intact and in order under jitter; many chunks on their
//! way at once rather than one delay after another. (Cut, silence, heal and move with a delay
//! set: with the relay's other tests.)
//!
//! Only lower bounds on time are asserted (a round trip through a delay of d each way takes at
//! least 2d, however loaded the machine); the rest are states.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandbox::{Delay, Delays, Relay, wait_for};

/// How long a state may take to come about on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A server that writes back what it reads, and tells `arrivals` when each read came.
fn echo(arrivals: Option<mpsc::Sender<Instant>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let arrivals = arrivals.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                loop {
                    let n = match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if let Some(arrivals) = &arrivals {
                        let _ = arrivals.send(Instant::now());
                    }
                    if stream.write_all(&buf[..n]).is_err() {
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
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// Sends `ping`; returns when it was sent, when it reached the server, and when its answer
/// came back.
fn timed_ask(stream: &mut TcpStream, arrivals: &mpsc::Receiver<Instant>) -> [Instant; 3] {
    let sent = Instant::now();
    stream.write_all(b"ping").unwrap();
    let mut answer = [0u8; 4];
    stream.read_exact(&mut answer).unwrap();
    let answered = Instant::now();
    let arrived = arrivals.recv().unwrap();
    // A request the server read in two parts told of two arrivals; the first one counts.
    while arrivals.try_recv().is_ok() {}
    [sent, arrived, answered]
}

#[test]
fn each_direction_is_delayed_by_its_own_delay_and_a_round_trip_by_both() {
    let (told, arrivals) = mpsc::channel();
    let relay = Relay::start(echo(Some(told))).unwrap();
    let mut stream = connect(&relay);
    let d = Duration::from_millis(40);
    // Each set while the connection is open: it applies from the next chunk.
    relay.set_delays(Delays {
        to_server: Delay::fixed(d),
        to_client: Delay::NONE,
    });
    let [sent, arrived, _] = timed_ask(&mut stream, &arrivals);
    assert!(arrived - sent >= d, "to the server in {:?}", arrived - sent);
    relay.set_delays(Delays {
        to_server: Delay::NONE,
        to_client: Delay::fixed(d),
    });
    let [_, arrived, answered] = timed_ask(&mut stream, &arrivals);
    assert!(answered - arrived >= d, "back in {:?}", answered - arrived);
    relay.set_delays(Delays::round_trip(2 * d));
    assert_eq!(relay.delays(), Delays::each_way(Delay::fixed(d)));
    for _ in 0..3 {
        let [sent, _, answered] = timed_ask(&mut stream, &arrivals);
        assert!(answered - sent >= 2 * d, "round trip {:?}", answered - sent);
    }
}

/// `len` bytes of a pattern that repeats rarely.
fn pattern(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Where `received` first differs from `sent`.
fn first_wrong(received: &[u8], sent: &[u8]) -> Option<usize> {
    received.iter().zip(sent).position(|(a, b)| a != b)
}

#[test]
fn a_delayed_relay_with_jitter_carries_every_byte_intact_and_in_order() {
    let delay = Delay::fixed(Duration::from_millis(2)).with_jitter(Duration::from_millis(5));
    let relay = Relay::start_delayed(echo(None), Delays::each_way(delay)).unwrap();
    let stream = connect(&relay);
    let sent = pattern(1_000_000);
    let (mut writer, bytes) = (stream.try_clone().unwrap(), sent.clone());
    let sending = std::thread::spawn(move || {
        // Writes of many sizes, so that the relay reads many chunks, each with its own jitter.
        let (mut at, mut size) = (0, 1);
        while at < bytes.len() {
            let end = (at + size).min(bytes.len());
            writer.write_all(&bytes[at..end]).unwrap();
            (at, size) = (end, size * 7 % 5_003 + 1);
        }
    });
    let mut received = vec![0u8; sent.len()];
    (&stream).read_exact(&mut received).unwrap();
    sending.join().unwrap();
    assert_eq!(
        first_wrong(&received, &sent),
        None,
        "the byte at this offset came back changed"
    );
}

#[test]
fn a_delayed_relay_waits_for_room_at_a_server_that_does_not_read_and_loses_no_byte() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let one_way = Delay::fixed(Duration::from_millis(1));
    let relay = Relay::start_delayed(server.local_addr().unwrap(), Delays::each_way(one_way));
    let relay = relay.unwrap();
    let mut stream = connect(&relay);
    let (mut server, _) = server.accept().unwrap();
    server.set_read_timeout(Some(PATIENCE)).unwrap();
    // Far more than the kernel holds for one connection: this returns once the relay has read
    // it all, while its writes to the server, which reads nothing yet, find no room.
    let sent = pattern(32 << 20);
    stream.write_all(&sent).unwrap();
    let mut received = vec![0u8; sent.len()];
    server.read_exact(&mut received).unwrap();
    assert_eq!(
        first_wrong(&received, &sent),
        None,
        "the byte at this offset arrived changed"
    );
}

#[test]
fn a_delay_holds_many_chunks_on_their_way_at_once_rather_than_one_after_another() {
    // So long that none arrives during the test: what is counted is a state, not a race.
    let far = Delay::fixed(Duration::from_secs(3_600));
    let relay = Relay::start_delayed(
        echo(None),
        Delays {
            to_server: far,
            to_client: Delay::NONE,
        },
    )
    .unwrap();
    let mut stream = connect(&relay);
    const CHUNKS: usize = 10;
    for k in 1..=CHUNKS {
        stream.write_all(&[k as u8; 100]).unwrap();
        // Each is read before the next is sent, so that the relay reads them apart. A relay
        // that held one chunk at a time would never read the second.
        let read = wait_for(PATIENCE, || (relay.in_flight() >= k).then_some(()));
        assert!(
            read.is_some(),
            "chunk {k} was never read while the ones before it waited: {} on their way",
            relay.in_flight()
        );
    }
    assert_eq!(relay.in_flight(), CHUNKS);
    // Cutting drops what is on its way, without waiting out the delay.
    relay.cut();
    let dropped = wait_for(PATIENCE, || (relay.in_flight() == 0).then_some(()));
    assert!(
        dropped.is_some(),
        "{} still on their way",
        relay.in_flight()
    );
}
