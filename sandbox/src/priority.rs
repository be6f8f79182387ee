//! The servers' scheduling priority.
//!
//! On a machine where the load generator shares its cores with the servers it measures, a
//! generator that waits for a core sends late and reads late, and an open loop, which times
//! each request from the moment it was due, charges that wait to the service: in a run on two
//! cores, a refusal the service wrote within 84 ms of the send was 467 ms late from its due
//! time, because the generator itself had waited for a core. Buyers' clicks come from their own
//! machines. So a benchmark may set a niceness (`nice(1)`) for the servers it starts — the
//! database, Redis, the lock services, the app instances — and leave its own process at the
//! default: the kernel then gives the generator a core first, and its lateness stops standing
//! in for the service's. The servers compete with each other exactly as before.
//!
//! Nothing here needs privileges: a process may always lower its children's priority. Unset
//! (the default, and what the tests use), servers run at the niceness of the process that
//! starts them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::process::find_program;

static NICENESS: AtomicI32 = AtomicI32::new(0);

/// Servers started from now on run at `niceness` (0: at this process's own; at most 19).
pub fn set_server_niceness(niceness: i32) {
    NICENESS.store(niceness.clamp(0, 19), Ordering::Release);
}

/// `command`, run at the servers' niceness: through `nice -n N` when one is set, with its
/// arguments, environment and directory. Unchanged when none is set, or when its program
/// cannot be found (so that spawning it fails with that program's name).
pub fn at_server_priority(command: Command) -> Command {
    niced(command, NICENESS.load(Ordering::Acquire))
}

fn niced(command: Command, niceness: i32) -> Command {
    if niceness <= 0 {
        return command;
    }
    let Some(program) = resolve(&command) else {
        return command;
    };
    let mut niced = Command::new("nice");
    niced
        .arg("-n")
        .arg(niceness.to_string())
        .arg(program)
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => niced.env(key, value),
            None => niced.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        niced.current_dir(dir);
    }
    niced
}

/// The program's path, where [`find_program`] finds it; `None` when it finds no file (it
/// falls back to the bare name, which names none here).
fn resolve(command: &Command) -> Option<PathBuf> {
    let found = find_program(&command.get_program().to_string_lossy());
    (found.components().count() > 1 && found.is_file()).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn niceness_seen_by(command: Command) -> String {
        let mut command = command;
        let out = command.output().expect("runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    }

    fn report_niceness() -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", "echo \"$(nice) $PROBE\""])
            .env("PROBE", "kept");
        c
    }

    #[test]
    fn a_niced_server_runs_that_much_nicer_than_its_starter_with_its_arguments_and_environment() {
        let own: i32 = niceness_seen_by(Command::new("nice"))
            .parse()
            .expect("a number");
        let seen = niceness_seen_by(niced(report_niceness(), 7));
        assert_eq!(seen, format!("{} kept", (own + 7).min(19)));
    }

    #[test]
    fn without_a_niceness_the_command_is_left_as_it_was() {
        let c = niced(report_niceness(), 0);
        assert_eq!(c.get_program(), "sh");
    }

    #[test]
    fn a_program_that_is_not_installed_is_left_to_fail_under_its_own_name() {
        let c = niced(Command::new("no-such-server-anywhere"), 7);
        assert_eq!(c.get_program(), "no-such-server-anywhere");
    }
}
