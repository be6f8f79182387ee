//! Refusing, at once, what the service cannot take. A refusal here costs what a no-op costs and
//! answers `503 overloaded` or `429 rate_limited` with a spread `Retry-After`, so the load the
//! service accepts keeps its latency, its memory stays flat, and the refused come back spread
//! out instead of in one wave. (A queue without a bound does the opposite: everyone waits, the
//! wait grows with the crowd, and the answers come too late to be of use.)
//!
//! * [`Limiter`] — every purchase is admitted through it, or refused before its strategy runs:
//!   its strategy's queue believed full ([`crate::strategy::StockStrategy::queue_full`]), the
//!   instance at `--max-in-flight` (memory), the runtime late under a crowd that stays
//!   ([`shedding`]), or the strategy at its [`Limit`] — one policy, [`Little`] (as many as it
//!   answers within `--latency-budget-ms`) or [`Fixed`], within the strategy's own bounds
//!   ([`crate::strategy::AtOnce`]).
//! * [`Rates`] — a buyer's and an address's requests per second, on every buyer route.
//! * [`Connections`] — the connections an instance holds, the last few kept for operators.
//! * [`Pacer`] — products' public pages served at a rate, each view waiting for its turn.

pub mod connections;
pub mod limit;
mod limiter;
mod pacer;
mod rates;
pub mod shedding;

pub use connections::Connections;
pub use limit::{Fixed, Limit, Little};
pub use limiter::{Limiter, Place};
pub use pacer::Pacer;
pub use rates::Rates;
