//! A deadline for a request's body, counted from its headers. hyper bounds the time a client
//! takes to send its headers and nothing after them: a client that announces a body and sends
//! it a byte now and then — or never the last bytes — would hold its connection, its buffers
//! and a task for as long as it liked, and a few hundred such clients every file the process
//! may open. An idle timeout between frames (tower-http's `TimeoutBody`) does not stop it: a
//! byte every few seconds keeps it forever. This bounds the whole body.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::HttpBody;
use hyper::body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a body was not read: it had not all come by its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the body had not all come {0:?} after the headers")]
pub struct BodyTimedOut(pub Duration);

/// `body`, failing with [`BodyTimedOut`] once `within` has passed since it was wrapped (when
/// its headers were read) and it has not ended.
pub struct Deadline<B> {
    body: B,
    within: Duration,
    at: Instant,
    /// Started only once the body makes its reader wait: one that came with its headers, as a
    /// purchase's few dozen bytes do, costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> Deadline<B> {
    pub fn new(body: B, within: Duration) -> Deadline<B> {
        Deadline {
            body,
            within,
            at: Instant::now() + within,
            sleep: None,
        }
    }
}

impl<B> HttpBody for Deadline<B>
where
    B: HttpBody + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let at = this.at;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut(this.within).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::body::{Body, Bytes};
    use futures::StreamExt;

    #[tokio::test]
    async fn a_body_that_has_not_ended_by_its_deadline_fails_however_often_it_sends() {
        // A byte every 10 ms, for ever: no gap is long, the whole is.
        let trickle = futures::stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from("x")))
            .then(|byte| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                byte
            });
        let within = Duration::from_millis(100);
        let body = Body::new(Deadline::new(Body::from_stream(trickle), within));
        let read = axum::body::to_bytes(body, usize::MAX);
        let error = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("read for a minute")
            .expect_err("read whole");
        let timed_out =
            std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
                .any(|e| e.is::<BodyTimedOut>());
        assert!(timed_out, "{error}");
    }

    #[tokio::test]
    async fn a_body_that_came_with_its_headers_is_read_whole_whatever_the_deadline() {
        let body = Body::new(Deadline::new(Body::from("{}"), Duration::ZERO));
        let read = axum::body::to_bytes(body, usize::MAX).await.expect("read");
        assert_eq!(read, "{}");
    }
}
