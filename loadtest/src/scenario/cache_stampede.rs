//! `cache-stampede`: buyers refresh a product's page during a sale, and the page's cached copy
//! expires.
//!
//! A cache in front of a costly page holds the database off only while its copy lives. When
//! every copy expires at the same moment — one lifetime set for all, as a plain cache does —
//! every reader that arrives before the first new copy is stored misses, and each one asks the
//! database itself: the stampede (缓存击穿). Here the page also shows the units sold, summed
//! from the product's orders on the pool the purchases use, so each miss is a costly read that
//! takes a buyer's connection. The fix is the service's default: one request reads while the
//! others are answered the copy they have, each copy's lifetime is drawn apart from the
//! others', and the read — one row, never the orders — goes through connections of its own;
//! and the views themselves are paced (`--page-views-per-second`): a crowd refreshing in a
//! closed loop waits for its turns on a timer instead of taking the cores the buyers need.
//!
//! Both fleets carry the same load: readers refreshing the page of a product with many orders,
//! and beside them buyers of *another* product. The page reads are counted per instance and
//! lifetime, and the buyers' latency
//! with and without the readers is measured and reported beside it.
//!
//! The verdict counts what the stampede is: on one instance, reads of the page under way at
//! the same time — after an expiry, every reader that missed — where one read per expiry
//! never has a second beside it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::Strategy;
use serde::{Deserialize, Serialize};
use sqlx::{Connection, MySqlConnection};
use testkit::{Answers, Clicks, Crowd};

use super::{Judgement, Scenario, Stage};
use crate::drive::latency::Latencies;
use crate::rig::fleet::Fleet;
use crate::rig::order_life::metric;

pub struct CacheStampede;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Orders of the page's product, placed before the readers start.
    orders: u64,
    /// Readers refreshing the page, spread over the instances.
    readers: usize,
    /// The page's lifetime.
    ttl_ms: u64,
    /// Lifetimes the readers read for.
    lifetimes: u64,
}

/// How the instances keep the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cache {
    /// One expiry for all, every miss reads (`--page-refresh-together`).
    ExpiringTogether,
    /// One read per expiry, lifetimes drawn apart, its own connections (the default).
    SingleFlight,
}

impl fmt::Display for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cache::ExpiringTogether => "copies expiring together, every miss reads",
            Cache::SingleFlight => "one read per expiry, lifetimes drawn apart",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub instances: usize,
    pub readers: usize,
    pub lifetimes: u64,
    /// Page requests answered.
    pub page_views: u64,
    /// Of them, read from the database (the rest answered from a copy).
    pub page_reads: u64,
    /// The most reads of the page under way at once on one instance.
    pub most_reads_at_once: u64,
    /// Purchases of the other product made while nobody read the page, and their p99.
    pub alone: Bought,
    /// The same while the readers refreshed the page.
    pub beside_readers: Bought,
}

impl Figures {
    /// Database reads of the page per instance and lifetime.
    pub fn reads_per_lifetime(&self) -> f64 {
        self.page_reads as f64 / (self.instances as f64 * self.lifetimes as f64)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Bought {
    pub purchases: usize,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

const INSTANCES: usize = 2;
const PAGE_PRODUCT: u64 = 960;
const BUY_PRODUCT: u64 = 961;
/// Buyers of the other product, clicking one after another.
const BUYERS: usize = 4;

impl Scenario for CacheStampede {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        orders: 20_000,
        readers: 16,
        ttl_ms: 200,
        lifetimes: 10,
    };
    const FULL: Sizes = Sizes {
        orders: 200_000,
        readers: 64,
        ttl_ms: 500,
        lifetimes: 20,
    };
    type Subject = Cache;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} readers refresh the page of a product with {} orders (a {} ms lifetime) \
             through {INSTANCES} instances for {} lifetimes; beside them {BUYERS} buyers of \
             another product",
            s.readers, s.orders, s.ttl_ms, s.lifetimes
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Cache, Figures)>> {
        let mut rows = Vec::new();
        for cache in [Cache::ExpiringTogether, Cache::SingleFlight] {
            let mut flags = vec![format!("--page-ttl-ms={}", s.ttl_ms)];
            if cache == Cache::ExpiringTogether {
                flags.push("--page-refresh-together".to_owned());
            }
            let fleet = Fleet::start(stage.app_binary()?, INSTANCES, &flags).await?;
            let tl = stage.round(cache.to_string());
            fleet.reset(PAGE_PRODUCT, 1_000_000).await?;
            fleet.reset(BUY_PRODUCT, 1_000_000).await?;
            place_orders(&fleet.database_url, PAGE_PRODUCT, s.orders).await?;
            tl.log("scenario", format!("{} orders placed", s.orders));
            let read_for = Duration::from_millis(s.ttl_ms * s.lifetimes);

            let alone = buy_for(&fleet, read_for, "alone").await;
            tl.log("buyers", format!("alone: {} purchases", alone.created()));
            let reads_before = page_reads(&fleet).await?;
            let (page_views, beside) = tokio::join!(
                read_pages(&fleet, s.readers, read_for),
                buy_for(&fleet, read_for, "beside")
            );
            let page_reads = page_reads(&fleet).await? - reads_before;
            let most_reads_at_once = most_reads_at_once(&fleet).await?;
            tl.log(
                "readers",
                format!(
                    "{page_views} page views, {page_reads} read from the database; buyers \
                     beside them: {} purchases",
                    beside.created()
                ),
            );
            rows.push((
                cache,
                Figures {
                    instances: INSTANCES,
                    readers: s.readers,
                    lifetimes: s.lifetimes,
                    page_views,
                    page_reads,
                    most_reads_at_once,
                    alone: bought(&alone, read_for),
                    beside_readers: bought(&beside, read_for),
                },
            ));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, cache: &Cache, f: &Figures) -> Judgement {
        let observed = format!(
            "{} page views, {} read from the database ({:.1} per instance and lifetime, at most \
             {} at once); the other product's purchases p99 {:.1} ms beside the readers, {:.1} \
             ms alone",
            f.page_views,
            f.page_reads,
            f.reads_per_lifetime(),
            f.most_reads_at_once,
            f.beside_readers.p99_ms,
            f.alone.p99_ms
        );
        match cache {
            Cache::ExpiringTogether => Judgement::new(
                "at an expiry, the readers that miss all read the page from the database at \
                 once",
                observed,
                f.most_reads_at_once > 1,
            ),
            Cache::SingleFlight => Judgement::new(
                "one read at a time however many readers; most views answered from a copy",
                observed,
                f.most_reads_at_once == 1 && f.page_views > f.page_reads,
            ),
        }
    }

    fn why(s: &Sizes, rows: &[(Cache, Figures)]) -> String {
        let find = |c: Cache| rows.iter().find(|(r, _)| *r == c).map(|(_, f)| *f);
        let (Some(together), Some(single)) =
            (find(Cache::ExpiringTogether), find(Cache::SingleFlight))
        else {
            return String::new();
        };
        format!(
            "{} readers refreshed a page whose product had {} orders. With one expiry for \
             every copy, each expiry sent the readers that missed to the database at once: \
             {} reads for {} page views ({:.1} per instance and lifetime, up to {} at once on \
             one instance), each summing the orders on a connection the buyers needed — the other product's purchases took \
             {:.1} ms at p99 beside them against {:.1} ms alone ({:.0} against {:.0} a \
             second). With one read per expiry, lifetimes drawn apart and the page read from \
             the product row on connections of its own, and the views paced: {} reads for {} \
             page views ({:.1} per instance and lifetime, {:.0} views a second), and the \
             purchases took {:.1} ms at p99 beside the readers against {:.1} ms alone.",
            s.readers,
            s.orders,
            together.page_reads,
            together.page_views,
            together.reads_per_lifetime(),
            together.most_reads_at_once,
            together.beside_readers.p99_ms,
            together.alone.p99_ms,
            together.beside_readers.per_second,
            together.alone.per_second,
            single.page_reads,
            single.page_views,
            single.reads_per_lifetime(),
            single.page_views as f64 / (s.lifetimes as f64 * s.ttl_ms as f64 / 1000.0),
            single.beside_readers.p99_ms,
            single.alone.p99_ms
        )
    }
}

/// Places `count` paid orders of `product` straight in the database, and takes their units
/// from its row, so the accounting still adds up.
async fn place_orders(database_url: &str, product: u64, count: u64) -> Result<()> {
    let mut conn = MySqlConnection::connect(database_url)
        .await
        .context("connecting to place the orders")?;
    let sql = format!(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, state) \
         SELECT ?, CONCAT('earlier-', seq), 1, 'conditional', 'r', 'paid' \
         FROM seq_1_to_{count}"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(product)
        .execute(&mut conn)
        .await
        .context("placing the orders")?;
    sqlx::query("UPDATE products SET stock = stock - ? WHERE id = ?")
        .bind(count)
        .bind(product)
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// Buyers of the other product, one click after another, for `span`.
async fn buy_for(fleet: &Fleet, span: Duration, prefix: &str) -> Answers {
    let sale = Crowd::new(
        BUYERS,
        Clicks::Total(u64::MAX),
        Strategy::Conditional,
        prefix,
    )
    .start(&fleet.api, BUY_PRODUCT);
    tokio::time::sleep(span).await;
    sale.stop().await
}

/// `readers` readers GET the page, each one after another, spread over the instances, for
/// `span`: the page views answered.
async fn read_pages(fleet: &Fleet, readers: usize, span: Duration) -> u64 {
    let client = reqwest::Client::new();
    let views = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..readers)
        .map(|r| {
            let url = format!("{}/api/products/{PAGE_PRODUCT}", fleet.api.base(r));
            let (client, views, stop) = (client.clone(), Arc::clone(&views), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let ok = client
                        .get(&url)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if ok {
                        views.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(span).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    views.load(Ordering::Relaxed)
}

/// The most page reads under way at once on any instance.
async fn most_reads_at_once(fleet: &Fleet) -> Result<u64> {
    let mut most = 0;
    for n in 0..INSTANCES {
        let here = metric(fleet, n, "seckill_page_reads_at_once_max")
            .await?
            .context("an instance without the page reads gauge")?;
        most = most.max(here);
    }
    Ok(most)
}

/// The page reads of every instance so far.
async fn page_reads(fleet: &Fleet) -> Result<u64> {
    let mut total = 0;
    for n in 0..INSTANCES {
        total += metric(fleet, n, "seckill_page_reads_total")
            .await?
            .context("an instance without the page reads counter")?;
    }
    Ok(total)
}

fn bought(answers: &Answers, span: Duration) -> Bought {
    let mut latencies = Latencies::default();
    for latency in answers.latencies() {
        latencies.record(latency);
    }
    let summary = latencies.summary();
    let purchases = answers.created();
    Bought {
        purchases,
        per_second: purchases as f64 / span.as_secs_f64(),
        p50_ms: summary.p50_us as f64 / 1000.0,
        p99_ms: summary.p99_us as f64 / 1000.0,
    }
}
