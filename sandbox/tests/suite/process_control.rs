//! The harness really controls its servers: a paused server does not answer, a resumed one
//! does, a killed one refuses connections, a restarted one serves again.

use std::net::TcpStream;

use sandbox::{Etcd, MariaDb, Memcached, Redis, RedisPair, Server, ZooKeeper};

fn refuses_connections(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

/// Pause, resume, kill, restart, checking after each step with `answers`.
fn exercise(server: &Server, port: u16, answers: impl Fn() -> bool) {
    assert!(answers(), "{} answers after start", server.name());
    server.pause().unwrap();
    assert!(!answers(), "{} must not answer while paused", server.name());
    server.resume().unwrap();
    assert!(answers(), "{} answers again after resume", server.name());
    server.kill().unwrap();
    assert!(!server.is_running());
    assert!(
        refuses_connections(port),
        "{} port closed after kill",
        server.name()
    );
    server.restart().unwrap();
    assert!(server.is_running());
    assert!(answers(), "{} answers after restart", server.name());
}

#[test]
fn redis_ping_fails_while_paused_and_succeeds_after_resume_and_restart() {
    sandbox::require_faults!();
    let redis = Redis::start().unwrap();
    exercise(redis.server(), redis.port(), || {
        redis.command(&["PING"]).is_ok_and(|r| r == "PONG")
    });
}

#[test]
fn mariadb_handshake_fails_while_paused_and_succeeds_after_resume_and_restart() {
    sandbox::require_faults!();
    let db = MariaDb::start().unwrap();
    exercise(db.server(), db.port(), || db.version().is_ok());
}

#[test]
fn zookeeper_srvr_fails_while_paused_and_succeeds_after_resume_and_restart() {
    sandbox::require_faults!();
    let zk = ZooKeeper::start().unwrap();
    exercise(zk.server(), zk.port(), || zk.version().is_ok());
}

#[test]
fn etcd_version_fails_while_paused_and_succeeds_after_resume_and_restart() {
    sandbox::require_faults!();
    let etcd = Etcd::start().unwrap();
    exercise(etcd.server(), etcd.port(), || etcd.version().is_ok());
}

#[test]
fn memcached_version_fails_while_paused_and_succeeds_after_resume_and_restart() {
    sandbox::require_faults!();
    let memcached = Memcached::start().unwrap();
    exercise(memcached.server(), memcached.port(), || {
        memcached.version().is_ok()
    });
}

#[test]
fn redis_replica_follows_primary_and_can_be_promoted() {
    sandbox::require_faults!();
    let pair = RedisPair::start().unwrap();
    pair.primary.command(&["SET", "k", "v"]).unwrap();
    // Replication is asynchronous: the replica catches up, eventually.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pair.replica.command(&["GET", "k"]).unwrap() != "v" {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never caught up"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        pair.replica.command(&["SET", "k", "w"]).is_err(),
        "a replica is read-only"
    );
    pair.primary.server().kill().unwrap();
    pair.promote_replica().unwrap();
    pair.replica.command(&["SET", "k", "w"]).unwrap();
    assert_eq!(pair.replica.command(&["GET", "k"]).unwrap(), "w");
}

#[test]
fn redis_restarted_after_kill_comes_back_empty() {
    sandbox::require_faults!();
    let redis = Redis::start().unwrap();
    redis.command(&["SET", "lock", "holder"]).unwrap();
    redis.server().restart().unwrap();
    assert_eq!(redis.command(&["EXISTS", "lock"]).unwrap(), "0");
}
