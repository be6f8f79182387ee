//! The falls (`analyse::falls`) in words, for the top of a run's report and of a comparison:
//! nothing when nothing fell.

use std::fmt::Write;

use crate::schema::{BaselineFall, Fall, Fallen};

/// The lead of a run's falls.
pub const AGAINST_BEST: &str = "Fell by more than half against the best run on this machine";
/// The lead of a comparison's falls.
pub const AGAINST_A: &str = "Fell by more than half from run A";

/// `lead`, then one line per fall beyond the machine's (`` `batched` 1826/s against 12701/s
/// in <run> (0.14×; `sql-conditional` 0.95× in the same two runs) ``), then the falls that are
/// the machine's ([`Fall::with_the_machine`]) in one paragraph, so that a slow day does not
/// bury a real fall among thirty of its own.
pub fn markdown(lead: &str, falls: &[Fall]) -> String {
    let (machine, beyond): (Vec<&Fall>, Vec<&Fall>) =
        falls.iter().partition(|f| f.with_the_machine());
    let mut md = String::new();
    if !beyond.is_empty() {
        let _ = write!(md, "**{lead}:**\n\n");
        for f in beyond {
            let reference = f.baseline.map_or(String::new(), |b| {
                format!("; {} in the same two runs", reference(b))
            });
            let door = f.door_percent.map_or(String::new(), |percent| {
                format!(
                    ": {percent:.0}% of its closed loop's attempts in this run were refused at \
                     the door, `503 overloaded`"
                )
            });
            let _ = writeln!(
                md,
                "- {} {:.0}/s against {:.0}/s in {} ({}×{reference}){door}",
                name(f.fallen),
                f.median,
                f.best_median,
                f.best_run(),
                ratio(f.ratio)
            );
        }
        md.push('\n');
    }
    if !machine.is_empty() {
        let each: Vec<String> = (machine.iter())
            .map(|f| match f.baseline {
                Some(b) => format!("{} {}× ({})", name(f.fallen), ratio(f.ratio), reference(b)),
                None => format!("{} {}×", name(f.fallen), ratio(f.ratio)),
            })
            .collect();
        let _ = write!(
            md,
            "**{lead}, as far as the machine did** (each within half of how far its reference \
             fell between the same two runs: a strategy's own baseline, `http-noop` for a \
             baseline): {}.\n\n",
            each.join(", ")
        );
    }
    md
}

/// How far a fall's reference fell: `` `sql-conditional` 0.95× ``.
fn reference(b: BaselineFall) -> String {
    format!("`{}` {}×", b.name, ratio(b.ratio))
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
