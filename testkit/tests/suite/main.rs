//! testkit's integration tests, one module per subject, in one test binary.

mod client;
mod crowd;
