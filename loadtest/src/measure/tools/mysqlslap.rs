//! `mysqlslap` (mariadb-client): the SQL baselines' work from MariaDB's own load client.
//!
//! It runs a fixed number of statements, spread over its clients, and prints how long that
//! took; the count is sized from our own rate in the same round so that both run about as
//! long. A transaction is one `--query` of four statements (`BEGIN; UPDATE …; INSERT …;
//! COMMIT`), and every client runs whole transactions.

use std::time::Duration;

use super::{Outcome, Work, address, find, run, shown};

pub const TOOL: &str = "mysqlslap";

/// The work's statements, as one `--query` (a transaction's four joined by `;`).
fn query(work: Work) -> &'static str {
    match work {
        Work::HotRow => "UPDATE products SET stock = stock - 1 WHERE id = 2",
        Work::ConditionalTransaction => {
            "BEGIN;UPDATE products SET stock = stock - 1 WHERE id = 1 AND stock >= 1;\
             INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, \
             fencing_token) VALUES (1, 'baseline', 1, 'conditional', UUID(), NULL);COMMIT"
        }
    }
}

/// Statements per operation.
fn statements_of(work: Work) -> u64 {
    match work {
        Work::HotRow => 1,
        Work::ConditionalTransaction => 4,
    }
}

/// How many statements to ask for: about `operations` operations, whole ones per client.
pub fn statements(work: Work, operations: f64, clients: usize) -> (u64, u64) {
    let clients = clients.max(1) as u64;
    let per_client = ((operations / clients as f64).ceil() as u64).max(10);
    let ops = per_client * clients;
    (ops * statements_of(work), ops)
}

/// "Average number of seconds to run all queries: 0.151 seconds" → 0.151.
pub fn parse_seconds(output: &str) -> Option<f64> {
    output
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Average number of seconds to run all queries:")
        })?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `work` from `clients` connections for about `operations` operations against the
/// database `schema` of the server at `server_url`.
pub async fn measure(
    server_url: &str,
    schema: &str,
    work: Work,
    clients: usize,
    operations: f64,
    limit: Duration,
) -> (String, Outcome) {
    let Some(program) = find(TOOL) else {
        return (TOOL.into(), Outcome::NotInstalled);
    };
    let Some(a) = address(server_url) else {
        return (
            TOOL.into(),
            Outcome::Failed(format!("cannot read {server_url}")),
        );
    };
    let (total, ops) = statements(work, operations, clients);
    let mut args = vec![
        format!("--host={}", a.host),
        format!("--port={}", a.port.unwrap_or(3306)),
        format!("--user={}", a.user.as_deref().unwrap_or("root")),
        format!("--create-schema={schema}"),
        format!("--concurrency={clients}"),
        "--iterations=1".into(),
        format!("--number-of-queries={total}"),
        format!("--query={}", query(work)),
    ];
    if statements_of(work) > 1 {
        args.push("--delimiter=;".into());
    }
    let command = shown(TOOL, &args);
    let env: Vec<(&str, String)> = a.password.map(|p| ("MYSQL_PWD", p)).into_iter().collect();
    let outcome = Outcome::of_run(run(&program, &args, &env, limit).await, |stdout| {
        let secs = parse_seconds(stdout).filter(|&secs| secs > 0.0)?;
        Some((ops as f64 / secs, ops as f64))
    });
    (command, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_time_is_read_from_real_output() {
        let hot = include_str!("samples/mysqlslap-hot-row.txt");
        assert_eq!(parse_seconds(hot), Some(0.151));
        let tx = include_str!("samples/mysqlslap-transaction.txt");
        assert_eq!(parse_seconds(tx), Some(0.099));
        assert_eq!(parse_seconds("mysqlslap: Error when connecting"), None);
    }

    #[test]
    fn every_client_runs_whole_transactions() {
        // 8 clients, about 100 transactions: 13 each, 4 statements per transaction.
        assert_eq!(
            statements(Work::ConditionalTransaction, 100.0, 8),
            (13 * 8 * 4, 13 * 8)
        );
        assert_eq!(statements(Work::HotRow, 10_000.0, 64), (157 * 64, 157 * 64));
        assert_eq!(
            statements(Work::HotRow, 0.0, 4),
            (40, 40),
            "at least 10 per client"
        );
    }
}
