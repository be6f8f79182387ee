//! `seckill-bench lock peers` in its quick form: one round, about a second per lock. Every lock
//! (ours and the Python libraries, run by `loadtest/peers/lock_peers.py` from the venv `cargo
//! xtask setup` makes) is granted, and being correct locks, none lets two holders overlap. No
//! figure of speed is asserted: that is the report's business.

use loadtest::lock::peers::{PeersOptions, Subject, run};
use sandbox::Endpoints;

#[tokio::test(flavor = "multi_thread")]
async fn every_peer_is_granted_and_no_correct_lock_lets_two_holders_overlap() {
    let endpoints = Endpoints {
        database_url: String::new(),
        redis_url: sandbox::shared::redis_url(),
        redlock_urls: Vec::new(),
        zookeeper: sandbox::shared::zookeeper(),
        etcd: Vec::new(),
        memcached: String::new(),
        postgres_url: None,
    };
    let options = PeersOptions {
        workers: 8,
        seconds: 1.0,
        rounds: 1,
        python: PeersOptions::default_python(),
        script: PeersOptions::default_script(),
    };
    let report = run(&endpoints, &options).await.unwrap();
    assert_eq!(report.subjects.len(), Subject::ALL.len());
    for s in &report.subjects {
        assert!(s.acquisitions > 0, "{} was never granted: {s:?}", s.subject);
        assert_eq!(
            s.violations, 0,
            "{} let two holders overlap: {s:?}",
            s.subject
        );
    }
    assert_eq!(report.targets.len(), 3);
    assert!(report.markdown().contains("kazoo"));
}
