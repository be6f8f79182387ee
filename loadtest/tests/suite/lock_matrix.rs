//! `seckill-bench lock matrix` in its quick form for two backends: a row each with a cell per
//! requirement, written as Markdown and JSON, and the correctness cells measured — no
//! violation in the checked history, no try granted while the lock was held, the lock freed
//! after its holder was SIGKILLed, and not long before its lease ran out.

use loadtest::lock::matrix::{self, Availability, Options, Reentry, Requirement, Settings};
use locks::Backend;

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_matrix_measures_every_requirement_and_finds_no_violation() {
    sandbox::require_faults!();
    let settings = Settings::new(true);
    let opts = Options {
        settings,
        backends: vec![Backend::RedisWatchdog, Backend::ZooKeeper],
        hold_binary: env!("CARGO_BIN_EXE_seckill-bench").into(),
    };
    let m = matrix::run(&opts).await.unwrap();
    let md = matrix::markdown(&m);
    eprintln!("{md}");
    assert!(md.contains("Every lock kept what it claims"), "{md}");

    let backends: Vec<Backend> = m.rows.iter().map(|r| r.backend).collect();
    assert_eq!(backends, opts.backends);
    for row in &m.rows {
        let b = row.backend;
        let columns: Vec<Requirement> = row.cells.iter().map(|c| c.requirement).collect();
        assert_eq!(columns, Requirement::ALL, "{b}");
        assert!(
            row.cells.iter().all(|c| !c.text.is_empty()),
            "{b}: {:?}",
            row.cells
        );
        assert!(
            md.contains(&format!("| `{b}` (")),
            "{b} has no line in\n{md}"
        );

        let c = &row.contention;
        assert!(c.acquisitions > 0, "{b}: {c}");
        assert_eq!(c.history_violations, Some(0), "{b}: {c}");
        assert_eq!(c.violations, 0, "{b}: {c}");
        assert!(
            row.cell(Requirement::OneHolder)
                .starts_with("0 overlapping holders"),
            "{b}: {}",
            row.cell(Requirement::OneHolder)
        );
        assert!(
            row.cell(Requirement::TokensInOrder)
                .starts_with("0 tokens out of order, 0 stale writes"),
            "{b}: {}",
            row.cell(Requirement::TokensInOrder)
        );

        let t = &row.try_once;
        assert_eq!((t.granted, t.busy), (0, t.tries), "{b}: {t:?}");

        let e = &row.expiry;
        assert!(e.held_before_kill, "{b}: {e:?}");
        let freed = e
            .freed_after_ms
            .unwrap_or_else(|| panic!("{b}: never freed: {e:?}"));
        // The holder was killed moments after its grant: its lease had nearly all to run.
        assert!(freed >= e.lease_ms as f64 / 2.0, "{b}: freed early: {e:?}");
        assert!(e.next_token > Some(e.holder_token), "{b}: {e:?}");
    }

    let watchdog = &m.rows[0];
    assert!(
        matches!(
            watchdog.reentry,
            Reentry::Reentered {
                held_after_inner_release: true,
                free_after_outer_release: true
            }
        ),
        "{:?}",
        watchdog.reentry
    );
    assert!(
        matches!(
            watchdog.availability,
            Availability::SingleServer {
                answer: "unavailable",
                ..
            }
        ),
        "{:?}",
        watchdog.availability
    );
    let zookeeper = &m.rows[1];
    assert!(
        matches!(zookeeper.reentry, Reentry::NotReentrant { .. }),
        "{:?}",
        zookeeper.reentry
    );
    match &zookeeper.availability {
        Availability::Cluster {
            regained_after_ms,
            violations,
            ..
        } => {
            assert_eq!(*violations, 0);
            // Liveness: grants resumed within the 6 s the old leader stayed down.
            assert!(regained_after_ms.is_some(), "{:?}", zookeeper.availability);
        }
        other => panic!("zookeeper ran on one server: {other:?}"),
    }

    let dir = tempfile::tempdir().unwrap();
    matrix::write(dir.path(), &m).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("matrix.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(
            row["cells"].as_array().unwrap().len(),
            Requirement::ALL.len()
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("matrix.md")).unwrap(),
        md
    );
    let page = std::fs::read_to_string(dir.path().join("matrix.html")).unwrap();
    assert!(page.contains("<table class=\"sortable\">"), "{page}");
    for row in &m.rows {
        assert!(
            page.contains(&format!("<code>{}</code>", row.backend)),
            "{page}"
        );
    }
}

/// The seed articles' database locks in the matrix: each claim the articles make for them is
/// measured in its row and judged in the matrix's text — exclusion (history-checked), a dead
/// holder's lock freed by the database, a try that does not wait, re-entry held until the
/// last release.
#[tokio::test(flavor = "multi_thread")]
async fn the_articles_database_locks_have_their_claims_measured_in_the_matrix() {
    sandbox::require_faults!();
    let opts = Options {
        settings: Settings::new(true),
        backends: vec![
            Backend::DbRowLock,
            Backend::DbBlockingInsert,
            Backend::DbLockReentrant,
        ],
        hold_binary: env!("CARGO_BIN_EXE_seckill-bench").into(),
    };
    let m = matrix::run(&opts).await.unwrap();
    let md = matrix::markdown(&m);
    eprintln!("{md}");
    assert!(md.contains("Every lock kept what it claims"), "{md}");
    let claims = &md[md
        .find("## The seed articles' claims")
        .expect("a section on the articles' claims")..];
    for row in &m.rows {
        let b = row.backend;
        let c = &row.contention;
        assert!(c.acquisitions > 0, "{b}: {c}");
        assert_eq!(c.history_violations, Some(0), "{b}: {c}");
        assert!(
            matches!(
                row.reentry,
                Reentry::Reentered {
                    held_after_inner_release: true,
                    free_after_outer_release: true
                }
            ),
            "{b}: {:?}",
            row.reentry
        );
        let t = &row.try_once;
        assert_eq!((t.granted, t.busy), (0, t.tries), "{b}: {t:?}");
        let e = &row.expiry;
        assert!(
            e.held_before_kill && e.freed_after_ms.is_some(),
            "{b}: {e:?}"
        );
        assert!(e.next_token > Some(e.holder_token), "{b}: {e:?}");
        assert!(claims.contains(&format!("`{b}`:")), "{b}: {claims}");
        assert!(
            claims.contains("- mutual exclusion: holds"),
            "{b}: {claims}"
        );
    }
    for b in [Backend::DbRowLock, Backend::DbBlockingInsert] {
        let row = &claims[claims.find(&format!("`{b}`:")).unwrap()..];
        for claim in [
            "the database frees a dead holder's lock: holds",
            "a non-blocking try: holds",
            "reentrancy: holds",
            "waiters served in arrival order:",
            "no thundering herd (only the next waiter wakes):",
        ] {
            assert!(row.contains(claim), "{b}: {claim} in {row}");
        }
    }
}

/// PostgreSQL's advisory locks in the matrix, on a PostgreSQL the row starts: exclusion and
/// tokens history-checked, a dead holder's lock freed by the server as soon as its session
/// ends (long before the lease), no re-entry through a second acquire (each holder keeps a
/// connection of its own), a try that does not wait, a killed server failing the client.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_advisory_locks_have_their_rows_measured_on_a_postgresql_of_their_own() {
    sandbox::require_faults!();
    let opts = Options {
        settings: Settings::new(true),
        backends: vec![Backend::PgAdvisory, Backend::PgAdvisoryXact],
        hold_binary: env!("CARGO_BIN_EXE_seckill-bench").into(),
    };
    let m = matrix::run(&opts).await.unwrap();
    let md = matrix::markdown(&m);
    eprintln!("{md}");
    assert!(md.contains("Every lock kept what it claims"), "{md}");
    assert!(
        md.contains(", PostgreSQL 1"),
        "no PostgreSQL version in\n{md}"
    );
    for row in &m.rows {
        let b = row.backend;
        assert!(md.contains(&format!("| `{b}` (1 PostgreSQL)")), "{b}: {md}");
        let c = &row.contention;
        assert!(c.acquisitions > 0, "{b}: {c}");
        assert_eq!(
            (c.violations, c.history_violations),
            (0, Some(0)),
            "{b}: {c}"
        );
        let t = &row.try_once;
        assert_eq!((t.granted, t.busy), (0, t.tries), "{b}: {t:?}");
        let e = &row.expiry;
        let freed = e
            .freed_after_ms
            .unwrap_or_else(|| panic!("{b}: never freed: {e:?}"));
        assert!(e.held_before_kill, "{b}: {e:?}");
        assert!(
            freed < e.lease_ms as f64 / 2.0,
            "{b}: freed by the lease, not the server: {e:?}"
        );
        assert!(e.next_token > Some(e.holder_token), "{b}: {e:?}");
        assert!(
            matches!(row.reentry, Reentry::NotReentrant { .. }),
            "{b}: {:?}",
            row.reentry
        );
        assert!(
            matches!(
                row.availability,
                Availability::SingleServer {
                    answer: "unavailable",
                    ..
                }
            ),
            "{b}: {:?}",
            row.availability
        );
    }
}

/// The hidden `lock hold` quits (and gives the lock back) when its standard input closes: a
/// matrix that dies without killing its holder leaves no process behind holding a lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_parent_went_away_gives_the_lock_back_and_exits() {
    use std::process::Stdio;
    use std::time::Duration;

    use locks::{AcquireOptions, DistributedLock};
    use tokio::io::{AsyncBufReadExt, BufReader};

    let redis = sandbox::shared::redis_url();
    let key = format!("matrix-test:hold:{}", locks::new_owner_id());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill-bench"))
        .args([
            "lock",
            "hold",
            "--backend",
            "redis",
            "--key",
            &key,
            "--lease-ms",
            "60000",
        ])
        // `lock hold` reads every address; only Redis's is used by a Redis lock.
        .envs([
            ("DATABASE_URL", "unused"),
            ("REDLOCK_URLS", "unused"),
            ("ZOOKEEPER_CONNECT", "unused"),
            ("ETCD_ENDPOINTS", "unused"),
            ("MEMCACHED_ADDR", "unused"),
        ])
        .env("REDIS_URL", &redis)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    assert!(line.starts_with("granted "), "{line}");
    let lock = locks::redis::RedisLock::connect(&redis).unwrap();
    let options = AcquireOptions::new(Duration::from_secs(10));
    assert!(
        lock.acquire(&key, options).await.is_err(),
        "held by the child"
    );

    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the holder still runs 20 s after its stdin closed")
        .unwrap();
    assert!(status.success(), "{status}");
    // Given back, not expired: the lease had a minute left.
    let guard = lock.acquire(&key, options).await.expect("free again");
    guard.release().await.unwrap();
}
