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

static NICENESS: AtomicI32 = AtomicI32::new(0);

/// Servers started from now on run at `niceness` (0: at this process's own; at most 19).
pub fn set_server_niceness(niceness: i32) {
    NICENESS.store(niceness.clamp(0, 19), Ordering::Release);
}

/// The niceness servers are started at (0: this process's own).
pub fn server_niceness() -> i32 {
    NICENESS.load(Ordering::Acquire)
}

/// `command`, run at the servers' niceness: through `nice -n N` when one is set, with its
/// arguments, environment and directory. Unchanged when none is set, or when its program
/// cannot be found (so that spawning it fails with that program's name).
pub fn at_server_priority(command: Command) -> Command {
    niced(command, server_niceness())
}

fn niced(command: Command, niceness: i32) -> Command {
    let Some(program) = resolve(&command).filter(|_| niceness > 0) else {
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

/// The program's path: as given when it names a file, else the first match on `PATH`.
fn resolve(command: &Command) -> Option<PathBuf> {
    let program = PathBuf::from(command.get_program());
    if program.components().count() > 1 {
        return program.is_file().then_some(program);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(&program))
        .find(|p| p.is_file())
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
