//! The falls (`analyse::falls`) in words, for the top of a run's report and of a comparison:
//! nothing when nothing fell.

use std::fmt::Write;

use crate::schema::{Fall, Fallen};

/// The lead of a run's falls.
pub const AGAINST_BEST: &str = "Fell by more than half against the best run on this machine";
/// The lead of a comparison's falls.
pub const AGAINST_A: &str = "Fell by more than half from run A";

/// `lead`, then one line per fall: `` `batched` 1826/s against 12701/s in <run> (0.14×) ``.
pub fn markdown(lead: &str, falls: &[Fall]) -> String {
    if falls.is_empty() {
        return String::new();
    }
    let mut md = format!("**{lead}:**\n\n");
    for f in falls {
        let _ = writeln!(
            md,
            "- {} {:.0}/s against {:.0}/s in {} ({}×)",
            name(f.fallen),
            f.median,
            f.best_median,
            f.best_run(),
            ratio(f.ratio)
        );
    }
    md.push('\n');
    md
}

fn name(fallen: Fallen) -> String {
    match fallen {
        Fallen::Strategy(s) => format!("`{s}`"),
        Fallen::Baseline(b) => format!("baseline `{b}`"),
    }
}

/// Two decimals, three below 0.1: a fall to 0.004 is not a fall to 0.00.
fn ratio(r: f64) -> String {
    match r < 0.1 {
        true => format!("{r:.3}"),
        false => format!("{r:.2}"),
    }
}
