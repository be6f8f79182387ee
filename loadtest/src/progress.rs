//! The progress bar: one step per phase, showing strategy, phase and elapsed time (stderr).

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    current: Mutex<String>,
}

impl Progress {
    pub fn new(steps: u64) -> Progress {
        let bar = ProgressBar::new(steps);
        bar.set_style(
            ProgressStyle::with_template(
                "[{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}",
            )
            .expect("valid progress template")
            .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress {
            bar,
            current: Mutex::new(String::new()),
        }
    }

    /// Starts a step: completes the previous one and shows `subject · phase`.
    pub fn phase(&self, subject: &str, phase: &str) {
        let mut current = self.current.lock().expect("progress lock");
        if !current.is_empty() {
            self.bar.inc(1);
        }
        *current = format!("{subject} · {phase}");
        self.bar.set_message(current.clone());
    }

    /// Shows a phase without counting a step (e.g. the open loop after the closed one).
    pub fn detail(&self, subject: &str, phase: &str) {
        self.bar.set_message(format!("{subject} · {phase}"));
    }

    /// Prints a line above the bar.
    pub fn println(&self, line: impl AsRef<str>) {
        self.bar.println(line.as_ref());
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
