//! One strategy's flood: a flash sale as it arrives — thousands of buyers within a second for
//! far fewer units, double clicks, bots — and what it did to the service.

use app::accounting::Accounting;
use app::api::Strategy;
use serde::{Deserialize, Serialize};
use testkit::Outcomes;

use crate::schema::{CpuUse, LatencySummary};

/// How a flood arrives (the same for every strategy of a run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloodShape {
    /// People who click (each once, a double-clicker twice).
    pub users: usize,
    /// Units on sale, one per customer.
    pub units: i64,
    /// All the regular clicks arrive within this many ms of the opening, uniformly.
    pub burst_ms: u64,
    /// Share of users who double-click (a second click 0–50 ms after the first).
    pub double_click_share: f64,
    /// Share of users that are bots behind one shared account, all firing at the opening.
    pub shared_account_bot_share: f64,
    /// Share of users that are bots firing this many ms before the opening.
    pub early_bot_share: f64,
    pub early_by_ms: u64,
    /// Each `503` is retried up to this many times, 1–4 s later (the spread the service's
    /// `Retry-After` asks for); 0: never.
    pub retries: u32,
    pub instances: usize,
    /// Share of the winners who never pay: their orders expire and the units go back on sale.
    #[serde(default)]
    pub non_payer_share: f64,
    /// The product's payment window in the flood, in ms.
    #[serde(default)]
    pub payment_window_ms: u64,
    /// Whether one app instance is SIGKILLed once the first unpaid order is due (the sale
    /// goes on through the other; the killed one is started again afterwards).
    #[serde(default)]
    pub kill_mid_sale: bool,
    /// Whether each strategy's flood is sent a second time, its product sold first come,
    /// first served ([`FloodResult::first_come`]).
    #[serde(default)]
    pub first_come: bool,
}

/// What one flood did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloodResult {
    /// What its clicks got (in `report.json`, among the flood's own fields).
    #[serde(flatten)]
    pub crowd: CrowdResult,
    /// Of the clicks: those of the bots firing before the opening and of the shared account.
    pub early_clicks: u64,
    pub shared_account_clicks: u64,
    /// Answers per 100 ms by kind, with the units the answers sold so far.
    pub timeline: Vec<FloodSlice>,
    /// After the clicks: payments, expiries, and the units bought again by returning buyers.
    #[serde(default)]
    pub resale: Option<Resale>,
    /// Once sold out: purchases refused per second beside `GET /api/noop` on the same
    /// instances, both in a closed loop of the same connections, interleaved. `None` when the
    /// flood did not sell out (the loop would time purchases, not refusals) or was not timed.
    pub after_sold_out: Option<RefusalRate>,
    /// The same crowd (arrivals, instances, client) asking `GET /api/noop` instead, right
    /// after this flood: what the HTTP stack alone takes to answer it.
    #[serde(default)]
    pub noop_flood: Option<NoopFlood>,
    /// The same crowd sent again against the same strategy and instances, right after the
    /// flood, the product sold first come, first served (each click given its place in one
    /// queue as it comes, across every instance; see `app::first_come`): what arrival order
    /// buys, and what it costs beside the random door's flood. No second act, no kill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_come: Option<CrowdResult>,
    /// CPU of every process over the flood; its successes are the clicks.
    pub cpu: Option<CpuUse>,
    /// Cores each process group would need at [`PROJECTED_CLICKS_PER_SECOND`], projected
    /// linearly from its CPU per click in this flood: a projection, not a measurement.
    pub projection: Vec<Projection>,
}

/// What one crowd's clicks got: the flood's, and the same crowd's sent again first come.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrowdResult {
    /// Clicks sent: regular, second clicks of double-clickers, and bots'.
    pub clicks: u64,
    /// What the buyers were told.
    pub outcomes: Outcomes,
    /// What the stock's home and the orders hold.
    pub accounting: Accounting,
    /// Units that buyers hold beyond the per-user limit, summed over buyers (from the orders).
    pub beyond_limit: i64,
    /// From the opening to the answer that sold the last unit (`None`: not sold out).
    pub sold_out_after_ms: Option<f64>,
    /// From the opening to the last answer of any click.
    pub all_answered_after_ms: f64,
    /// Latency of the clicks that bought, and of those refused (any refusal), from the send.
    pub winners: LatencySummary,
    pub refused: LatencySummary,
    pub fairness: Fairness,
}

/// The click rate the projection is made for: the order of a record sale's peak.
pub const PROJECTED_CLICKS_PER_SECOND: f64 = 500_000.0;

/// Whether the first to click were the first served.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fairness {
    /// Of the first `units` regular clicks sent after the opening, the share that bought.
    pub first_clicks_won: f64,
    /// Spearman's rank correlation between how early a regular click was sent and whether it
    /// bought: 0 is a lottery; positive, the earlier the likelier.
    pub earliness_rank_correlation: Option<f64>,
    /// The correlation had the same number of regular clicks bought been the first ones sent:
    /// the most a yes-or-no outcome allows (`√(3p(1−p))` for a share p of winners, 0.38 when
    /// one click in twenty buys, never above 0.87), so that the correlation is read against
    /// it. `None` in runs that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainable_correlation: Option<f64>,
}

impl Fairness {
    /// The rank correlation as a share of the attainable: 1 is first come, first served.
    pub fn correlation_share(&self) -> Option<f64> {
        let (r, best) = (
            self.earliness_rank_correlation?,
            self.attainable_correlation?,
        );
        (best > 0.0).then(|| r / best)
    }
}

/// 100 ms of a flood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloodSlice {
    /// Start of the slice, ms from the opening (negative: before it).
    pub from_ms: i64,
    pub bought: u64,
    pub sold_out: u64,
    /// `limit_reached`, `sale_not_started`, `purchase_token_required`,
    /// `purchase_token_mismatch`, `purchase_token_expired`, `sale_ended`.
    pub rules: u64,
    /// `overloaded`, `rate_limited`, `busy`, `backend_unavailable`.
    pub shed: u64,
    /// No answer, an answer outside the contract, any other refusal.
    pub failed: u64,
    /// Units on sale by the answers so far (the stock minus what the answers sold).
    pub units_left: i64,
}

/// Cores a process group would need at the projected rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub group: String,
    pub cpu_ms_per_1000_clicks: f64,
    pub cores: f64,
}

impl FloodResult {
    /// The time until every click was answered over the no-op flood's, if one was timed.
    pub fn answered_over_noop(&self) -> Option<f64> {
        let noop = self.noop_flood?;
        (noop.all_answered_after_ms > 0.0)
            .then(|| self.crowd.all_answered_after_ms / noop.all_answered_after_ms)
    }

    /// Whether the stock's home had no unit left after the flood.
    pub fn sold_out(&self) -> bool {
        self.crowd.accounting.final_stock <= 0
    }
}

/// The flood's crowd asking `GET /api/noop`: same arrivals, same instances, same client.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NoopFlood {
    pub clicks: u64,
    /// Answered `2xx`; the rest had no answer or another one.
    pub served: u64,
    /// From the (nominal) opening to the last answer, as the flood's own figure.
    pub all_answered_after_ms: f64,
}

/// How cheap a refusal is once the product is sold out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RefusalRate {
    pub refusals_per_second: f64,
    pub noop_per_second: f64,
    pub connections: usize,
    /// Units bought after the flood (and its second act) to sell the product out before the
    /// refusals were timed: what the flood left.
    #[serde(default)]
    pub sold_after_flood: u64,
    /// Alternations of refusals and no-ops the medians are of (three in runs that did not
    /// record it).
    #[serde(default = "three")]
    pub rounds: usize,
    /// The median of the rounds' own ratios, each round's refusals over the no-ops beside
    /// them, in percent: a round's pair ran back to back, so a machine that sped up or slowed
    /// down between rounds moves both alike, where the medians of each kind may come from
    /// rounds far apart. `None` in runs that did not record it (their share is the medians'
    /// quotient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_percent: Option<f64>,
}

fn three() -> usize {
    3
}

impl RefusalRate {
    /// Refusals per second as a share of the no-ops' rate: the median of the rounds' own
    /// ratios where the run recorded them.
    pub fn percent_of_noop(&self) -> f64 {
        self.paired_percent.unwrap_or_else(|| {
            100.0 * self.refusals_per_second / self.noop_per_second.max(f64::EPSILON)
        })
    }
}

/// The sale's second act: the winners pay or walk away, the unpaid orders expire, and buyers
/// who were told "sold out" come back for the units that return.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Resale {
    /// Orders the flood's clicks won.
    pub won: u64,
    /// Of them, the orders whose buyers never pay.
    pub never_paid: u64,
    /// Payments the service accepted from the winners; units the returning buyers bought, and
    /// of them the ones they paid for.
    pub paid_by_winners: u64,
    pub bought_on_return: u64,
    pub paid_on_return: u64,
    /// Payments (of winners and returning buyers alike, each made as soon as the order was
    /// won) answered `order_expired`: the answers came after the deadline. Their orders
    /// expire like the never-paid ones.
    pub payments_too_late: u64,
    /// Payments refused with any other code (a payment the service should have taken), and
    /// payments that got no answer.
    pub payments_refused: u64,
    pub payments_failed: u64,
    /// Buyers who came back after a `sold_out`, and their clicks.
    pub returners: u64,
    pub return_clicks: u64,
    /// From the opening until the last unit was paid: the sale truly ended (`None`: not
    /// every unit was paid by the end of the watch).
    pub ended_after_ms: Option<f64>,
    /// When an app instance was SIGKILLed, ms from the opening.
    pub killed_after_ms: Option<f64>,
    /// Purchases the kill caught between a Redis deduction and the order insert, whose units
    /// `reconcile` gave back once the instance was restarted (0: none, or a home in the
    /// database, where a crash rolls the purchase back).
    #[serde(default)]
    pub released_after_kill: u64,
    /// The product at the end: units left, reserved, paid, expired or cancelled, and on their
    /// way back. `initial = left + reserved + paid + returning + pending` must hold.
    pub left: i64,
    pub reserved: i64,
    pub paid: i64,
    pub returned: i64,
    pub returning: i64,
    pub pending: i64,
    /// The accounting at the end of the second act.
    pub accounting: Accounting,
}

impl Resale {
    /// Units the invariant `initial = left + reserved + paid + returning + pending` misses (0
    /// when kept; positive: units lost, negative: units made up).
    pub fn unaccounted(&self) -> i64 {
        self.accounting.initial_stock
            - (self.left + self.reserved + self.paid + self.returning + self.pending)
    }
}

/// Who a click of a flood is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Regular,
    /// A double-clicker's second click.
    Second,
    SharedAccount,
    Early,
}

/// A bar of the flood missed, with the figures that say by how much.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "bar", rename_all = "kebab-case")]
pub enum FloodMiss {
    /// The fastest safe strategy took longer than `bar_ratio` times the no-op flood to answer
    /// every click.
    SlowFlood {
        strategy: Strategy,
        answered_ms: f64,
        noop_answered_ms: f64,
        bar_ratio: f64,
    },
    /// A safe strategy that sold out refused at less than `bar_percent` of the no-op rate.
    CostlyRefusals {
        strategy: Strategy,
        percent_of_noop: f64,
        bar_percent: f64,
        /// HTTP's floor in the same run: `http-floor-refusal` as a share of `http-floor-noop`
        /// (absent without those baselines).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        http_floor_percent: Option<f64>,
    },
}

#[cfg(test)]
pub mod sample {
    use app::accounting::{Accounting, Ledger};
    use app::api::{ErrorCode, Strategy};
    use testkit::{Answer, Outcomes};

    use super::{CrowdResult, Fairness, FloodResult, FloodShape, NoopFlood, RefusalRate};
    use crate::sample::Tagged;
    use crate::schema::{LatencySummary, RunReport};

    /// Puts the flood's shape in `report`'s settings, and `conditional`'s flood, every click
    /// answered in 1 s beside 0.8 s for the no-op flood, in its record.
    pub fn put(report: &mut RunReport) {
        let result = flood(Strategy::Conditional, 1_000.0, 800.0, 90.0).result;
        crate::sample::put_phase(report, super::super::NAME, flood_shape(), result);
    }

    /// The shape of the sample's flood: 2,000 people for 100 units.
    pub fn flood_shape() -> FloodShape {
        FloodShape {
            users: 2_000,
            units: 100,
            burst_ms: 1_000,
            double_click_share: 0.1,
            shared_account_bot_share: 0.02,
            early_bot_share: 0.02,
            early_by_ms: 300,
            retries: 0,
            instances: 2,
            non_payer_share: 0.0,
            payment_window_ms: 0,
            kill_mid_sale: false,
            first_come: true,
        }
    }

    /// A strategy's flood of [`flood_shape`], sold out: every click answered `answered_ms` after
    /// the opening and the same crowd's no-op flood `noop_ms`; refusals once sold out at
    /// `refusal_percent` of 40,000 no-ops per second.
    pub fn flood(
        strategy: Strategy,
        answered_ms: f64,
        noop_ms: f64,
        refusal_percent: f64,
    ) -> Tagged<FloodResult> {
        let (outcomes, accounting) = sold_out_crowd();
        Tagged::new(
            strategy,
            FloodResult {
                crowd: CrowdResult {
                    clicks: 2_000,
                    outcomes,
                    accounting,
                    beyond_limit: 0,
                    sold_out_after_ms: Some(answered_ms / 2.0),
                    all_answered_after_ms: answered_ms,
                    winners: LatencySummary::default(),
                    refused: LatencySummary::default(),
                    fairness: Fairness {
                        first_clicks_won: 0.5,
                        earliness_rank_correlation: None,
                        attainable_correlation: None,
                    },
                },
                early_clicks: 0,
                shared_account_clicks: 0,
                timeline: Vec::new(),
                resale: None,
                after_sold_out: Some(RefusalRate {
                    refusals_per_second: 400.0 * refusal_percent,
                    noop_per_second: 40_000.0,
                    connections: 200,
                    sold_after_flood: 0,
                    rounds: 5,
                    paired_percent: None,
                }),
                noop_flood: Some(NoopFlood {
                    clicks: 2_000,
                    served: 2_000,
                    all_answered_after_ms: noop_ms,
                }),
                first_come: Some(first_come_flood()),
                cpu: None,
                projection: Vec::new(),
            },
        )
    }

    /// 2,000 clicks for 100 units: the first 100 bought, the rest told `sold_out`.
    fn sold_out_crowd() -> (Outcomes, Accounting) {
        let mut outcomes = Outcomes::default();
        for k in 0..2_000 {
            outcomes.count(&if k < 100 {
                Answer::Created {
                    fencing_token: None,
                }
            } else {
                Answer::Refused {
                    status: 409,
                    code: ErrorCode::SoldOut,
                }
            });
        }
        let ledger = Ledger {
            initial_stock: 100,
            final_stock: 0,
            units_in_orders: 100,
            orders: 100,
            pending: 0,
            reserved: 100,
            paid: 0,
            returned: 0,
            returning: 0,
        };
        (outcomes, Accounting::of(ledger, 2_000))
    }

    /// The sample flood's crowd sent again, sold first come: the first 100 of 2,000 clicks bought.
    pub fn first_come_flood() -> CrowdResult {
        let (outcomes, accounting) = sold_out_crowd();
        CrowdResult {
            clicks: 2_000,
            outcomes,
            accounting,
            beyond_limit: 0,
            sold_out_after_ms: Some(180.0),
            all_answered_after_ms: 1_150.0,
            winners: LatencySummary::default(),
            refused: LatencySummary::default(),
            fairness: Fairness {
                first_clicks_won: 0.97,
                earliness_rank_correlation: Some(0.21),
                attainable_correlation: Some(0.22),
            },
        }
    }
}
