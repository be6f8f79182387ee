//! Waking waiters by pub/sub instead of polling, for the watchdog lock and the fair lock.
//!
//! Each client has ONE subscriber connection, subscribed to the channels of the keys it has
//! waiters for (subscribed when the first waiter for a key arrives, unsubscribed when the last
//! one leaves), and per key a FIFO of waiters. Two ways of waking, one per lock:
//!
//! * **The front** ([`Wakeups::released`], `redis-watchdog`): the unlock script publishes on
//!   `locks:released:<key>`, which every client waiting for the key hears. A message wakes only
//!   the waiter at the front of the client's queue: one retry per client per release, never a
//!   thundering herd of every waiter. The woken waiter stays at the front until it wins or
//!   leaves; if it leaves without winning (cancelled, out of budget), it passes the wake-up on
//!   to the next one. A release of the same client can do better than wake its own front: it
//!   hands the lock over to it ([`Wakeups::next_in_line`], [`Wakeups::hand_over`]; see
//!   `watchdog.rs`), and the waiter finds the grant on waking, without a request of its own.
//! * **By name** ([`Wakeups::turns`], `redis-fair`): Redis keeps the queue, and its scripts
//!   publish the name of the waiter whose turn it is on that waiter's client's own channel,
//!   `locks:turn:<client>:<key>`. Only that client hears it, and it wakes only that waiter.
//!
//! A message can be missed: the holder crashed and published nothing, the subscription was not
//! up yet, the subscriber connection dropped. So every waiter also re-checks when the current
//! holder's lease would end (the `PTTL` the lock script returned). After the subscriber
//! reconnects, it re-subscribes and wakes every queue's front (by name: every waiter), since
//! messages may have been lost in between.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool_redis::redis::aio::PubSubSink;
use futures::StreamExt;
use tokio::sync::{Notify, mpsc, watch};

use crate::redis::{Requests, Target};
use crate::{Guard, LockError};

/// Where the watchdog's unlock script announces a release, before the key.
const RELEASED_PREFIX: &str = "locks:released:";
/// Where the fair lock's scripts announce a turn, before `<client>:<key>`. The scripts in
/// `fair/scripts.rs` spell it too.
pub(super) const TURN_PREFIX: &str = "locks:turn:";

/// How long one SUBSCRIBE/UNSUBSCRIBE may take before the connection is considered dead.
const SINK_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts to (re)connect the subscriber.
const RECONNECT: Duration = Duration::from_millis(200);

/// The per-key queues of one client, and the line to its subscriber task.
pub(super) struct Wakeups {
    queues: Mutex<HashMap<String, Queue>>,
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicU64,
    /// The channel of key `k` is this prefix followed by `k`.
    prefix: String,
    /// Whether a message names the waiter to wake (the fair lock) or wakes the front.
    by_name: bool,
}

struct Queue {
    waiters: VecDeque<Arc<Waiter>>,
    /// Whether the key's channel is subscribed on the current subscriber connection.
    subscribed: watch::Sender<bool>,
}

struct Waiter {
    id: u64,
    /// The lock owner it waits as, when messages wake by name or a release hands over to it.
    name: Option<String>,
    /// The lease it asks for, when a release may hand the lock over to it.
    lease: Option<Duration>,
    /// What a release of this client handed over to it, until it wakes and takes it.
    handed: Mutex<Option<Handed>>,
    wake: Notify,
}

/// What a release hands to the next waiter of its client.
pub(super) enum Handed {
    /// The lock, granted to the waiter's owner name. Dropped untaken (the waiter left), the
    /// guard releases it.
    Granted(Guard),
    /// The release's answer was lost: the lock may have been granted to the waiter's name. The
    /// waiter claims it (or finds it is not its own) with its next attempt.
    InDoubt,
}

/// The waiter a release may hand the lock over to.
pub(super) struct Next {
    pub(super) id: u64,
    pub(super) owner: String,
    pub(super) lease: Duration,
}

enum Command {
    Subscribe(String),
    Unsubscribe(String),
}

impl Wakeups {
    /// Wake-ups by release messages, which wake the front of a key's queue; and the subscriber
    /// task to spawn (it runs until aborted).
    pub(super) fn released(
        target: Target,
        requests: Arc<Requests>,
    ) -> (Arc<Wakeups>, impl Future<Output = ()> + Send + 'static) {
        Self::new(target, requests, RELEASED_PREFIX.to_owned(), false)
    }

    /// Wake-ups by turn messages to the client named `client_id`, which wake the waiter they
    /// name; and the subscriber task to spawn (it runs until aborted).
    pub(super) fn turns(
        target: Target,
        requests: Arc<Requests>,
        client_id: &str,
    ) -> (Arc<Wakeups>, impl Future<Output = ()> + Send + 'static) {
        Self::new(target, requests, format!("{TURN_PREFIX}{client_id}:"), true)
    }

    fn new(
        target: Target,
        requests: Arc<Requests>,
        prefix: String,
        by_name: bool,
    ) -> (Arc<Wakeups>, impl Future<Output = ()> + Send + 'static) {
        let (commands, receiver) = mpsc::unbounded_channel();
        let wakeups = Arc::new(Wakeups {
            queues: Mutex::default(),
            commands,
            next_id: AtomicU64::new(0),
            prefix,
            by_name,
        });
        let task = Arc::clone(&wakeups).subscriber(target, receiver, requests);
        (wakeups, task)
    }

    /// The channel this client listens on for `key`.
    pub(super) fn channel(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Whether some local waiter already queues for `key` (a newcomer then queues behind it
    /// instead of barging in).
    pub(super) fn has_waiters(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    /// Waiters queued, over all keys.
    pub(super) fn len(&self) -> usize {
        self.lock().values().map(|q| q.waiters.len()).sum()
    }

    /// Joins `key`'s queue as the waiter a turn message names `name`.
    pub(super) fn enqueue_as(self: &Arc<Self>, key: &str, name: &str) -> Ticket {
        self.join(key, Some(name.to_owned()), None)
    }

    /// Joins the back of `key`'s queue (subscribing to its channel if this is the first waiter)
    /// as owner `name` asking for `lease`, to whom a release of this client may hand the lock
    /// over.
    pub(super) fn enqueue_handing(
        self: &Arc<Self>,
        key: &str,
        name: &str,
        lease: Duration,
    ) -> Ticket {
        self.join(key, Some(name.to_owned()), Some(lease))
    }

    fn join(self: &Arc<Self>, key: &str, name: Option<String>, lease: Option<Duration>) -> Ticket {
        let waiter = Arc::new(Waiter {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            name,
            lease,
            handed: Mutex::new(None),
            wake: Notify::new(),
        });
        let mut queues = self.lock();
        let queue = queues.entry(key.to_owned()).or_insert_with(|| {
            let _ = self.commands.send(Command::Subscribe(key.to_owned()));
            Queue {
                waiters: VecDeque::new(),
                subscribed: watch::channel(false).0,
            }
        });
        queue.waiters.push_back(Arc::clone(&waiter));
        Ticket {
            wakeups: Arc::clone(self),
            key: key.to_owned(),
            subscribed: queue.subscribed.subscribe(),
            waiter,
            granted: false,
        }
    }

    /// The first waiter for `key` that a release may hand the lock over to and that has not
    /// been handed anything yet.
    pub(super) fn next_in_line(&self, key: &str) -> Option<Next> {
        let queues = self.lock();
        queues.get(key)?.waiters.iter().find_map(|w| {
            let lease = w.lease?;
            let owner = w.name.clone()?;
            w.handed().is_none().then_some(Next {
                id: w.id,
                owner,
                lease,
            })
        })
    }

    /// Gives `handed` to waiter `id` of `key` and wakes it; gives it back if that waiter left.
    pub(super) fn hand_over(&self, key: &str, id: u64, handed: Handed) -> Result<(), Handed> {
        let queues = self.lock();
        let Some(waiter) = queues
            .get(key)
            .and_then(|q| q.waiters.iter().find(|w| w.id == id))
        else {
            return Err(handed);
        };
        *waiter.handed() = Some(handed);
        waiter.wake.notify_one();
        Ok(())
    }

    fn wake_front(queue: &Queue) {
        if let Some(front) = queue.waiters.front() {
            front.wake.notify_one();
        }
    }

    /// A message arrived for `key`: wakes the waiter it names, or the front.
    fn deliver(&self, key: &str, payload: &[u8]) {
        let queues = self.lock();
        let Some(queue) = queues.get(key) else {
            return;
        };
        if !self.by_name {
            Self::wake_front(queue);
        } else if let Some(named) =
            (queue.waiters.iter()).find(|w| w.name.as_deref().map(str::as_bytes) == Some(payload))
        {
            named.wake.notify_one();
        }
    }

    /// Messages may have been lost: wakes whoever a lost message could have been for.
    fn wake_all(&self) {
        for queue in self.lock().values() {
            if self.by_name {
                queue.waiters.iter().for_each(|w| w.wake.notify_one());
            } else {
                Self::wake_front(queue);
            }
        }
    }

    fn leave(&self, key: &str, id: u64, granted: bool) {
        let mut queues = self.lock();
        let Some(queue) = queues.get_mut(key) else {
            return;
        };
        let was_front = queue.waiters.front().is_some_and(|w| w.id == id);
        queue.waiters.retain(|w| w.id != id);
        if queue.waiters.is_empty() {
            queues.remove(key);
            let _ = self.commands.send(Command::Unsubscribe(key.to_owned()));
        } else if was_front && !granted && !self.by_name {
            // It may have been woken for a release it will not use: pass it on. (By name,
            // Redis passes the turn on: the leaving waiter tells it.)
            Self::wake_front(queue);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Queue>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn subscriber(
        self: Arc<Self>,
        target: Target,
        mut commands: mpsc::UnboundedReceiver<Command>,
        requests: Arc<Requests>,
    ) {
        loop {
            // Through Sentinel, each reconnection subscribes at the primary of the moment.
            let pubsub = match target.client().await {
                Ok(client) => client
                    .get_async_pubsub()
                    .await
                    .map_err(LockError::unavailable),
                Err(e) => Err(e),
            };
            match pubsub {
                Ok(pubsub) => {
                    let (mut sink, mut stream) = pubsub.split();
                    if self.resubscribe(&mut sink, &requests).await {
                        loop {
                            tokio::select! {
                                command = commands.recv() => {
                                    let Some(command) = command else { return };
                                    if !self.apply(command, &mut sink, &requests).await {
                                        break;
                                    }
                                }
                                message = stream.next() => {
                                    let Some(message) = message else { break };
                                    if let Some(key) = message.get_channel_name().strip_prefix(&self.prefix) {
                                        self.deliver(key, message.get_payload_bytes());
                                    }
                                }
                            }
                        }
                    }
                    tracing::warn!("watchdog: subscriber connection lost; reconnecting");
                    for queue in self.lock().values() {
                        queue.subscribed.send_replace(false);
                    }
                }
                Err(error) => tracing::warn!(%error, "watchdog: subscriber cannot connect"),
            }
            tokio::time::sleep(RECONNECT).await;
        }
    }

    /// On a fresh connection: subscribes every key with waiters and wakes whoever a message
    /// could have been for, since messages may have gone unheard. `false` if the connection
    /// failed.
    async fn resubscribe(&self, sink: &mut PubSubSink, requests: &Requests) -> bool {
        let keys: Vec<String> = self.lock().keys().cloned().collect();
        for key in keys {
            if !self.apply(Command::Subscribe(key), sink, requests).await {
                return false;
            }
        }
        self.wake_all();
        true
    }

    /// Runs one command on the subscriber connection; `false` if the connection failed.
    async fn apply(&self, command: Command, sink: &mut PubSubSink, requests: &Requests) -> bool {
        let outcome = match &command {
            Command::Subscribe(key) => {
                requests.add(1);
                tokio::time::timeout(SINK_TIMEOUT, sink.subscribe(self.channel(key))).await
            }
            // Waiters came back for the key since: keep the subscription.
            Command::Unsubscribe(key) if self.lock().contains_key(key) => return true,
            Command::Unsubscribe(key) => {
                requests.add(1);
                tokio::time::timeout(SINK_TIMEOUT, sink.unsubscribe(self.channel(key))).await
            }
        };
        match outcome {
            Ok(Ok(())) => {
                if let Command::Subscribe(key) = command
                    && let Some(queue) = self.lock().get(&key)
                {
                    queue.subscribed.send_replace(true);
                }
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "watchdog: subscriber command failed");
                false
            }
            Err(_) => false,
        }
    }
}

impl Waiter {
    fn handed(&self) -> MutexGuard<'_, Option<Handed>> {
        self.handed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A waiter's place in its key's queue. Dropping it leaves the queue (cancellation-safe); a
/// grant handed to it and not taken is released then.
pub(super) struct Ticket {
    wakeups: Arc<Wakeups>,
    key: String,
    waiter: Arc<Waiter>,
    subscribed: watch::Receiver<bool>,
    granted: bool,
}

impl Ticket {
    /// Resolves once the key's channel is subscribed (bound it with a timeout: it never
    /// resolves while the subscriber is disconnected).
    pub(super) async fn subscribed(&mut self) {
        if self.subscribed.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when a release wakes this waiter (or woke it while it was busy trying).
    pub(super) async fn woken(&self) {
        self.waiter.wake.notified().await;
    }

    /// What a release handed over to this waiter, if anything (see [`Handed`]).
    pub(super) fn take_handed(&self) -> Option<Handed> {
        self.waiter.handed().take()
    }

    /// Leaves the queue as the new holder: the next waiter is not woken (the lock is taken).
    pub(super) fn granted(mut self) {
        self.granted = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.wakeups.leave(&self.key, self.waiter.id, self.granted);
    }
}
