//! `redis-benchmark` (redis-tools): the `redis-lua` baseline's script, by `EVALSHA`, from the
//! same number of connections, sized from our own rate in the same round.

use std::time::Duration;

use super::{Outcome, address, find, run, shown};

pub const TOOL: &str = "redis-benchmark";

/// requests/s of the first data row of `--csv` output (`"test","rps",…`).
pub fn parse_csv(output: &str) -> Option<f64> {
    let mut lines = output.lines().filter(|l| l.starts_with('"'));
    let header: Vec<&str> = lines.next()?.split(',').collect();
    let column = header.iter().position(|h| h.trim_matches('"') == "rps")?;
    let row: Vec<&str> = lines.next()?.split("\",\"").collect();
    row.get(column)?.trim_matches('"').parse().ok()
}

/// `EVALSHA sha 1 key 1` from `clients` connections, about `requests` requests.
pub async fn measure(
    redis_url: &str,
    sha: &str,
    key: &str,
    clients: usize,
    requests: f64,
    limit: Duration,
) -> (String, Outcome) {
    let Some(program) = find(TOOL) else {
        return (TOOL.into(), Outcome::NotInstalled);
    };
    let Some(a) = address(redis_url) else {
        return (
            TOOL.into(),
            Outcome::Failed(format!("cannot read {redis_url}")),
        );
    };
    let n = (requests.ceil() as u64).max(10 * clients as u64);
    let mut args: Vec<String> = vec![
        "-h".into(),
        a.host,
        "-p".into(),
        a.port.unwrap_or(6379).to_string(),
        "-c".into(),
        clients.to_string(),
        "-n".into(),
        n.to_string(),
        "--csv".into(),
    ];
    let command = shown(TOOL, &args);
    if let Some(p) = a.password {
        args.extend(["-a".into(), p, "--no-auth-warning".into()]);
    }
    args.extend(["EVALSHA", sha, "1", key, "1"].map(String::from));
    let command = format!("{command} EVALSHA {sha} 1 {key} 1");
    let outcome = Outcome::of_run(run(&program, &args, &[], limit).await, |stdout| {
        parse_csv(stdout).map(|rps| (rps, n as f64))
    });
    (command, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_from_real_csv_output() {
        let csv = include_str!("samples/redis-benchmark.csv");
        assert_eq!(parse_csv(csv), Some(31545.74));
        // An unknown script: redis-benchmark prints the header and no row.
        let failed = "\"test\",\"rps\",\"avg_latency_ms\"\n";
        assert_eq!(parse_csv(failed), None);
    }
}
