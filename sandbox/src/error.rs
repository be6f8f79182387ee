use std::path::PathBuf;

/// What can go wrong while running a throwaway server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server's program is not installed (run `cargo xtask setup`).
    #[error("`{program}` was not found on PATH; run `cargo xtask setup` to install it")]
    NotInstalled { program: String },
    /// The server did not become ready in time or exited during start-up.
    #[error("{server} did not start: {reason}\n--- last lines of {log} ---\n{tail}")]
    StartFailed {
        server: String,
        reason: String,
        log: PathBuf,
        tail: String,
    },
    /// The server refuses to run as root, and the account to run it as instead is missing.
    #[error(
        "{server} refuses to run as root, and there is no `{account}` account to run it as; \
         run `cargo xtask setup` (its package creates the account)"
    )]
    NoAccount { server: String, account: String },
    /// A signal or command sent to a running server failed.
    #[error("{server}: {action} failed: {reason}")]
    Control {
        server: String,
        action: &'static str,
        reason: String,
    },
    /// The environment names servers to use, but is incomplete or malformed.
    #[error("environment variable {var}: {reason}")]
    Env { var: &'static str, reason: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
