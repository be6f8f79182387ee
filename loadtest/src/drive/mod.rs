//! What sends the load: the one HTTP client and its answers, its keep-alive connections, the
//! closed and open loops, the database connections held one per worker, and goose beside our
//! own client.

pub mod client;
pub mod connections;
pub mod dedicated;
pub mod goose;
pub mod load;
