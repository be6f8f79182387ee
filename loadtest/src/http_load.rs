//! The closed-loop HTTP load, driven by goose: U goose users spread over the app instances,
//! each sending its next request when the previous answer arrived.
//!
//! Goose schedules the users and runs the clients; the latencies are recorded here, exactly,
//! in µs (goose's own metrics round long times and are switched off).

use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Result, anyhow};
use goose::config::GooseConfiguration;
use goose::prelude::*;
use tokio::time::Instant;

use crate::client::{Answer, Outcomes, order_request};
use crate::latency::Latencies;
use crate::load::{LoadResult, Window};

/// What every goose user sends.
#[derive(Debug, Clone)]
pub enum HttpRequest {
    /// `POST /api/products/{product}/orders` with a fresh request id each time.
    Order {
        product: u64,
        strategy: String,
        quantity: i64,
        /// Prefix of the request ids, unique per run.
        id_prefix: String,
    },
    /// `GET {path}`; any 2xx counts as a success.
    Get { path: String },
}

#[derive(Default)]
struct Shared {
    outcomes: Outcomes,
    latencies: Latencies,
}

/// Runs `users` goose users against `bases` (round robin by user) for the window.
pub async fn closed_loop(
    bases: &[String],
    users: usize,
    window: Window,
    request: HttpRequest,
) -> Result<LoadResult> {
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
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Arc::new(move |user| {
            let (shared, request, counter) = (shared.clone(), request.clone(), counter.clone());
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
                let outcome = match &request {
                    HttpRequest::Order {
                        product,
                        strategy,
                        quantity,
                        id_prefix,
                    } => {
                        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let body = order_request(
                            format!("u-{}", user.weighted_users_index),
                            strategy,
                            format!("{id_prefix}-{n}"),
                            *quantity,
                        );
                        let path = format!("/api/products/{product}/orders");
                        match user.post_json(&path, &body).await?.response {
                            Ok(r) => {
                                let status = r.status().as_u16();
                                let body = r.bytes().await.unwrap_or_default();
                                Answer::of_order(status, &body)
                            }
                            Err(_) => Answer::Transport,
                        }
                    }
                    HttpRequest::Get { path } => match user.get(path).await?.response {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let body = r.bytes().await.unwrap_or_default();
                            Answer::of_request(status, &body)
                        }
                        Err(_) => Answer::Transport,
                    },
                };
                if sent >= measure_from {
                    let elapsed = sent.elapsed();
                    let mut s = shared.lock().expect("latency lock");
                    s.outcomes.count(&outcome);
                    s.latencies.record(elapsed);
                }
                Ok(())
            })
        })
    };

    let scenario = scenario!("Buyer")
        .register_transaction(Transaction::new(pick_instance).set_on_start())
        .register_transaction(Transaction::new(send));
    GooseAttack::initialize_with_config(config)?
        .register_scenario(scenario)
        .execute()
        .await?;

    let s = shared.lock().expect("latency lock");
    Ok(LoadResult::new(
        "closed",
        users,
        None,
        window.measure.as_secs_f64(),
        s.outcomes,
        0,
        &s.latencies,
    ))
}
