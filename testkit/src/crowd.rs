//! The one crowd: many buyers click, then the answers are counted.
//!
//! Every sale that judges what its buyers were told — the benchmark's flash sale, the fault
//! scenarios' sales — sends its clicks through [`Crowd`]: B buyers, each a task of its own,
//! click (an order of one product through a strategy) until the crowd's clicks are spent,
//! retry what the [`Retry`] policy retries with the same request id, and record every
//! answer with when its click was sent and answered ([`Answers`]). What the sale really did
//! is read from the database afterwards (`app::accounting`); the answers are what the buyers
//! were told.
//!
//! ```no_run
//! # async fn sale(api: &testkit::Api) {
//! use app::api::Strategy;
//! use testkit::{Clicks, Crowd};
//! let answers = Crowd::new(50, Clicks::Total(300), Strategy::Conditional, "run-1")
//!     .run(api, 7)
//!     .await;
//! println!("{}", answers.outcomes()); // 201 ×100, sold_out ×200
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use app::api::{ErrorCode, OrderRequest, Strategy};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::answer::{Answer, Outcomes};
use crate::client::Api;

/// How many clicks a crowd makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clicks {
    /// This many in all: each buyer takes the next one as soon as its last was answered.
    Total(u64),
    /// Every buyer clicks this many times.
    Each(u64),
    /// Every buyer clicks until a buyer is told `sold_out`, or until `patience` has passed
    /// since the crowd began; after an answer that placed no order it waits `pause` first.
    UntilSoldOut { pause: Duration, patience: Duration },
}

/// Which instance a click goes to: the `key`-th of the crowd's instances, where the key is
/// the click's number in the crowd or its buyer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    ByClick,
    ByBuyer,
}

/// Answers a click retries with the same request id (the buyer clicks "buy" again on the same
/// order), how often and after what pause: `pause` plus up to `jitter` at random.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub when: fn(&Answer) -> bool,
    pub times: u32,
    pub pause: Duration,
    pub jitter: Duration,
}

impl Retry {
    /// Nothing is retried.
    pub const NEVER: Retry = Retry {
        when: |_| false,
        times: 0,
        pause: Duration::ZERO,
        jitter: Duration::ZERO,
    };

    /// Answers that say "try again": no answer, `busy`, `overloaded`, `backend_unavailable`.
    pub fn transient(answer: &Answer) -> bool {
        matches!(answer, Answer::Transport)
            || answer.refused_with(ErrorCode::Busy)
            || answer.refused_with(ErrorCode::Overloaded)
            || answer.refused_with(ErrorCode::BackendUnavailable)
    }
}

/// The user id of buyer `buyer` of a crowd whose users are named `prefix`
/// ([`Crowd::users`]; `u` by default).
pub fn user_id(prefix: &str, buyer: usize) -> String {
    format!("{prefix}-{buyer}")
}

/// One buyer of a crowd that arrives on a schedule ([`Crowd::arriving`]): who clicks, and
/// when (from the crowd's start). Several arrivals may share a user: a double click, or bots
/// behind one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub user: String,
    pub at: Duration,
}

/// One click as the crowd saw it: when it was first sent and finally answered (from the
/// crowd's start), how many tries it took, and the last answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Click {
    pub buyer: usize,
    pub request_id: String,
    pub sent: Duration,
    pub answered: Duration,
    pub tries: u32,
    pub answer: Answer,
}

/// Every click of a crowd, in the order they were answered per buyer, buyer after buyer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    pub clicks: Vec<Click>,
    /// From the crowd's start to its last answer.
    pub elapsed: Duration,
    /// From the crowd's start to the sale's opening, for a crowd that waited for it
    /// ([`Crowd::opening`]).
    pub opened: Option<Duration>,
}

impl Answers {
    /// How many clicks ended each way, every code apart.
    pub fn outcomes(&self) -> Outcomes {
        let mut outcomes = Outcomes::default();
        for click in &self.clicks {
            outcomes.count(&click.answer);
        }
        outcomes
    }

    /// Clicks whose answer matches.
    pub fn count(&self, matches: impl Fn(&Answer) -> bool) -> usize {
        self.clicks.iter().filter(|c| matches(&c.answer)).count()
    }

    /// Clicks that placed an order.
    pub fn created(&self) -> usize {
        self.count(Answer::created)
    }

    /// Clicks refused with `code`.
    pub fn refused(&self, code: ErrorCode) -> usize {
        self.count(|a| a.refused_with(code))
    }

    /// Each click's time from its first send to its last answer.
    pub fn latencies(&self) -> impl Iterator<Item = Duration> + '_ {
        self.clicks.iter().map(|c| c.answered - c.sent)
    }

    /// When the first click sent at or after `t` that placed an order was answered.
    pub fn first_placed_sent_after(&self, t: Duration) -> Option<Duration> {
        self.clicks
            .iter()
            .filter(|c| c.answer.created() && c.sent >= t)
            .map(|c| c.answered)
            .min()
    }
}

/// Told of every click as soon as it is answered (a live view of the sale): the same click
/// the crowd records, nothing measured apart.
#[derive(Clone)]
pub struct Watch(Arc<dyn Fn(&Click) + Send + Sync>);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

/// B buyers clicking through a strategy; see the module docs.
#[derive(Debug, Clone)]
pub struct Crowd {
    buyers: usize,
    clicks: Clicks,
    /// Each try picks one at random (one: always that one).
    strategies: Vec<Strategy>,
    quantity: i64,
    hold: Duration,
    spread: Spread,
    /// The instances the clicks go to (indices of the client's instances); empty: all.
    through: Vec<usize>,
    retry: Retry,
    /// Buyer `b` starts `b × stagger` after the first.
    stagger: Duration,
    /// When set, buyer `b` is `arrivals[b]`: its user, and when it clicks (once).
    arrivals: Option<Arc<[Arrival]>>,
    id_prefix: String,
    /// Users are `<users>-<buyer>`.
    users: String,
    watch: Option<Watch>,
    /// Each click is `GET /api/noop` instead of a purchase.
    noop: bool,
    /// Set: the sale opens when the crowd is told ([`Sale::open`]).
    opening: Option<Opening>,
}

/// Where a crowd that waits for the sale's opening divides: the first `ahead` arrivals are
/// sent on the crowd's clock, the others on the opening's, `at - opens_after` after it.
#[derive(Debug, Clone, Copy)]
struct Opening {
    ahead: usize,
    opens_after: Duration,
}

impl Crowd {
    /// `buyers` buyers making `clicks` clicks for one unit each through `strategy`, spread
    /// over every instance by click; request ids `<id_prefix>-<buyer>-<click of the buyer>`,
    /// users `u-<buyer>`.
    pub fn new(buyers: usize, clicks: Clicks, strategy: Strategy, id_prefix: &str) -> Crowd {
        Crowd {
            buyers: buyers.max(1),
            clicks,
            strategies: vec![strategy],
            quantity: 1,
            hold: Duration::ZERO,
            spread: Spread::ByClick,
            through: Vec::new(),
            retry: Retry::NEVER,
            stagger: Duration::ZERO,
            arrivals: None,
            id_prefix: id_prefix.to_owned(),
            users: "u".to_owned(),
            watch: None,
            noop: false,
            opening: None,
        }
    }

    /// A crowd that arrives on a schedule, as a flood does: one click per arrival, sent at its
    /// time whatever happened before (an open loop: a slow server does not slow the clicks),
    /// from its user. Buyer `b` is `arrivals[b]`.
    pub fn arriving(arrivals: Vec<Arrival>, strategy: Strategy, id_prefix: &str) -> Crowd {
        let mut crowd = Crowd::new(arrivals.len(), Clicks::Each(1), strategy, id_prefix);
        crowd.arrivals = Some(arrivals.into());
        crowd
    }

    /// A crowd arriving on a schedule whose sale opens when the crowd is told, not at a time:
    /// its first `ahead` arrivals (those that click before the opening) are sent on the crowd's
    /// clock; the others wait for [`Sale::open`] and are sent `at - opens_after` after the
    /// opening it names. So the clicks meant to reach the service before the sale opens do,
    /// however slow the machine: the sale is opened once [`Sale::ahead_answered`].
    pub fn opening(mut self, ahead: usize, opens_after: Duration) -> Crowd {
        self.opening = Some(Opening { ahead, opens_after });
        self
    }

    /// Users `<prefix>-<buyer>` instead of `u-<buyer>`: buyers apart from any other crowd's.
    pub fn users(mut self, prefix: &str) -> Crowd {
        self.users = prefix.to_owned();
        self
    }

    /// Each click asks `GET /api/noop` instead of buying, on the same schedule and through the
    /// same instances: the HTTP stack alone under the same crowd.
    pub fn asking_noop(mut self) -> Crowd {
        self.noop = true;
        self
    }

    /// Every try picks one of `strategies` at random.
    pub fn mixing(mut self, strategies: &[Strategy]) -> Crowd {
        if !strategies.is_empty() {
            self.strategies = strategies.to_vec();
        }
        self
    }

    /// Units per order.
    pub fn quantity(mut self, quantity: i64) -> Crowd {
        self.quantity = quantity;
        self
    }

    /// Every purchase pauses `hold` inside its critical section (the app must allow fault
    /// injection).
    pub fn holding(mut self, hold: Duration) -> Crowd {
        self.hold = hold;
        self
    }

    /// Clicks go to these instances only, spread as `spread` says.
    pub fn through(mut self, instances: &[usize], spread: Spread) -> Crowd {
        self.through = instances.to_vec();
        self.spread = spread;
        self
    }

    /// Spreads the clicks over every instance by buyer instead of by click.
    pub fn by_buyer(mut self) -> Crowd {
        self.spread = Spread::ByBuyer;
        self
    }

    pub fn retrying(mut self, retry: Retry) -> Crowd {
        self.retry = retry;
        self
    }

    /// Buyer `b` starts `b × stagger` after the first.
    pub fn staggered(mut self, stagger: Duration) -> Crowd {
        self.stagger = stagger;
        self
    }

    /// Calls `watch` with every click as soon as it is answered.
    pub fn watched(mut self, watch: impl Fn(&Click) + Send + Sync + 'static) -> Crowd {
        self.watch = Some(Watch(Arc::new(watch)));
        self
    }

    /// Runs the crowd against `product` through `api` and returns every answer.
    pub async fn run(self, api: &Api, product: u64) -> Answers {
        self.start(api, product).finish().await
    }

    /// Starts the crowd; the returned sale can be watched while it runs.
    pub fn start(self, api: &Api, product: u64) -> Sale {
        let ahead = self.opening.map_or(0, |o| o.ahead.min(self.buyers));
        let shared = Arc::new(Shared {
            ahead_left: watch::Sender::new(ahead),
            opened: watch::Sender::new(None),
            crowd: self,
            api: api.clone(),
            product,
            began: Instant::now(),
            next_click: AtomicU64::new(0),
            placed: AtomicUsize::new(0),
            sold_out: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        });
        let buyers = (0..shared.crowd.buyers)
            .map(|buyer| tokio::spawn(shared.clone().buyer(buyer)))
            .collect();
        Sale { shared, buyers }
    }
}

/// A crowd that is running.
pub struct Sale {
    shared: Arc<Shared>,
    buyers: Vec<JoinHandle<Vec<Click>>>,
}

impl Sale {
    /// Orders placed so far.
    pub fn placed(&self) -> usize {
        self.shared.placed.load(Ordering::Relaxed)
    }

    /// Whether a buyer has been told `sold_out`.
    pub fn sold_out(&self) -> bool {
        self.shared.sold_out.load(Ordering::Relaxed)
    }

    /// Since the crowd began.
    pub fn elapsed(&self) -> Duration {
        self.shared.began.elapsed()
    }

    /// Waits until every click sent ahead of the sale's opening has its last answer
    /// ([`Crowd::opening`]; at once for a crowd that does not wait for one).
    pub async fn ahead_answered(&self) {
        let mut left = self.shared.ahead_left.subscribe();
        // The sender lives as long as `self`.
        let _ = left.wait_for(|left| *left == 0).await;
    }

    /// Opens the sale at `at`: the arrivals that waited for it are sent on its clock.
    pub fn open(&self, at: Instant) {
        self.shared.opened.send_replace(Some(at));
    }

    /// Tells every buyer to click no more (a click under way is still answered), then waits
    /// for their last answers: a crowd that runs beside something else for as long as it does.
    pub async fn stop(self) -> Answers {
        self.shared.stopped.store(true, Ordering::Relaxed);
        // Buyers still waiting for the opening wake, and click no more: the sale never opened.
        let opened = self.shared.opened.borrow().is_some();
        self.shared.opened.send_modify(|at| {
            at.get_or_insert_with(Instant::now);
        });
        let answers = self.finish().await;
        Answers {
            opened: answers.opened.filter(|_| opened),
            ..answers
        }
    }

    /// Waits for every buyer's last answer.
    pub async fn finish(self) -> Answers {
        let mut clicks = Vec::new();
        for buyer in self.buyers {
            clicks.extend(buyer.await.expect("a buyer task panicked"));
        }
        let began = self.shared.began;
        let opened = *self.shared.opened.borrow();
        Answers {
            clicks,
            elapsed: began.elapsed(),
            opened: opened.map(|at| at.saturating_duration_since(began)),
        }
    }
}

struct Shared {
    crowd: Crowd,
    api: Api,
    product: u64,
    began: Instant,
    next_click: AtomicU64,
    placed: AtomicUsize,
    sold_out: AtomicBool,
    /// [`Sale::stop`] was called.
    stopped: AtomicBool,
    /// Buyers ahead of the opening whose clicks are not all answered yet.
    ahead_left: watch::Sender<usize>,
    /// When the sale opens, once the crowd is told ([`Sale::open`]).
    opened: watch::Sender<Option<Instant>>,
}

/// A buyer ahead of the opening, its clicks all answered when dropped.
struct Ahead<'a>(&'a watch::Sender<usize>);

impl Drop for Ahead<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|left| *left = left.saturating_sub(1));
    }
}

impl Shared {
    async fn buyer(self: Arc<Self>, buyer: usize) -> Vec<Click> {
        let crowd = &self.crowd;
        let ahead = crowd.opening.is_some_and(|o| buyer < o.ahead);
        // Counts this buyer's clicks answered when it ends, however it ends.
        let _ahead = ahead.then(|| Ahead(&self.ahead_left));
        match (&crowd.arrivals, crowd.opening) {
            (Some(arrivals), Some(o)) if !ahead => {
                let mut opened = self.opened.subscribe();
                let at = *opened
                    .wait_for(Option::is_some)
                    .await
                    .expect("held by self");
                if self.stopped.load(Ordering::Relaxed) {
                    return Vec::new();
                }
                let after = arrivals[buyer].at.saturating_sub(o.opens_after);
                tokio::time::sleep_until(at.expect("waited until set") + after).await
            }
            (Some(arrivals), _) => tokio::time::sleep_until(self.began + arrivals[buyer].at).await,
            (None, _) => {
                tokio::time::sleep(crowd.stagger * u32::try_from(buyer).unwrap_or(u32::MAX)).await
            }
        }
        let mut clicks = Vec::new();
        for mine in 0.. {
            let Some(number) = self.next(mine) else { break };
            let click = self.click(buyer, mine, number).await;
            if let Some(Watch(watch)) = &crowd.watch {
                watch(&click);
            }
            let answer = click.answer;
            clicks.push(click);
            if answer.created() {
                self.placed.fetch_add(1, Ordering::Relaxed);
            } else if answer.refused_with(ErrorCode::SoldOut) {
                self.sold_out.store(true, Ordering::Relaxed);
            } else if let Clicks::UntilSoldOut { pause, .. } = crowd.clicks {
                tokio::time::sleep(pause).await;
            }
        }
        clicks
    }

    /// The number (in the crowd) of this buyer's click `mine`, if the crowd makes it.
    fn next(&self, mine: u64) -> Option<u64> {
        if self.stopped.load(Ordering::Relaxed) {
            return None;
        }
        let going = match self.crowd.clicks {
            Clicks::Total(total) => {
                let n = self.next_click.fetch_add(1, Ordering::Relaxed);
                return (n < total).then_some(n);
            }
            Clicks::Each(each) => mine < each,
            Clicks::UntilSoldOut { patience, .. } => {
                !self.sold_out.load(Ordering::Relaxed) && self.began.elapsed() < patience
            }
        };
        going.then(|| self.next_click.fetch_add(1, Ordering::Relaxed))
    }

    /// One click, retried as the policy says.
    async fn click(&self, buyer: usize, mine: u64, number: u64) -> Click {
        let crowd = &self.crowd;
        let key = match crowd.spread {
            Spread::ByClick => number as usize,
            Spread::ByBuyer => buyer,
        };
        let instance = match crowd.through.as_slice() {
            [] => key,
            through => through[key % through.len()],
        };
        let request_id = format!("{}-{buyer}-{mine}", crowd.id_prefix);
        let user_id = match &crowd.arrivals {
            Some(arrivals) => arrivals[buyer].user.clone(),
            None => user_id(&crowd.users, buyer),
        };
        let sent = self.began.elapsed();
        let mut tries = 0;
        loop {
            tries += 1;
            let body = OrderRequest {
                user_id: Some(user_id.clone()),
                quantity: crowd.quantity,
                request_id: request_id.clone(),
                strategy: Some(crowd.strategies[rand::random_range(0..crowd.strategies.len())]),
                purchase_token: None,
            };
            let answer = match crowd.noop {
                true => self.api.noop(instance).await,
                false => {
                    (self.api)
                        .order_holding(instance, self.product, &body, crowd.hold)
                        .await
                }
            };
            let retry = &crowd.retry;
            if tries > retry.times || !(retry.when)(&answer) {
                return Click {
                    buyer,
                    request_id,
                    sent,
                    answered: self.began.elapsed(),
                    tries,
                    answer,
                };
            }
            let jitter = retry.jitter.mul_f64(rand::random::<f64>());
            tokio::time::sleep(retry.pause + jitter).await;
        }
    }
}
