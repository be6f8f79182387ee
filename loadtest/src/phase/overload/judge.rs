//! The bars of the overload phase, and which of them each strategy missed, with the figures
//! that say why: accepted purchases answered within a second (p99, from the due time), at
//! least half of the capacity still accepted, the excess refused `503 overloaded` within
//! milliseconds, nothing answered any other slow way (beyond a trace), and the app instances'
//! memory flat while the overload goes on.

use app::api::ErrorCode;
use testkit::Outcomes;

use super::schema::{OverloadFinding, OverloadMiss, OverloadResult};
use crate::schema::Of;

/// The p99 of accepted purchases, from their due time, must stay under this.
pub const ACCEPTED_P99_BAR_US: u64 = 1_000_000;
/// The purchases accepted per second must stay at least this share of the capacity: a service
/// that refuses the excess by refusing most of what it could serve has not held the crowd.
pub const ACCEPTED_SHARE_BAR: f64 = 0.5;
/// The p99 of refusals, from their due time, must stay under this: "within milliseconds".
pub const REFUSAL_P99_BAR_US: u64 = 10_000;
/// Slow answers of another kind (a strategy's own `busy`, say) are a miss only when more than
/// this share of the answers: a p99 over one or two answers in thousands is not a tail but an
/// anecdote — `optimistic` answers a purchase `busy` now and then after losing every round, by
/// design. An answer that never came, or one outside the contract, is a miss however rare.
pub const OTHER_TRACE_SHARE: f64 = 0.001;
/// The memory counts as flat while its peak stays within this share of the memory at the end
/// of the warm-up…
pub const MEMORY_MARGIN_SHARE: f64 = 0.10;
/// …or within this many bytes, whichever is more (allocators keep what they once took in
/// steps of megabytes).
pub const MEMORY_MARGIN_BYTES: u64 = 16 << 20;

/// The share of the machine the excess over a strategy's capacity may take to refuse: of the
/// sold-out refusals a second the machine answers at most (see `phase::overload::offered`).
pub const EXCESS_SHARE_OF_CEILING: f64 = 0.25;

/// The bars `o` missed (`None`: it met them all).
pub fn finding(o: &Of<'_, OverloadResult>) -> Option<OverloadFinding> {
    let mut misses = Vec::new();
    let accepted = &o.from_due.accepted;
    if accepted.count > 0 && accepted.p99_us >= ACCEPTED_P99_BAR_US {
        let mean_s = o.from_send.accepted.mean_us / 1e6;
        misses.push(OverloadMiss::SlowAccepted {
            p99_us: accepted.p99_us,
            bar_us: ACCEPTED_P99_BAR_US,
            from_send_p99_us: o.from_send.accepted.p99_us,
            in_flight: o.load.successes_per_sec * mean_s,
            in_flight_limit: o.limit_at_end(),
            accepted_per_second: o.load.successes_per_sec,
            overloaded: o.overloaded(),
        });
    }
    if o.accepted_share()
        .is_some_and(|share| share < ACCEPTED_SHARE_BAR)
    {
        misses.push(OverloadMiss::FewAccepted {
            accepted_per_second: o.load.successes_per_sec,
            capacity_per_second: o.capacity_per_second,
            bar_share: ACCEPTED_SHARE_BAR,
            in_flight_limit: o.limit_at_end(),
        });
    }
    let refused = &o.from_due.overloaded;
    if refused.count > 0 && refused.p99_us >= REFUSAL_P99_BAR_US {
        misses.push(OverloadMiss::SlowRefusals {
            p99_us: refused.p99_us,
            bar_us: REFUSAL_P99_BAR_US,
            from_send_p99_us: o.from_send.overloaded.p99_us,
        });
    }
    let outcomes = &o.load.outcomes;
    let other = &o.from_due.other;
    let broken = outcomes.transport_error + outcomes.unexpected.values().sum::<u64>();
    let more_than_a_trace = o.other_share() > OTHER_TRACE_SHARE;
    if o.other() > 0 && (broken > 0 || (more_than_a_trace && other.p99_us >= REFUSAL_P99_BAR_US)) {
        misses.push(OverloadMiss::OtherAnswers {
            count: o.other(),
            transport_errors: outcomes.transport_error,
            most: most_frequent_other(outcomes),
        });
    }
    let m = &o.memory;
    let margin = margin_bytes(m.loaded_bytes);
    if m.instances > 0 && m.growth_bytes() > margin {
        misses.push(OverloadMiss::MemoryGrew {
            loaded_bytes: m.loaded_bytes,
            peak_bytes: m.peak_bytes,
            margin_bytes: margin,
        });
    }
    (!misses.is_empty()).then_some(OverloadFinding {
        strategy: o.strategy.name,
        misses,
    })
}

/// How far memory of `loaded` bytes may rise and still count as flat.
pub fn margin_bytes(loaded: u64) -> u64 {
    ((loaded as f64 * MEMORY_MARGIN_SHARE) as u64).max(MEMORY_MARGIN_BYTES)
}

/// The most frequent answer that is neither a purchase nor `503 overloaded`, in words.
fn most_frequent_other(o: &Outcomes) -> String {
    let mut counts: Vec<(u64, String)> = o
        .refused
        .iter()
        .filter(|(code, _)| *code != ErrorCode::Overloaded)
        .map(|(code, n)| (n, format!("`{} {}`", code.status().as_u16(), code.name())))
        .chain(
            (o.unexpected.iter())
                .map(|(status, n)| (*n, format!("`{status}` outside the contract"))),
        )
        .chain([(o.transport_error, "no answer".to_owned())])
        .chain([(o.replayed, "`200` replayed".to_owned())])
        .filter(|(n, _)| *n > 0)
        .collect();
    counts.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    counts
        .into_iter()
        .next()
        .map_or_else(String::new, |(n, what)| format!("{what} ×{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phase::overload::schema::sample::overload;
    use crate::sample::Tagged;

    #[test]
    fn a_strategy_within_every_bar_has_no_finding() {
        assert_eq!(finding(&overload(200_000, 2_000, 0).of()), None);
    }

    #[test]
    fn a_strategy_that_accepted_less_than_half_its_capacity_misses_the_accepted_share() {
        let mut o = overload(200_000, 2_000, 0);
        o.capacity_per_second = 1_000.0;
        let f = finding(&o.of()).expect("a miss");
        let [
            OverloadMiss::FewAccepted {
                accepted_per_second,
                capacity_per_second,
                ..
            },
        ] = f.misses.as_slice()
        else {
            panic!("{f:?}");
        };
        assert_eq!(
            (*accepted_per_second, *capacity_per_second),
            (400.0, 1_000.0)
        );
        o.capacity_per_second = 800.0;
        assert_eq!(finding(&o.of()), None, "half of the capacity meets the bar");
    }

    #[test]
    fn slow_purchases_name_the_purchases_in_flight_beside_the_limit_the_instances_admitted() {
        let f = finding(&overload(2_500_000, 2_000, 0).of()).expect("a miss");
        let [
            OverloadMiss::SlowAccepted {
                p99_us,
                in_flight,
                in_flight_limit,
                ..
            },
        ] = f.misses.as_slice()
        else {
            panic!("{f:?}")
        };
        assert_eq!((*p99_us, *in_flight_limit), (2_500_000, 100));
        assert!(*in_flight > 0.0);
    }

    #[test]
    fn slow_refusals_and_growing_memory_are_each_a_miss() {
        let f = finding(&overload(200_000, 40_000, 64 << 20).of()).expect("a miss");
        assert!(matches!(
            f.misses[0],
            OverloadMiss::SlowRefusals { p99_us: 40_000, .. }
        ));
        assert!(
            matches!(f.misses[1], OverloadMiss::MemoryGrew { .. }),
            "{f:?}"
        );
    }

    /// `o` with `n` answers `503 busy`, each `p99_us` late at p99.
    fn with_busy(mut o: Tagged<OverloadResult>, n: u64, p99_us: u64) -> Tagged<OverloadResult> {
        for _ in 0..n {
            o.load.outcomes.count(&testkit::Answer::Refused {
                status: 503,
                code: ErrorCode::Busy,
            });
        }
        o.from_due.other.count = n;
        o.from_due.other.p99_us = p99_us;
        o
    }

    #[test]
    fn slow_answers_of_another_kind_are_a_miss_past_a_trace() {
        let o = with_busy(overload(200_000, 2_000, 0), 30, 400_000);
        let f = finding(&o.of()).expect("30 slow busy answers in 1,230");
        assert!(
            matches!(
                f.misses.as_slice(),
                [OverloadMiss::OtherAnswers { count: 30, .. }]
            ),
            "{f:?}"
        );
    }

    #[test]
    fn one_slow_answer_of_another_kind_in_thousands_is_a_trace_not_a_miss() {
        let mut o = overload(200_000, 2_000, 0);
        for _ in 0..3_000 {
            o.load.outcomes.count(&testkit::Answer::Refused {
                status: 503,
                code: ErrorCode::Overloaded,
            });
        }
        assert_eq!(finding(&with_busy(o, 1, 400_000).of()), None);
    }

    #[test]
    fn an_answer_that_never_came_is_a_miss_however_fast() {
        let mut o = overload(200_000, 2_000, 0);
        o.load.outcomes.count(&testkit::Answer::Transport);
        let f = finding(&o.of()).expect("a miss");
        let [
            OverloadMiss::OtherAnswers {
                count,
                transport_errors,
                most,
            },
        ] = f.misses.as_slice()
        else {
            panic!("{f:?}")
        };
        assert_eq!((*count, *transport_errors), (1, 1));
        assert_eq!(most, "no answer ×1");
    }
}
