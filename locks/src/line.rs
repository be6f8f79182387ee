//! A line per lock name among the waiters of one client, so that only the first of them polls.
//!
//! A lock that is only polled keeps no queue: every waiter asks the backend on every interval,
//! and a release goes to whoever asks next. Under a crowd that costs twice: the backend answers
//! a poll per waiter per interval (for the database lock, two statements each, on the
//! connections the holder needs for its own work, so the holder slows as the crowd grows and
//! fewer are served the more wait), and the release goes to a lucky newcomer as often as to
//! someone who has waited seconds.
//!
//! The waiters of one client (one process, usually) need not ask the backend to know that they
//! are waiting for each other. So they stand in a local line per name — a fair (first come,
//! first served) mutex — and only the first polls. The backend then sees one poller per
//! process, and a process's buyers are served in the order they came. The line decides
//! nothing: the backend still grants the lock, so exclusion and fencing are as before, and a
//! waiter of another process competes with this process's first as it did.
//!
//! The first of the line leaves it when its lock is released — or when the library knows the
//! lock is lost (the lease passed): from then on the backend would let another holder in, and
//! the line must not keep this process's waiters from asking, or a stalled holder would block
//! its own process longer than the lease that everyone else obeys.
//!
//! **Turns between clients.** The next of a line asks the moment the lock is released, while
//! another process's first asks only when its pause ends: a line that is never empty keeps the
//! lock release after release, and the other process's buyers wait until it empties. Two app
//! instances sharing a polled lock under a crowd took it in turns of 300–500 ms, each
//! instance's buyers waiting through the other's whole turn. So a line that has kept the lock
//! for its share ([`SHARE`] courtesy pauses) makes its next waiter pause once, as a poller
//! would, before asking: another client's waiter asking then gets the lock. The pause is the
//! backend's shortest poll (half a millisecond for Redis; a share is 32 ms): alone, a line
//! leaves the lock idle about 1% of the time; beside another busy client, each gets the lock
//! within a few shares.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{OwnedMutexGuard, oneshot, watch};

use crate::polling::jittered;
use crate::{AcquireOptions, Acquiring, Guard, Held, LockError};

/// How many courtesy pauses long a line keeps the lock before its next waiter pauses once.
pub(crate) const SHARE: u32 = 64;

/// One line: a fair mutex, whose holder is the head and keeps the line's turn.
type Line = Arc<tokio::sync::Mutex<Turn>>;

/// The lines of one client, by lock name.
type Map = Arc<Mutex<HashMap<String, Line>>>;

/// Since when a line has kept the lock, handing it from one of its waiters to the next.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    kept_since: Option<Instant>,
}

impl Turn {
    fn kept_longer_than(&self, share: Duration) -> bool {
        self.kept_since
            .is_some_and(|since| since.elapsed() >= share)
    }
}

/// The lines of one client, by lock name; a name's line is forgotten when nobody is in it.
pub(crate) struct Lines {
    map: Map,
    /// The pause of a line's next waiter once the line has kept the lock for its share.
    courtesy: Duration,
}

impl Lines {
    /// Lines whose waiters pause `courtesy` (half to all of it) once their line has kept the
    /// lock for [`SHARE`] times as long: the backend's shortest poll.
    pub(crate) fn new(courtesy: Duration) -> Lines {
        Lines {
            map: Map::default(),
            courtesy,
        }
    }

    /// [`Lines::in_line`] within the whole acquire's budget ([`crate::options::budgeted`]).
    pub(crate) fn budgeted<'a, F, Fut>(
        &'a self,
        key: &'a str,
        options: AcquireOptions,
        acquire: F,
    ) -> Acquiring<'a>
    where
        F: FnOnce(Instant) -> Fut + Send + 'a,
        Fut: Future<Output = Result<Guard, LockError>> + Send + 'a,
    {
        crate::options::budgeted(key, options, self.in_line(key, options.wait, acquire))
    }

    /// Runs `acquire` — given when the waiter came, from which its wait budget and its age
    /// count — once this client's earlier waiters for `key` were served (for up to `wait`),
    /// after a courtesy pause if the line has kept the lock for its share; the guard it
    /// returns heads the line until released or lost.
    pub(crate) async fn in_line<F, Fut>(
        &self,
        key: &str,
        wait: Option<Duration>,
        acquire: F,
    ) -> Result<Guard, LockError>
    where
        F: FnOnce(Instant) -> Fut,
        Fut: Future<Output = Result<Guard, LockError>>,
    {
        let started = Instant::now();
        let mut place = self.join(key, wait).await?;
        let turn = place
            .turn
            .as_mut()
            .expect("a place that was joined has its turn");
        if wait.is_some() && turn.kept_longer_than(self.courtesy * SHARE) {
            turn.kept_since = None;
            tokio::time::sleep(jittered(self.courtesy)).await;
        }
        match acquire(started).await {
            Ok(guard) => {
                turn.kept_since.get_or_insert_with(Instant::now);
                Ok(guard.in_line(place))
            }
            Err(e) => {
                turn.kept_since = None;
                Err(e)
            }
        }
    }

    /// Waits for the head of `key`'s line, for up to `wait` (`None`: only if nobody is in it).
    async fn join(&self, key: &str, wait: Option<Duration>) -> Result<Place, LockError> {
        let started = Instant::now();
        let line = Arc::clone(
            self.map
                .lock()
                .expect("the lines' map is never poisoned: no code panics holding it")
                .entry(key.to_owned())
                .or_default(),
        );
        let turn = match wait {
            None => Arc::clone(&line).try_lock_owned().ok(),
            Some(wait) => tokio::time::timeout(wait, Arc::clone(&line).lock_owned())
                .await
                .ok(),
        };
        let place = Place {
            lines: Arc::clone(&self.map),
            key: key.to_owned(),
            line,
            turn,
        };
        if place.turn.is_none() {
            // Dropped on the way out: the line is forgotten if nobody else is in it.
            return Err(LockError::waited_since(key, started));
        }
        Ok(place)
    }
}

/// The head of a line: the others of this client wait until it is dropped.
pub(crate) struct Place {
    lines: Map,
    key: String,
    line: Line,
    /// `None` for a waiter that did not get to the head in time.
    turn: Option<OwnedMutexGuard<Turn>>,
}

impl Drop for Place {
    /// Lets the next in line go, and forgets the line if nobody else is in it or coming (each
    /// of them holds the line too).
    fn drop(&mut self) {
        self.turn = None;
        let mut lines = self
            .lines
            .lock()
            .expect("the lines' map is never poisoned: no code panics holding it");
        // The map's and this place's: nobody waits.
        if Arc::strong_count(&self.line) == 2 {
            lines.remove(&self.key);
        }
    }
}

/// A held lock whose holder heads its line: the line moves on when the lock is released, or
/// as soon as the library knows it is lost.
pub(crate) struct InLine {
    held: Box<dyn Held>,
    /// The holder's place, left by the release itself, or by the task watching for the loss.
    place: Arc<Mutex<Option<Place>>>,
    /// Dropped with this hold (released or not): the task watching for the loss ends.
    released: oneshot::Sender<()>,
}

impl InLine {
    pub(crate) fn new(
        held: Box<dyn Held>,
        place: Place,
        mut lost: watch::Receiver<bool>,
    ) -> InLine {
        let (released, gone) = oneshot::channel::<()>();
        let place = Arc::new(Mutex::new(Some(place)));
        let watched = Arc::clone(&place);
        tokio::spawn(async move {
            // A closed `lost` channel: the backend can no longer tell, and its lease clock
            // is gone; the line moves on rather than wait on what will never come.
            tokio::select! {
                _ = gone => {}
                _ = lost.wait_for(|lost| *lost) => {}
            }
            leave(&watched);
        });
        InLine {
            held,
            place,
            released,
        }
    }
}

impl Held for InLine {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        let InLine {
            held,
            place,
            released,
        } = *self;
        Box::pin(async move {
            let released_ours = held.release().await;
            // After the row is gone, the next in line finds the name free — and before this
            // returns, so that the holder's own next try finds the line free too.
            leave(&place);
            drop(released);
            released_ours
        })
    }
}

/// Leaves the line, if the place is still held.
fn leave(place: &Mutex<Option<Place>>) {
    let left = place
        .lock()
        .expect("a place's lock is never poisoned: nothing panics holding it")
        .take();
    drop(left);
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "product:1";
    const WAIT: Duration = Duration::from_secs(30);
    const COURTESY: Duration = Duration::from_millis(1);

    struct Nothing;

    impl Held for Nothing {
        fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
            Box::pin(async { Ok(true) })
        }
    }

    fn known(lines: &Lines) -> usize {
        lines.map.lock().unwrap().len()
    }

    #[tokio::test]
    async fn a_line_serves_its_waiters_in_the_order_they_came() {
        let lines = Arc::new(Lines::new(COURTESY));
        let first = lines.join(KEY, Some(WAIT)).await.unwrap();
        let (served, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for n in 0..5 {
            let (line, served) = (Arc::clone(&lines), served.clone());
            waiters.push(tokio::spawn(async move {
                let _place = line.join(KEY, Some(WAIT)).await.unwrap();
                served.send(n).unwrap();
            }));
            // Each stands in line before the next comes: the map, the head and its turn hold
            // the line, and each waiter twice (its place to be, and its wait).
            while Arc::strong_count(&lines.map.lock().unwrap()[KEY]) < 3 + 2 * (n + 1) {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        drop(served);
        let mut seen = Vec::new();
        while let Some(n) = order.recv().await {
            seen.push(n);
        }
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(known(&lines), 0, "an empty line is forgotten");
    }

    #[tokio::test]
    async fn a_line_that_kept_the_lock_for_its_share_makes_its_next_waiter_pause_before_asking() {
        let lines = Arc::new(Lines::new(COURTESY));
        let mut first = lines.join(KEY, Some(WAIT)).await.unwrap();
        first.turn.as_mut().unwrap().kept_since = Some(Instant::now() - COURTESY * SHARE);
        let asked = Arc::new(Mutex::new(None));
        let next = tokio::spawn({
            let (lines, asked) = (Arc::clone(&lines), Arc::clone(&asked));
            async move {
                let failed = lines
                    .in_line(KEY, Some(WAIT), |_| async move {
                        *asked.lock().unwrap() = Some(Instant::now());
                        Err(LockError::Timeout {
                            key: KEY.to_owned(),
                            waited: Duration::ZERO,
                        })
                    })
                    .await;
                assert!(failed.is_err());
            }
        });
        // The next stands in line: the map, the head and its turn, and the waiter twice.
        while Arc::strong_count(&lines.map.lock().unwrap()[KEY]) < 5 {
            tokio::task::yield_now().await;
        }
        let released = Instant::now();
        drop(first);
        next.await.unwrap();
        let asked = asked.lock().unwrap().expect("it asked");
        assert!(
            asked - released >= COURTESY / 2,
            "asked {:?} after the release",
            asked - released
        );
        assert_eq!(known(&lines), 0, "its failure ended the line");
    }

    #[tokio::test]
    async fn trying_once_behind_a_head_is_a_timeout_and_leaves_no_line_behind() {
        let lines = Lines::new(COURTESY);
        let head = lines.join(KEY, None).await.unwrap();
        let refused = lines.join(KEY, None).await;
        assert!(matches!(refused, Err(LockError::Timeout { .. })));
        drop(head);
        assert_eq!(known(&lines), 0);
        lines.join(KEY, None).await.expect("free again");
    }

    #[tokio::test]
    async fn a_released_holder_has_left_the_line_when_its_release_returns() {
        let lines = Lines::new(COURTESY);
        let (_lose, lost) = watch::channel(false);
        let held = InLine::new(
            Box::new(Nothing),
            lines.join(KEY, None).await.unwrap(),
            lost,
        );
        assert!(Box::new(held).release().await.unwrap());
        // No other task has run since (one thread, no pause): the line must be free already,
        // not once the runtime gets round to it — the holder's own next try comes at once.
        lines
            .join(KEY, None)
            .await
            .expect("the next try finds the line free");
        assert_eq!(known(&lines), 0);
    }

    #[tokio::test]
    async fn a_lost_lock_lets_the_line_move_before_its_release() {
        let lines = Lines::new(COURTESY);
        let (lose, lost) = watch::channel(false);
        let held = InLine::new(
            Box::new(Nothing),
            lines.join(KEY, None).await.unwrap(),
            lost,
        );
        assert!(
            lines.join(KEY, None).await.is_err(),
            "the holder heads the line"
        );
        lose.send(true).unwrap();
        let next = lines.join(KEY, Some(WAIT)).await;
        assert!(next.is_ok(), "the line moved once the lock was known lost");
        drop(next);
        assert!(Box::new(held).release().await.unwrap());
    }

    #[tokio::test]
    async fn a_release_lets_the_next_in_line_go() {
        let lines = Lines::new(COURTESY);
        let (_lose, lost) = watch::channel(false);
        let held = InLine::new(
            Box::new(Nothing),
            lines.join(KEY, None).await.unwrap(),
            lost,
        );
        assert!(lines.join(KEY, None).await.is_err());
        Box::new(held).release().await.unwrap();
        lines.join(KEY, Some(WAIT)).await.expect("the next goes");
    }
}
