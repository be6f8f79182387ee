//! PgBouncer in front of the sandbox's PostgreSQL, as its clients see it: behind transaction
//! pooling, what one client leaves on a server session is found by the next client handed that
//! session; behind session pooling, each client has its own.

use sandbox::{PgBouncer, Pooling, Postgres};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

async fn start(pooling: Pooling, pool_size: u32) -> (Postgres, PgBouncer) {
    tokio::task::spawn_blocking(move || {
        let pg = Postgres::start().expect("postgres starts");
        let bouncer = PgBouncer::start(pg.port(), pooling, pool_size).expect("pgbouncer starts");
        (pg, bouncer)
    })
    .await
    .expect("start thread")
}

/// A client of PgBouncer, its statement cache off: PgBouncer 1.18 keeps no prepared statement
/// across the server sessions it hands out.
async fn client(bouncer: &PgBouncer) -> PgConnection {
    let options: PgConnectOptions = format!("{}/postgres", bouncer.url()).parse().unwrap();
    options
        .statement_cache_capacity(0)
        .connect()
        .await
        .expect("connect through pgbouncer")
}

/// What the session the statement ran on holds in the custom setting `seckill.owner`.
async fn owner(conn: &mut PgConnection) -> String {
    sqlx::query_scalar("SELECT coalesce(current_setting('seckill.owner', true), '')")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn behind_transaction_pooling_a_session_setting_of_one_client_is_found_by_another() {
    sandbox::require_faults!();
    let (_pg, bouncer) = start(Pooling::Transaction, 1).await;
    let mut a = client(&bouncer).await;
    let mut b = client(&bouncer).await;
    sqlx::raw_sql("SET seckill.owner = 'a'")
        .execute(&mut a)
        .await
        .unwrap();
    assert_eq!(
        owner(&mut b).await,
        "a",
        "B was handed the session A left its setting on"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test]
async fn behind_session_pooling_each_client_keeps_a_session_of_its_own() {
    sandbox::require_faults!();
    let (_pg, bouncer) = start(Pooling::Session, 2).await;
    let mut a = client(&bouncer).await;
    let mut b = client(&bouncer).await;
    sqlx::raw_sql("SET seckill.owner = 'a'")
        .execute(&mut a)
        .await
        .unwrap();
    assert_eq!(owner(&mut b).await, "");
    assert_eq!(owner(&mut a).await, "a");
    a.close().await.unwrap();
    b.close().await.unwrap();
}
