//! Clippy inside the build.
//!
//! `cargo clippy` is `cargo check` with `clippy-driver` as the rustc wrapper of the workspace's
//! own crates (`RUSTC_WORKSPACE_WRAPPER`, the lint flags in `CLIPPY_ARGS`). Checking compiles
//! the whole dependency tree a second time, as metadata only, beside the build the tests need:
//! on a cold machine with two cores that second pass was minutes of `cargo xtask test`. With
//! the wrapper set on the *build*, clippy lints each workspace crate while it is compiled, the
//! dependencies are compiled once, and `-D warnings` fails the build exactly as `cargo clippy`
//! would. Every later cargo call of the run carries the same variables, so nothing is rebuilt
//! for the tests.

use std::path::PathBuf;
use std::process::Command;

/// The lint flags `cargo clippy -- -D warnings` passes, in cargo-clippy's encoding.
const CLIPPY_ARGS: &str = "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__";

/// `clippy-driver` of the toolchain running this cargo, when that toolchain has clippy.
pub fn driver() -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO").map(PathBuf::from)?;
    let driver = cargo.with_file_name("clippy-driver");
    let works = Command::new(&driver)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    works.then_some(driver)
}

/// Makes `c` lint the workspace crates with `driver` while it compiles them.
pub fn apply(c: &mut Command, driver: &std::path::Path) {
    c.env("RUSTC_WORKSPACE_WRAPPER", driver)
        .env("CLIPPY_ARGS", CLIPPY_ARGS);
}
