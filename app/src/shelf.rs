//! What an instance remembers of each product between requests: its sale rules, and whether
//! its shelf is empty. This is what lets a refusal cost what a no-op costs: a purchase outside
//! the sale window, without its token, past the per-user limit in one click, or for a product
//! this instance knows is sold out, is answered from memory, before any database or Redis.
//!
//! **Sold out, remembered.** When a strategy answers `sold_out`, the instance remembers it, and
//! loads the purchases that hold the product's units (its winners: the orders, or for Redis-held
//! stock the charge records, which include those still on their way to an order). Once the
//! shelf is empty no new purchase can win, so the set is final; from then on a click refused
//! from memory is one whose purchase is not among them, and a retry of a click that did buy
//! still goes to its strategy and gets its order back. When the memory ages out, the read that
//! renews it reads the winners again if the shelf is still empty, so a crowd refused from memory
//! stays refused from memory rather than reaching the strategies once per lifetime.
//!
//! **Renewed before it ages.** A request that finds the memory past half its lifetime reads the
//! product again in the background and is answered from memory meanwhile; only a memory past its
//! whole lifetime (no request came in the second half) makes requests wait for the read. So the
//! read — which goes through the pool the purchases use, and waits behind them when the service
//! is busy — never stands between a buyer and a refusal, and the memory is never older than its
//! lifetime.
//!
//! **Forgetting.** Stock comes back by a reset, a reconciliation that gives units back, or an
//! order that returns them (it expired or was cancelled); each makes its own instance forget at
//! once, and every instance forgets within the memory's lifetime (`--product-memory-ms`) in
//! any case. A return forgets only that the product was sold out: its rules are the same, and
//! reading them again would make every request for the product wait for one read through the
//! pool the purchases queue on — with the expiry sweep returning units every second, a stall of
//! every buyer's request every second. A reset or a reconciliation forgets the rules too. With
//! Redis configured, both are also announced on channels every instance listens to, so they all
//! forget at once ([`crate::redis_stock::announce`]). A memory that does not forget refuses
//! buyers while units are on sale: the scenario `stale-sold-out` shows it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::MySqlPool;

use crate::api::{Home, SaleRules};
use crate::db::orders::PurchaseKey;
use crate::db::products;
use crate::inventory::{self, ReadError};
use crate::metrics::Metrics;
use crate::redis_stock::{RedisStock, charge};

/// Most winners remembered for one sold-out product; a product with more is refused by its
/// strategy instead.
const MAX_WINNERS: usize = 200_000;

/// A product as the instance remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub home: Home,
    pub rules: SaleRules,
}

/// What one instance remembers.
pub struct Shelf {
    pool: MySqlPool,
    metrics: Arc<Metrics>,
    redis: Option<RedisStock>,
    lifetime: Duration,
    entries: Mutex<HashMap<u64, Entry>>,
    /// One load of a product's rules at a time: a flood's first clicks all find the memory
    /// empty at once, and one of them asks the backend while the others wait for its answer.
    loading: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

#[derive(Debug, Clone)]
struct Entry {
    /// `None`: no such product.
    known: Option<Known>,
    loaded: Instant,
    /// Bumped each time the product is forgotten while its entry is being filled.
    epoch: u64,
    winners: Option<Arc<Winners>>,
    /// A request is loading the winners.
    learning: bool,
    /// A read in the background is renewing the entry.
    renewing: bool,
}

/// A moment of a product's memory, to learn from only if nothing was forgotten since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

/// A product as one moment of the instance's memory holds it: read once per request, so a
/// refusal from memory looks the product up once.
#[derive(Debug, Clone)]
pub struct Recalled {
    /// `None`: no such product.
    pub known: Option<Known>,
    pub epoch: Epoch,
    /// Its winners, when it is remembered sold out.
    sold_out: Option<Arc<Winners>>,
}

impl Recalled {
    /// Whether the purchase is refused from memory: the product is known to be sold out and
    /// the purchase is not one of its winners.
    pub fn refuses(&self, key: PurchaseKey<'_>) -> bool {
        (self.sold_out.as_ref()).is_some_and(|w| !w.holds(key.user_id, key.request_id))
    }
}

impl Shelf {
    pub fn new(
        pool: MySqlPool,
        metrics: Arc<Metrics>,
        redis: Option<RedisStock>,
        lifetime: Duration,
    ) -> Shelf {
        Shelf {
            pool,
            metrics,
            redis,
            lifetime,
            entries: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The product's home and rules (`None`: no such product), from memory when it is fresh,
    /// else from the database; the moment of memory they belong to; and its winners, when it
    /// is remembered sold out.
    pub async fn product(self: &Arc<Self>, id: u64) -> Result<Recalled, sqlx::Error> {
        if let Some((fresh, renew)) = self.recall(id) {
            if renew {
                let shelf = Arc::clone(self);
                tokio::spawn(async move { shelf.renew(id).await });
            }
            return Ok(fresh);
        }
        // Boxed: the read's state would otherwise make every purchase's future as large as
        // its own, and a refusal from memory would move that much for nothing.
        Box::pin(self.read(id, false)).await
    }

    /// The product as remembered, if the memory is fresh; and whether this caller is to renew
    /// it (it is past half its lifetime and nobody is renewing it yet).
    fn recall(&self, id: u64) -> Option<(Recalled, bool)> {
        let mut entries = self.entries();
        let e = entries.get_mut(&id)?;
        let age = e.loaded.elapsed();
        if age >= self.lifetime {
            return None;
        }
        let renew = age >= self.lifetime / 2 && !e.renewing;
        e.renewing |= renew;
        Some((e.recalled(), renew))
    }

    /// Reads the product again while its memory still serves.
    async fn renew(&self, id: u64) {
        if let Err(e) = self.read(id, true).await {
            tracing::warn!(error = %e, product = id, "could not renew a product's memory");
            if let Some(entry) = self.entries().get_mut(&id) {
                entry.renewing = false;
            }
        }
    }

    /// Reads the product into memory, one read of a product at a time; unless `again`, not
    /// when a read that finished while this one waited for its turn already did.
    async fn read(&self, id: u64, again: bool) -> Result<Recalled, sqlx::Error> {
        let gate = {
            let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(loading.entry(id).or_default())
        };
        let loaded = {
            let _turn = gate.lock().await;
            self.load(id, again).await
        };
        // The last one through takes the gate away: the map holds only loads under way.
        let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&gate) == 2 {
            loading.remove(&id);
        }
        loaded
    }

    /// The product as remembered, if the memory is fresh.
    fn remembered(&self, id: u64) -> Option<Recalled> {
        let entries = self.entries();
        let e = entries.get(&id)?;
        (e.loaded.elapsed() < self.lifetime).then(|| e.recalled())
    }

    /// Reads the product from its backend into memory, unless (when not `again`) a load that
    /// finished while this one waited for its turn already did.
    async fn load(&self, id: u64, again: bool) -> Result<Recalled, sqlx::Error> {
        if !again && let Some(fresh) = self.remembered(id) {
            return Ok(fresh);
        }
        let (epoch, was_sold_out) = match self.entries().get(&id) {
            Some(e) => (e.epoch, e.winners.is_some()),
            None => (0, false),
        };
        self.metrics.product_read();
        let known = match self.rules_in_redis(id).await {
            Some(rules) => Some(Known {
                home: Home::Redis,
                rules,
            }),
            None => products::rules(&self.pool, id)
                .await?
                .map(|(home, rules)| Known { home, rules }),
        };
        // Sold out when last read: still sold out if the shelf is still empty, with the winners
        // of now (units that came back and sold again changed them).
        let winners = match (was_sold_out, known) {
            (true, Some(_)) => self.winners(id).await.ok().flatten().map(Arc::new),
            _ => None,
        };
        let entry = Entry {
            known,
            loaded: Instant::now(),
            epoch,
            winners,
            learning: false,
            renewing: false,
        };
        let recalled = entry.recalled();
        let mut entries = self.entries();
        let current = entries.get(&id).map_or(0, |e| e.epoch);
        if current == epoch {
            entries.insert(id, entry);
        }
        Ok(recalled)
    }

    /// The rules of a product whose stock Redis holds, kept there at its reset; `None` for
    /// any other product, or when Redis cannot say (the database is asked then).
    async fn rules_in_redis(&self, id: u64) -> Option<SaleRules> {
        self.redis.as_ref()?.sale_rules(id).await.ok().flatten()
    }

    /// Remembers that the product was sold out at `epoch`: loads its winners and, if nothing
    /// was forgotten meanwhile, refuses from memory from now on.
    pub async fn learn_sold_out(&self, id: u64, epoch: Epoch) -> Result<(), ReadError> {
        {
            let mut entries = self.entries();
            match entries.get_mut(&id) {
                Some(e)
                    if e.epoch == epoch.0
                        && e.winners.is_none()
                        && !e.learning
                        && e.known.is_some() =>
                {
                    e.learning = true;
                }
                _ => return Ok(()),
            }
        }
        let winners = self.winners(id).await;
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(&id).filter(|e| e.epoch == epoch.0) else {
            return winners.map(|_| ());
        };
        entry.learning = false;
        if let Some(winners) = winners? {
            entry.winners = Some(Arc::new(winners));
            entry.loaded = Instant::now();
        }
        Ok(())
    }

    /// Forgets that the product was sold out: units came back (an order expired or was
    /// cancelled). Its rules did not change, so they stay remembered: a return costs the
    /// purchases beside it nothing, where forgetting everything would make every request wait
    /// for the product to be read again, through the pool the purchases queue on. A load of
    /// winners under way when the units came back is not kept (its epoch is past).
    pub fn restocked(&self, id: u64) {
        let mut entries = self.entries();
        if let Some(e) = entries.get_mut(&id) {
            e.epoch += 1;
            e.winners = None;
            e.learning = false;
        }
    }

    /// Forgets what the instance knows of the product: its rules may have changed (a reset),
    /// or its stock was repaired.
    pub fn forget(&self, id: u64) {
        let mut entries = self.entries();
        let epoch = entries.get(&id).map_or(0, |e| e.epoch) + 1;
        entries.insert(
            id,
            Entry {
                known: None,
                // Stale at once: the next read loads the product again.
                loaded: Instant::now() - self.lifetime,
                epoch,
                winners: None,
                learning: false,
                renewing: false,
            },
        );
    }

    /// The purchases that hold the product's units, if its shelf is empty (a `sold_out` answer
    /// may only mean that fewer units are left than one buyer asked for); `None` if it is not,
    /// or if there are too many to remember. Once the shelf is empty no purchase can take a
    /// unit until one comes back, so the set read after it is final.
    async fn winners(&self, id: u64) -> Result<Option<Winners>, ReadError> {
        let Some(home) = products::rules(&self.pool, id).await?.map(|(home, _)| home) else {
            return Ok(None);
        };
        let left = inventory::left(&self.pool, self.redis.as_ref(), id, home).await?;
        if left != Some(0) {
            return Ok(None);
        }
        let home = Some(home);
        let winners: Vec<(String, String)> = match (home, &self.redis) {
            (Some(Home::Redis), Some(redis)) => redis
                .charged(id)
                .await?
                .into_iter()
                .filter(|(_, record)| record != charge::CANCELLED)
                .filter_map(|(field, _)| {
                    charge::parse_field(&field).map(|(u, r)| (u.to_string(), r.to_string()))
                })
                .collect(),
            (Some(_), _) => crate::db::orders::purchases_of(&self.pool, id)
                .await?
                .into_iter()
                .filter(|(_, _, state)| state.holds_units())
                .map(|(user, request, _)| (user, request))
                .collect(),
            (None, _) => return Ok(None),
        };
        Ok((winners.len() <= MAX_WINNERS).then(|| Winners::of(winners)))
    }
}

impl Entry {
    fn recalled(&self) -> Recalled {
        Recalled {
            known: self.known,
            epoch: Epoch(self.epoch),
            sold_out: self.winners.clone(),
        }
    }
}

/// The purchases that hold a sold-out product's units: request ids by user, so that a
/// refusal looks itself up without building a key.
#[derive(Debug, Default)]
struct Winners(HashMap<String, HashSet<String>>);

impl Winners {
    fn of(purchases: Vec<(String, String)>) -> Winners {
        let mut by_user: HashMap<String, HashSet<String>> = HashMap::new();
        for (user, request) in purchases {
            by_user.entry(user).or_default().insert(request);
        }
        Winners(by_user)
    }

    fn holds(&self, user_id: &str, request_id: &str) -> bool {
        self.0
            .get(user_id)
            .is_some_and(|requests| requests.contains(request_id))
    }
}
