//! `wrk`: `GET /api/noop` from the same number of connections as our `http-noop`, one `wrk`
//! per app instance (wrk talks to one address), all at once, for the same window; their rates
//! add up.

use std::time::Duration;

use super::{Outcome, find, run, shown};

pub const TOOL: &str = "wrk";

/// What one wrk run printed: requests/s, requests, and answers outside 2xx/3xx plus socket
/// errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub per_sec: f64,
    pub requests: f64,
    pub errors: u64,
}

pub fn parse(output: &str) -> Option<Figures> {
    let value = |prefix: &str| {
        output
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let per_sec = value("Requests/sec:")?.parse().ok()?;
    let requests = output
        .lines()
        .find(|l| l.contains(" requests in "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let non_2xx: u64 = value("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let socket: u64 = value("Socket errors:").map_or(0, |v| {
        v.split(',')
            .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    });
    Some(Figures {
        per_sec,
        requests,
        errors: non_2xx + socket,
    })
}

/// `connections` connections over the instances at `bases` for `seconds`.
pub async fn measure(
    bases: &[String],
    connections: usize,
    seconds: f64,
    limit: Duration,
) -> (String, Outcome) {
    let Some(program) = find(TOOL) else {
        return (TOOL.into(), Outcome::NotInstalled);
    };
    let each = connections.div_ceil(bases.len().max(1)).max(1);
    let secs = seconds.ceil().max(1.0) as u64;
    let argv: Vec<Vec<String>> = bases
        .iter()
        .map(|b| {
            vec![
                "-t1".into(),
                format!("-c{each}"),
                format!("-d{secs}s"),
                format!("{b}/api/noop"),
            ]
        })
        .collect();
    let command = argv
        .iter()
        .map(|a| shown(TOOL, a))
        .collect::<Vec<_>>()
        .join(" & ");
    let runs =
        futures::future::join_all(argv.iter().map(|args| run(&program, args, &[], limit))).await;
    let (mut per_sec, mut requests, mut cpu) = (0.0, 0.0, Some(0.0));
    for r in runs {
        let out = match r {
            Ok(out) => out,
            Err(e) => return (command, Outcome::Failed(e)),
        };
        match parse(&out.stdout) {
            Some(f) if out.success && f.errors == 0 => {
                per_sec += f.per_sec;
                requests += f.requests;
            }
            Some(f) => {
                return (
                    command,
                    Outcome::Failed(format!("{} error answers or socket errors", f.errors)),
                );
            }
            None => {
                return (
                    command,
                    Outcome::Failed(format!("{}{}", out.stdout.trim(), out.stderr.trim())),
                );
            }
        }
        // Concurrent children: the waited-for total is only right for all of them together.
        cpu = cpu.zip(out.cpu_seconds).map(|(a, b): (f64, f64)| a.max(b));
    }
    (
        command,
        Outcome::Measured {
            per_sec,
            operations: requests,
            cpu_seconds: cpu,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_and_count_are_read_from_real_output() {
        let f = parse(include_str!("samples/wrk.txt")).unwrap();
        assert_eq!(f.per_sec, 582.80);
        assert_eq!(f.requests, 1169.0);
        assert_eq!(f.errors, 0);
        assert_eq!(parse(include_str!("samples/wrk-refused.txt")), None);
    }

    #[test]
    fn error_answers_and_socket_errors_are_counted() {
        let out = "  10 requests in 1.00s, 1KB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\n  Non-2xx or 3xx responses: 4\nRequests/sec:     10.00\n";
        let f = parse(out).unwrap();
        assert_eq!(f.errors, 7);
    }
}
