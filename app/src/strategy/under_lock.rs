//! Round trips a purchase makes while it holds a lock, counted as it makes them.
//!
//! A lock all buyers of a product take — the product's row lock, a distributed lock — lets
//! one purchase through at a time, so every round trip its holder waits for while holding it
//! is a round trip every other buyer of the product waits too: with the servers a round trip
//! `r` away, one product sells at most about 1 / (k × r) a second, where k is those round
//! trips. This module counts k.
//!
//! **What is counted**: the calls a purchase sends after the call that took the lock, through
//! the call that releases it. From the server's side that is exactly how long the lock is
//! held, in round trips: half a trip for the taking call's answer to reach the holder, one for
//! each call in between, half for the releasing call to reach its server. Under the row lock
//! taken by an `UPDATE` (`conditional`), the order's `INSERT` and the `COMMIT`: 2. Under a
//! `SELECT … FOR UPDATE` (`pessimistic`), the stock's `UPDATE`, the `INSERT`, the `COMMIT`: 3.
//! Under a distributed lock, every statement of the critical section, and the release.
//!
//! **How**: a strategy runs the part of its purchase that holds the lock in [`counted`]; every
//! statement sqlx sends from inside it is counted by [`layer`], which sees sqlx's own record of
//! each statement it ran (target `sqlx::query`, one per statement, a failed one included) and
//! asks for it only inside a counted section, so that no other statement pays for the record.
//! A call that is not a statement (a lock's release) is counted where it is made ([`call`]).
//! Sections may nest (a mutex around a row lock): each counts what the inner ones do not, and
//! the purchase's count is their sum.
//!
//! Nothing is counted unless [`layer`] is installed (the service's binary installs it), and
//! then a purchase that held no lock reports none ([`PurchaseStats::under_lock`]), so a count
//! of zero always means zero.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::level_filters::LevelFilter;
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Event, Metadata};
use tracing_subscriber::filter::{DynFilterFn, dynamic_filter_fn};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::PurchaseStats;

/// The target of sqlx's record of a statement it ran.
const STATEMENTS: &str = "sqlx::query";

tokio::task_local! {
    /// The calls counted in the section the task is in.
    static CALLS: Cell<u32>;
}

/// Whether [`layer`] was installed, so that statements are counted.
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Runs `section`, the part of a purchase that holds a lock, counting the calls it makes into
/// `stats`.
pub async fn counted<F: Future>(stats: &PurchaseStats, section: F) -> F::Output {
    if !COUNTING.load(Ordering::Relaxed) {
        return section.await;
    }
    let (output, calls) = CALLS
        .scope(Cell::new(0), async {
            let output = section.await;
            (output, CALLS.with(Cell::get))
        })
        .await;
    stats.add_under_lock(calls);
    output
}

/// Counts a call made inside the section, one that is not a statement (a lock's release).
pub fn call(stats: &PurchaseStats) {
    if COUNTING.load(Ordering::Relaxed) {
        stats.add_under_lock(1);
    }
}

/// Whether the calling task is in a counted section.
fn in_section() -> bool {
    CALLS.try_with(|_| ()).is_ok()
}

/// Counts one statement into the section the task is in, if any.
fn count_one() {
    let _ = CALLS.try_with(|calls| calls.set(calls.get() + 1));
}

/// The layer that counts the statements sent inside [`counted`] sections; installing it turns
/// the counting on.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    COUNTING.store(true, Ordering::Relaxed);
    Statements.with_filter(filter())
}

/// sqlx's records of statements, and only inside a section: sqlx formats a record only if some
/// layer asks for it, so outside the sections no statement pays for one.
fn filter<S>() -> impl Filter<S> {
    let only_statements: fn(&'static Metadata<'static>) -> Interest = |meta| match meta.target() {
        STATEMENTS => Interest::sometimes(),
        _ => Interest::never(),
    };
    let in_a_section: fn(&Metadata<'_>, &Context<'_, S>) -> bool =
        |meta, _| meta.target() == STATEMENTS && in_section();
    let filter: DynFilterFn<S, _, _> = dynamic_filter_fn(in_a_section)
        .with_max_level_hint(LevelFilter::DEBUG)
        .with_callsite_filter(only_statements);
    filter
}

/// Counts every event its filter lets through: one statement each.
struct Statements;

impl<S: Subscriber> Layer<S> for Statements {
    fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
        count_one();
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A statement record as sqlx writes one.
    fn statement() {
        tracing::debug!(target: "sqlx::query", summary = "insert into orders …", "");
    }

    #[tokio::test]
    async fn statements_inside_a_section_are_counted_and_those_outside_are_not() {
        let subscriber = tracing_subscriber::registry().with(layer());
        let _default = tracing::subscriber::set_default(subscriber);
        let stats = PurchaseStats::default();
        statement();
        counted(&stats, async {
            statement();
            tracing::debug!(target: "app::other", "not a statement");
            tokio::task::yield_now().await;
            statement();
        })
        .await;
        statement();
        assert_eq!(stats.under_lock(), Some(2));
        call(&stats);
        assert_eq!(
            stats.under_lock(),
            Some(3),
            "the release is a call under the lock"
        );
    }

    #[tokio::test]
    async fn a_nested_section_adds_its_statements_once() {
        let subscriber = tracing_subscriber::registry().with(layer());
        let _default = tracing::subscriber::set_default(subscriber);
        let stats = PurchaseStats::default();
        counted(&stats, async {
            statement();
            counted(&stats, async {
                statement();
                statement();
            })
            .await;
        })
        .await;
        assert_eq!(stats.under_lock(), Some(3));
    }

    #[test]
    fn a_purchase_that_held_no_lock_reports_no_count() {
        assert_eq!(PurchaseStats::default().under_lock(), None);
    }
}
