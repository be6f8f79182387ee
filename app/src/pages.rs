//! A product's public page as one instance serves it: what buyers refreshing the page during a
//! sale are shown, at the cost of a refusal from memory rather than a read of the database each.
//!
//! **Why it is kept apart from the accounting.** The accounting (`GET
//! /api/products/{id}/accounting`, admin) sums every order of the product: with 200,000 orders
//! one such read takes a quarter of a second, and a crowd refreshing a page that did it held
//! every connection of the pool the purchases queue on — a purchase of *another* product then
//! waited seconds. The page shows what a buyer needs, the rules and the units left, read from
//! the product row (or its buckets, or its Redis counter) alone, never its orders.
//!
//! **Read once, by one request.** An instance keeps each product's page for `--page-ttl-ms`
//! and reads it again through one request while the others are answered the copy it has (a
//! copy past its time is served for as long again while one request renews it in the
//! background; past that, requests wait for the one read). However many buyers refresh, a
//! product costs the database one indexed row per instance per lifetime.
//!
//! **No two instances expire together.** Each copy's lifetime is drawn between three quarters
//! and five quarters of `--page-ttl-ms`. Copies that all expired at the same moment would send
//! every instance's readers to the database at once — the cache stampede of the seed articles.
//!
//! **On connections of their own.** The reads go through the readers' pool
//! (`--db-reader-pool-size`), never the purchases' pool, so even a page nobody has cached,
//! read by a crowd of unknown ids, waits for its own connections and not a buyer's.
//!
//! **The stampede, on purpose.** With `--page-refresh-together` (a fault switch, for the
//! `cache-stampede` scenario) the instance keeps a page the way a plain cache in front of a
//! page that also shows the units sold does: every copy expires at the same moments on every
//! instance (the multiples of the lifetime on the wall clock), every request that finds its
//! copy expired reads the page itself, and the read sums the product's orders through the
//! purchases' own pool.
//!
//! **Bounded.** An id that names no product is answered `404` and remembered nowhere; at most
//! [`MAX_PAGES`] products are kept, and a full memory first drops the copies past their time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::db::Db;

use crate::api::{Home, ProductPage};
use crate::db::products;
use crate::inventory::ReadError;
use crate::redis_stock::{RedisStock, RedisStockError};

/// Most products whose page an instance keeps.
pub const MAX_PAGES: usize = 10_000;

/// How an instance renews its copies of the pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// One request reads, the others are answered the copy; lifetimes drawn apart.
    OneAtATime,
    /// Every copy expires at the same wall-clock moments, every request that finds its copy
    /// expired reads, summing the orders (the `cache-stampede` scenario's fault).
    Together,
}

/// The public pages one instance keeps.
pub struct Pages {
    pool: Db,
    /// A replica the rows are read on first (`--database-replica-url`).
    replica: Option<Db>,
    redis: Option<RedisStock>,
    ttl: Duration,
    refresh: Refresh,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Reads of a page from the database or Redis, ever.
    reads: AtomicU64,
    /// Reads made on the primary because the replica lacked the product or did not answer.
    on_primary: AtomicU64,
    /// Reads under way now, and the most there ever were at once.
    reading: AtomicU64,
    most_at_once: AtomicU64,
}

/// One read under way, counted while it lives.
struct Reading<'a>(&'a Pages);

impl<'a> Reading<'a> {
    fn begin(pages: &'a Pages) -> Reading<'a> {
        pages.reads.fetch_add(1, Ordering::Relaxed);
        let now = pages.reading.fetch_add(1, Ordering::Relaxed) + 1;
        pages.most_at_once.fetch_max(now, Ordering::Relaxed);
        Reading(pages)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.reading.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One product's page: the copy, and the one read that renews it.
#[derive(Default)]
struct Slot {
    copy: Mutex<Option<Copy>>,
    reading: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Clone, Copy)]
struct Copy {
    page: ProductPage,
    read: Instant,
    /// Served as it is until then; renewed in the background for as long again.
    fresh_until: Instant,
    lifetime: Duration,
}

impl Copy {
    fn served_at(&self, now: Instant) -> ProductPage {
        let age = now.saturating_duration_since(self.read);
        ProductPage {
            age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
            ..self.page
        }
    }

    /// Past its lifetime and its grace: not to be served without a read.
    fn spent(&self, now: Instant) -> bool {
        now >= self.fresh_until + self.lifetime
    }
}

impl Pages {
    /// Pages read through `pool` (the readers' pool) and `redis`, each kept about `ttl`,
    /// renewed as `refresh` says.
    pub fn new(pool: Db, redis: Option<RedisStock>, ttl: Duration, refresh: Refresh) -> Pages {
        Pages {
            pool,
            replica: None,
            redis,
            ttl,
            refresh,
            slots: Mutex::new(HashMap::new()),
            reads: AtomicU64::new(0),
            on_primary: AtomicU64::new(0),
            reading: AtomicU64::new(0),
            most_at_once: AtomicU64::new(0),
        }
    }

    /// The same pages with their rows read on `replica` first, when there is one.
    pub fn reading_on(self, replica: Option<Db>) -> Pages {
        Pages { replica, ..self }
    }

    /// Prometheus text: the reads of a page from its backends so far (the other requests were
    /// answered from a copy), the most that were under way at once, and how many products'
    /// pages are kept.
    pub fn render(&self) -> String {
        let reads = self.reads.load(Ordering::Relaxed);
        let most = self.most_at_once.load(Ordering::Relaxed);
        let kept = self.lock_slots().len();
        let replica = match self.replica {
            Some(_) => format!(
                "# HELP seckill_page_reads_on_primary_total Page reads made on the primary \
                 because the replica lacked the product or did not answer.\n\
                 # TYPE seckill_page_reads_on_primary_total counter\n\
                 seckill_page_reads_on_primary_total {}\n",
                self.on_primary.load(Ordering::Relaxed)
            ),
            None => String::new(),
        };
        replica
            + &format!(
                "# HELP seckill_page_reads_total Reads of a product's public page from its backends.\n\
             # TYPE seckill_page_reads_total counter\n\
             seckill_page_reads_total {reads}\n\
             # HELP seckill_page_reads_at_once_max The most page reads under way at once, ever.\n\
             # TYPE seckill_page_reads_at_once_max gauge\n\
             seckill_page_reads_at_once_max {most}\n\
             # HELP seckill_pages_kept Products whose public page this instance keeps.\n\
             # TYPE seckill_pages_kept gauge\n\
             seckill_pages_kept {kept}\n"
            )
    }

    /// The product's page, or `None` if there is no such product.
    pub async fn page(self: &Arc<Self>, id: u64) -> Result<Option<ProductPage>, ReadError> {
        let slot = Arc::clone(self.lock_slots().entry(id).or_default());
        let now = Instant::now();
        if let Some(copy) = slot.current() {
            if now < copy.fresh_until {
                return Ok(Some(copy.served_at(now)));
            }
            if !copy.spent(now) && self.refresh == Refresh::OneAtATime {
                self.renew_in_background(id, &slot);
                return Ok(Some(copy.served_at(now)));
            }
        }
        // The reads boxed: a page served from the copy should not carry, and move, the 20 KB
        // future of reading the backends.
        let read = match self.refresh {
            Refresh::OneAtATime => {
                let _reading = slot.reading.lock().await;
                let now = Instant::now();
                if let Some(copy) = slot.current().filter(|c| now < c.fresh_until) {
                    return Ok(Some(copy.served_at(now)));
                }
                Box::pin(self.read(id, &slot)).await
            }
            Refresh::Together => Box::pin(self.read_summing(id, &slot)).await,
        };
        if !matches!(read, Ok(Some(_))) {
            self.drop_unread(id, &slot);
        }
        read
    }

    /// Starts one read of the product's page in the background, unless one is under way.
    fn renew_in_background(self: &Arc<Self>, id: u64, slot: &Arc<Slot>) {
        let Ok(reading) = Arc::clone(&slot.reading).try_lock_owned() else {
            return;
        };
        let pages = Arc::clone(self);
        let slot = Arc::clone(slot);
        tokio::spawn(async move {
            if let Err(e) = pages.read(id, &slot).await {
                tracing::warn!(product = id, error = %e, "could not renew the product's page");
            }
            drop(reading);
        });
    }

    /// Reads the page from the backends into `slot`.
    async fn read(&self, id: u64, slot: &Slot) -> Result<Option<ProductPage>, ReadError> {
        let _reading = Reading::begin(self);
        let Some((home, rules, mut stock, initial_stock)) = self.row(id).await? else {
            return Ok(None);
        };
        if home.in_redis() {
            let redis = self.redis.as_ref().ok_or(RedisStockError::NotConfigured)?;
            stock = match home {
                Home::RedisSplit => redis.split_counter_and_charges(id).await?.map(|(s, _)| s),
                _ => redis.counter(id).await?,
            }
            .unwrap_or(0);
        }
        let page = ProductPage {
            id,
            home,
            rules,
            stock,
            initial_stock,
            age_ms: 0,
        };
        let lifetime = self.ttl.mul_f64(rand::random_range(0.75..1.25));
        self.keep(slot, page, lifetime);
        Ok(Some(page))
    }

    /// The product's page row: on the replica when there is one and it has the product, else
    /// on the primary (a product created a moment ago that the replica has not applied yet, or
    /// a replica that does not answer).
    async fn row(&self, id: u64) -> Result<Option<products::PageRow>, sqlx::Error> {
        if let Some(replica) = &self.replica {
            match products::page(replica, id).await {
                Ok(Some(row)) => return Ok(Some(row)),
                Ok(None) => {}
                Err(e) => tracing::warn!(product = id, error = %e,
                    "the replica did not answer for the product's page; reading it on the primary"),
            }
            self.on_primary.fetch_add(1, Ordering::Relaxed);
        }
        products::page(&self.pool, id).await
    }

    /// [`Pages::read`] as the stampede reads it: the whole accounting, orders summed, kept
    /// until the next multiple of the lifetime on the wall clock.
    async fn read_summing(&self, id: u64, slot: &Slot) -> Result<Option<ProductPage>, ReadError> {
        let _reading = Reading::begin(self);
        let Some(view) = crate::inventory::view(&self.pool, self.redis.as_ref(), id).await? else {
            return Ok(None);
        };
        let page = ProductPage {
            id,
            home: view.home,
            rules: view.rules,
            stock: view.stock,
            initial_stock: view.initial_stock,
            age_ms: 0,
        };
        let ttl_ms = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let until_next = Duration::from_millis(ttl_ms - now_ms % ttl_ms);
        self.keep(slot, page, until_next);
        Ok(Some(page))
    }

    /// Keeps `page` in `slot` for `lifetime` from now.
    fn keep(&self, slot: &Slot, page: ProductPage, lifetime: Duration) {
        let read = Instant::now();
        *slot.lock_copy() = Some(Copy {
            page,
            read,
            fresh_until: read + lifetime,
            lifetime,
        });
        self.keep_within_bound();
    }

    /// Forgets a slot that holds no page (no such product, or its read failed), unless another
    /// request has put one there meanwhile.
    fn drop_unread(&self, id: u64, slot: &Arc<Slot>) {
        let mut slots = self.lock_slots();
        if slot.current().is_none() && slots.get(&id).is_some_and(|kept| Arc::ptr_eq(kept, slot)) {
            slots.remove(&id);
        }
    }

    /// Past [`MAX_PAGES`], drops the copies past their time; if every copy is current, the
    /// oldest ones.
    fn keep_within_bound(&self) {
        let mut slots = self.lock_slots();
        if slots.len() <= MAX_PAGES {
            return;
        }
        let now = Instant::now();
        slots.retain(|_, slot| slot.current().is_some_and(|c| now < c.fresh_until));
        while slots.len() > MAX_PAGES {
            let oldest = slots
                .iter()
                .min_by_key(|(_, s)| s.current().map(|c| c.read))
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => slots.remove(&id),
                None => break,
            };
        }
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Slot {
    fn current(&self) -> Option<Copy> {
        *self.lock_copy()
    }

    fn lock_copy(&self) -> std::sync::MutexGuard<'_, Option<Copy>> {
        self.copy.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unreachable_code, clippy::diverging_sub_expression)]
    fn a_page_served_from_its_copy_carries_no_read_of_the_backends() {
        let page = crate::future_size(|| Pages::page(todo!(), todo!()));
        assert!(page <= 4096, "a page's future is {page} bytes");
    }
}
