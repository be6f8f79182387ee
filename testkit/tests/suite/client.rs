//! The load's client over real sockets, against a hand-driven HTTP/1.1 server that decides
//! when a connection closes: keep-alive reuse, a connection the server dropped while idle, a
//! request written and never answered, and the answers the accounting reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use app::api::{ErrorCode, Strategy};
use testkit::{Answer, Api, order_request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

/// What the server does after reading a request.
#[derive(Clone, Copy)]
enum Then {
    /// Answers and keeps the connection open.
    Answer,
    /// Answers, then closes the connection (without saying so in the answer) when the test
    /// says so ([`Seen::close`]).
    AnswerAndClose,
    /// Closes the connection without answering.
    Hang,
}

/// Counts of what the server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
    /// Tells an [`Then::AnswerAndClose`] connection to close.
    close: Notify,
}

/// A server on a free port: `answer` is the raw status line, headers and body it sends; the
/// k-th request (from 0) on any connection gets `plan(k)`. Every connection it closes is
/// reported on the returned channel once closed.
async fn serve(
    answer: &'static str,
    plan: fn(usize) -> Then,
) -> (String, Arc<Seen>, mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let (closed_tx, closed_rx) = mpsc::unbounded_channel();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            s.connections.fetch_add(1, Ordering::SeqCst);
            let (s, closed) = (s.clone(), closed_tx.clone());
            tokio::spawn(async move {
                connection(socket, answer, plan, &s).await;
                let _ = closed.send(());
            });
        }
    });
    (base, seen, closed_rx)
}

async fn connection(mut socket: TcpStream, answer: &str, plan: fn(usize) -> Then, seen: &Seen) {
    let mut buf = Vec::new();
    loop {
        let Some(request_len) = read_request(&mut socket, &mut buf).await else {
            return;
        };
        buf.drain(..request_len);
        let k = seen.requests.fetch_add(1, Ordering::SeqCst);
        match plan(k) {
            Then::Answer => socket.write_all(answer.as_bytes()).await.unwrap(),
            Then::AnswerAndClose => {
                socket.write_all(answer.as_bytes()).await.unwrap();
                seen.close.notified().await;
                return;
            }
            Then::Hang => return,
        }
    }
}

/// Reads one whole request (head and `Content-Length` body) into `buf`; its length, or
/// `None` when the client closed.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
            let body_len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            let total = head_end + 4 + body_len;
            if buf.len() >= total {
                return Some(total);
            }
        }
        let mut chunk = [0u8; 4096];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

const NO_CONTENT: &str = "HTTP/1.1 204 No Content\r\n\r\n";

fn order(id: &str) -> app::api::OrderRequest {
    order_request("u-1".into(), Strategy::RedisLuaStream, id.into(), 1)
}

#[tokio::test]
async fn sequential_requests_reuse_one_keep_alive_connection() {
    let (base, seen, _) = serve(NO_CONTENT, |_| Then::Answer).await;
    let api = Api::new(vec![base], None).unwrap();
    for n in 0..20 {
        assert_eq!(api.noop(n).await, Answer::Served { status: 204 });
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 20);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    assert_eq!(api.idle_connections(0), 1);
}

#[tokio::test]
async fn a_keep_alive_connection_the_server_dropped_is_reopened_and_the_request_sent_once() {
    // The first request's connection is closed by the server after its answer, while the
    // client keeps it as idle; the second request finds it dead before writing.
    let (base, seen, mut closed) = serve(NO_CONTENT, |k| {
        if k == 0 {
            Then::AnswerAndClose
        } else {
            Then::Answer
        }
    })
    .await;
    let api = Api::new(vec![base], None).unwrap();
    assert_eq!(api.noop(0).await, Answer::Served { status: 204 });
    assert_eq!(api.idle_connections(0), 1, "kept for reuse");
    seen.close.notify_one();
    closed
        .recv()
        .await
        .expect("the server closed the first connection");

    assert_eq!(api.noop(0).await, Answer::Served { status: 204 });
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2, "each request once");
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(
        api.idle_connections(0),
        1,
        "only the live connection is kept"
    );
}

#[tokio::test]
async fn a_written_request_that_got_no_answer_is_a_transport_error_and_not_sent_again() {
    let (base, seen, _) = serve(NO_CONTENT, |_| Then::Hang).await;
    let api = Api::new(vec![base], None).unwrap();
    assert_eq!(api.order(0, 1, &order("r-1")).await, Answer::Transport);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1, "never resent");
    assert_eq!(api.idle_connections(0), 0);
}

#[tokio::test]
async fn an_instance_that_refuses_connections_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let api = Api::new(vec![base], None).unwrap();
    assert_eq!(api.noop(0).await, Answer::Transport);
}

#[tokio::test]
async fn a_202_with_the_order_status_counts_as_a_created_order() {
    let status = r#"{"request_id":"r-1","product_id":1,"user_id":"u-1","state":"pending"}"#;
    let accepted = format!(
        "HTTP/1.1 202 Accepted\r\nlocation: /api/products/1/orders/r-1?user_id=u-1\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{status}",
        status.len()
    );
    let accepted: &'static str = accepted.leak();
    let (base, _, _) = serve(accepted, |_| Then::Answer).await;
    let api = Api::new(vec![base], None).unwrap();
    assert_eq!(
        api.order(0, 1, &order("r-1")).await,
        Answer::Created {
            fencing_token: None
        }
    );
}

#[tokio::test]
async fn a_busy_refusal_is_counted_by_its_code_and_the_connection_kept() {
    const BUSY: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
        content-length: 33\r\n\r\n{\"error\":\"busy\",\"message\":\"busy\"}";
    let (base, seen, _) = serve(BUSY, |_| Then::Answer).await;
    let api = Api::new(vec![base], None).unwrap();
    for i in 0..3 {
        let answer = api.order(0, 1, &order(&format!("r-{i}"))).await;
        assert!(answer.refused_with(ErrorCode::Busy), "{answer:?}");
    }
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_that_says_the_server_closes_is_counted_and_its_connection_not_reused() {
    const CLOSING: &str = "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n";
    let (base, seen, _) = serve(CLOSING, |_| Then::Answer).await;
    let api = Api::new(vec![base], None).unwrap();
    for n in 0..3 {
        assert_eq!(api.noop(n).await, Answer::Served { status: 204 });
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
    assert_eq!(api.idle_connections(0), 0);
}

#[tokio::test]
async fn a_chunked_refusal_is_read_whole_and_the_connection_kept_for_the_next_request() {
    const CHUNKED: &str = "HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\n\
        transfer-encoding: chunked\r\n\r\n10\r\n{\"error\":\"sold_o\r\n\
        15\r\nut\",\"message\":\"gone\"}\r\n0\r\n\r\n";
    let (base, seen, _) = serve(CHUNKED, |_| Then::Answer).await;
    let api = Api::new(vec![base], None).unwrap();
    for i in 0..2 {
        let answer = api.order(0, 1, &order(&format!("r-{i}"))).await;
        assert_eq!(answer, Answer::SOLD_OUT);
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_reused_connection_closed_before_a_byte_of_answer_carries_the_request_again_on_a_new_one()
{
    // The server's idle timeout closing a kept connection as a request crosses it: browsers
    // send the request again on a new connection, and so does the load.
    let (base, seen, _) = serve(
        NO_CONTENT,
        |k| {
            if k == 1 { Then::Hang } else { Then::Answer }
        },
    )
    .await;
    let api = Api::new(vec![base], None).unwrap();
    assert_eq!(api.noop(0).await, Answer::Served { status: 204 });
    assert_eq!(api.noop(0).await, Answer::Served { status: 204 });
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    assert_eq!(api.idle_connections(0), 1);
}

#[tokio::test]
async fn a_request_dropped_again_on_its_new_connection_is_a_transport_error_and_sent_no_third_time()
{
    let (base, seen, _) = serve(
        NO_CONTENT,
        |k| {
            if k == 0 { Then::Answer } else { Then::Hang }
        },
    )
    .await;
    let api = Api::new(vec![base], None).unwrap();
    assert_eq!(api.noop(0).await, Answer::Served { status: 204 });
    assert_eq!(api.order(0, 1, &order("r-1")).await, Answer::Transport);
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        3,
        "sent twice, no more"
    );
    assert_eq!(api.idle_connections(0), 0);
}

#[tokio::test]
async fn an_admin_read_outlasts_a_service_closing_every_new_connection_while_a_crowd_holds_them() {
    // The service closes a new connection at once while every one it may hold is held — after
    // a flood, by the crowd's idle keep-alive connections, until its header-read deadline lets
    // them go. Here it closes the first `FULL` connections, more than three tries' worth.
    const FULL: usize = 6;
    const LIST: &str = r#"{"default":"conditional","strategies":[]}"#;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            if seen.fetch_add(1, Ordering::SeqCst) < FULL {
                drop(socket);
                continue;
            }
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(len) = read_request(&mut socket, &mut buf).await {
                    buf.drain(..len);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{LIST}",
                        LIST.len()
                    );
                    socket.write_all(answer.as_bytes()).await.unwrap();
                }
            });
        }
    });
    let api = Api::new(vec![base], None).unwrap();
    let strategies = api.strategies().await.expect("read once a door was free");
    assert!(strategies.is_empty());
    assert_eq!(connections.load(Ordering::SeqCst), FULL + 1);
}
