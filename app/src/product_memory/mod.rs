//! What an instance remembers of each product between requests: its sale rules, and whether
//! it has units left. This is what lets a refusal cost what a no-op costs: a purchase outside
//! the sale window, without its token, past the per-user limit in one click, or for a product
//! this instance knows is sold out, is answered from memory, before any database or Redis.
//!
//! **Sold out, remembered.** When a strategy answers `sold_out`, the instance remembers it, and
//! loads the purchases that hold the product's units (its winners: the orders, or for Redis-held
//! stock the charge records, which include those still on their way to an order). Once no
//! unit is left no new purchase can win, so the set is final; from then on a click refused
//! from memory is one whose purchase is not among them, and a retry of a click that did buy
//! still goes to its strategy and gets its order back. When the memory ages out, the read that
//! renews it asks whether the product is still sold out and whether anyone can have bought
//! since the winners were read ([`winners`]): only then are they read again, so a crowd
//! refused from memory stays refused from memory, and a product with 200,000 winners costs its
//! renewal two small reads, not 200,000 rows.
//!
//! **Renewed before it ages.** A request that finds the memory past half its lifetime reads the
//! product again in the background and is answered from memory meanwhile; only a memory past its
//! whole lifetime (no request came in the second half) makes requests wait for the read. So the
//! read — which goes through the pool the purchases use, and waits behind them when the service
//! is busy — never stands between a buyer and a refusal, and the memory is never older than its
//! lifetime.
//!
//! **Read from the product's home.** A read asks first where the product's stock lived when it
//! was last read, so that a Redis that does not answer holds up no purchase of stock kept in
//! the database ([`home`]).
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
//! **Bounded.** An id that has no product leaves no product behind, and a product nobody asks
//! about any more is dropped: the memory holds the products that exist and are asked for
//! ([`bounds`]).
//!
//! **Read without a lock.** Every click reads the memory, on every core at once; it changes
//! only when a product is read, learnt sold out, or forgotten. So the memory is a map the
//! readers load as it stands ([`arc_swap`]) and a writer replaces with a changed copy: a
//! refusal from memory writes nothing the other cores read, where a lock taken by every click
//! (and a reference to the winners counted up and down by each) passes one cache line between
//! the cores on every refusal. A copy of every product for each change would make a change cost
//! what the memory holds, so the map is split in [`SHARDS`] by product id, each swapped on its
//! own: a change copies its product's shard, a 64th of the memory. A read still loads one
//! pointer and looks the product up in one hash map. (A concurrent map was the other choice:
//! `dashmap` takes a shard's read lock on every lookup — a write to a cache line every reader
//! shares, which is what this memory exists to avoid — and the lock-free ones, `papaya` or
//! `scc`, would be a new dependency on the refusals' path for a map that changes a few times a
//! second per product.)

mod absent;
mod bounds;
mod entry;
mod gate;
mod home;
mod winners;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::db::Db;
use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;

use crate::api::{Home, SaleRules};
use crate::db::orders::PurchaseKey;
use crate::inventory::ReadError;
use crate::metrics::Metrics;
use crate::redis_stock::RedisStock;
use absent::Absent;
use entry::Entry;
use gate::Gate;
use winners::Winners;

/// The parts the memory is split in, each copied on its own when it changes.
const SHARDS: usize = 64;

/// A product as the instance remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub home: Home,
    pub rules: SaleRules,
    /// The epoch of its Redis-held stock, which its purchases expect of Redis's marker (0 for
    /// a product of another home; see [`crate::redis_stock::epoch`]).
    pub redis_epoch: u64,
    /// The parts its Redis-held stock is split in (0: one counter, or another home).
    pub redis_parts: u32,
}

type Entries = HashMap<u64, Arc<Entry>>;

/// What one instance remembers.
pub struct ProductMemory {
    pool: Db,
    metrics: Arc<Metrics>,
    redis: Option<RedisStock>,
    lifetime: Duration,
    /// The products remembered, by product id modulo [`SHARDS`].
    shards: Box<[CachePadded<Shard>]>,
    /// Product ids that have no product, lately read.
    absent: Mutex<Absent>,
    /// One load of a product's rules at a time: a flood's first clicks all find the memory
    /// empty at once, and one of them asks the backend while the others wait for its answer
    /// (see [`gate`]).
    loading: Mutex<HashMap<u64, Arc<Gate>>>,
    /// The next entry's epoch. Drawn from one counter, so that an entry dropped and made again
    /// never has an epoch a reader of the old one still holds.
    epochs: AtomicU64,
    /// Purchases read from the backends to learn or renew sold-out products' winners.
    winners_read: AtomicU64,
}

/// A part of the memory, read as it stands by every request.
#[derive(Default)]
struct Shard {
    entries: ArcSwap<Entries>,
    /// One change of the shard at a time: a change copies it, so two at once would lose one
    /// of them.
    changing: Mutex<()>,
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

impl Recalled {
    /// A product id that has no product (no entry ever has epoch 0).
    const UNKNOWN: Recalled = Recalled {
        known: None,
        epoch: Epoch(0),
        refused: false,
    };
}

impl ProductMemory {
    pub fn new(
        pool: Db,
        metrics: Arc<Metrics>,
        redis: Option<RedisStock>,
        lifetime: Duration,
    ) -> ProductMemory {
        ProductMemory {
            pool,
            metrics,
            redis,
            lifetime,
            shards: (0..SHARDS).map(|_| CachePadded::default()).collect(),
            absent: Mutex::default(),
            loading: Mutex::new(HashMap::new()),
            epochs: AtomicU64::new(1),
            winners_read: AtomicU64::new(0),
        }
    }

    fn shard(&self, id: u64) -> &Shard {
        // Product ids are the operator's, mostly consecutive: they spread as they are.
        &self.shards[(id % SHARDS as u64) as usize]
    }

    fn absent(&self) -> MutexGuard<'_, Absent> {
        self.absent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_epoch(&self) -> u64 {
        self.epochs.fetch_add(1, Ordering::Relaxed)
    }

    /// Changes the shard of product `id`: `change` sees the shard as it stands, under the
    /// shard's lock, and gives its changed copy, or `None` if there is nothing to change.
    /// Readers go on reading the shard as it stood meanwhile. Whether it changed.
    fn change(&self, id: u64, change: impl FnOnce(&Entries) -> Option<Entries>) -> bool {
        change_shard(self.shard(id), change)
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
        if !self
            .shard(id)
            .entries
            .load()
            .get(&id)
            .is_some_and(|e| when(e))
        {
            return false;
        }
        self.change(id, |entries| {
            let mut entry = Entry::clone(entries.get(&id).filter(|e| when(e))?);
            change(&mut entry);
            Some(with(entries, id, entry))
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
                let memory = Arc::clone(self);
                tokio::spawn(async move { memory.renew(id).await });
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
        let entries = self.shard(id).entries.load();
        let Some(e) = entries.get(&id) else {
            let absent = self.absent().holds(id, self.lifetime);
            return absent.then_some((Recalled::UNKNOWN, false));
        };
        if !e.fresh(self.lifetime) {
            return None;
        }
        let loaded = e.loaded;
        let renew = loaded.elapsed() >= self.lifetime / 2
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
    /// when a read that finished while this one waited for its turn already did. Behind a
    /// read that could not reach the database, answers as it did ([`Gate`]).
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
        let loaded = gate.read(id, self.load(id, again, purchase)).await;
        // The last one through takes the gate away: the map holds only loads under way.
        let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&gate) == 2 {
            loading.remove(&id);
        }
        loaded
    }

    /// The product as remembered, if the memory is fresh.
    fn remembered(&self, id: u64, purchase: Option<PurchaseKey<'_>>) -> Option<Recalled> {
        let entries = self.shard(id).entries.load();
        match entries.get(&id) {
            Some(e) => e.fresh(self.lifetime).then(|| e.recalled(purchase)),
            None => (self.absent().holds(id, self.lifetime)).then_some(Recalled::UNKNOWN),
        }
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
        let (epoch, sold_out, last_home) = match self.shard(id).entries.load().get(&id) {
            Some(e) => (Some(e.epoch), e.winners.clone(), e.last_home),
            None => (None, None, None),
        };
        self.metrics.product_read();
        let Some(known) = self.ask(id, last_home).await? else {
            self.remember_absent(id, epoch);
            return Ok(Recalled::UNKNOWN);
        };
        // Sold out when last read: still sold out if no unit came back, with the winners
        // of now (units that came back and sold again changed them).
        let looked = sold_out.is_some();
        let winners = match sold_out {
            Some(winners) => self.winners_again(id, known.home, winners).await,
            None => None,
        };
        let entry = Entry {
            known: Some(known),
            loaded: Instant::now(),
            epoch: epoch.unwrap_or_else(|| self.new_epoch()),
            winners,
            learning: false,
            renewing: false,
            last_home: Some(known.home),
        };
        let mut recalled = entry.recalled(purchase);
        self.change(id, |entries| {
            let current = entries.get(&id);
            (current.map(|e| e.epoch) == epoch).then(|| {
                let entry = match current {
                    Some(current) => entry.replacing(current, looked),
                    None => entry,
                };
                recalled = entry.recalled(purchase);
                with(entries, id, entry)
            })
        });
        Ok(recalled)
    }

    /// Remembers that the product was sold out at `epoch`: loads its winners and, if nothing
    /// was forgotten meanwhile, refuses from memory from now on.
    pub async fn learn_sold_out(&self, id: u64, epoch: Epoch) -> Result<(), ReadError> {
        let to_learn = |e: &Entry| {
            e.epoch == epoch.0 && e.winners.is_none() && !e.learning && e.known.is_some()
        };
        let entries = self.shard(id).entries.load();
        let Some(home) = (entries.get(&id).filter(|e| to_learn(e)))
            .and_then(|e| e.known)
            .map(|known| known.home)
        else {
            return Ok(());
        };
        if !self.change_entry(id, to_learn, |e| e.learning = true) {
            return Ok(());
        }
        let (winners, failed) = match self.winners(id, home).await {
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
                e.epoch = self.new_epoch();
                e.winners = None;
                e.learning = false;
            },
        );
    }

    /// Forgets what the instance knows of the product: its rules may have changed (a reset),
    /// or its stock was repaired.
    pub fn forget(&self, id: u64) {
        self.change(id, |entries| {
            self.absent().remove(id);
            let last_home = entries.get(&id).and_then(|e| e.last_home);
            let forgotten = Entry {
                known: None,
                loaded: Instant::now(),
                epoch: self.new_epoch(),
                winners: None,
                learning: false,
                renewing: false,
                last_home,
            };
            Some(with(entries, id, forgotten))
        });
    }
}

/// [`ProductMemory::change`] of one shard.
fn change_shard(shard: &Shard, change: impl FnOnce(&Entries) -> Option<Entries>) -> bool {
    let _one = shard
        .changing
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match change(&shard.entries.load()) {
        Some(changed) => {
            shard.entries.store(Arc::new(changed));
            true
        }
        None => false,
    }
}

/// A copy of `entries` with `entry` as product `id`'s.
fn with(entries: &Entries, id: u64, entry: Entry) -> Entries {
    let mut changed = entries.clone();
    changed.insert(id, Arc::new(entry));
    changed
}
