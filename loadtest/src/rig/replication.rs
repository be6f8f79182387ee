//! Probes of Redis replication the failover scenarios share: a replica pointed at its primary
//! through a relay, and how many replicas have every write so far (`WAIT` after a write of its
//! own), and what a primary still holds back for its replicas.

use std::time::Duration;

use anyhow::Result;
use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{Client, cmd};

/// How long a replica's link may take to come up.
const LINK_PATIENCE: Duration = Duration::from_secs(60);

/// Points `replica` at the primary through the relay on `port`, and waits until the link is
/// up.
pub fn replicate_through(replica: &sandbox::Redis, port: u16) -> sandbox::Result<()> {
    replica.command(&["REPLICAOF", "127.0.0.1", &port.to_string()])?;
    let up = sandbox::wait_for(LINK_PATIENCE, || {
        let info = replica.command(&["INFO", "replication"]).ok()?;
        (info.contains("master_link_status:up") && info.contains(&format!("master_port:{port}")))
            .then_some(())
    });
    up.ok_or_else(|| sandbox::Error::Control {
        server: "redis replica".into(),
        action: "replicate",
        reason: format!("the link through the relay was not up within {LINK_PATIENCE:?}"),
    })
}

/// A connection of the scenario's own to one data server, patient with large replies and
/// with a `WAIT` of up to `wait`.
pub async fn connection(url: &str, wait: Duration) -> Result<MultiplexedConnection> {
    let mut conn = Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    // The client's default reply timeout is 500 ms.
    conn.set_response_timeout(wait + Duration::from_secs(10));
    Ok(conn)
}

/// A write of its own (a barrier), then `WAIT replicas <wait>`: how many replicas hold every
/// write the primary applied before the barrier. Replication is one ordered stream, so a
/// replica that acknowledged the barrier has every earlier write too, whichever connection
/// made it.
pub async fn replicas_with_everything(
    conn: &mut MultiplexedConnection,
    replicas: usize,
    wait: Duration,
) -> Result<i64> {
    let () = cmd("SET")
        .arg("scenario:replication:barrier")
        .arg(1)
        .query_async(conn)
        .await?;
    let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    Ok(cmd("WAIT")
        .arg(replicas)
        .arg(wait_ms)
        .query_async(conn)
        .await?)
}

/// Bytes the primary holds for the replica it has sent the most to (`omem` of `CLIENT
/// LIST`): what that replica has not received.
pub async fn held_back_bytes(conn: &mut MultiplexedConnection) -> Result<u64> {
    let list: String = cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("replica")
        .query_async(conn)
        .await?;
    Ok(list
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("omem="))
                .and_then(|v| v.parse().ok())
        })
        .min()
        .unwrap_or(0))
}
