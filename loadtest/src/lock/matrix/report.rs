//! The matrix's report (`matrix.md`, `matrix.html`): the matrix as one table of short cells, what a lock broke of what it claims
//! (in words, never only in a cell), and notes (¹–¹⁰) on how each column was measured, with
//! this run's settings.

use sandbox::REDLOCK_INSTANCES;

use super::availability::CONTENDERS;
use super::{Matrix, Requirement, Settings, claims, contention, duration};
use crate::report::section::Section;
use crate::report::table::Table;

/// The note marks of the columns, in [`Requirement::ALL`]'s order.
const MARKS: [&str; 10] = ["¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹", "¹⁰"];

/// The report's title.
pub const TITLE: &str = "Lock requirements matrix";

/// The whole report in Markdown.
pub fn render(m: &Matrix) -> String {
    format!("# {TITLE}\n\n{}", document(m).markdown())
}

/// The whole report, printed as Markdown and as HTML.
pub fn document(m: &Matrix) -> Section {
    let s = &m.settings;
    let mut out = Section::default();
    out.prose(format!(
        "`seckill-bench lock matrix{}`, started {}, {:.0} s in all. Every cell was measured in \
         this run against throwaway servers; the notes below the table say how.",
        if s.quick { " --quick" } else { "" },
        m.started_at,
        m.duration_seconds
    ));
    let mut titles = vec!["backend".to_string()];
    titles.extend(
        Requirement::ALL
            .iter()
            .zip(MARKS)
            .map(|(requirement, mark)| format!("{}{mark}", requirement.title())),
    );
    let mut table = Table::left(titles);
    for row in &m.rows {
        let mut cells = vec![format!("`{}` ({})", row.backend, row.deployment)];
        cells.extend(row.cells.iter().map(|c| c.text.clone()));
        table.row(cells);
    }
    out.table(table);
    let broken: Vec<String> = m
        .rows
        .iter()
        .filter_map(|row| {
            contention::broken_claims(row.backend, &row.contention, &row.availability)
        })
        .collect();
    if broken.is_empty() {
        out.prose(
            "Every lock kept what it claims: one holder at a time, and fencing tokens in grant \
             order.",
        );
    }
    for text in broken {
        out.prose(text);
    }
    out.append(claims::section(m));
    for (requirement, mark) in Requirement::ALL.iter().zip(MARKS) {
        out.prose(format!(
            "{mark} **{}**: {}",
            requirement.title(),
            note(*requirement, s)
        ));
    }
    if let Some(v) = &m.versions {
        let postgres =
            (m.postgres_version.as_ref()).map_or(String::new(), |p| format!(", PostgreSQL {p}"));
        out.prose(format!(
            "Servers: MariaDB {}, Redis {}, ZooKeeper {}, etcd {}, memcached {}{postgres}.",
            v.mariadb, v.redis, v.zookeeper, v.etcd, v.memcached
        ));
    }
    out
}

/// How `requirement`'s column was measured.
fn note(requirement: Requirement, s: &Settings) -> String {
    let contention = "the contention run of ¹";
    match requirement {
        Requirement::OneHolder => format!(
            "{} workers, each with a client of its own, contend for one lock for {} s \
             (`seckill-bench lock --check`); every attempt, grant, release and fenced write is \
             recorded, and the lock-history checker (`locks::history`) counts two holders at \
             once: a grant while another holding was open, with no release and no loss notice \
             in between. Nothing happens inside the lock but a Redis GET and SET of a counter, \
             whose lost increments are shown only if there were any.",
            s.workers, s.seconds
        ),
        Requirement::TokensInOrder => format!(
            "From {contention}: the checker counts a grant whose fencing token is not above \
             every token granted before it, and a write a fenced resource accepted from a \
             token that was no longer the newest."
        ),
        Requirement::NoDeadlock => format!(
            "A child process (`seckill-bench lock hold`) acquires the lock with a lease of {} \
             (ZooKeeper: a session timeout of that length) and is SIGKILLed holding it; another \
             client, refused while the child lived, tries every 20 ms: the time from the kill to \
             its grant.",
            duration(s.crash_lease_ms as f64)
        ),
        Requirement::Reentrancy => format!(
            "The holder asks for the lock again: through `reenter` where the lock offers it \
             (`redis-watchdog`, `redis-fair`, `db-lock-reentrant`, `db-row-lock`, \
             `db-blocking-insert`), and then another client must be refused after the \
             first release and granted after the second; elsewhere by a second `acquire` from \
             the holder's own client, waiting up to {}.",
            duration(s.reentry_wait_ms as f64)
        ),
        Requirement::NonBlockingTry => format!(
            "While one client holds the lock another tries {} times without waiting: the \
             median time to the `busy` answer (a grant would be printed in capitals).",
            s.tries
        ),
        Requirement::HighAvailability => format!(
            "One server (MariaDB, PostgreSQL, Redis, memcached): SIGKILLed, then a client asks once — the \
             time to its failure; \"no grant after restart\" if the same client was not granted \
             again once the server was back. Redlock: {minority} of {REDLOCK_INSTANCES} \
             instances killed, grants counted for {}, then one more killed. ZooKeeper, etcd: \
             {} clients contend on the three-member cluster whose leader is SIGKILLed and \
             restarted {} later; the time from the kill to the grant that ended the longest \
             stall between grants while it is down (a grant answered just after the kill was \
             committed before it), the run checked by the lock-history checker.",
            duration(s.minority_window_ms as f64),
            CONTENDERS,
            duration(s.leader_down_ms as f64),
            minority = REDLOCK_INSTANCES - (REDLOCK_INSTANCES / 2 + 1),
        ),
        Requirement::Performance => {
            format!("From {contention}: grants per second and the p99 of the time to acquire.")
        }
        Requirement::Fairness => format!(
            "From {contention}: Jain's index over the grants per worker, (Σx)²/(n·Σx²) (1 = \
             even), and the share of grants that went to the worker that had waited longest (1 \
             = first come, first served)."
        ),
        Requirement::NoHerd => format!(
            "From {contention}: the requests all clients sent per grant (their own count, \
             waiting included); on Redis also the commands the server executed per grant \
             (`total_commands_processed`, a Lua script's inner commands counted). A release that \
             wakes every waiter costs a request per waiter."
        ),
        Requirement::Notification => format!(
            "One client holds the lock for {} while {} waiters, each with a client of its own, \
             wait: the requests they sent meanwhile per waiter per second (a polling lock's \
             interval is its inverse; under 1 per second the waiters were notified, by the \
             mechanism named), and the time from the release to the first waiter's grant.",
            duration(s.held_ms as f64),
            s.waiters
        ),
    }
}
