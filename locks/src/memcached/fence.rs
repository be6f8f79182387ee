//! The fencing counter: `<key>:fence`, incremented once per grant, created on first use at a
//! floor taken from the wall clock so that it never goes back.
//!
//! memcached keeps nothing across a restart and may evict any item, the counter included. A
//! counter that started again at 1 would hand out tokens a resource has already seen, and the
//! resource would refuse the new holder (or worse, accept a stale one). So the counter is
//! created by the increment itself (`ma <fence> N0 J<floor>`: "auto-create with no expiry,
//! starting at `floor`") with `floor` = microseconds since the Unix epoch. Every token handed out
//! before is at most its own counter's floor plus the grants since then, which stays below
//! today's floor as long as the lock was granted less than once per microsecond on average and
//! the clients' wall clocks do not step back by more than the time since the counter was
//! created. Tokens are then about 1.8 × 10¹⁵: they fit a signed 64-bit database column.

use std::time::{SystemTime, UNIX_EPOCH};

use async_memcached::{Error, ErrorKind, MetaProtocol, Status};

use super::pool::Pooled;

/// The companion key holding the fencing counter of lock `key`.
pub fn fence_key(key: &str) -> String {
    format!("{key}:fence")
}

/// Where a counter created now starts: microseconds since the Unix epoch.
fn floor() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Increments the counter of lock `key` (creating it at [`floor`] if missing) and returns the
/// new value. One request.
pub(super) async fn next_token(conn: &mut Pooled<'_>, key: &str) -> Result<u64, Error> {
    let create_at = format!("J{}", floor());
    let counter = conn
        .meta_increment(
            fence_key(key),
            false,
            None,
            None,
            Some(&["N0", &create_at, "v"]),
        )
        .await?;
    counter
        .and_then(|value| value.data)
        .and_then(|digits| std::str::from_utf8(&digits).ok()?.trim().parse().ok())
        .ok_or_else(|| {
            Status::Error(ErrorKind::Protocol(Some(
                "`ma … v` answered without a number".into(),
            )))
            .into()
        })
}
