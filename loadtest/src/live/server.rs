//! The live page's server (axum), on a thread and a runtime of its own so that a scenario held
//! by the teaching mode, or a load that keeps the run's workers busy, never keeps the page
//! from being answered: `GET /` is the page, `GET /events` the server-sent events (every
//! message so far, then each new one as the feed brings it), `POST /next` the teaching mode's
//! "Next".

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::{get, post};
use futures::Stream;
use tokio::sync::{broadcast, oneshot};

use super::board::{Board, Message};
use super::{Feed, Update};

/// A running page server; dropping it stops it.
pub struct Live {
    addr: SocketAddr,
    feed: Feed,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    feed: Feed,
    board: Mutex<Board>,
    /// `None` once the server closes: every stream ends after its last message.
    messages: Mutex<Option<broadcast::Sender<Message>>>,
}

impl Live {
    /// Serves the page of `feed` on `addr` (port 0: any free port); returns once it listens.
    pub fn start(addr: SocketAddr, feed: &Feed) -> Result<Live> {
        let mut updates = feed
            .subscribe()
            .context("the live page needs a feed that is on")?;
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("binding the live page to {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let shared = Arc::new(Shared {
            feed: feed.clone(),
            board: Mutex::new(Board::new(Instant::now())),
            messages: Mutex::new(Some(broadcast::channel(4096).0)),
        });
        let thread = std::thread::Builder::new()
            .name("live-page".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the live page");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let folding = shared.clone();
                    tokio::spawn(async move {
                        loop {
                            let update = updates.recv().await;
                            // The board stays locked until its messages are sent, so a page
                            // that connects meanwhile gets each message once: in the history
                            // it copies, or from its subscription.
                            let mut board = folding.board();
                            let out = match update {
                                Ok(Update::Closing) | Err(broadcast::error::RecvError::Closed) => {
                                    // Every page gets what was sent before, then its stream ends.
                                    folding.sender().take();
                                    return;
                                }
                                Ok(update) => board.apply(update, Instant::now()),
                                Err(broadcast::error::RecvError::Lagged(n)) => board.missed(n),
                            };
                            if let Some(sender) = folding.sender().as_ref() {
                                for m in out {
                                    let _ = sender.send(m);
                                }
                            }
                        }
                    });
                    let app = Router::new()
                        .route("/", get(page))
                        .route("/events", get(events))
                        .route("/next", post(next))
                        .with_state(shared);
                    let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    });
                    if let Err(e) = served.await {
                        tracing::warn!("the live page stopped: {e}");
                    }
                });
            })?;
        Ok(Live {
            addr,
            feed: feed.clone(),
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where the page is.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

/// Stops the server once every page was sent what the feed brought before: the pages' streams
/// end, and the server waits for them.
impl Drop for Live {
    fn drop(&mut self) {
        self.feed.send(Update::Closing);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sender(&self) -> std::sync::MutexGuard<'_, Option<broadcast::Sender<Message>>> {
        self.messages.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn page() -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Html(super::page::render()),
    )
}

/// Every message so far, then each new one. The board is locked while the history is copied
/// and the subscription made, so no message falls between the two.
async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (kept, receiver) = {
        let board = shared.board();
        let receiver = shared.sender().as_ref().map(broadcast::Sender::subscribe);
        (board.kept.clone(), receiver)
    };
    let replay = futures::stream::iter(kept);
    let live = futures::stream::unfold(receiver, |receiver| async move {
        let mut receiver = receiver?;
        loop {
            match receiver.recv().await {
                Ok(m) => return Some((m, Some(receiver))),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures::StreamExt;
    let stream = replay
        .chain(live)
        .map(|m| Ok(Event::default().event(m.event).data(m.data.to_string())));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The teaching mode's "Next"; `409` when the run is not in teaching mode.
async fn next(State(shared): State<Arc<Shared>>) -> StatusCode {
    match shared.feed.step() {
        Some(step) => {
            step.next();
            StatusCode::NO_CONTENT
        }
        None => StatusCode::CONFLICT,
    }
}

#[cfg(test)]
mod tests {
    use app::api::Strategy;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_page_gets_what_happened_before_it_connected_then_each_update_and_the_end() {
        let feed = Feed::new(false);
        let live = Live::start("127.0.0.1:0".parse().unwrap(), &feed).unwrap();
        feed.phase("conditional", "flash sale");
        let client = reqwest::Client::new();
        // The page comes with its policy.
        let page = client.get(live.url()).send().await.unwrap();
        assert!(page.status().is_success());
        assert!(page.text().await.unwrap().contains("default-src 'none'"));
        let mut events = client
            .get(format!("{}events", live.url()))
            .send()
            .await
            .unwrap();
        let first = String::from_utf8(events.chunk().await.unwrap().unwrap().to_vec()).unwrap();
        assert!(first.contains("event: phase"), "{first}");
        feed.send(Update::Sale {
            strategy: Strategy::Conditional,
            stock: 10,
            requests: 30,
        });
        feed.send(Update::Finished { report: None });
        let stopping = tokio::task::spawn_blocking(move || drop(live));
        let mut rest = String::new();
        while let Some(chunk) = events.chunk().await.unwrap() {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
        stopping.await.unwrap();
        let (sale, finished) = (rest.find("event: sale\n"), rest.find("event: finished"));
        assert!(sale.is_some() && sale < finished, "{rest}");
        assert!(!rest.contains("event: phase"), "sent once: {rest}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn next_is_refused_outside_the_teaching_mode_and_lets_a_step_go_on_in_it() {
        let plain = Feed::new(false);
        let live = Live::start("127.0.0.1:0".parse().unwrap(), &plain).unwrap();
        let client = reqwest::Client::new();
        let next = |url: String| client.post(format!("{url}next")).send();
        assert_eq!(next(live.url()).await.unwrap().status(), 409);
        drop(live);
        let teaching = Feed::new(true);
        let live = Live::start("127.0.0.1:0".parse().unwrap(), &teaching).unwrap();
        assert_eq!(next(live.url()).await.unwrap().status(), 204);
        // The permit "Next" gave lets the next event go on at once.
        let step = teaching.step().unwrap().clone();
        tokio::task::spawn_blocking(move || step.wait())
            .await
            .unwrap();
        drop(live);
    }
}
