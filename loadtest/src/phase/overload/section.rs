//! The overload phase's section of the report: how the load was offered, each strategy in one
//! row, and a sentence for every bar a strategy missed, from the figures that say why.

use std::fmt::Write;

use super::judge::{
    ACCEPTED_P99_BAR_US, ACCEPTED_SHARE_BAR, EXCESS_SHARE_OF_CEILING, MEMORY_MARGIN_BYTES,
    MEMORY_MARGIN_SHARE, REFUSAL_P99_BAR_US,
};
use super::schema::{OverloadFinding, OverloadMiss, OverloadResult, OverloadShape};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::schema::{LatencySummary, Of};

/// The section, or nothing when the run had no overload phase.
pub fn section(
    shape: Option<&OverloadShape>,
    overloads: &[Of<'_, OverloadResult>],
    findings: &[OverloadFinding],
) -> Section {
    let Some(shape) = shape else {
        return Section::default();
    };
    if overloads.is_empty() {
        return Section::default();
    }
    let mut s = Section::titled(format!("Overload: {} × capacity", shape.factor));
    s.prose(describe(shape, overloads) + &capped(shape, overloads));
    s.table(table(overloads));
    s.prose(
        "Capacity: the closed loop's purchases/s (its median). Sent: answers per second of \
         the measured window (the open loop sends every due request, late when it falls \
         behind). Other: answers neither a purchase nor `503 overloaded` — other refusals, no \
         answer, answers outside the contract — with the most frequent. Latency from each \
         request's due time, as a buyer who clicked then waited. Memory: resident memory of \
         the app instances together, before the loop, at the end of its warm-up, its peak \
         after the warm-up, and once every answer came back.",
    );
    s.prose(went_wrong(findings));
    s
}

/// How the load was offered, and the bars, in a few sentences.
fn describe(shape: &OverloadShape, overloads: &[Of<'_, OverloadResult>]) -> String {
    let first = &overloads[0];
    format!(
        "Each strategy that can be deployed (safe, or safe while leases hold: the unsafe ones \
         exist to show a race, not to be run) is offered {} × its capacity in an open loop for \
         {} s after {} s of warm-up, from {} connections, on a product that cannot sell out \
         (emptied afterwards). The instances refuse past {} purchases in flight together{}. The \
         bars: accepted purchases answered within {} s at p99, at least {:.0}% of the capacity \
         accepted, the excess refused `503 overloaded` within {} ms at p99, no answer of any \
         other kind slower than that (more than one in a thousand answers) nor lost, and the \
         memory flat — its peak after the warm-up within {:.0}% or {} MiB (whichever \
         is more) of the memory at the end of the warm-up.",
        shape.factor,
        shape.seconds,
        shape.warmup,
        first.load.concurrency,
        first.in_flight_limit,
        budget(first.latency_budget_ms),
        ACCEPTED_P99_BAR_US / 1_000_000,
        100.0 * ACCEPTED_SHARE_BAR,
        REFUSAL_P99_BAR_US / 1_000,
        100.0 * MEMORY_MARGIN_SHARE,
        MEMORY_MARGIN_BYTES >> 20,
    )
}

/// The strategies offered less than the factor, because refusing the excess would have taken
/// more than a quarter of the machine, in a sentence (nothing when none was).
fn capped(shape: &OverloadShape, overloads: &[Of<'_, OverloadResult>]) -> String {
    let capped: Vec<String> = (overloads.iter())
        .filter(|o| o.offered_per_second < 0.995 * shape.factor * o.capacity_per_second)
        .map(|o| format!("`{}` {:.0}/s", o.strategy.name, o.offered_per_second))
        .collect();
    let Some(ceiling) = overloads.iter().find_map(|o| o.refusal_ceiling_per_second) else {
        return String::new();
    };
    if capped.is_empty() {
        return String::new();
    }
    format!(
        " A strategy whose excess would take more than {:.0}% of the machine to refuse — it \
         answered at most {ceiling:.0} sold-out refusals a second in this run, from memory, \
         the least an answer to a purchase costs — is offered its capacity and that share of \
         the ceiling instead, since refusing more would leave its purchases no core whatever \
         the door did: {}.",
        100.0 * EXCESS_SHARE_OF_CEILING,
        capped.join(", ")
    )
}

/// The admission by latency budget, in words (nothing when the instances had none).
fn budget(ms: u64) -> String {
    if ms == 0 {
        return String::new();
    }
    format!(
        ", and past as many purchases of a strategy as it answers in {ms} ms at the rate it \
         answers them (Little's law; the limit column: what the instances admitted at once when \
         the overload ended), unless its time inside is its own work, as a batch's round trip \
         is, when fewer admitted would only be fewer answered: its limit is fixed at its most"
    )
}

fn table(overloads: &[Of<'_, OverloadResult>]) -> Table {
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    let cells = |l: &LatencySummary| {
        if l.count == 0 {
            ["–".to_owned(), "–".to_owned(), "–".to_owned()]
        } else {
            [ms(l.p50_us), ms(l.p99_us), ms(l.max_us)]
        }
    };
    let mut t = Table::left(["strategy"]).and_right([
        "capacity/s",
        "offered/s",
        "limit",
        "sent/s",
        "accepted/s",
        "503 overloaded",
        "other",
        "accepted p50 ms",
        "accepted p99 ms",
        "accepted max ms",
        "503 p50 ms",
        "503 p99 ms",
        "503 max ms",
        "other p99 ms",
        "memory MiB: before → loaded → peak → after",
    ]);
    for o in overloads {
        let mut row = vec![
            format!("`{}`", o.strategy.name),
            format!("{:.0}", o.capacity_per_second),
            format!("{:.0}", o.offered_per_second),
            o.limit_at_end().to_string(),
            format!("{:.0}", o.load.attempts_per_sec),
            accepted(o),
            format!("{} ({:.0}%)", o.overloaded(), 100.0 * o.refused_share()),
            other(o),
        ];
        row.extend(cells(&o.from_due.accepted));
        row.extend(cells(&o.from_due.overloaded));
        row.push(if o.from_due.other.count == 0 {
            "–".into()
        } else {
            ms(o.from_due.other.p99_us)
        });
        let m = &o.memory;
        row.push(format!(
            "{} → {} → {} → {}",
            mib(m.before_bytes),
            mib(m.loaded_bytes),
            mib(m.peak_bytes),
            mib(m.after_bytes)
        ));
        t.row(row);
    }
    t
}

/// The purchases accepted per second, and their share of the capacity.
fn accepted(o: &OverloadResult) -> String {
    let per_second = o.load.successes_per_sec;
    match o.accepted_share() {
        Some(share) => format!("{per_second:.0} ({:.0}%)", 100.0 * share),
        None => format!("{per_second:.0}"),
    }
}

/// The answers neither a purchase nor `503 overloaded`, and the tickets never sent.
fn other(o: &OverloadResult) -> String {
    let mut cell = o.other().to_string();
    if o.load.not_sent > 0 {
        let _ = write!(cell, " (+{} not sent)", o.load.not_sent);
    }
    cell
}

fn mib(bytes: u64) -> String {
    format!("{:.0}", bytes as f64 / f64::from(1 << 20))
}

/// A sentence for every bar missed, or one saying none was.
pub fn went_wrong(findings: &[OverloadFinding]) -> String {
    if findings.is_empty() {
        return "Every strategy met every bar of the overload phase.\n".into();
    }
    let mut md = String::from("What went wrong under overload:\n\n");
    for f in findings {
        for m in &f.misses {
            let _ = writeln!(md, "- `{}`: {}", f.strategy, miss(m));
        }
    }
    md
}

/// One missed bar, in words, with its reason as measured.
pub fn miss(m: &OverloadMiss) -> String {
    let ms = |us: u64| format!("{:.0} ms", us as f64 / 1000.0);
    match m {
        OverloadMiss::SlowAccepted {
            p99_us,
            bar_us,
            from_send_p99_us,
            in_flight,
            in_flight_limit,
            accepted_per_second,
            overloaded,
        } => {
            let head = format!(
                "accepted purchases took {} at p99 from their due time (bar {}), {} from their \
                 send.",
                ms(*p99_us),
                ms(*bar_us),
                ms(*from_send_p99_us)
            );
            let queue = *in_flight_limit as f64 / accepted_per_second.max(1e-9);
            let why = if from_send_p99_us < bar_us {
                "The service answered them within the bar once sent: the rest of the wait was \
                 in the generator, behind schedule on a busy machine."
                    .to_owned()
            } else if *overloaded == 0 {
                format!(
                    "No request was refused `503 overloaded`: about {in_flight:.0} purchases \
                     were outstanding at once (accepted/s × their mean time from the send), \
                     under the limit of {in_flight_limit}, so the excess queued inside instead; \
                     at {accepted_per_second:.0} purchases/s a full limit is {queue:.1} s of \
                     waiting."
                )
            } else if queue * 1e6 < *bar_us as f64 && *in_flight > *in_flight_limit as f64 {
                format!(
                    "About {in_flight:.0} purchases were outstanding at once (accepted/s × their \
                     mean time from the send), more than the {in_flight_limit} the service \
                     admitted at once when the overload ended: its limit was higher while they \
                     waited and fell since, so those admitted under it waited behind each other \
                     (at {accepted_per_second:.0} purchases/s, a full limit of {in_flight_limit} \
                     is {queue:.1} s of waiting)."
                )
            } else {
                format!(
                    "About {in_flight:.0} purchases were outstanding at once (accepted/s × their \
                     mean time from the send) against a limit of {in_flight_limit} in the \
                     service: at {accepted_per_second:.0} purchases/s, one admitted behind a \
                     full limit waits {queue:.1} s — the limit admits more than this strategy \
                     answers within the bar."
                )
            };
            format!("{head} {why}")
        }
        OverloadMiss::FewAccepted {
            accepted_per_second,
            capacity_per_second,
            bar_share,
            in_flight_limit,
        } => format!(
            "it accepted {accepted_per_second:.0} purchases/s, {:.0}% of its capacity of \
             {capacity_per_second:.0}/s (bar {:.0}%), with {in_flight_limit} admitted at once when \
             the overload ended: refusing the excess costs cores the purchases need (the app \
             instances, the backends and the generator share this machine's), and what is left \
             serves fewer of them — the fewer as an instance under a crowd that stays admits \
             less while its runtime wakes later than its target (`--lag-target-ms`), so \
             that its refusals are answered at once.",
            100.0 * accepted_per_second / capacity_per_second.max(1e-9),
            100.0 * bar_share,
        ),
        OverloadMiss::SlowRefusals {
            p99_us,
            bar_us,
            from_send_p99_us,
        } => {
            let why = if from_send_p99_us < bar_us {
                "the refusal itself was quick once sent; the request waited in the generator, \
                 behind schedule on a busy machine"
            } else {
                "the refusal itself waited, between the send and the answer, for an instance \
                 busy with the accepted work to read it; the rest, behind schedule in the \
                 generator"
            };
            format!(
                "`503 overloaded` took {} at p99 from the due time (bar {}), {} from the send: \
                 {why}.",
                ms(*p99_us),
                ms(*bar_us),
                ms(*from_send_p99_us)
            )
        }
        OverloadMiss::OtherAnswers {
            count,
            transport_errors,
            most,
        } => format!(
            "{count} answer(s) were neither a purchase nor a quick `503 overloaded` (most: \
             {most}; {transport_errors} with no answer at all): the excess was not refused at \
             the door but let in and turned away by the strategy (`busy`: its retries spent, a \
             lock or row not taken in time), after work the door would have spared."
        ),
        OverloadMiss::MemoryGrew {
            loaded_bytes,
            peak_bytes,
            margin_bytes,
        } => format!(
            "the instances' resident memory rose from {} MiB at the end of the warm-up to {} \
             MiB at its peak (margin {} MiB): it grew while the overload went on.",
            mib(*loaded_bytes),
            mib(*peak_bytes),
            mib(*margin_bytes)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phase::overload::judge::finding;
    use crate::phase::overload::schema::sample::{overload, overload_shape};

    #[test]
    fn a_strategy_offered_less_than_the_factor_is_named_with_the_machines_ceiling() {
        let shape = overload_shape();
        let slow = overload(200_000, 2_000, 0);
        let md = section(Some(&shape), &[slow.of()], &[]).markdown();
        assert!(!md.contains("share of the ceiling"), "{md}");
        let mut fast = overload(200_000, 2_000, 0);
        fast.capacity_per_second = 18_000.0;
        fast.offered_per_second = 33_000.0;
        let md = section(Some(&shape), &[slow.of(), fast.of()], &[]).markdown();
        assert!(md.contains("more than 25% of the machine"), "{md}");
        assert!(
            md.contains("at most 60000 sold-out refusals a second"),
            "{md}"
        );
        assert!(
            md.contains(&format!("`{}` 33000/s.", fast.strategy.name)),
            "{md}"
        );
    }

    #[test]
    fn the_section_has_a_row_per_strategy_and_says_when_every_bar_was_met() {
        let o = overload(200_000, 2_000, 0);
        let md = section(Some(&overload_shape()), &[o.of()], &[]).markdown();
        assert!(md.contains("## Overload: 3 × capacity"), "{md}");
        let row = md
            .lines()
            .find(|l| l.starts_with("| `conditional` |"))
            .unwrap_or_else(|| panic!("no row:\n{md}"));
        assert!(
            row.contains(
                "| 400 | 1200 | 100 | 1200 | 400 (100%) | 800 (67%) | 0 | 100.0 | 200.0 | 200.0 |"
            ),
            "{row}"
        );
        assert!(row.contains("| 40 → 48 → 48 → 48 |"), "{row}");
        assert!(md.contains("Every strategy met every bar"), "{md}");
    }

    #[test]
    fn a_strategy_that_queued_is_told_with_its_purchases_in_flight_and_the_limit_it_had() {
        let mut o = overload(2_500_000, 2_000, 0);
        o.from_send.accepted = o.from_due.accepted;
        let f = finding(&o.of()).expect("a miss");
        let md = section(Some(&overload_shape()), &[o.of()], &[f]).markdown();
        assert!(
            md.contains("- `conditional`: accepted purchases took 2500 ms at p99"),
            "{md}"
        );
        assert!(
            md.contains("more than the 100 the service admitted at once when the overload ended: its limit was higher while they waited"),
            "{md}"
        );
        assert!(!md.contains("Every strategy met"), "{md}");
    }

    #[test]
    fn a_strategy_whose_limit_admits_more_than_it_answers_within_the_bar_is_told_so() {
        let mut o = overload(2_500_000, 2_000, 0);
        o.from_send.accepted = o.from_due.accepted;
        o.admission_limit = Some(2_000);
        let f = finding(&o.of()).expect("a miss");
        let md = went_wrong(&[f]);
        assert!(
            md.contains("against a limit of 2000 in the service: at 400 purchases/s, one admitted behind a full limit waits 5.0 s"),
            "{md}"
        );
    }

    #[test]
    fn a_strategy_that_accepted_too_little_is_told_with_its_share_of_capacity() {
        let mut o = overload(200_000, 2_000, 0);
        o.capacity_per_second = 1_000.0;
        let f = finding(&o.of()).expect("a miss");
        let md = went_wrong(&[f]);
        assert!(
            md.contains("- `conditional`: it accepted 400 purchases/s, 40% of its capacity of 1000/s (bar 50%)"),
            "{md}"
        );
    }

    #[test]
    fn no_overload_phase_no_section() {
        assert!(section(None, &[overload(1, 1, 0).of()], &[]).is_empty());
        assert!(section(Some(&overload_shape()), &[], &[]).is_empty());
    }
}
