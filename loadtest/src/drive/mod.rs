//! What sends the load: the closed and open loops (every HTTP figure goes through them, with
//! the one client, [`testkit::Api`]; the closed loop's HTTP workers run on one current-thread
//! runtime per core, [`cores`]), the database connections held one per worker, goose
//! beside our own client, and clients contending for a lock through a cluster's leader loss.
//! The crowd of buyers a sale sends is [`testkit::Crowd`], shared with the app's tests.

pub mod cores;
pub mod dedicated;
pub mod goose;
pub mod latency;
pub mod load;
pub mod lock_contention;
