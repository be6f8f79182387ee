//! Progress on stderr, one step per phase. On a terminal: a bar showing strategy, phase and
//! elapsed time. Anywhere else (CI, `nohup`, a pipe): one plain line per phase with the
//! elapsed time and an estimate of what is left, so a log shows where a long run is.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    out: Output,
    started: Instant,
    steps: u64,
    /// Steps started so far, and the current one's label.
    current: Mutex<(u64, String)>,
}

enum Output {
    Bar(ProgressBar),
    Lines,
}

impl Progress {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn new(steps: u64) -> Progress {
        let out = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(steps);
            bar.set_style(
                ProgressStyle::with_template(
                    "[{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}",
                )
                .expect("valid progress template")
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(250));
            Output::Bar(bar)
        } else {
            Output::Lines
        };
        Progress {
            out,
            started: Instant::now(),
            steps,
            current: Mutex::new((0, String::new())),
        }
    }

    /// Starts a step: completes the previous one and shows `subject · phase`.
    pub fn phase(&self, subject: &str, phase: &str) {
        let mut current = self.current.lock().expect("progress lock");
        let done = current.0;
        current.0 += 1;
        current.1 = format!("{subject} · {phase}");
        match &self.out {
            Output::Bar(bar) => {
                if done > 0 {
                    bar.inc(1);
                }
                bar.set_message(current.1.clone());
            }
            Output::Lines => eprintln!(
                "{}",
                line(self.started.elapsed(), done, self.steps, &current.1)
            ),
        }
    }

    /// Prints a line (above the bar on a terminal).
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.out {
            Output::Bar(bar) => bar.println(line.as_ref()),
            Output::Lines => eprintln!("{}", line.as_ref()),
        }
    }

    pub fn finish(&self) {
        match &self.out {
            Output::Bar(bar) => bar.finish_and_clear(),
            Output::Lines => eprintln!(
                "[{}] done, {} steps",
                clock(self.started.elapsed()),
                self.steps
            ),
        }
    }
}

/// `[ 3:12] step 15/97, about 18:40 left: conditional · closed loop`.
fn line(elapsed: Duration, done: u64, steps: u64, what: &str) -> String {
    let left = remaining(elapsed, done, steps).map_or_else(
        || "no estimate yet".into(),
        |d| format!("about {} left", clock(d).trim_start()),
    );
    format!(
        "[{}] step {}/{}, {left}: {what}",
        clock(elapsed),
        done + 1,
        steps.max(done + 1)
    )
}

/// What is left of the run, assuming the steps still to come take as long on average as the
/// `done` ones took. `None` before the first step is done.
pub fn remaining(elapsed: Duration, done: u64, steps: u64) -> Option<Duration> {
    if done == 0 {
        return None;
    }
    let per_step = elapsed.as_secs_f64() / done as f64;
    Some(Duration::from_secs_f64(
        per_step * steps.saturating_sub(done) as f64,
    ))
}

/// `m:ss`, or `h:mm:ss` from one hour on.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:2}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_extrapolates_the_average_step_to_the_steps_left() {
        let left = remaining(Duration::from_secs(60), 3, 10).unwrap();
        assert_eq!(left, Duration::from_secs(140));
        assert_eq!(remaining(Duration::from_secs(5), 0, 10), None);
        assert_eq!(
            remaining(Duration::from_secs(60), 12, 10),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_log_line_names_the_step_the_elapsed_time_and_the_time_left() {
        let l = line(Duration::from_secs(192), 4, 10, "conditional · closed loop");
        assert_eq!(
            l,
            "[ 3:12] step 5/10, about 4:48 left: conditional · closed loop"
        );
        let first = line(Duration::ZERO, 0, 10, "baseline · http-noop");
        assert!(first.contains("no estimate yet"), "{first}");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
