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
//! **Read from the product's home.** A read asks first where the product's stock lived when it
//! was last read: Redis for the stock it holds (it keeps that stock's rules beside the
//! counter, so that it sells while the database is away), the database for any other and for
//! a product not read yet (its row says where the stock lives). So a Redis that does not
//! answer holds up no purchase of stock kept in the database. The other store is asked when
//! the first cannot say.
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
//!
//! **Read without a lock.** Every click reads the memory, on every core at once; it changes
//! only when a product is read, learnt sold out, or forgotten. So the memory is a map the
//! readers load as it stands ([`arc_swap`]) and a writer replaces with a changed copy: a
//! refusal from memory writes nothing the other cores read, where a lock taken by every click
//! (and a reference to the winners counted up and down by each) passes one cache line between
//! the cores on every refusal.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
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
    /// The epoch of its Redis-held stock, which its purchases expect of Redis's marker (0 for
    /// a product of another home; see [`crate::redis_stock::epoch`]).
    pub redis_epoch: u64,
}

/// What one instance remembers.
pub struct Shelf {
    pool: MySqlPool,
    metrics: Arc<Metrics>,
    redis: Option<RedisStock>,
    lifetime: Duration,
    /// The products remembered, read as they stand by every request.
    entries: ArcSwap<HashMap<u64, Arc<Entry>>>,
    /// One change of the memory at a time: a change copies the map, so two at once would
    /// lose one of them.
    changing: Mutex<()>,
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
    /// Where the product's stock lived when it was last read, kept when the rest is forgotten:
    /// the store the next read asks first.
    last_home: Option<Home>,
}

/// A moment of a product's memory, to learn from only if nothing was forgotten since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

/// A product as one moment of the instance's memory holds it: read once per request, so a
/// refusal from memory looks the product up once.
#[derive(Debug, Clone, Copy)]
pub struct Recalled {
    /// `None`: no such product.
    pub known: Option<Known>,
    pub epoch: Epoch,
    /// The purchase asked about is refused from memory: the product is remembered sold out
    /// and the purchase is not one of its winners.
    pub refused: bool,
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
            entries: ArcSwap::from_pointee(HashMap::new()),
            changing: Mutex::new(()),
            loading: Mutex::new(HashMap::new()),
        }
    }

    /// Changes the memory: a copy of the map, changed by `change`, takes its place if `change`
    /// says it changed something. Readers go on reading the map as it stood meanwhile.
    fn change(&self, change: impl FnOnce(&mut HashMap<u64, Arc<Entry>>) -> bool) -> bool {
        let _one = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut entries = HashMap::clone(&self.entries.load());
        let changed = change(&mut entries);
        if changed {
            self.entries.store(Arc::new(entries));
        }
        changed
    }

    /// Changes the product's entry if `when` holds of it: asked first of the memory as it
    /// stands (most callers find nothing to change, and copy nothing), and again as the change
    /// is made. Whether it changed.
    fn change_entry(
        &self,
        id: u64,
        when: impl Fn(&Entry) -> bool,
        change: impl FnOnce(&mut Entry),
    ) -> bool {
        if !self.entries.load().get(&id).is_some_and(|e| when(e)) {
            return false;
        }
        self.change(|entries| match entries.get_mut(&id) {
            Some(e) if when(e) => {
                change(Arc::make_mut(e));
                true
            }
            _ => false,
        })
    }

    /// The product's home and rules (`None`: no such product), from memory when it is fresh,
    /// else from the database; the moment of memory they belong to; and whether memory refuses
    /// `purchase`, if one is asked about.
    pub async fn product(
        self: &Arc<Self>,
        id: u64,
        purchase: Option<PurchaseKey<'_>>,
    ) -> Result<Recalled, sqlx::Error> {
        if let Some((fresh, renew)) = self.recall(id, purchase) {
            if renew {
                let shelf = Arc::clone(self);
                tokio::spawn(async move { shelf.renew(id).await });
            }
            return Ok(fresh);
        }
        // Boxed: the read's state would otherwise make every purchase's future as large as
        // its own, and a refusal from memory would move that much for nothing.
        Box::pin(self.read(id, false, purchase)).await
    }

    /// The product as remembered, if the memory is fresh; and whether this caller is to renew
    /// it (it is past half its lifetime and nobody is renewing it yet).
    fn recall(&self, id: u64, purchase: Option<PurchaseKey<'_>>) -> Option<(Recalled, bool)> {
        let entries = self.entries.load();
        let e = entries.get(&id)?;
        let age = e.loaded.elapsed();
        if age >= self.lifetime {
            return None;
        }
        let loaded = e.loaded;
        let renew = age >= self.lifetime / 2
            && !e.renewing
            && self.change_entry(
                id,
                |e| e.loaded == loaded && !e.renewing,
                |e| e.renewing = true,
            );
        Some((e.recalled(purchase), renew))
    }

    /// Reads the product again while its memory still serves.
    async fn renew(&self, id: u64) {
        if let Err(e) = self.read(id, true, None).await {
            tracing::warn!(error = %e, product = id, "could not renew a product's memory");
            self.change_entry(id, |e| e.renewing, |e| e.renewing = false);
        }
    }

    /// Reads the product into memory, one read of a product at a time; unless `again`, not
    /// when a read that finished while this one waited for its turn already did.
    async fn read(
        &self,
        id: u64,
        again: bool,
        purchase: Option<PurchaseKey<'_>>,
    ) -> Result<Recalled, sqlx::Error> {
        let gate = {
            let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(loading.entry(id).or_default())
        };
        let loaded = {
            let _turn = gate.lock().await;
            self.load(id, again, purchase).await
        };
        // The last one through takes the gate away: the map holds only loads under way.
        let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&gate) == 2 {
            loading.remove(&id);
        }
        loaded
    }

    /// The product as remembered, if the memory is fresh.
    fn remembered(&self, id: u64, purchase: Option<PurchaseKey<'_>>) -> Option<Recalled> {
        let entries = self.entries.load();
        let e = entries.get(&id)?;
        (e.loaded.elapsed() < self.lifetime).then(|| e.recalled(purchase))
    }

    /// Reads the product from its backend into memory, unless (when not `again`) a load that
    /// finished while this one waited for its turn already did.
    async fn load(
        &self,
        id: u64,
        again: bool,
        purchase: Option<PurchaseKey<'_>>,
    ) -> Result<Recalled, sqlx::Error> {
        if !again && let Some(fresh) = self.remembered(id, purchase) {
            return Ok(fresh);
        }
        let (epoch, was_sold_out, last_home) = match self.entries.load().get(&id) {
            Some(e) => (e.epoch, e.winners.is_some(), e.last_home),
            None => (0, false, None),
        };
        self.metrics.product_read();
        let known = self.ask(id, last_home).await?;
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
            last_home: known.map(|k| k.home).or(last_home),
        };
        let recalled = entry.recalled(purchase);
        self.change(|entries| {
            let current = entries.get(&id).map_or(0, |e| e.epoch);
            if current != epoch {
                return false;
            }
            entries.insert(id, Arc::new(entry));
            true
        });
        Ok(recalled)
    }

    /// The product's home and rules, asked first of where its stock lived when last read, so
    /// that each product's admission depends on its own home only. Redis, for stock it held:
    /// it keeps the rules beside the counter, and a purchase of that stock is admitted while
    /// the database is away. Otherwise the database, whose row says where the stock lives: a
    /// product of the database is not held up by a Redis that does not answer. The other
    /// store is asked when the first cannot say.
    async fn ask(&self, id: u64, last_home: Option<Home>) -> Result<Option<Known>, sqlx::Error> {
        let in_redis = |(rules, redis_epoch)| Known {
            home: Home::Redis,
            rules,
            redis_epoch,
        };
        let redis_first = last_home == Some(Home::Redis);
        if redis_first && let Some(found) = self.rules_in_redis(id).await {
            return Ok(Some(in_redis(found)));
        }
        match products::rules(&self.pool, id).await {
            Ok(found) => Ok(found.map(|r| Known {
                home: r.home,
                rules: r.sale,
                redis_epoch: if r.home == Home::Redis {
                    r.redis_epoch
                } else {
                    0
                },
            })),
            Err(e) if redis_first => Err(e),
            Err(e) => self
                .rules_in_redis(id)
                .await
                .map(in_redis)
                .map(Some)
                .ok_or(e),
        }
    }

    /// The rules of a product whose stock Redis holds, kept there at its reset, and the epoch
    /// they were written at; `None` for any other product, or when Redis cannot say or lost
    /// them (the database is asked then).
    async fn rules_in_redis(&self, id: u64) -> Option<(SaleRules, u64)> {
        self.redis.as_ref()?.sale_rules(id).await.ok().flatten()
    }

    /// Remembers that the product was sold out at `epoch`: loads its winners and, if nothing
    /// was forgotten meanwhile, refuses from memory from now on.
    pub async fn learn_sold_out(&self, id: u64, epoch: Epoch) -> Result<(), ReadError> {
        let to_learn = |e: &Entry| {
            e.epoch == epoch.0 && e.winners.is_none() && !e.learning && e.known.is_some()
        };
        if !self.change_entry(id, to_learn, |e| e.learning = true) {
            return Ok(());
        }
        let (winners, failed) = match self.winners(id).await {
            Ok(winners) => (winners.map(Arc::new), None),
            Err(e) => (None, Some(e)),
        };
        self.change_entry(
            id,
            |e| e.epoch == epoch.0,
            |e| {
                e.learning = false;
                if let Some(winners) = winners {
                    e.winners = Some(winners);
                    e.loaded = Instant::now();
                }
            },
        );
        failed.map_or(Ok(()), Err)
    }

    /// Forgets that the product was sold out: units came back (an order expired or was
    /// cancelled). Its rules did not change, so they stay remembered: a return costs the
    /// purchases beside it nothing, where forgetting everything would make every request wait
    /// for the product to be read again, through the pool the purchases queue on. A load of
    /// winners under way when the units came back is not kept (its epoch is past).
    pub fn restocked(&self, id: u64) {
        self.change_entry(
            id,
            |_| true,
            |e| {
                e.epoch += 1;
                e.winners = None;
                e.learning = false;
            },
        );
    }

    /// Forgets what the instance knows of the product: its rules may have changed (a reset),
    /// or its stock was repaired.
    pub fn forget(&self, id: u64) {
        self.change(|entries| {
            let epoch = entries.get(&id).map_or(0, |e| e.epoch) + 1;
            let last_home = entries.get(&id).and_then(|e| e.last_home);
            let forgotten = Entry {
                known: None,
                // Stale at once: the next read loads the product again.
                loaded: Instant::now() - self.lifetime,
                epoch,
                winners: None,
                learning: false,
                renewing: false,
                last_home,
            };
            entries.insert(id, Arc::new(forgotten));
            true
        });
    }

    /// The purchases that hold the product's units, if its shelf is empty (a `sold_out` answer
    /// may only mean that fewer units are left than one buyer asked for); `None` if it is not,
    /// or if there are too many to remember. Once the shelf is empty no purchase can take a
    /// unit until one comes back, so the set read after it is final.
    async fn winners(&self, id: u64) -> Result<Option<Winners>, ReadError> {
        let Some(home) = products::rules(&self.pool, id).await?.map(|r| r.home) else {
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
    fn recalled(&self, purchase: Option<PurchaseKey<'_>>) -> Recalled {
        let refused = purchase
            .zip(self.winners.as_deref())
            .is_some_and(|(p, winners)| !winners.holds(p.user_id, p.request_id));
        Recalled {
            known: self.known,
            epoch: Epoch(self.epoch),
            refused,
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
