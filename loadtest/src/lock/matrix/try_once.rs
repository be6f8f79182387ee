//! The non-blocking try: while one client holds the lock, another asks without waiting
//! (`AcquireOptions::wait` = `None`), many times. It must answer `busy` every time (a grant
//! would be two holders), and promptly.

use std::time::{Duration, Instant};

use anyhow::Result;
use locks::{AcquireOptions, Backend};
use serde::Serialize;

use super::{LEASE, WAIT, duration, fresh_key, is_busy, warm};
use crate::lock::connect_backend;

/// How the tries against a held lock were answered.
#[derive(Debug, Clone, Serialize)]
pub struct TryOnce {
    pub tries: usize,
    pub busy: usize,
    /// Tries granted while another client held the lock: mutual exclusion broken.
    pub granted: usize,
    /// Tries that failed otherwise (the backend unavailable).
    pub failed: usize,
    /// Of the `busy` answers.
    pub median_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl TryOnce {
    pub fn cell(&self) -> String {
        if self.granted > 0 {
            return format!(
                "GRANTED while held in {} of {} tries",
                self.granted, self.tries
            );
        }
        let Some(median) = self.median_ms else {
            return format!("no answer: {} of {} tries failed", self.failed, self.tries);
        };
        let mut text = format!("busy in {} (median of {})", duration(median), self.busy);
        if self.failed > 0 {
            text.push_str(&format!("; {} failed", self.failed));
        }
        text
    }
}

pub async fn measure(
    backend: Backend,
    endpoints: &sandbox::Endpoints,
    tries: usize,
) -> Result<TryOnce> {
    let key = fresh_key("try");
    let holder = connect_backend(backend, endpoints).await?;
    let other = connect_backend(backend, endpoints).await?;
    warm(other.as_ref()).await?;
    let guard = holder
        .acquire(&key, AcquireOptions::new(LEASE).wait(WAIT))
        .await?;
    let mut answered: Vec<Duration> = Vec::new();
    let (mut granted, mut failed) = (0, 0);
    for _ in 0..tries {
        let start = Instant::now();
        match other.acquire(&key, AcquireOptions::new(LEASE)).await {
            Err(e) if is_busy(&e) => answered.push(start.elapsed()),
            Err(_) => failed += 1,
            Ok(second) => {
                granted += 1;
                let _ = second.release().await;
            }
        }
    }
    guard.release().await?;
    answered.sort_unstable();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    Ok(TryOnce {
        tries,
        busy: answered.len(),
        granted,
        failed,
        median_ms: answered.get(answered.len() / 2).map(ms),
        max_ms: answered.last().map(ms),
    })
}
