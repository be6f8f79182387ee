//! `advisory-behind-pgbouncer`: PostgreSQL's session advisory lock taken through PgBouncer's
//! transaction pooling, and the two ways to keep it safe.
//!
//! A session lock is held by the *server* session that took it. Behind transaction pooling,
//! PgBouncer hands that session to whichever client comes next once the statement is done:
//! client A takes `pg-advisory`; client B, handed the same server session for its own try, is
//! granted the lock at once — PostgreSQL grants a session a lock it already holds — and two
//! clients hold one lock while the server's lock table shows one holder. Behind session pooling
//! each client keeps its own server session and B is refused; the transaction lock
//! (`pg-advisory-xact`) is held by a transaction, which PgBouncer does not hand on until it
//! ends, so B, on another server session, waits for it there and is refused.
//!
//! Both clients are the crate's own locks (which send their statements unnamed, as every
//! client behind PgBouncer 1.18 must: it keeps no prepared statement across the server
//! sessions it hands out). Where the failure is shown PgBouncer has one server session, as a
//! busy pool often has one idle: B is handed the session A used. Elsewhere it may open two.

use std::fmt;
use std::time::Duration;

use anyhow::{Result, bail};
use locks::postgres::{PgAdvisoryLock, PgAdvisoryXactLock, create_schema, session_of};
use locks::{AcquireOptions, DistributedLock, LockError};
use serde::{Deserialize, Serialize};
use sqlx::ConnectOptions as _;
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase as _;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::{Judgement, Scenario, Stage};
use crate::rig::start;

pub struct AdvisoryBehindPgbouncer;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// A's lease: long enough that its keep-alive does not speak while B tries.
    lease: Duration,
    /// How long B may wait for the lock.
    wait: Duration,
}

/// A row: a lock, and how PgBouncer pools the sessions it is taken through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    SessionLockTransactionPooling,
    SessionLockSessionPooling,
    TransactionLockTransactionPooling,
}

impl Subject {
    const ALL: [Subject; 3] = [
        Subject::SessionLockTransactionPooling,
        Subject::SessionLockSessionPooling,
        Subject::TransactionLockTransactionPooling,
    ];

    fn pooling(self) -> sandbox::Pooling {
        match self {
            Subject::SessionLockSessionPooling => sandbox::Pooling::Session,
            _ => sandbox::Pooling::Transaction,
        }
    }

    /// Server sessions PgBouncer may open: one where the failure is shown, so that B is
    /// handed A's session whatever else runs at that moment (a keep-alive of A's included);
    /// more than the clients' connections elsewhere, so that B gets a session of its own.
    fn server_sessions(self) -> u32 {
        match self {
            Subject::SessionLockTransactionPooling => 1,
            _ => 4,
        }
    }

    fn lock(self) -> &'static str {
        match self {
            Subject::TransactionLockTransactionPooling => "pg-advisory-xact",
            _ => "pg-advisory",
        }
    }

    fn breaks(self) -> bool {
        self == Subject::SessionLockTransactionPooling
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pooling = match self.pooling() {
            sandbox::Pooling::Transaction => "transaction",
            sandbox::Pooling::Session => "session",
        };
        write!(f, "{}, {pooling} pooling", self.lock())
    }
}

/// A holds the lock; B asks while A holds; A releases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Clients told they hold the lock at once (A, and B if granted).
    pub clients_holding: u8,
    /// Server sessions holding it in PostgreSQL's lock table while both asked.
    pub server_sessions_holding: i64,
    /// The server session (its process id) of A's grant, and of B's if B was granted.
    pub session_a: Option<i32>,
    pub session_b: Option<i32>,
    pub token_a: u64,
    pub token_b: Option<u64>,
    /// A's release reported the lock A's own.
    pub a_released: bool,
    /// Server sessions still holding it once every client released.
    pub left_held: i64,
}

impl Scenario for AdvisoryBehindPgbouncer {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        lease: Duration::from_secs(30),
        wait: Duration::from_secs(1),
    };
    const FULL: Sizes = Sizes {
        lease: Duration::from_secs(30),
        wait: Duration::from_secs(1),
    };
    type Subject = Subject;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "two clients take one PostgreSQL advisory lock through PgBouncer: A holds it; B asks \
             (waiting up to {:?}) while A holds",
            s.wait
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Subject, Figures)>> {
        let postgres = start(sandbox::Postgres::start).await?;
        let database = format!("{}/advisory", postgres.url());
        sqlx::Postgres::create_database(&database).await?;
        let direct = PgPoolOptions::new()
            .max_connections(1)
            .connect(&database)
            .await?;
        create_schema(&direct).await?;
        let mut rows = Vec::new();
        for subject in Subject::ALL {
            let tl = stage.round(subject.to_string());
            let (pooling, sessions) = (subject.pooling(), subject.server_sessions());
            let upstream = postgres.port();
            let bouncer = tokio::task::spawn_blocking(move || {
                sandbox::PgBouncer::start(upstream, pooling, sessions)
            })
            .await??;
            let url = format!("{}/advisory", bouncer.url());
            let (a, b) = (client(subject, &url).await?, client(subject, &url).await?);
            let key = format!("scenario:advisory:{}", subject.lock());
            let figures = round(&s, &tl, &direct, &key, a.as_ref(), b.as_ref()).await?;
            rows.push((subject, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, subject: &Subject, f: &Figures) -> Judgement {
        let (expected, holds) = if subject.breaks() {
            (
                "B is handed A's server session and granted at once: two clients hold, one \
                 server session in the lock table",
                f.clients_holding == 2
                    && f.server_sessions_holding == 1
                    && f.session_a == f.session_b,
            )
        } else {
            (
                "B is refused while A holds: one client holds",
                f.clients_holding == 1 && f.server_sessions_holding == 1,
            )
        };
        let observed = format!(
            "{} client(s) held at once; {} server session(s) in the lock table ({}); {} left \
             held after release",
            f.clients_holding,
            f.server_sessions_holding,
            match (f.session_a, f.session_b) {
                (Some(a), Some(b)) if a == b => format!("A and B both on session {a}"),
                (Some(a), Some(b)) => format!("A on session {a}, B on {b}"),
                (Some(a), None) => format!("A on session {a}, B refused"),
                _ => "A's session unknown".into(),
            },
            f.left_held
        );
        Judgement::new(expected, observed, holds && f.left_held == 0)
    }

    fn why(_: &Sizes, rows: &[(Subject, Figures)]) -> String {
        let mut text = String::from(
            "An advisory lock belongs to a server session (the session form) or to a \
             transaction (the transaction form), never to the client that asked for it.",
        );
        for (subject, f) in rows {
            let what = match (subject, f.clients_holding) {
                (Subject::SessionLockTransactionPooling, 2) => format!(
                    " Behind transaction pooling, PgBouncer handed B the server session A had \
                     taken `{}` on, as soon as A's statement was done; PostgreSQL grants a \
                     session a lock it already holds, so B was granted at once (token {} after \
                     A's {}) while the lock table showed {} server session holding it: two \
                     clients inside the critical section, and nothing in the server to tell.",
                    subject.lock(),
                    f.token_b.map_or("–".into(), |t| t.to_string()),
                    f.token_a,
                    f.server_sessions_holding
                ),
                (Subject::SessionLockSessionPooling, 1) => " Behind session pooling, A kept its \
                     server session for as long as it was connected, and B, on another, was \
                     refused: the session lock is safe where a client keeps its session."
                    .to_string(),
                (Subject::TransactionLockTransactionPooling, 1) => " The transaction lock is \
                     held by A's open transaction, and PgBouncer does not hand a session on \
                     in the middle of a transaction: B was given another server session and \
                     waited there for the lock until its wait ran out — the form to use behind \
                     transaction pooling."
                    .to_string(),
                (subject, n) => format!(" With `{subject}`, {n} client(s) held at once."),
            };
            text.push_str(&what);
        }
        text
    }
}

/// A lock client of `subject`'s kind on its own pool through PgBouncer, its connection to
/// PgBouncer open before the round (so that B's wait is spent on the lock, not on logging in).
async fn client(subject: Subject, url: &str) -> Result<Box<dyn DistributedLock>> {
    let options: PgConnectOptions = url.parse()?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .connect_with(options.disable_statement_logging())
        .await?;
    Ok(match subject {
        Subject::TransactionLockTransactionPooling => Box::new(PgAdvisoryXactLock::new(pool)),
        _ => Box::new(PgAdvisoryLock::new(pool)),
    })
}

/// A takes the lock; B asks while A holds; the lock table is read; both release.
async fn round(
    s: &Sizes,
    tl: &super::Timeline,
    direct: &PgPool,
    key: &str,
    a: &dyn DistributedLock,
    b: &dyn DistributedLock,
) -> Result<Figures> {
    let guard_a = a.acquire(key, AcquireOptions::new(s.lease)).await?;
    let session_a = session_of(&guard_a);
    tl.log(
        "A",
        format!(
            "granted token {} on server session {}",
            guard_a.fencing_token(),
            pid(session_a)
        ),
    );
    let guard_b = match b
        .acquire(key, AcquireOptions::new(s.lease).wait(s.wait))
        .await
    {
        Ok(g) => {
            tl.log(
                "B",
                format!(
                    "granted token {} on server session {} while A holds",
                    g.fencing_token(),
                    pid(session_of(&g))
                ),
            );
            Some(g)
        }
        Err(LockError::Timeout { waited, .. }) => {
            let ms = waited.as_secs_f64() * 1e3;
            tl.log("B", format!("refused after {ms:.0} ms: A holds the lock"));
            None
        }
        Err(e) => bail!("B's acquire of `{key}` failed: {e}"),
    };
    let server_sessions_holding = advisory_holders(direct).await?;
    tl.log(
        "PostgreSQL",
        format!("{server_sessions_holding} server session(s) hold an advisory lock"),
    );
    let figures_b = guard_b.as_ref().map(|g| (session_of(g), g.fencing_token()));
    let token_a = guard_a.fencing_token();
    let a_released = guard_a.release().await?;
    tl.log("A", format!("released; its own: {a_released}"));
    if let Some(g) = guard_b {
        let own = g.release().await?;
        tl.log("B", format!("released; its own: {own}"));
    }
    let left_held = advisory_holders(direct).await?;
    tl.log(
        "PostgreSQL",
        format!("{left_held} server session(s) still hold it"),
    );
    Ok(Figures {
        clients_holding: 1 + u8::from(figures_b.is_some()),
        server_sessions_holding,
        session_a,
        session_b: figures_b.and_then(|(s, _)| s),
        token_a,
        token_b: figures_b.map(|(_, t)| t),
        a_released,
        left_held,
    })
}

/// A server session's process id, as the timeline shows it.
fn pid(session: Option<i32>) -> String {
    session.map_or("(unknown)".into(), |pid| pid.to_string())
}

/// Server sessions holding an advisory lock granted, from PostgreSQL's lock table.
async fn advisory_holders(direct: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted",
    )
    .fetch_one(direct)
    .await?)
}
