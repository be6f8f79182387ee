//! The database lock table, now a backend of the `locks` crate ([`locks::database`], which
//! explains why it is safe while leases hold); the `db-lock*` strategies run
//! [`super::locked::Locked`] over it.

pub use locks::database::DbLock;
