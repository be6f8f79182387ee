//! The `goose-noop` baseline: `GET /api/noop` from U goose users spread over the app
//! instances, each sending its next request when the previous answer arrived.
//!
//! Every measurement of the benchmark goes through its own client and driver
//! ([`crate::drive::load`]); this one exists to check that client. goose is the load tool people in
//! this field know: if it gets far more requests per second out of the same server, the
//! benchmark's client is the ceiling of its HTTP figures. Goose schedules the users and runs
//! its clients; the latencies are recorded here, exactly, in µs (goose's own metrics round
//! long times and are switched off).

use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Result, anyhow};
use goose::config::GooseConfiguration;
use goose::prelude::*;
use tokio::time::Instant;

use crate::drive::latency::Latencies;
use crate::drive::load::Window;
use crate::schema::{LoadResult, Loop};
use testkit::{Answer, Outcomes};

#[derive(Default)]
struct Shared {
    outcomes: Outcomes,
    latencies: Latencies,
}

/// Runs `users` goose users against `bases` (round robin by user) for the window.
pub async fn closed_loop(bases: &[String], users: usize, window: Window) -> Result<LoadResult> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let bases = Arc::new(bases.to_vec());
    // The window opens with the first request (goose needs a while to build its users'
    // clients); goose starts its run-time clock once every user is launched, after that first
    // request, so a run of the window's length covers the window.
    let run_secs = (window.warmup + window.measure).as_secs_f64().ceil() as u64;
    let config = GooseConfiguration::parse_args_default(&[
        "--host",
        bases[0].as_str(),
        "--users",
        &users.to_string(),
        "--increase-rate",
        &(users * 20).to_string(),
        "--run-time",
        &format!("{run_secs}s"),
        "--timeout",
        "60",
        "--quiet",
        "--no-metrics",
        "--no-print-metrics",
        "--no-error-summary",
        "--no-telnet",
    ])
    .map_err(|e| anyhow!("goose configuration: {e}"))?;

    let first_request = Arc::new(OnceLock::<Instant>::new());

    let pick_instance: TransactionFunction = {
        let bases = bases.clone();
        Arc::new(move |user| {
            let base = bases[user.weighted_users_index % bases.len()].clone();
            Box::pin(async move {
                user.set_base_url(&base)?;
                Ok(())
            })
        })
    };
    let send: TransactionFunction = {
        let shared = shared.clone();
        Arc::new(move |user| {
            let shared = shared.clone();
            let first_request = first_request.clone();
            Box::pin(async move {
                let sent = Instant::now();
                let measure_from = *first_request.get_or_init(|| sent) + window.warmup;
                let end = measure_from + window.measure;
                if sent >= end {
                    // Past the window: idle until goose stops the run.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    return Ok(());
                }
                let answer = match user.get("/api/noop").await?.response {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body = r.bytes().await.unwrap_or_default();
                        Answer::of_request(status, &body)
                    }
                    Err(_) => Answer::Transport,
                };
                if sent >= measure_from {
                    let elapsed = sent.elapsed();
                    let mut s = shared.lock().expect("latency lock");
                    s.outcomes.count(&answer);
                    s.latencies.record(elapsed);
                }
                Ok(())
            })
        })
    };

    let scenario = scenario!("NoopClient")
        .register_transaction(Transaction::new(pick_instance).set_on_start())
        .register_transaction(Transaction::new(send));
    GooseAttack::initialize_with_config(config)?
        .register_scenario(scenario)
        .execute()
        .await?;

    let s = std::mem::take(&mut *shared.lock().expect("latency lock"));
    Ok(s.latencies.result(
        Loop::Closed,
        users,
        window.measure.as_secs_f64(),
        s.outcomes,
        0,
    ))
}
