//! testkit's integration tests, one module per subject, in one test binary.

mod buyer_tokens;
mod client;
mod crowd;
