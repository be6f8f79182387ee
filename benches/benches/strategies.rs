//! One purchase through each strategy of the app, uncontended: called directly on the strategy
//! object, and through the HTTP API of the same app served in-process, so the HTTP layer's share
//! (JSON, routing, the loopback socket, the handler's own work) is the difference. Beside them,
//! a MariaDB `SELECT 1` through a pool set up like the app's, and an HTTP request that touches
//! no backend, as yardsticks.
//!
//! Run with `cargo bench -p benches --bench strategies`; it ends with a table of medians measured
//! interleaved (see `benches::interleave`), the criterion figures are for baselines.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use app::api::Strategy;
use app::strategy::StockStrategy;
use benches::interleave::{self, Op};
use benches::raw::{mariadb_pool, select_one};
use benches::report::criterion_home;
use benches::shop::Shop;
use futures::FutureExt;
use sqlx::MySqlPool;

const GROUP: &str = "purchase";

/// The operations of the table, by benchmark id: the yardsticks, then each strategy's purchase
/// direct and over HTTP.
fn ops<'a>(
    shop: &'a Shop,
    pool: &'a MySqlPool,
    strategies: &'a [(Strategy, u64, Arc<dyn StockStrategy>)],
) -> Vec<(String, Op<'a>)> {
    let mut ops: Vec<(String, Op<'a>)> = vec![
        (
            SELECT_ONE.into(),
            Box::new(move || select_one(pool).boxed()),
        ),
        (HTTP_ONLY.into(), Box::new(move || shop.http_only().boxed())),
    ];
    for (name, product, strategy) in strategies {
        let direct: Op<'a> = Box::new(move || {
            async move {
                let placed = shop.buy_direct(strategy.as_ref(), *name, *product).await;
                if let Err(e) = placed {
                    panic!("`{name}` refused an uncontended purchase: {e}");
                }
            }
            .boxed()
        });
        let http: Op<'a> = Box::new(move || {
            async move {
                let status = shop.buy_http(*name, *product).await;
                assert!(status.is_success(), "`{name}` over HTTP answered {status}");
            }
            .boxed()
        });
        ops.push((format!("{name}/direct"), direct));
        ops.push((format!("{name}/http"), http));
    }
    ops
}

const SELECT_ONE: &str = "select-1/direct";
const HTTP_ONLY: &str = "noop/http";

/// Rounds of the interleaved measurement behind the table.
const ROUNDS: usize = 100;

fn table(ops: &[(String, Op<'_>)], medians: &[Duration], strategies: &[Strategy]) -> String {
    let median = |id: &str| {
        ops.iter()
            .position(|(name, _)| name == id)
            .map(|i| medians[i].as_secs_f64() * 1e9)
    };
    let us = |ns: f64| format!("{:.0} µs", ns / 1_000.0);
    let mut out = String::new();
    let select = median(SELECT_ONE);
    if let (Some(select), Some(http_only)) = (select, median(HTTP_ONLY)) {
        let _ = writeln!(
            out,
            "Yardsticks: MariaDB `SELECT 1` {}, HTTP `GET /api/noop` (no backend) {}.\n",
            us(select),
            us(http_only)
        );
    }
    out.push_str(
        "| strategy | direct | over HTTP | HTTP's share | direct in `SELECT 1`s |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for name in strategies {
        let (Some(direct), Some(http)) = (
            median(&format!("{name}/direct")),
            median(&format!("{name}/http")),
        ) else {
            continue;
        };
        let in_selects = select.map_or("–".into(), |s| format!("{:.1}", direct / s));
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} ({:.0}%) | {in_selects} |",
            us(direct),
            us(http),
            us(http - direct),
            (http - direct) / http * 100.0,
        );
    }
    out
}

fn main() {
    let rt = benches::runtime();
    let mut c = benches::criterion();
    let endpoints = &benches::env().endpoints;
    let shop = rt.block_on(Shop::start(endpoints));
    let pool = rt.block_on(mariadb_pool(&endpoints.database_url, 1));
    let names = shop.strategies();
    let strategies: Vec<(Strategy, u64, Arc<dyn StockStrategy>)> = (1..)
        .zip(&names)
        .map(|(product, &name)| {
            rt.block_on(shop.stock_up(product));
            (name, product, shop.strategy(name))
        })
        .collect();
    let ops = ops(&shop, &pool, &strategies);

    let mut group = c.benchmark_group(GROUP);
    group
        .sample_size(15)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (id, op) in &ops {
        group.bench_function(id.as_str(), |b| b.to_async(&rt).iter(op));
    }
    group.finish();
    c.final_summary();

    let timed: Vec<(&str, &Op<'_>)> = ops.iter().map(|(id, op)| (id.as_str(), op)).collect();
    let medians = rt.block_on(interleave::medians(&timed, ROUNDS));
    let table = table(&ops, &medians, &names);
    println!("\nOne uncontended purchase, direct and over HTTP (medians, measured interleaved):\n");
    println!("{table}");
    if let Some(home) = criterion_home()
        && std::fs::create_dir_all(&home).is_ok()
    {
        let _ = std::fs::write(home.join("purchases.md"), &table);
    }
}
