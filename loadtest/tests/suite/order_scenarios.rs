//! The fault scenarios of an order's life in their quick form: each shows the failure of the
//! unchecked (or uninvalidated) variant and the fix holding, in the same run.

use loadtest::scenario::Name;
use loadtest::scenario::cache_stampede::Cache;
use loadtest::scenario::cancel_expiry_race::Transitions;
use loadtest::scenario::late_payment::Payment;
use loadtest::scenario::stale_sold_out::Memory;

use crate::scenarios::{assert_all_pass, quick, row};

#[tokio::test(flavor = "multi_thread")]
async fn a_payment_after_the_deadline_oversells_unchecked_and_is_refused_by_the_conditional_transition()
 {
    sandbox::require_faults!();
    let report = quick(Name::LatePayment).await;
    assert_all_pass(&report);
    let unchecked = row!(report, Payment::Unchecked, late_payment);
    let conditional = row!(report, Payment::Conditional, late_payment);
    assert!(unchecked.late_payment_accepted && unchecked.oversell > 0);
    assert_eq!(conditional.oversell, 0);
    assert_eq!(
        conditional.refused_with,
        Some(app::api::ErrorCode::OrderExpired)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancellation_racing_the_expiry_returns_the_unit_twice_unchecked_and_once_conditionally()
{
    sandbox::require_faults!();
    let report = quick(Name::CancelExpiryRace).await;
    assert_all_pass(&report);
    let unchecked = row!(report, Transitions::Unchecked, cancel_expiry_race);
    let conditional = row!(report, Transitions::Conditional, cancel_expiry_race);
    assert!(unchecked.phantom_units > 0 && unchecked.oversell_after_resale > 0);
    assert_eq!(
        (conditional.phantom_units, conditional.oversell_after_resale),
        (0, 0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_expiry_and_the_return_to_redis_strands_the_unit_until_reconcile_gives_it_back_once()
 {
    sandbox::require_faults!();
    let report = quick(Name::ReturnCrash).await;
    assert_all_pass(&report);
    let f = row!(report, "redis-lua, after the crash", return_crash);
    assert_eq!(f.stranded_after_crash, 1);
    assert_eq!((f.stranded_after_reconcile, f.oversell), (0, 0));
    assert_eq!(f.units_sold_at_end, f.stock);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_sold_out_memory_refuses_buyers_while_units_are_back_and_invalidation_sells_them() {
    sandbox::require_faults!();
    let report = quick(Name::StaleSoldOut).await;
    assert_all_pass(&report);
    let stale = row!(report, Memory::NoInvalidation, stale_sold_out);
    let fresh = row!(report, Memory::Invalidation, stale_sold_out);
    assert!(stale.refused_with_stock_left > 0 && stale.left_at_end > 0);
    assert_eq!(fresh.left_at_end, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_whose_copies_expire_together_sends_every_reader_to_the_database_and_single_flight_one()
 {
    sandbox::require_faults!();
    let report = quick(Name::CacheStampede).await;
    assert_all_pass(&report);
    let together = row!(report, Cache::ExpiringTogether, cache_stampede);
    let single = row!(report, Cache::SingleFlight, cache_stampede);
    assert!(together.most_reads_at_once > 1);
    assert_eq!(single.most_reads_at_once, 1);
}
