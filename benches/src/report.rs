//! The round-trip table printed at the end of the lock benchmarks: each lock's median
//! acquire+release divided by the raw operations it is made of (all measured interleaved, see
//! [`crate::interleave`]), and where the tables are saved.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// One lock of the table, with the figures measured for it.
pub struct LockRow {
    pub lock: &'static str,
    /// Median acquire+release.
    pub median: Duration,
    /// Requests the lock client sent per acquire+release, as it counts them.
    pub requests_per_cycle: f64,
    /// The raw operations one acquire+release cannot do without: name, how many, median of one.
    pub minimum: Vec<(&'static str, u32, Duration)>,
}

/// Where criterion keeps its results: `$CRITERION_HOME`, else `<target dir>/criterion` (the
/// bench executable lives in `<target dir>/<profile>/deps/`).
pub fn criterion_home() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(PathBuf::from(home));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

/// The markdown table of `rows`.
pub fn round_trip_table(rows: &[LockRow]) -> String {
    let mut table = String::from(
        "| lock | acquire+release (median) | requests sent | minimum: raw operations (median each) | their sum | ratio |\n\
         |---|---:|---:|---|---:|---:|\n",
    );
    for row in rows {
        let minimum: Duration = row.minimum.iter().map(|(_, n, each)| *each * *n).sum();
        let parts: Vec<String> = row
            .minimum
            .iter()
            .map(|(op, n, each)| format!("{n} × {op} ({})", micros(*each)))
            .collect();
        let _ = writeln!(
            table,
            "| {} | {} | {:.1} | {} | {} | {:.2}× |",
            row.lock,
            micros(row.median),
            row.requests_per_cycle,
            parts.join(" + "),
            micros(minimum),
            row.median.as_secs_f64() / minimum.as_secs_f64()
        );
    }
    table
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}
