//! `pgbench` (postgresql-15): the SQL baselines' work from PostgreSQL's own load client, on a
//! run whose rows PostgreSQL holds.
//!
//! It runs a script of the baseline's statements from each client, over and over, for a time
//! given in whole seconds, and prints how many transactions it completed and their rate. It
//! prepares its statements (`-M prepared`), as sqlx does ours; a transaction's statements are
//! the script's lines between `BEGIN` and `END`.

use std::time::Duration;

use super::{Outcome, Work, address, run, shown};

pub const TOOL: &str = "pgbench";

/// The work's script, one statement a line.
fn script(work: Work) -> &'static str {
    match work {
        Work::HotRow => "UPDATE products SET stock = stock - 1 WHERE id = 2;\n",
        Work::ConditionalTransaction => {
            "BEGIN;\n\
             UPDATE products SET stock = stock - 1 WHERE id = 1 AND stock >= 1;\n\
             INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, \
             fencing_token) VALUES (1, 'baseline', 1, 'conditional', gen_random_uuid()::text, \
             NULL);\n\
             END;\n"
        }
    }
}

/// `(transactions per second, transactions)` from pgbench's summary: its
/// `number of transactions actually processed: N` and `tps = R (without initial connection
/// time)` lines.
pub fn parse(output: &str) -> Option<(f64, f64)> {
    let field = |prefix: &str| {
        output
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix))?
            .split_whitespace()
            .next()?
            .parse::<f64>()
            .ok()
    };
    Some((
        field("tps =")?,
        field("number of transactions actually processed:")?,
    ))
}

/// Runs `work` from `clients` connections for `seconds` (whole, at least 1) against the
/// database `database` of the server at `server_url`.
pub async fn measure(
    server_url: &str,
    database: &str,
    work: Work,
    clients: usize,
    seconds: f64,
    limit: Duration,
) -> (String, Outcome) {
    // Debian's directory for PostgreSQL's programs, else PATH: where the sandbox finds them.
    let Some(program) = Some(sandbox::postgres_program(TOOL)).filter(|p| p.is_file()) else {
        return (TOOL.into(), Outcome::NotInstalled);
    };
    let Some(a) = address(server_url) else {
        return (
            TOOL.into(),
            Outcome::Failed(format!("cannot read {server_url}")),
        );
    };
    let file = std::env::temp_dir().join(format!(
        "seckill-bench-pgbench-{}-{work:?}.sql",
        std::process::id()
    ));
    if let Err(e) = std::fs::write(&file, script(work)) {
        return (
            TOOL.into(),
            Outcome::Failed(format!("writing {}: {e}", file.display())),
        );
    }
    let clients = clients.max(1);
    let args = vec![
        format!("--host={}", a.host),
        format!("--port={}", a.port.unwrap_or(5432)),
        format!("--username={}", a.user.as_deref().unwrap_or("postgres")),
        "--no-vacuum".into(),
        "--protocol=prepared".into(),
        format!("--client={clients}"),
        // Two threads send for the clients, as many as the machine's cores.
        format!("--jobs={}", clients.min(2)),
        format!("--time={}", seconds.round().max(1.0) as u64),
        format!("--file={}", file.display()),
        database.to_owned(),
    ];
    let command = shown(TOOL, &args);
    let env: Vec<(&str, String)> = a.password.map(|p| ("PGPASSWORD", p)).into_iter().collect();
    let outcome = Outcome::of_run(run(&program, &args, &env, limit).await, parse);
    let _ = std::fs::remove_file(&file);
    (command, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_and_the_transactions_are_read_from_real_output() {
        let hot = include_str!("samples/pgbench-hot-row.txt");
        assert_eq!(parse(hot), Some((4071.200484, 8138.0)));
        let tx = include_str!("samples/pgbench-transaction.txt");
        assert_eq!(parse(tx), Some((2355.809830, 4709.0)));
        assert_eq!(parse("pgbench: error: connection to server failed"), None);
    }
}
