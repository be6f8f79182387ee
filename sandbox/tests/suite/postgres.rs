//! The sandbox's PostgreSQL as a client sees it: it serves queries; paused, it answers none, on
//! a connection opened before the pause too (its backend is a process of its own, paused with
//! the rest); resumed, it answers again; killed, it refuses connections; restarted, it serves
//! again with what was committed; dropped, it leaves nothing behind.

use std::time::Duration;

use sandbox::Postgres;
use sqlx::{Connection, PgConnection};

async fn start() -> Postgres {
    tokio::task::spawn_blocking(Postgres::start)
        .await
        .expect("start thread")
        .expect("postgres starts")
}

async fn one(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT 1").fetch_one(conn).await
}

#[tokio::test]
async fn a_postgres_query_times_out_while_paused_and_is_answered_after_resume_and_restart() {
    sandbox::require_faults!();
    let pg = start().await;
    let mut conn = PgConnection::connect(&pg.url()).await.expect("connect");
    assert_eq!(one(&mut conn).await.expect("a query"), 1);
    sqlx::raw_sql("CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)")
        .execute(&mut conn)
        .await
        .expect("a committed row");

    pg.server().pause().unwrap();
    // Only the paused server's answer could end this wait early, and it cannot give one: a
    // slow machine makes the wait no less certain to run out.
    let paused = tokio::time::timeout(Duration::from_secs(1), one(&mut conn)).await;
    assert!(paused.is_err(), "a paused server answered: {paused:?}");

    pg.server().resume().unwrap();
    assert_eq!(
        one(&mut conn).await.expect("answered after resume"),
        1,
        "the connection opened before the pause serves again"
    );

    pg.server().kill().unwrap();
    match PgConnection::connect(&pg.url()).await {
        Err(sqlx::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
        other => panic!(
            "a killed server must refuse connections: {:?}",
            other.map(drop)
        ),
    }
    assert!(
        one(&mut conn).await.is_err(),
        "a connection to a killed server must fail"
    );

    let pg = tokio::task::spawn_blocking(move || {
        pg.server().restart().unwrap();
        pg
    })
    .await
    .expect("restart thread");
    let mut conn = PgConnection::connect(&pg.url())
        .await
        .expect("connect after restart");
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM kept")
        .fetch_one(&mut conn)
        .await
        .expect("the table survives a kill");
    assert_eq!(kept, 1, "a committed row survives a kill");
}

/// The processes under `pid` (a postmaster's backends and helpers).
fn processes_under(pid: u32) -> Vec<u32> {
    let parent_of = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

fn exists(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its new parent) holds nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// The System V shared memory segment ids of the machine (`/proc/sysvipc/shm`).
fn shared_memory_segments() -> Vec<String> {
    std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1).map(String::from))
        .collect()
}

#[tokio::test]
async fn dropping_a_killed_postgres_leaves_no_process_no_directory_and_no_shared_memory() {
    sandbox::require_faults!();
    let pg = start().await;
    let mut conn = PgConnection::connect(&pg.url()).await.expect("connect");
    assert_eq!(one(&mut conn).await.expect("a query"), 1);
    let postmaster = pg.server().pid().expect("running");
    let processes = processes_under(postmaster);
    assert!(
        processes.len() >= 2,
        "a backend for the connection and the helpers: {processes:?}"
    );
    let dir = pg.server().dir().to_path_buf();
    let pidfile = std::fs::read_to_string(dir.join("data").join("postmaster.pid")).unwrap();
    let segment = pidfile
        .lines()
        .nth(6)
        .and_then(|line| line.split_whitespace().nth(1))
        .expect("the interlock segment's id")
        .to_string();
    assert!(shared_memory_segments().contains(&segment));

    pg.server().kill().unwrap();
    for &pid in processes.iter().chain([&postmaster]) {
        assert!(!exists(pid), "process {pid} outlived the kill");
    }
    drop(pg);
    assert!(!dir.exists(), "{} still exists", dir.display());
    assert!(
        !shared_memory_segments().contains(&segment),
        "segment {segment} outlived the server"
    );
}
