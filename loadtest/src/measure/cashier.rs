//! Buyers who pay what they bought, or never do: the flood's winners in its second act, and the
//! buyers of the expiry phase's loops. Each purchase is handed over as it is answered; a drawn
//! share of the buyers never pays (their orders fall due and expire), the others pay at once,
//! beside the purchases still going on, and each payment is counted by how it ended.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use app::api::ErrorCode;
use testkit::{Api, Click};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// How long a payment is tried again while it is answered `order_pending` (the order not
/// placed yet), a `503`, or nothing: longer than any payment window the benchmark sets, so a
/// payment given up is one the service could not take in time.
const PAY_PATIENCE: Duration = Duration::from_secs(10);
/// The pause before the first try again; it doubles up to [`LONGEST_PAUSE`]. A cashier that
/// asked every 20 ms was, at a few thousand purchases a second, a crowd of its own on the
/// service it waited for.
const FIRST_PAUSE: Duration = Duration::from_millis(25);
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// Whether `user` is one who never pays: a draw fixed by `seed`, as the flood's is.
pub fn never_pays(user: &str, seed: u64, share: f64) -> bool {
    let mut h = DefaultHasher::new();
    (seed, user).hash(&mut h);
    (h.finish() % 10_000) as f64 / 10_000.0 < share
}

/// Payments made as the purchases are answered: [`Cashier::bought`] (or, for a crowd's
/// clicks, [`Cashier::win`]) hands each one over.
pub struct Cashier {
    wins: mpsc::UnboundedSender<(String, String)>,
    till: tokio::task::JoinHandle<Till>,
}

/// What the payments came to.
#[derive(Debug, Default)]
pub struct Till {
    /// Purchases handed over.
    pub won: u64,
    /// Of them, those whose buyer never pays.
    pub never_paid: u64,
    pub paid: u64,
    /// Answered `order_expired`: the deadline passed before the payment arrived (its order
    /// expires as an unpaid one does).
    pub too_late: u64,
    /// Any other refusal: a payment the service should have taken.
    pub refused: u64,
    /// Not taken within the cashier's patience.
    pub failed: u64,
    /// The earliest moment an unpaid order falls due.
    pub first_due: Option<Instant>,
}

impl Cashier {
    /// Starts taking purchases of `product`, whose orders are due `window` after they are
    /// placed: a share `non_payers` of the buyers (drawn by `seed`) never pays, the others pay
    /// at once.
    pub fn open(api: &Api, product: u64, seed: u64, non_payers: f64, window: Duration) -> Cashier {
        let (wins, mut rx) = mpsc::unbounded_channel::<(String, String)>();
        let api = api.clone();
        let till = tokio::spawn(async move {
            let mut till = Till::default();
            let mut payments = JoinSet::new();
            while let Some((user, request)) = rx.recv().await {
                till.won += 1;
                if never_pays(&user, seed, non_payers) {
                    till.never_paid += 1;
                    till.first_due.get_or_insert(Instant::now() + window);
                    continue;
                }
                let api = api.clone();
                let n = till.won as usize;
                payments.spawn(async move { pay(&api, n, product, &user, &request).await });
            }
            for paid in payments.join_all().await {
                till.count(paid);
            }
            till
        });
        Cashier { wins, till }
    }

    /// Hands a click to the cashier: a win is paid (or not) at once.
    pub fn win(&self, click: &Click, user: &str) {
        if click.answer.created() {
            self.bought(user, &click.request_id);
        }
    }

    /// Hands over the order `user` placed with `request`: paid (or not) at once.
    pub fn bought(&self, user: &str, request: &str) {
        let _ = self.wins.send((user.to_owned(), request.to_owned()));
    }

    /// Takes no more purchases; waits for the payments under way and counts them.
    pub async fn close(self) -> Till {
        drop(self.wins);
        self.till.await.unwrap_or_default()
    }

    /// [`Cashier::close`] for a cashier shared with the load that handed it purchases, once
    /// that load has stopped and dropped its share.
    pub async fn close_shared(shared: Arc<Cashier>) -> anyhow::Result<Till> {
        let cashier = Arc::into_inner(shared).context("the load kept its cashier")?;
        Ok(cashier.close().await)
    }
}

impl Till {
    pub fn count(&mut self, paid: Paid) {
        match paid {
            Paid::Yes => self.paid += 1,
            Paid::TooLate => self.too_late += 1,
            Paid::Refused => self.refused += 1,
            Paid::Failed => self.failed += 1,
        }
    }
}

/// How a payment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paid {
    Yes,
    /// `order_expired`: the deadline passed before the payment arrived (a slow answer under
    /// load, not a fault of the books).
    TooLate,
    /// Any other refusal: a payment the service should have taken.
    Refused,
    /// Not taken within the cashier's patience.
    Failed,
}

/// Pays the buyer's order, again while it is not placed yet or the answer is lost, with
/// growing pauses, for as long as [`PAY_PATIENCE`].
pub async fn pay(api: &Api, n: usize, product: u64, user: &str, request: &str) -> Paid {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    for attempt in 0.. {
        if started.elapsed() >= PAY_PATIENCE {
            break;
        }
        match api.pay(n + attempt, product, user, request).await {
            Ok(Ok(_)) | Ok(Err(ErrorCode::OrderPaid)) => return Paid::Yes,
            Ok(Err(ErrorCode::OrderExpired)) => return Paid::TooLate,
            // Not placed yet, or a `503` (busy, the backend away, overloaded): again.
            Ok(Err(
                ErrorCode::OrderPending
                | ErrorCode::Busy
                | ErrorCode::BackendUnavailable
                | ErrorCode::Overloaded
                | ErrorCode::RateLimited,
            ))
            | Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            Ok(Err(code)) => {
                tracing::warn!(%user, %request, ?code, "a payment was refused");
                return Paid::Refused;
            }
        }
    }
    Paid::Failed
}
