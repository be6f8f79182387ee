//! What drives the app from outside, shared by the benchmark (`loadtest`), the
//! micro-benchmarks (`benches`) and the app's own tests: the app started in-process
//! ([`TestApp`]) or as `seckill-app` processes ([`Apps`]), the one HTTP client ([`Api`]) and its
//! answers ([`Answer`], [`Outcomes`]), and the one crowd of buyers ([`Crowd`]).

pub mod answer;
pub mod client;
pub mod connections;
pub mod crowd;
pub mod floor;
pub mod launch;
pub mod metrics;
pub mod process;
pub mod wire;

pub use answer::{Answer, Outcomes, order_request};
pub use client::{Api, Fault, PreparedOrder, Transition};
pub use connections::own_runtime_thread;
pub use crowd::{Answers, Arrival, Click, Clicks, Crowd, Retry, Sale, Spread, user_id};
pub use launch::{TestApp, config_on};
pub use process::{Apps, Instance, Launch, locate_app};
