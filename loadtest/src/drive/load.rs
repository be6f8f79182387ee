//! The one load driver: a closed and an open loop for any asynchronous operation, with exact
//! latencies. Every HTTP measurement drives the same [`testkit::Api`] through it, so a
//! difference between the two loops is the server's, never the clients'; the direct
//! baselines drive their backend calls through it the same way.
//!
//! **Closed loop**: U workers, each sending its next request as soon as the previous answer
//! arrives. Latency is measured from the actual send. A stalled server slows the *senders*
//! down, so a stall of length P costs at most U slow samples: the queue that would have built
//! up is never sent, hence never measured (coordinated omission).
//!
//! **Open loop**: request *i* is due at `start + i / rate`, whatever happened before. U
//! workers take the next due ticket, sleep until its time if it is in the future, send, and
//! record `answer time − due time`. When the server stalls, tickets fall behind schedule and
//! every one of them carries the time it waited in our queue, as a real user's click would
//! (the wrk2 method).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use app::api::ErrorCode;
use testkit::{Answer, Outcomes};
use tokio::time::Instant;

use crate::drive::latency::Latencies;
use crate::live::Feed;
use crate::schema::{LoadResult, Loop};

/// Timing of one measured run.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

impl Window {
    pub fn from_secs(warmup: f64, measure: f64) -> Window {
        Window {
            warmup: Duration::from_secs_f64(warmup),
            measure: Duration::from_secs_f64(measure),
        }
    }
}

/// What every worker hands back.
#[derive(Default)]
struct Tally {
    outcomes: Outcomes,
    latencies: Latencies,
}

fn merge(tallies: Vec<Tally>) -> Tally {
    let mut all = Tally::default();
    for t in tallies {
        all.outcomes.add(&t.outcomes);
        all.latencies.add(&t.latencies);
    }
    all
}

/// Runs `op(sequence number)` from `concurrency` workers back to back for the window, on the
/// load threads ([`crate::drive::cores`]): for loads through [`testkit::Api`], whose
/// connections each load thread opens for itself. Latency is measured from the actual send.
pub async fn closed_loop<F, Fut>(concurrency: usize, window: Window, op: F) -> LoadResult
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    closed_loop_feeding(concurrency, window, &Feed::off(), move |_, i| op(i)).await
}

/// [`closed_loop`], telling `feed` of every answer it counts, with the latency it records.
pub async fn closed_loop_feeding<F, Fut>(
    concurrency: usize,
    window: Window,
    feed: &Feed,
    op: F,
) -> LoadResult
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let shared = Arc::new(Closed::new(window, feed, op));
    let cores = crate::drive::cores::cores();
    let threads = cores.len().min(concurrency).max(1);
    let jobs: Vec<_> = (0..threads)
        .map(|core| {
            let shared = shared.clone();
            let seq = Sequence::new(core, threads);
            cores.run(core, move || {
                let workers = (core..concurrency).step_by(threads);
                let all = workers.map(move |worker| shared.clone().worker(worker, seq.clone()));
                Box::pin(async move { merge(futures::future::join_all(all).await) })
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(jobs.len());
    for job in jobs {
        tallies.push(job.await.expect("a load thread dropped its job"));
    }
    shared.result(concurrency, merge(tallies))
}

/// Runs `op(worker, sequence number)` from `concurrency` workers on the calling runtime: for
/// work on connections opened there (a database connection per worker, as the standard load
/// tools hold one), which belong to its reactor.
pub async fn closed_loop_by_worker<F, Fut>(concurrency: usize, window: Window, op: F) -> LoadResult
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let shared = Arc::new(Closed::new(window, &Feed::off(), op));
    let seq = Sequence::new(0, 1);
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| tokio::spawn(shared.clone().worker(worker, seq.clone())))
        .collect();
    let tally = merge(join_all(workers).await);
    shared.result(concurrency, tally)
}

/// Where a closed loop's workers take their requests' numbers: one count per load thread,
/// thread `t` of `n` numbering its requests `t`, `t + n`, `t + 2n`, … — every number used
/// once, and no count shared between two cores per request.
///
/// A request goes to instance `number % K` ([`testkit::Api`]), so with as many load threads
/// as instances (or a multiple) each thread talks to one instance only, over connections of
/// its own — one `wrk` thread per instance, as the `wrk` baseline runs, and as many
/// connections at each instance as `wrk` holds. Spread over every instance, each thread
/// would keep connections open to all of them and the app would see twice as many, each half
/// as busy, and more wake-ups per request.
#[derive(Clone)]
struct Sequence {
    count: Arc<AtomicU64>,
    thread: u64,
    threads: u64,
}

impl Sequence {
    fn new(thread: usize, threads: usize) -> Sequence {
        Sequence {
            count: Arc::default(),
            thread: thread as u64,
            threads: threads as u64,
        }
    }

    fn next(&self) -> u64 {
        self.count.fetch_add(1, Ordering::Relaxed) * self.threads + self.thread
    }
}

/// How long a closed loop's worker waits after the service turned it away at the door (`503
/// overloaded`, `429 rate_limited`) before its next request. A buyer told to come back later
/// does not click again the same instant: a loop that did would measure how fast the service
/// refuses, spending the machine's cores on it, instead of what it sells. Shorter than any
/// `Retry-After` the service gives, so the loop still offers more than the service takes.
pub const TURNED_AWAY_PAUSE: Duration = Duration::from_millis(100);

/// Whether the service turned the request away before any strategy saw it.
fn turned_away(answer: &Answer) -> bool {
    answer.refused_with(ErrorCode::Overloaded) || answer.refused_with(ErrorCode::RateLimited)
}

/// What the workers of one closed loop share: the operation and the window.
struct Closed<F> {
    op: F,
    measure_from: Instant,
    end: Instant,
    measure: Duration,
    feed: Feed,
}

impl<F, Fut> Closed<F>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    fn new(window: Window, feed: &Feed, op: F) -> Closed<F> {
        let measure_from = Instant::now() + window.warmup;
        Closed {
            op,
            measure_from,
            end: measure_from + window.measure,
            measure: window.measure,
            feed: feed.clone(),
        }
    }

    /// One worker: its next request as soon as its last was answered, until the window ends.
    async fn worker(self: Arc<Self>, worker: usize, seq: Sequence) -> Tally {
        let mut tally = Tally::default();
        loop {
            let sent = Instant::now();
            if sent >= self.end {
                return tally;
            }
            let i = seq.next();
            let outcome = (self.op)(worker, i).await;
            if sent >= self.measure_from {
                let latency = sent.elapsed();
                tally.outcomes.count(&outcome);
                tally.latencies.record(latency);
                self.feed.answer(&outcome, latency);
            }
            if turned_away(&outcome) {
                tokio::time::sleep(TURNED_AWAY_PAUSE).await;
            }
        }
    }

    fn result(&self, concurrency: usize, tally: Tally) -> LoadResult {
        tally.latencies.result(
            Loop::Closed,
            concurrency,
            self.measure.as_secs_f64(),
            tally.outcomes,
            0,
        )
    }
}

/// Sends `op` at `rate` per second from `concurrency` workers, latency from the due time.
/// Tickets still unsent when the hard stop (end of window + max(window, 5 s)) comes are
/// counted in `not_sent`.
pub async fn open_loop<F, Fut>(concurrency: usize, rate: f64, window: Window, op: F) -> LoadResult
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send,
{
    open_loop_feeding(concurrency, rate, window, &Feed::off(), op).await
}

/// [`open_loop`], telling `feed` of every answer it counts, with the latency it records.
pub async fn open_loop_feeding<F, Fut>(
    concurrency: usize,
    rate: f64,
    window: Window,
    feed: &Feed,
    op: F,
) -> LoadResult
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send,
{
    let op = Arc::new(op);
    let ticket = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let warmup_tickets = (window.warmup.as_secs_f64() * rate).ceil() as u64;
    let total_tickets = ((window.warmup + window.measure).as_secs_f64() * rate).floor() as u64;
    let hard_stop =
        start + window.warmup + window.measure + window.measure.max(Duration::from_secs(5));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (op, ticket, feed) = (op.clone(), ticket.clone(), feed.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut not_sent = 0u64;
                loop {
                    let i = ticket.fetch_add(1, Ordering::Relaxed);
                    if i >= total_tickets {
                        return (tally, not_sent);
                    }
                    let due = start + interval.mul_f64(i as f64);
                    if Instant::now() >= hard_stop {
                        not_sent += u64::from(i >= warmup_tickets);
                        continue;
                    }
                    tokio::time::sleep_until(due).await;
                    let outcome = op(i).await;
                    if i >= warmup_tickets {
                        let latency = due.elapsed();
                        tally.outcomes.count(&outcome);
                        tally.latencies.record(latency);
                        feed.answer(&outcome, latency);
                    }
                }
            })
        })
        .collect();
    let results = join_all(workers).await;
    let not_sent = results.iter().map(|(_, n)| n).sum();
    let tally = merge(results.into_iter().map(|(t, _)| t).collect());
    tally.latencies.result(
        Loop::Open { target_rate: rate },
        concurrency,
        window.measure.as_secs_f64(),
        tally.outcomes,
        not_sent,
    )
}

async fn join_all<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("load worker panicked"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_open_loop_sends_at_the_asked_rate_and_counts_no_warm_up_request() {
        let r = open_loop(4, 200.0, Window::from_secs(0.2, 0.5), |_| async {
            Answer::Created {
                fencing_token: None,
            }
        })
        .await;
        // 0.7 s × 200/s = 140 tickets, of which 40 fall in the warm-up.
        assert_eq!(r.outcomes.created, 100, "{:?}", r.outcomes);
        assert_eq!(r.not_sent, 0);
    }

    #[tokio::test]
    async fn a_fed_loop_tells_the_feed_every_answer_it_counts_and_no_warm_up_answer() {
        let feed = Feed::new(false);
        let mut updates = feed.subscribe().unwrap();
        let r = open_loop_feeding(4, 200.0, Window::from_secs(0.2, 0.5), &feed, |_| async {
            Answer::SOLD_OUT
        })
        .await;
        let mut told = 0;
        while let Ok(update) = updates.try_recv() {
            assert!(matches!(
                update,
                crate::live::Update::Answer {
                    answer: Answer::SOLD_OUT,
                    ..
                }
            ));
            told += 1;
        }
        assert_eq!(told, r.outcomes.total());
        assert_eq!(told, 100);
    }

    #[tokio::test]
    async fn the_closed_loop_counts_every_outcome_it_measured() {
        let r = closed_loop(3, Window::from_secs(0.05, 0.2), |i| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if i % 2 == 0 {
                Answer::Created {
                    fencing_token: None,
                }
            } else {
                Answer::SOLD_OUT
            }
        })
        .await;
        assert!(r.outcomes.total() > 0);
        assert_eq!(r.outcomes.total(), r.latency.count);
        assert_eq!(r.outcomes.errors(), 0);
    }

    #[tokio::test]
    async fn every_request_of_the_closed_loop_gets_a_number_of_its_own() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let r = closed_loop(5, Window::from_secs(0.0, 0.1), move |i| {
            s.lock().unwrap().push(i);
            async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Answer::Served { status: 204 }
            }
        })
        .await;
        let mut numbers = seen.lock().unwrap().clone();
        let sent = numbers.len();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), sent, "no number used twice");
        assert!(r.outcomes.total() > 0);
        assert!(r.outcomes.total() <= sent as u64);
    }

    #[test]
    fn a_load_threads_numbers_are_its_index_modulo_the_threads() {
        let seq = Sequence::new(1, 3);
        let numbers: Vec<u64> = (0..4).map(|_| seq.next()).collect();
        assert_eq!(numbers, [1, 4, 7, 10]);
        let other = Sequence::new(0, 3);
        assert_eq!(other.next(), 0);
    }

    #[tokio::test]
    async fn an_answered_noop_request_is_not_counted_as_a_sale() {
        let r = closed_loop(2, Window::from_secs(0.0, 0.1), |_| async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Answer::Served { status: 204 }
        })
        .await;
        assert_eq!(r.successes_per_sec, 0.0);
        assert!(r.outcomes.total() > 0);
        assert_eq!(r.outcomes.served, r.outcomes.total());
    }
}
