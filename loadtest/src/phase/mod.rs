//! The parts of a run and what each is handed: products of its own and a request-id prefix of
//! its own ([`allocate`]), so that no part picks a product or an id by hand and no part meets
//! another's orders.

pub mod allocate;

pub use allocate::{Allocator, Allotment};
