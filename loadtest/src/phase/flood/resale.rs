//! The sale's second act. A flood's winners hold reservations, not purchases: each pays at
//! once — or, for a share of them, never — and the unpaid orders expire at the product's
//! payment deadline, their units going back on sale. Buyers who were told `sold_out` come back
//! now and then, as people do who keep a tab open, and buy what returns. With
//! [`FloodShape::kill_mid_sale`] one app instance is SIGKILLed once the first unpaid order is
//! due, so that the expiry, the return and the resale go on through the other.
//!
//! What a shop whose stock is money watches: every unit ends paid or on the shelf and none
//! twice (`initial = left + reserved + paid + returning + pending`), how many units found a
//! second buyer, and how long until the sale truly ended — every unit paid.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use app::accounting::{Accounting, Ledger};
use app::api::{ErrorCode, Strategy};
use rand::{Rng, SeedableRng};
use testkit::{Answer, Answers, Api, Apps, Click, order_request};
use tokio::task::JoinSet;

use super::arrivals::Plan;
use super::schema::{FloodShape, Kind, Resale};
use crate::measure::cashier::{Cashier, Paid, Till, pay};

/// How often a returning buyer looks again, on average (each look 50–150% of it).
const LOOK_AGAIN: Duration = Duration::from_millis(500);
/// How often the act looks whether every order has ended, once no buyer looks any more.
const SETTLE_POLL: Duration = Duration::from_millis(100);
/// How long the watch for the returning units lasts beyond the payment window: the sweep's
/// round, and the grace after which another instance finishes a return a dead one left
/// half-way (the app's `--return-grace-ms`), with room to spare.
const WATCH_BEYOND_DEADLINE: Duration = Duration::from_secs(14);

/// How long `reconcile` is asked again while a charge is in flight: the app's default
/// reconcile grace (10 s), with room to spare.
const RECONCILE_PATIENCE: Duration = Duration::from_secs(15);

/// The second act of `product`'s flood, after its clicks: the winners' payments finished, the
/// returning buyers buy and pay what comes back, one instance killed when the first unpaid
/// order is due (when the shape says so, and `apps` has more than one). `opened` is the
/// sale's opening on this process's clock.
#[allow(clippy::too_many_arguments)]
pub async fn second_act(
    api: &Api,
    apps: &mut Apps,
    product: u64,
    shape: &FloodShape,
    drawn: &Plan,
    answers: &Answers,
    cashier: Cashier,
    opened: Instant,
    strategy: Strategy,
    id_prefix: &str,
) -> Result<Resale> {
    let mut till = cashier.close().await;
    let by_winners = till.paid;
    let units = shape.units.max(0) as u64;
    let paid = Arc::new(AtomicU64::new(till.paid));
    let ended = Arc::new(std::sync::Mutex::new(
        (till.paid >= units).then(|| opened.elapsed()),
    ));
    let returners = returning_buyers(drawn, answers, units as usize);
    let return_clicks = Arc::new(AtomicU64::new(0));
    let watch_until =
        Instant::now() + Duration::from_millis(shape.payment_window_ms) + WATCH_BEYOND_DEADLINE;
    let mut buyers = JoinSet::new();
    for (k, user) in returners.iter().enumerate() {
        let look = Look {
            api: api.clone(),
            product,
            user: user.clone(),
            prefix: format!("{id_prefix}-back-{k}"),
            paid: Arc::clone(&paid),
            ended: Arc::clone(&ended),
            clicks: Arc::clone(&return_clicks),
            units,
            opened,
            watch_until,
            first: k,
            strategy,
        };
        buyers.spawn(look.run());
    }
    let mut victim = (shape.kill_mid_sale && apps.instances.len() > 1).then_some(apps);
    let kill_at = till.first_due.filter(|_| victim.is_some());
    let mut killed_after = None;
    let mut bought_on_return = 0;
    let mut returners_paid = Till::default();
    // The act lasts while buyers look, and then until no order waits on its deadline and no
    // unit is on its way back (or the watch ends): a sale nobody came back to still expires.
    let mut buyers_done = false;
    loop {
        let kill = async {
            match kill_at {
                Some(at) if killed_after.is_none() => tokio::time::sleep_until(at.into()).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = kill => {
                if let Some(apps) = victim.as_deref_mut() {
                    apps.instances[0].kill()?;
                }
                killed_after = Some(opened.elapsed());
            }
            done = buyers.join_next(), if !buyers_done => match done {
                Some(Ok(Some(paid))) => {
                    bought_on_return += 1;
                    returners_paid.count(paid);
                }
                Some(_) => {}
                None => buyers_done = true,
            },
            () = tokio::time::sleep(SETTLE_POLL), if buyers_done => {
                let view = api.product(product).await?;
                let killed_or_never = killed_after.is_some() || kill_at.is_none();
                if (view.reserved == 0 && view.returning == 0 && killed_or_never)
                    || Instant::now() >= watch_until
                {
                    break;
                }
            }
        }
    }
    till.too_late += returners_paid.too_late;
    till.refused += returners_paid.refused;
    till.failed += returners_paid.failed;
    if killed_after.is_some()
        && let Some(apps) = victim
    {
        apps.restart_in_place(0).await?;
    }
    let released_after_kill = match killed_after.is_some() && strategy.home().in_redis() {
        true => release_what_the_kill_left(api, product).await?,
        false => 0,
    };
    let view = api.product(product).await?;
    let ledger = Ledger::of(view);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ended_after = *ended.lock().unwrap_or_else(|e| e.into_inner());
    Ok(Resale {
        won: till.won,
        never_paid: till.never_paid,
        paid_by_winners: by_winners,
        bought_on_return,
        paid_on_return: returners_paid.paid,
        payments_too_late: till.too_late,
        payments_refused: till.refused,
        payments_failed: till.failed,
        returners: returners.len() as u64,
        return_clicks: return_clicks.load(Ordering::Relaxed),
        ended_after_ms: ended_after.map(ms),
        killed_after_ms: killed_after.map(ms),
        released_after_kill,
        left: view.stock,
        reserved: view.reserved,
        paid: view.paid,
        returned: view.expired + view.cancelled,
        returning: view.returning,
        pending: view.pending,
        accounting: Accounting::of(ledger, drawn.people() as i64),
    })
}

/// What an operator does once a dead instance is back: `reconcile`, again until no charge is
/// left in flight. A purchase the kill caught between its Redis script and its order insert
/// holds a unit with no order (undersell); reconcile presumes it lost once it is older than
/// the app's grace (`--reconcile-grace-ms`), voids it and puts its unit back. How many such
/// purchases it released.
async fn release_what_the_kill_left(api: &Api, product: u64) -> Result<u64> {
    let mut released = 0;
    let patience = Instant::now() + RECONCILE_PATIENCE;
    loop {
        let found = api.reconcile(product).await?;
        released += found.released_requests;
        if found.in_flight == 0 || Instant::now() >= patience {
            return Ok(released);
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

/// Up to `most` buyers who were told `sold_out` on a regular click and won with none, in the
/// order they clicked.
fn returning_buyers(drawn: &Plan, answers: &Answers, most: usize) -> Vec<String> {
    let mut seen: HashSet<String> = (answers.clicks.iter())
        .filter(|c| c.answer.created())
        .map(|c| drawn.arrivals[c.buyer].user.clone())
        .collect();
    let mut clicks: Vec<&Click> = answers
        .clicks
        .iter()
        .filter(|c| drawn.kinds[c.buyer] == Kind::Regular && c.answer == Answer::SOLD_OUT)
        .collect();
    clicks.sort_by_key(|c| c.sent);
    clicks
        .into_iter()
        .map(|c| drawn.arrivals[c.buyer].user.clone())
        .filter(|user| seen.insert(user.clone()))
        .take(most)
        .collect()
}

/// One returning buyer: looks again now and then until they buy (and pay), every unit is
/// paid, or the watch ends.
struct Look {
    api: Api,
    product: u64,
    user: String,
    prefix: String,
    paid: Arc<AtomicU64>,
    ended: Arc<std::sync::Mutex<Option<Duration>>>,
    clicks: Arc<AtomicU64>,
    units: u64,
    opened: Instant,
    watch_until: Instant,
    first: usize,
    strategy: Strategy,
}

impl Look {
    /// How this buyer's payment ended, if they bought a unit.
    async fn run(self) -> Option<Paid> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.first as u64);
        let mut n = self.first;
        let mut tries = 0;
        // A click that got no answer (its instance killed under it) is sent again with its
        // request id, as a client that retries does: the service answers with the order it
        // placed, if it did, rather than leave it unpaid to expire while the buyer buys again.
        let mut unanswered: Option<String> = None;
        while Instant::now() < self.watch_until && self.paid.load(Ordering::Relaxed) < self.units {
            tokio::time::sleep(LOOK_AGAIN.mul_f64(rng.random_range(0.5..1.5))).await;
            n += 1;
            let request = unanswered.take().unwrap_or_else(|| {
                tries += 1;
                format!("{}-{tries}", self.prefix)
            });
            let body = order_request(self.user.clone(), self.strategy, request.clone(), 1);
            self.clicks.fetch_add(1, Ordering::Relaxed);
            match self.api.order(n, self.product, &body).await {
                answer if answer.created() => {}
                Answer::Replayed { .. } => {}
                Answer::Transport => {
                    unanswered = Some(request);
                    continue;
                }
                Answer::Refused {
                    code: ErrorCode::LimitReached,
                    ..
                } => return None,
                _ => continue,
            }
            let paid = pay(&self.api, n, self.product, &self.user, &request).await;
            if paid == Paid::Yes && self.paid.fetch_add(1, Ordering::Relaxed) + 1 == self.units {
                let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
                ended.get_or_insert(self.opened.elapsed());
            }
            return Some(paid);
        }
        None
    }
}
