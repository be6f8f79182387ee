//! The isolation matrix's report: `isolation.json`, `report.md`, and the same as `report.html`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::cell::PHANTOM_UNITS;
use super::engine::{Engine, Level};
use super::failure::{Failure, MAX_ATTEMPTS};
use super::schema::{Cell, IsolationReport};
use super::verdict::{Expect, Verdict, expect};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::schema::history::RunKind;

/// The matrix's figures, beside `report.md`.
pub const JSON: &str = RunKind::Isolation.file();

/// Writes the report's files into `dir`.
pub fn write_all(dir: &Path, r: &IsolationReport) -> Result<()> {
    crate::schema::json::write_as(&dir.join(JSON), r)?;
    let (title, body) = (TITLE, document(r));
    std::fs::write(
        dir.join("report.md"),
        format!("# {title}\n\n{}", body.markdown()),
    )?;
    std::fs::write(
        dir.join("report.html"),
        crate::report::html::page::of(title, &body),
    )?;
    Ok(())
}

/// The matrix written in `dir` ([`JSON`]), as [`write_all`] wrote it.
pub fn read(dir: &Path) -> Result<IsolationReport> {
    crate::schema::json::read_as(&dir.join(JSON))
}

/// The report's title.
const TITLE: &str = "Isolation matrix: which level stops which flash-sale failure";

/// The whole report in Markdown.
pub fn markdown(r: &IsolationReport) -> String {
    format!("# {TITLE}\n\n{}", document(r).markdown())
}

/// The whole report, printed as Markdown and as HTML.
fn document(r: &IsolationReport) -> Section {
    let s = &r.settings;
    let mut doc = Section::default();
    let servers: Vec<String> = (r.servers.iter())
        .map(|s| format!("{} {}", s.engine.name(), s.version))
        .collect();
    doc.prose(format!(
        "Started {}, {:.0} s, on {}. Each cell is one failure's transaction run by {} \
         connections at once on one engine at one level (set on each connection and read \
         back), {} time(s), the cells' order rotated each round; counts are summed over the \
         rounds, rates are their median. A click the engine refuses (deadlock, serialization \
         failure, record changed) is run again from the start, as a correct client must: at once \
         the first time, then after a random pause of up to 1, 2, 4 … 32 ms, up to {} times.\n\n\
         The stock failures sell {} units one per click until sold out; the write skew is {} \
         buyers clicking {} times at once for one per customer; the phantom inventory is {} \
         sales of {PHANTOM_UNITS} units to two buyers at once, one ordering 3 and one 2. \
         Judged from the database afterwards.",
        r.started_at,
        r.duration_seconds,
        servers.join(" and "),
        s.sessions,
        s.rounds,
        MAX_ATTEMPTS,
        s.stock,
        s.buyers,
        s.clicks_per_buyer,
        s.sales,
    ));
    matrix(r, &mut doc);
    for failure in Failure::ALL {
        section(r, failure, &mut doc);
    }
    differences(r, &mut doc);
    disagreements(r, &mut doc);
    doc
}

/// The columns of the matrix: every engine's levels.
fn columns() -> Vec<(Engine, Level)> {
    (Engine::ALL.iter())
        .flat_map(|e| e.levels().iter().map(|l| (*e, *l)))
        .collect()
}

/// A cell in the matrix's words.
fn mark(cell: &Cell) -> String {
    match Verdict::of(cell) {
        Verdict::Failed => format!("**fails** ({})", cell.failures()),
        Verdict::StoppedByRefusing => format!("stops, {} retries", cell.clicks().refusals_total()),
        Verdict::Held => "stops".into(),
    }
}

fn matrix(r: &IsolationReport, doc: &mut Section) {
    doc.heading(2, "The matrix");
    doc.prose(
        "A failure's count in brackets; *retries*: transactions the engine \
         refused and the client ran again. RC read committed, RR repeatable read, RR+SI \
         MariaDB's repeatable read with `innodb_snapshot_isolation` on, SER serializable.",
    );
    let titles: Vec<String> = (columns().iter())
        .map(|(e, l)| format!("{} {}", e.name(), l.short()))
        .collect();
    let mut table = Table::left(["failure (strategy)"]).and_left(titles);
    for failure in Failure::ALL {
        let mut row = vec![format!("{} (`{}`)", failure.name(), failure.strategy())];
        for (engine, level) in columns() {
            row.push(r.cell(failure, engine, level).map_or("–".into(), mark));
        }
        table.row(row);
    }
    doc.table(table);
}

/// The rate of `engine`'s conditional update at READ COMMITTED: the cheapest correct design,
/// against which a level's price is read.
fn yardstick(r: &IsolationReport, engine: Engine) -> Option<f64> {
    (r.cell(Failure::Conditional, engine, Level::ReadCommitted))
        .map(Cell::rate)
        .filter(|x| *x > 0.0)
}

fn section(r: &IsolationReport, failure: Failure, doc: &mut Section) {
    doc.heading(
        2,
        format!("{} (`{}`)", capitalised(failure.name()), failure.strategy()),
    );
    doc.prose(failure_doc(failure));
    doc.prose(format!(
        "Counted: {}. *÷ conditional*: the purchases per second against the conditional \
         update's on the same engine at READ COMMITTED.",
        failure.counted()
    ));
    let mut table = Table::left(["engine", "level", "verdict"]).and_right([
        "failed",
        "purchases",
        "retries",
        "attempts / purchase",
        "purchases/s",
        "÷ conditional",
        "given up",
    ]);
    let mut lines = String::new();
    for (engine, level) in columns() {
        let Some(cell) = r.cell(failure, engine, level) else {
            continue;
        };
        let clicks = cell.clicks();
        let rate = cell.rate();
        table.row([
            engine.name().to_string(),
            level.name().to_string(),
            Verdict::of(cell).name().to_string(),
            cell.failures().to_string(),
            clicks.bought.to_string(),
            clicks.refusals_total().to_string(),
            cell.attempts_per_purchase()
                .map_or("–".into(), |a| format!("{a:.2}")),
            format!("{rate:.0}"),
            yardstick(r, engine).map_or("–".into(), |y| format!("{:.2}", rate / y)),
            clicks.gave_up.to_string(),
        ]);
        lines.push_str(&sentence(cell));
    }
    doc.table(table);
    doc.prose(lines);
}

/// A cell's verdict, the engine's rule behind it, and what the retries cost.
fn sentence(cell: &Cell) -> String {
    let (expected, why) = expect(cell.failure, cell.engine, cell.level);
    let verdict = Verdict::of(cell);
    let clicks = cell.clicks();
    let mut s = format!(
        "- **{}, {} — {}",
        cell.engine.name(),
        cell.level,
        verdict.name()
    );
    if verdict == Verdict::Failed {
        let _ = write!(s, ": {} {}", cell.failures(), cell.failure.counted());
    }
    let _ = write!(s, ".** {}.", capitalised(why));
    if clicks.refusals_total() > 0 {
        let reasons: Vec<String> = (clicks.refusals.iter())
            .map(|(why, n)| format!("{why} ×{n}"))
            .collect();
        let _ = write!(
            s,
            " Refused and run again: {}; {} transactions per purchase.",
            reasons.join(", "),
            cell.attempts_per_purchase()
                .map_or("–".into(), |a| format!("{a:.2}"))
        );
    }
    if clicks.gave_up > 0 {
        let _ = write!(
            s,
            " {} click(s) refused {MAX_ATTEMPTS} times were given up.",
            clicks.gave_up
        );
    }
    if !verdict.agrees(expected) {
        s.push_str(match expected {
            Expect::Fails => {
                " *The rule lets this fail, and it did not in this run: the clicks did not \
                 overlap where it matters — timing, not safety.*"
            }
            Expect::Stops => " *The rule says this is stopped, and it was not: a finding.*",
        });
    }
    s.push('\n');
    s
}

/// For each level both engines have, where one stops what the other lets through.
fn differences(r: &IsolationReport, doc: &mut Section) {
    let mut lines = Vec::new();
    for failure in Failure::ALL {
        for level in [
            Level::ReadCommitted,
            Level::RepeatableRead,
            Level::Serializable,
        ] {
            let (Some(m), Some(p)) = (
                r.cell(failure, Engine::Mariadb, level),
                r.cell(failure, Engine::Postgres, level),
            ) else {
                continue;
            };
            let (vm, vp) = (Verdict::of(m), Verdict::of(p));
            if (vm == Verdict::Failed) != (vp == Verdict::Failed) {
                let (fails, stops) = if vm == Verdict::Failed {
                    (m, p)
                } else {
                    (p, m)
                };
                lines.push(format!(
                    "- **{}, {}**: {} lets it through ({} {}); {} stops it.",
                    capitalised(failure.name()),
                    level,
                    fails.engine.name(),
                    fails.failures(),
                    failure.counted(),
                    stops.engine.name(),
                ));
            }
        }
    }
    doc.heading(2, "Where the engines differ");
    if lines.is_empty() {
        doc.prose(
            "At every level both engines have, they stopped and let through the same failures.",
        );
    } else {
        doc.prose(format!(
            "The same transaction at the same level, measured in this run, with one engine's \
             verdict against the other's:\n\n{}",
            lines.join("\n")
        ));
    }
}

/// The cells whose figures disagree with their engine's rule.
fn disagreements(r: &IsolationReport, doc: &mut Section) {
    let off: Vec<String> = (r.cells.iter())
        .filter(|c| !Verdict::of(c).agrees(expect(c.failure, c.engine, c.level).0))
        .map(|c| {
            format!(
                "- {} on {} at {}: {} ({} {}).",
                c.failure.name(),
                c.engine.name(),
                c.level,
                Verdict::of(c).name(),
                c.failures(),
                c.failure.counted()
            )
        })
        .collect();
    doc.heading(2, "Against the engines' rules");
    if off.is_empty() {
        doc.prose(
            "Every cell showed what its engine's rules predict: each failure happened wherever \
             the level lets it, and none where the level stops it.",
        );
    } else {
        doc.prose(format!(
            "Cells whose figures disagree with the rule given beside them:\n\n{}",
            off.join("\n")
        ));
    }
}

/// What a failure's transaction does, for its section.
fn failure_doc(failure: Failure) -> &'static str {
    match failure {
        Failure::LostUpdate => {
            "`BEGIN; SELECT stock; UPDATE … SET stock = <read − 1>; INSERT order; COMMIT`. Two \
             buyers who read the same stock both write it less one: two units sold, one deducted."
        }
        Failure::NegativeStock => {
            "`BEGIN; SELECT stock;` checked ≥ 1, then `UPDATE … SET stock = stock − 1; INSERT \
             order; COMMIT`. No update is lost, but every buyer who passed the check before the \
             last unit went takes one: stock below zero."
        }
        Failure::WriteSkew => {
            "`BEGIN; SELECT COUNT(*)` of the buyer's orders, which must be 0, then `INSERT \
             order; COMMIT`, a buyer's clicks at once. Each transaction writes a row of its own, \
             so no row written by two of them can reveal the race: the classic write skew. (The \
             stock is left out here: a stock row both clicks update would make some engines \
             refuse the second for a reason that has nothing to do with the limit.)"
        }
        Failure::PhantomInventory => {
            "The seed articles' example: 4 units; one buyer orders 3 and another 2 at the same \
             moment, each through the lost update's read-then-write. Only one should be told \
             yes; when both are, 5 of 4 are sold and the stock still shows units left."
        }
        Failure::Conditional => {
            "`BEGIN; UPDATE … SET stock = stock − 1 WHERE id = ? AND stock >= 1;` then, if it \
             changed the row, `INSERT order; COMMIT`: the check is part of the write. The \
             control row — safe at every level — and the price each level puts on it."
        }
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::isolation::failure::Clicks;
    use crate::isolation::schema::{IsolationSettings, Round, SCHEMA_VERSION, ServerInfo};

    /// A matrix of two cells: the lost update at REPEATABLE READ, failing on MariaDB and
    /// refused on PostgreSQL.
    pub(crate) fn two_cells() -> IsolationReport {
        let round = |failures: i64, refusals: u64| Round {
            clicks: Clicks {
                clicks: 100,
                attempts: 100 + refusals,
                bought: 100,
                refusals: [("40001 serialization failure".to_string(), refusals)]
                    .into_iter()
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                ..Clicks::default()
            },
            seconds: 0.5,
            units: 100,
            sold: 100,
            left: failures,
            failures,
        };
        let cell = |engine, failures, refusals| Cell {
            failure: Failure::LostUpdate,
            engine,
            level: Level::RepeatableRead,
            rounds: vec![round(failures, refusals)],
        };
        IsolationReport {
            schema: SCHEMA_VERSION,
            started_at: "2026-11-05T00:00:00Z".into(),
            duration_seconds: 3.0,
            settings: IsolationSettings {
                sessions: 16,
                stock: 100,
                buyers: 40,
                clicks_per_buyer: 4,
                sales: 40,
                rounds: 1,
                max_attempts: MAX_ATTEMPTS,
                quick: true,
            },
            servers: vec![
                ServerInfo {
                    engine: Engine::Mariadb,
                    version: "10.11".into(),
                },
                ServerInfo {
                    engine: Engine::Postgres,
                    version: "15".into(),
                },
            ],
            cells: vec![cell(Engine::Mariadb, 37, 0), cell(Engine::Postgres, 0, 12)],
        }
    }

    #[test]
    fn a_level_one_engine_stops_and_the_other_lets_through_is_named_with_its_count() {
        let md = markdown(&two_cells());
        assert!(
            md.contains(
                "- **Lost update, REPEATABLE READ**: MariaDB lets it through (37 units sold and \
                 not deducted); PostgreSQL stops it."
            ),
            "{md}"
        );
        assert!(md.contains("| **fails** (37) |"), "{md}");
        assert!(md.contains("stops, 12 retries"), "{md}");
        assert!(md.contains("40001 serialization failure ×12; 1.12 transactions per purchase"));
        assert!(
            md.contains("Every cell showed what its engine's rules predict"),
            "{md}"
        );
    }

    #[test]
    fn a_cell_against_its_engine_s_rule_is_listed_as_a_finding() {
        let mut r = two_cells();
        r.cells[1].rounds[0].failures = 2;
        let md = markdown(&r);
        assert!(
            md.contains("- lost update on PostgreSQL at REPEATABLE READ: fails (2 units sold"),
            "{md}"
        );
        assert!(md.contains("*The rule says this is stopped, and it was not: a finding.*"));
    }
}
