//! HTTP/1.1 on the wire for the load's connections: a request written as bytes — a request
//! the load repeats (`GET /api/noop`, a late buyer's refused click) written once
//! ([`Prepared`]) —, an answer's head parsed by `httparse` (the parser hyper itself uses) and
//! its body cut out of the connection's read buffer, as `wrk` does in C.
//!
//! Why not hyper's client: per request it builds and validates a header map for the request
//! and another for the answer, and runs its dispatcher's state machine and a body stream, on
//! two cores shared with the server, where every CPU-second the client spends is the
//! server's loss. The load needs much less: one request in flight per keep-alive connection,
//! bodies known before sending, answers framed by `Content-Length` (every answer of the app)
//! or chunked. What it does not read (a malformed head, a close before the answer is whole) is
//! an error the caller counts, never a guess.

use std::io::Write as _;

use bytes::{Buf, Bytes, BytesMut};
use hyper::header::HeaderValue;
use hyper::{Request, StatusCode};

/// An answer's head fields the client acts on.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    pub status: StatusCode,
    /// Bytes of the head, up to and with the blank line.
    pub len: usize,
    pub framing: Framing,
    /// The server said it closes the connection after this answer.
    pub close: bool,
}

/// How the answer's body ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Framing {
    Length(usize),
    Chunked,
    /// No length given: the body runs until the server closes the connection.
    UntilClose,
}

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    #[error("unreadable answer head: {0}")]
    Head(#[from] httparse::Error),
    #[error("unreadable answer: {0}")]
    Field(&'static str),
}

/// Writes `request` (origin-form URI) with `host` to `out`, with a `Content-Length` whenever
/// it has a body or a method that carries one.
pub fn encode(request: &Request<Bytes>, host: &HeaderValue, out: &mut Vec<u8>) {
    up_to_host(request, out);
    out.extend_from_slice(host.as_bytes());
    after_host(request, out);
}

/// A request written once and sent many times, as `wrk` sends its script's: its bytes up to
/// the `Host` value and after it, so that a send to any instance copies three slices and builds
/// nothing — no header map, no length formatted.
#[derive(Debug, Clone)]
pub struct Prepared {
    up_to_host: Bytes,
    after_host: Bytes,
}

impl Prepared {
    pub fn of(request: &Request<Bytes>) -> Prepared {
        let (mut before, mut after) = (Vec::new(), Vec::new());
        up_to_host(request, &mut before);
        after_host(request, &mut after);
        Prepared {
            up_to_host: before.into(),
            after_host: after.into(),
        }
    }

    /// Writes the request with `host` to `out`, as [`encode`] would.
    pub fn write(&self, host: &HeaderValue, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.up_to_host);
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(&self.after_host);
    }
}

/// The request line and the `Host` header's name.
fn up_to_host(request: &Request<Bytes>, out: &mut Vec<u8>) {
    out.extend_from_slice(request.method().as_str().as_bytes());
    out.push(b' ');
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
}

/// The rest of the head after the `Host` value, and the body.
fn after_host(request: &Request<Bytes>, out: &mut Vec<u8>) {
    let body = request.body();
    out.extend_from_slice(b"\r\n");
    for (name, value) in request.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = matches!(request.method().as_str(), "GET" | "HEAD" | "DELETE");
    if !body.is_empty() || !bodiless {
        let _ = write!(out, "content-length: {}\r\n", body.len());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Parses the answer head at the start of `buf`: `None` while it is incomplete. Interim
/// (`1xx`) answers are for the caller to skip.
pub fn head(buf: &[u8]) -> Result<Option<Head>, Malformed> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut answer = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(len) = answer.parse(buf)? else {
        return Ok(None);
    };
    let code = answer.code.ok_or(Malformed::Field("no status"))?;
    let status = StatusCode::from_u16(code).map_err(|_| Malformed::Field("status"))?;
    let (mut length, mut chunked, mut close) = (None, false, answer.version == Some(0));
    for h in answer.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).map_err(|_| Malformed::Field("length"))?;
            length = Some(
                text.trim()
                    .parse()
                    .map_err(|_| Malformed::Field("length"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = h.value.eq_ignore_ascii_case(b"close");
        }
    }
    let framing = if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else if code / 100 == 1 || code == 204 || code == 304 {
        Framing::Length(0)
    } else {
        Framing::UntilClose
    };
    Ok(Some(Head {
        status,
        len,
        framing,
        close,
    }))
}

/// Cuts a chunked body out of the start of `buf` (just after the head): the body, and the
/// bytes it took, or `None` while incomplete. Trailers are skipped.
pub fn chunked(buf: &BytesMut) -> Result<Option<(Bytes, usize)>, Malformed> {
    let mut body = BytesMut::new();
    let mut at = 0;
    loop {
        let (start, size) = match httparse::parse_chunk_size(&buf[at..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(Malformed::Field("chunk size")),
        };
        let size = usize::try_from(size).map_err(|_| Malformed::Field("chunk size"))?;
        at += start;
        if size == 0 {
            // Trailers, if any, then the blank line.
            let rest = &buf[at..];
            let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                return Ok(None);
            };
            if end == 0 {
                return Ok(Some((body.freeze(), at + 2)));
            }
            let Some(blank) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
                return Ok(None);
            };
            return Ok(Some((body.freeze(), at + blank + 4)));
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size;
        if &buf[at..at + 2] != b"\r\n" {
            return Err(Malformed::Field("chunk end"));
        }
        at += 2;
    }
}

/// Takes `len` bytes off the front of `buf` as a body (no copy).
pub fn take(buf: &mut BytesMut, skip: usize, len: usize) -> Bytes {
    buf.advance(skip);
    buf.split_to(len).freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    /// A purchase's `POST` with a JSON body and its `Content-Type`.
    fn post() -> Request<Bytes> {
        let mut request = Request::new(Bytes::from_static(b"{\"a\":1}"));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = "/api/products/7/orders".parse().unwrap();
        request
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        request
    }

    #[test]
    fn a_post_is_written_with_its_host_headers_length_and_body() {
        let request = post();
        let mut out = Vec::new();
        encode(
            &request,
            &HeaderValue::from_static("127.0.0.1:80"),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /api/products/7/orders HTTP/1.1\r\nhost: 127.0.0.1:80\r\n\
             content-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
        );
    }

    #[test]
    fn a_prepared_request_is_written_to_any_host_as_encode_writes_it() {
        let request = post();
        let prepared = Prepared::of(&request);
        for host in ["127.0.0.1:80", "10.0.0.2:8081"] {
            let host = HeaderValue::from_static(host);
            let (mut encoded, mut written) = (Vec::new(), Vec::new());
            encode(&request, &host, &mut encoded);
            prepared.write(&host, &mut written);
            assert_eq!(written, encoded);
        }
    }

    #[test]
    fn a_get_without_body_is_written_without_a_length() {
        let mut request = Request::new(Bytes::new());
        *request.uri_mut() = "/api/noop".parse().unwrap();
        let mut out = Vec::new();
        encode(&request, &HeaderValue::from_static("h:1"), &mut out);
        assert_eq!(out, b"GET /api/noop HTTP/1.1\r\nhost: h:1\r\n\r\n");
    }

    #[test]
    fn an_answer_head_gives_its_status_length_and_whether_the_server_closes() {
        let answer = b"HTTP/1.1 409 Conflict\r\nContent-Length: 12\r\nConnection: close\r\n\r\n";
        let h = head(answer).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::CONFLICT);
        assert_eq!(h.len, answer.len());
        assert_eq!(h.framing, Framing::Length(12));
        assert!(h.close);
        assert_eq!(head(&answer[..20]).unwrap(), None, "incomplete");
        let no_content = head(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            (no_content.framing, no_content.close),
            (Framing::Length(0), false)
        );
        assert!(head(b"HTTP/1.1 2x0 OK\r\n\r\n").is_err());
    }

    #[test]
    fn a_chunked_body_is_joined_and_its_end_found_only_once_complete() {
        let whole = b"4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\nNEXT";
        let buf = BytesMut::from(&whole[..]);
        let (body, used) = chunked(&buf).unwrap().unwrap();
        assert_eq!(&body[..], b"abcdefg");
        assert_eq!(&whole[used..], b"NEXT");
        for cut in [2, 8, 15, 19] {
            assert!(
                chunked(&BytesMut::from(&whole[..cut])).unwrap().is_none(),
                "{cut}"
            );
        }
    }
}
