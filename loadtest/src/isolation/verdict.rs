//! What each cell should show and why, and what it did show.
//!
//! The expectation is the engines' documented behaviour; the verdict is read from the cell's
//! figures alone. A report prints the reason beside the verdict, and names every cell where the
//! two disagree — a failure that did not happen in a run is luck of the timing, not safety, and
//! a failure where the engine should stop it is a finding.

use super::engine::{Engine, Level};
use super::failure::Failure;
use super::schema::Cell;

/// What the engine's rules make of a failure at a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Nothing stops it: it happens whenever the clicks overlap.
    Fails,
    /// The engine stops it, by making a click wait or by refusing it.
    Stops,
}

/// What a cell showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The failure happened.
    Failed,
    /// No failure, and the engine refused transactions a correct client ran again.
    StoppedByRefusing,
    /// No failure and no refusal.
    Held,
}

impl Verdict {
    pub fn of(cell: &Cell) -> Verdict {
        if cell.failures() > 0 {
            Verdict::Failed
        } else if cell.clicks().refusals_total() > 0 {
            Verdict::StoppedByRefusing
        } else {
            Verdict::Held
        }
    }

    pub fn agrees(self, expect: Expect) -> bool {
        (self == Verdict::Failed) == (expect == Expect::Fails)
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Failed => "fails",
            Verdict::StoppedByRefusing => "stopped, with retries",
            Verdict::Held => "stopped",
        }
    }
}

const LOST_WHY: [(Engine, Level, Expect, &str); 7] = [
    (
        Engine::Mariadb,
        Level::ReadCommitted,
        Expect::Fails,
        "the plain `SELECT` reads the last committed stock and locks nothing; the `UPDATE` waits \
         for the row's lock, then writes the value computed from the old read over the other \
         buyer's",
    ),
    (
        Engine::Mariadb,
        Level::RepeatableRead,
        Expect::Fails,
        "the `SELECT` reads the transaction's snapshot, but InnoDB's `UPDATE` writes the row's \
         latest version without asking whether it changed since that snapshot: MariaDB's \
         REPEATABLE READ is no guard against a lost update",
    ),
    (
        Engine::Mariadb,
        Level::SnapshotIsolation,
        Expect::Stops,
        "with `innodb_snapshot_isolation` on, writing a row another transaction changed after \
         this one's snapshot fails with error 1020 (record has changed since last read): the \
         second writer starts again and reads the stock that is left",
    ),
    (
        Engine::Mariadb,
        Level::Serializable,
        Expect::Stops,
        "SERIALIZABLE turns the plain `SELECT` into a shared-lock read: two buyers who both read \
         hold the shared lock, and each waits for the other's to write — a deadlock; one is \
         rolled back (1213) and runs again",
    ),
    (
        Engine::Postgres,
        Level::ReadCommitted,
        Expect::Fails,
        "each statement sees what was committed before it began; the `UPDATE` waits for the \
         other writer, re-checks its `WHERE` on the new row version — it still matches the id — \
         and writes the value computed from the old read",
    ),
    (
        Engine::Postgres,
        Level::RepeatableRead,
        Expect::Stops,
        "a transaction may not update a row another changed after its snapshot: the second \
         writer fails with 40001 (could not serialize access due to concurrent update) and \
         starts again",
    ),
    (
        Engine::Postgres,
        Level::Serializable,
        Expect::Stops,
        "as at REPEATABLE READ, the second writer of the row is refused with 40001; the \
         serializable checks add nothing this failure needs",
    ),
];

const NEGATIVE_WHY: [(Engine, Level, Expect, &str); 7] = [
    (
        Engine::Mariadb,
        Level::ReadCommitted,
        Expect::Fails,
        "the check reads a committed value; the deduction is relative to whatever the row holds \
         once it has the row's lock, so every buyer who passed the check before the last unit \
         went takes one more",
    ),
    (
        Engine::Mariadb,
        Level::RepeatableRead,
        Expect::Fails,
        "the check reads the snapshot, the `UPDATE` deducts from the row's latest version: no \
         update is lost, and nothing stops the count going below zero",
    ),
    (
        Engine::Mariadb,
        Level::SnapshotIsolation,
        Expect::Stops,
        "the `UPDATE` of a row changed since the snapshot fails with 1020; run again, the check \
         sees the stock that is really left",
    ),
    (
        Engine::Mariadb,
        Level::Serializable,
        Expect::Stops,
        "the check becomes a shared-lock read, and two buyers who both checked deadlock when \
         each would write (1213): one runs again and sees the other's deduction",
    ),
    (
        Engine::Postgres,
        Level::ReadCommitted,
        Expect::Fails,
        "the check reads what was committed before it; the `UPDATE` waits for the other writer \
         and deducts from the new version: the count goes below zero",
    ),
    (
        Engine::Postgres,
        Level::RepeatableRead,
        Expect::Stops,
        "the `UPDATE` of a row changed after the snapshot fails with 40001; run again, the \
         check sees the stock that is left",
    ),
    (
        Engine::Postgres,
        Level::Serializable,
        Expect::Stops,
        "the second writer of the row is refused with 40001, as at REPEATABLE READ",
    ),
];

const SKEW_WHY: [(Engine, Level, Expect, &str); 7] = [
    (
        Engine::Mariadb,
        Level::ReadCommitted,
        Expect::Fails,
        "each click counts the orders committed before it and none of the others' uncommitted \
         ones; inserts of different rows never wait for each other",
    ),
    (
        Engine::Mariadb,
        Level::RepeatableRead,
        Expect::Fails,
        "each click counts the orders in its snapshot — none — and inserts a row of its own: \
         there is nothing for InnoDB to wait on or refuse",
    ),
    (
        Engine::Mariadb,
        Level::SnapshotIsolation,
        Expect::Fails,
        "snapshot isolation refuses a write to a row changed since the snapshot; each click \
         writes a row of its own, so there is none: write skew is what snapshot isolation \
         allows",
    ),
    (
        Engine::Mariadb,
        Level::Serializable,
        Expect::Stops,
        "the count becomes a locking read holding next-key locks on the buyer's range of the \
         index: another click's insert into that range waits, and two clicks that both counted \
         deadlock (1213) — one runs again and finds the other's order",
    ),
    (
        Engine::Postgres,
        Level::ReadCommitted,
        Expect::Fails,
        "each click counts the orders committed before it and none of the others' uncommitted \
         ones; inserts of different rows never wait for each other",
    ),
    (
        Engine::Postgres,
        Level::RepeatableRead,
        Expect::Fails,
        "PostgreSQL's REPEATABLE READ is snapshot isolation: each click counts no order in its \
         snapshot, and only rows two transactions both wrote are checked — here there are none",
    ),
    (
        Engine::Postgres,
        Level::Serializable,
        Expect::Stops,
        "serializable snapshot isolation records what each click read (predicate locks on the \
         buyer's range of the index) and that the other inserted into it; two such transactions \
         form a dangerous structure, and one is refused with 40001, runs again, and finds the \
         other's order",
    ),
];

const CONDITIONAL_WHY: [(Engine, Level, Expect, &str); 7] = [
    (
        Engine::Mariadb,
        Level::ReadCommitted,
        Expect::Stops,
        "nothing is read before the write: the `UPDATE` checks `stock >= q` on the row's latest \
         version while it holds the row's lock",
    ),
    (
        Engine::Mariadb,
        Level::RepeatableRead,
        Expect::Stops,
        "an `UPDATE` reads the row's latest version under its lock at every level (a current \
         read), so the condition holds whatever the snapshot says",
    ),
    (
        Engine::Mariadb,
        Level::SnapshotIsolation,
        Expect::Stops,
        "the `UPDATE` is the transaction's first statement: no snapshot has been read, so \
         there is nothing for snapshot isolation to refuse, and the condition is checked under \
         the row's lock",
    ),
    (
        Engine::Mariadb,
        Level::Serializable,
        Expect::Stops,
        "no plain read for SERIALIZABLE to lock: the `UPDATE` takes the row's lock and checks \
         the condition as at any level",
    ),
    (
        Engine::Postgres,
        Level::ReadCommitted,
        Expect::Stops,
        "the `UPDATE` waits for the row's other writer, then re-checks `stock >= q` on the new \
         row version (EvalPlanQual) before writing: no retry needed",
    ),
    (
        Engine::Postgres,
        Level::RepeatableRead,
        Expect::Stops,
        "safe, but the second updater of the row is not re-checked at this level: it is refused \
         with 40001, and a correct client must run even this statement again — the update that \
         needs no isolation pays for the level it runs at",
    ),
    (
        Engine::Postgres,
        Level::Serializable,
        Expect::Stops,
        "safe, and as at REPEATABLE READ the second updater of the row is refused with 40001 \
         and runs again",
    ),
];

/// What `failure` should show on `engine` at `level`, and why.
pub fn expect(failure: Failure, engine: Engine, level: Level) -> (Expect, &'static str) {
    let table = match failure {
        Failure::LostUpdate | Failure::PhantomInventory => &LOST_WHY,
        Failure::NegativeStock => &NEGATIVE_WHY,
        Failure::WriteSkew => &SKEW_WHY,
        Failure::Conditional => &CONDITIONAL_WHY,
    };
    (table.iter())
        .find(|(e, l, _, _)| *e == engine && *l == level)
        .map(|(_, _, expect, why)| (*expect, *why))
        .unwrap_or((Expect::Fails, "this level does not exist on this engine"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_the_matrix_runs_has_a_reason() {
        for failure in Failure::ALL {
            for engine in Engine::ALL {
                for level in engine.levels() {
                    let (_, why) = expect(failure, engine, *level);
                    assert!(
                        !why.starts_with("this level"),
                        "{failure:?} {engine:?} {level:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn only_serializable_stops_write_skew_on_either_engine() {
        for engine in Engine::ALL {
            for level in engine.levels() {
                let (e, _) = expect(Failure::WriteSkew, engine, *level);
                assert_eq!(e == Expect::Stops, *level == Level::Serializable);
            }
        }
    }
}
