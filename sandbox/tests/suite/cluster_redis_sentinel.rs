//! Redis with Sentinel: the Sentinels agree on the primary, promote a replica when it dies,
//! and nothing is left behind.

use std::path::PathBuf;
use std::time::Duration;

use sandbox::RedisSentinelCluster;

/// Generous: detection takes 1 s, the Sentinels' vote and the promotion a few more.
const FAILOVER: Duration = Duration::from_secs(60);

fn process_exists(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"))
}

#[test]
fn the_sentinels_agree_that_the_first_server_is_the_primary() {
    sandbox::require_faults!();
    let redis = RedisSentinelCluster::start().unwrap();
    assert_eq!(redis.await_leader(FAILOVER).unwrap(), 0);
    assert_eq!(redis.sentinel_addrs().len(), 3);
    for s in redis.sentinels() {
        assert_eq!(s.primary_port(), Some(redis.server(0).port()));
    }
}

#[test]
fn killing_the_primary_makes_the_sentinels_promote_a_replica() {
    sandbox::require_faults!();
    let redis = RedisSentinelCluster::start().unwrap();
    redis
        .server(0)
        .command(&["SET", "before-failover", "1"])
        .unwrap();
    redis.server(0).server().kill().unwrap();
    let new = sandbox::wait_for(FAILOVER, || redis.leader().filter(|&l| l != 0));
    let new = new.expect("no replica was promoted");
    let role = redis.server(new).command(&["ROLE"]).unwrap();
    assert!(role.starts_with("master"), "{role}");
    // The old primary comes back as a primary of its own; the Sentinels demote it.
    redis.server(0).server().start_again().unwrap();
    let demoted = sandbox::wait_for(FAILOVER, || {
        let role = redis.server(0).command(&["ROLE"]).ok()?;
        role.starts_with("slave").then_some(())
    });
    assert!(
        demoted.is_some(),
        "the old primary was not turned into a replica"
    );
    // A failover that overruns its timeout on a loaded machine is started again and may
    // promote the other replica: what must hold is that a replica, not the old primary, ends
    // as the primary the Sentinels agree on.
    let settled = sandbox::wait_for(FAILOVER, || redis.leader().filter(|&l| l != 0));
    assert!(
        settled.is_some(),
        "the Sentinels named no replica as primary"
    );
}

#[test]
fn dropping_the_cluster_leaves_no_process_and_no_directory() {
    sandbox::require_faults!();
    let redis = RedisSentinelCluster::start().unwrap();
    let mut servers: Vec<&sandbox::Server> = redis.servers().iter().map(|r| r.server()).collect();
    servers.extend(redis.sentinels().iter().map(|s| s.server()));
    let left: Vec<(u32, PathBuf)> = servers
        .iter()
        .map(|s| (s.pid().unwrap(), s.dir().to_path_buf()))
        .collect();
    assert_eq!(left.len(), 6);
    drop(servers);
    drop(redis);
    for (pid, dir) in &left {
        assert!(!process_exists(*pid), "process {pid} still runs");
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}
