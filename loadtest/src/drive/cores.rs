//! The HTTP load's threads: one current-thread runtime per core, each driving its own share of
//! the workers and its own connections, as `oha`'s fast path runs its load.
//!
//! Why not the process's multi-thread runtime: the generator shares the cores with the server,
//! and on a work-stealing runtime an answer that arrives on one worker thread often wakes its
//! task on another — a futex wake and a context switch per request, paid on the cores the
//! server needs. Here a worker's connection, its task and the reactor its socket is registered
//! with all live on one thread: an answer is read, counted and the next request written
//! without leaving it. Each thread keeps its connections apart from the other threads'
//! ([`testkit::own_runtime_thread`]), and its workers keep their tallies to themselves until
//! the end (no channel send, no counter shared between threads per request).
//!
//! The threads start on first use and live as long as the process, so the connections they
//! open stay valid from one load to the next.

use std::sync::OnceLock;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

/// A job for a load thread: makes the future the thread runs.
type Job = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// The load threads, one per core.
pub struct Cores {
    threads: Vec<mpsc::UnboundedSender<Job>>,
}

static CORES: OnceLock<Cores> = OnceLock::new();

/// The process's load threads (started on first use).
pub fn cores() -> &'static Cores {
    CORES.get_or_init(Cores::start)
}

impl Cores {
    fn start() -> Cores {
        let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let threads = (0..n)
            .map(|core| {
                let (jobs, inbox) = mpsc::unbounded_channel::<Job>();
                std::thread::Builder::new()
                    .name(format!("load-core-{core}"))
                    .spawn(move || serve(inbox))
                    .expect("starting a load thread");
                jobs
            })
            .collect();
        Cores { threads }
    }

    /// How many load threads there are.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Runs the future `make` makes on load thread `core % len`, and hands back its output.
    pub fn run<T: Send + 'static>(
        &self,
        core: usize,
        make: impl FnOnce() -> BoxFuture<'static, T> + Send + 'static,
    ) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let _ = tx.send(make().await);
            })
        });
        self.threads[core % self.threads.len()]
            .send(job)
            .expect("the load threads live as long as the process");
        rx
    }
}

/// A load thread: a current-thread runtime that runs every job it is sent as a task of its
/// own, so that two loads sent at once both go on.
fn serve(mut inbox: mpsc::UnboundedReceiver<Job>) {
    testkit::own_runtime_thread();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a load thread's runtime");
    runtime.block_on(async move {
        while let Some(job) = inbox.recv().await {
            tokio::spawn(job());
        }
    });
}
