//! Servers at a distance: a run whose every server stands behind a relay adding a round trip
//! sells as safely as over loopback, judged from what the database holds, and its report says
//! at which round trip it was taken.

use std::time::Duration;

use app::api::Strategy;
use loadtest::rig::distance;
use loadtest::rig::world::Distance;

use crate::common;

#[tokio::test(flavor = "multi_thread")]
async fn a_safe_strategy_sells_out_without_oversell_with_its_servers_a_millisecond_away() {
    let rtt = Duration::from_millis(1);
    let mut target = common::target();
    let (relays, endpoints) = distance::apart(&target.endpoints, rtt).unwrap();
    target.endpoints = endpoints;
    target.distance = Distance::of(Some(rtt));
    let (output, truth, _out) = common::run_and_read(Strategy::Conditional, &target).await;
    drop(relays);

    assert_eq!(truth.oversell, 0, "{truth:?}");
    assert_eq!(truth.lost_updates, 0, "{truth:?}");
    assert_eq!(truth.units_sold, truth.initial_stock, "{truth:?}");
    assert_eq!(&output.report.strategies[0].sale.accounting, &truth);
    assert_eq!(
        output.report.world.map(|w| w.distance),
        Some(Distance::Relayed { rtt_us: 1_000 })
    );
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("| round trip added | 1 ms"), "{md}");
}
