//! Redis Cluster: three shards serve every slot, a dead master's replica takes its slots with
//! what it had received, and the dead master comes back as its replica.

use std::time::Duration;

use sandbox::{Cluster, RedisCluster};

/// Generous: a master is judged failed after 1 s, the vote and the promotion take a few more.
const FAILOVER: Duration = Duration::from_secs(60);

/// The slot of `key`, as the cluster computes it.
fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    let member = cluster.shards()[0].member(0);
    member
        .command(&["CLUSTER", "KEYSLOT", key])
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn three_masters_each_with_a_replica_serve_all_16384_slots() {
    sandbox::require_faults!();
    let cluster = RedisCluster::start().unwrap();
    let shards = cluster.shards();
    assert_eq!(shards.len(), 3);
    assert_eq!(shards[0].slots().0, 0);
    assert_eq!(shards[2].slots().1, 16383);
    for pair in shards.windows(2) {
        assert_eq!(pair[0].slots().1 + 1, pair[1].slots().0);
    }
    for shard in shards {
        assert_eq!(shard.master(), Some(0));
        let role = shard.member(1).command(&["ROLE"]).unwrap();
        assert!(role.starts_with("slave"), "{role}");
    }
    assert!(cluster.url().starts_with("redis+cluster://127.0.0.1:"));
    assert_eq!(cluster.url().matches(',').count(), 5);
}

#[test]
fn a_killed_master_s_replica_takes_its_slots_and_the_master_returns_as_its_replica() {
    sandbox::require_faults!();
    let cluster = RedisCluster::start().unwrap();
    let key = "{probe}:stock";
    let shard = cluster.shard_of_slot(slot_of(&cluster, key)).clone();
    shard.member(0).command(&["SET", key, "10"]).unwrap();
    shard
        .member(0)
        .await_replicas_acknowledged(1, FAILOVER)
        .unwrap();
    shard.process(0).kill().unwrap();
    let promoted = sandbox::wait_for(FAILOVER, || shard.master().filter(|&m| m == 1));
    assert_eq!(promoted, Some(1), "the replica was not promoted");
    assert_eq!(shard.member(1).command(&["GET", key]).unwrap(), "10");
    shard.rejoin(0, FAILOVER).unwrap();
    let role = shard.member(0).command(&["ROLE"]).unwrap();
    assert!(role.starts_with("slave"), "{role}");
    assert_eq!(shard.master(), Some(1));
    let info = shard.member(1).command(&["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
}

#[test]
fn a_replica_cut_off_from_its_master_is_promoted_without_the_writes_made_since() {
    sandbox::require_faults!();
    let cluster = RedisCluster::start().unwrap();
    let key = "{probe}:stock";
    let shard = cluster.shard_of_slot(slot_of(&cluster, key)).clone();
    shard.member(0).command(&["SET", key, "100"]).unwrap();
    shard
        .member(0)
        .await_replicas_acknowledged(1, FAILOVER)
        .unwrap();
    assert_eq!(shard.cut_replication().unwrap(), 0);
    for _ in 0..10 {
        shard.member(0).command(&["DECR", key]).unwrap();
    }
    assert_eq!(shard.member(0).command(&["GET", key]).unwrap(), "90");
    shard.process(0).kill().unwrap();
    let promoted = sandbox::wait_for(FAILOVER, || shard.master().filter(|&m| m == 1));
    assert_eq!(promoted, Some(1), "the replica was not promoted");
    assert_eq!(
        shard.member(1).command(&["GET", key]).unwrap(),
        "100",
        "the promoted replica: {}",
        shard.member(1).command(&["INFO", "replication"]).unwrap()
    );
    shard.heal_replication();
    shard.rejoin(0, FAILOVER).unwrap();
    let role = shard.member(0).command(&["ROLE"]).unwrap();
    assert!(role.starts_with("slave"), "{role}");
    assert_eq!(shard.member(1).command(&["GET", key]).unwrap(), "100");
}

/// `PING` through `address` (`127.0.0.1:<port>`): whether it answered `PONG`.
fn pings(address: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

/// When `asked` last heard from the node on `port`, in its `CLUSTER NODES` (ms since the epoch).
fn pong_received(asked: &sandbox::Redis, port: u16) -> u64 {
    let view = asked.command(&["CLUSTER", "NODES"]).unwrap();
    view.lines()
        .find(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.starts_with(&format!("127.0.0.1:{port}@")))
        })
        .and_then(|l| l.split_whitespace().nth(5)?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_shard_cut_off_behind_its_relays_answers_no_client_and_is_not_failed_over() {
    sandbox::require_faults!();
    let cluster = RedisCluster::start_behind_relays().unwrap();
    let shard = cluster.shards()[0].clone();
    let addresses = shard.client_addresses();
    // The members announce their relays: the cluster's view and its clients' addresses are
    // the relays' ports, not the members' own.
    assert!(addresses.iter().all(|a| pings(a)), "{addresses:?}");
    assert!(!addresses.contains(&format!("127.0.0.1:{}", shard.member(0).port())));
    let other = cluster.shards()[1].member(0);
    let master_port: u16 = addresses[0].rsplit(':').next().unwrap().parse().unwrap();

    shard.cut_off();
    let cut_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(addresses.iter().all(|a| !pings(a)), "{addresses:?}");
    // The bus is direct: the other members go on hearing from the cut-off master, past
    // twice the node timeout, and fail nothing over.
    let heard = sandbox::wait_for(FAILOVER, || {
        (pong_received(other, master_port) > cut_at + 2_000).then_some(())
    });
    assert!(heard.is_some(), "the master went silent on the bus");
    assert_eq!(shard.master(), Some(0));
    let info = other.command(&["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");

    shard.reconnect();
    assert!(addresses.iter().all(|a| pings(a)), "{addresses:?}");
}
