//! The registry: every strategy of the catalogue, built once per service instance from the
//! catalogue's lines — a strategy of its own by its module's builder, a locked one as the
//! generic [`Locked`] strategy over the lock its backend connected.

use std::collections::BTreeMap;
use std::sync::Arc;

use locks::{Backend, DistributedLock};

use super::locked::Locked;
use super::{Deps, Kind, StockStrategy, Strategy};

/// The lock of each lock backend, as connected at start-up: `None` where the backend is not
/// configured or could not be reached (its strategies then answer `backend_unavailable`).
pub type Locks = BTreeMap<Backend, Option<Arc<dyn DistributedLock>>>;

/// Every strategy of the catalogue, built.
pub struct Registry {
    deps: Deps,
    locks: Locks,
    built: BTreeMap<Strategy, Arc<dyn StockStrategy>>,
}

impl Registry {
    /// Builds every strategy of the catalogue from `deps` and the connected `locks`.
    pub fn new(deps: Deps, locks: Locks) -> Registry {
        let mut registry = Registry {
            deps,
            locks,
            built: BTreeMap::new(),
        };
        for &strategy in Strategy::ALL {
            registry.build(strategy);
        }
        registry
    }

    /// Replaces the lock behind every strategy over `backend` (tests put in-process or failing
    /// locks there).
    pub fn set_lock(&mut self, backend: Backend, lock: Option<Arc<dyn DistributedLock>>) {
        self.locks.insert(backend, lock);
        for &strategy in Strategy::ALL {
            if strategy.lock_backend() == Some(backend) {
                self.build(strategy);
            }
        }
    }

    fn build(&mut self, strategy: Strategy) {
        let built = match (strategy.spec().kind, build_own(strategy, &self.deps)) {
            (_, Some(own)) => own,
            (Kind::Locked { backend, fencing }, None) => {
                let lock = self.locks.get(&backend).cloned().flatten();
                Arc::new(Locked::new(&self.deps, lock, fencing))
            }
            (Kind::Own { .. }, None) => unreachable!("every `Own` line names its builder"),
        };
        self.built.insert(strategy, built);
    }

    /// The built strategy.
    pub fn get(&self, strategy: Strategy) -> &Arc<dyn StockStrategy> {
        &self.built[&strategy]
    }
}

macro_rules! define_builders {
    ($($variant:ident = $name:tt, $safety:ident, $kind:ident ($($how:tt)*), $description:literal;)+) => {
        /// The strategy of its own that `strategy` names, built from `deps` by its module's
        /// builder; `None` for a locked strategy.
        fn build_own(strategy: Strategy, deps: &Deps) -> Option<Arc<dyn StockStrategy>> {
            match strategy {
                $(Strategy::$variant => builder!($kind($($how)*), deps),)+
            }
        }
    };
}

/// The builder call of one catalogue line.
macro_rules! builder {
    (Own($service:ident, $home:ident, $module:ident :: $build:ident), $deps:ident) => {
        Some(super::$module::$build($deps))
    };
    (Locked($backend:ident, $fencing:ident), $deps:ident) => {
        None
    };
}

crate::catalogue::for_each_strategy!(define_builders);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::mysql::MySqlPoolOptions;

    use super::*;
    use crate::strategy::AtOnce;

    /// Every strategy built over a pool that reaches nothing, `batch_max` to a batch.
    fn registry(batch_max: u32) -> Registry {
        let pool = crate::db::Engines::MySql(
            MySqlPoolOptions::new()
                .connect_lazy("mysql://root@127.0.0.1:1/none")
                .expect("a lazy pool"),
        );
        let deps = Deps {
            pool: pool.clone(),
            lock_pool: pool,
            lock_lease: Duration::from_secs(5),
            lock_wait: Duration::from_secs(3),
            lock_prefix: String::new(),
            optimistic_retries: 16,
            redis: None,
            batch_window: Duration::from_millis(2),
            batch_max,
            batch_queue: 0,
            stream_max_lag: 1000,
            full_queue_memory: Duration::from_millis(1),
            optimistic_in_flight: 3,
            split_fallback: true,
        };
        Registry::new(deps, Locks::new())
    }

    #[tokio::test]
    async fn a_strategy_that_serves_purchases_together_is_never_admitted_fewer_than_a_batch() {
        let batched = registry(64).get(Strategy::Batched).at_once();
        assert_eq!(batched.least, 64);
        assert!(!batched.adaptive, "a batch's time inside is its own work");
        assert_eq!(
            registry(1).get(Strategy::Batched).at_once().least,
            AtOnce::DEFAULT.least
        );
    }

    #[tokio::test]
    async fn optimistic_is_admitted_only_a_few_at_once_and_the_others_all_the_instance_holds() {
        let registry = registry(64);
        assert_eq!(registry.get(Strategy::Optimistic).at_once().most, Some(3));
        for strategy in [
            Strategy::Conditional,
            Strategy::Pessimistic,
            Strategy::RedisLock,
        ] {
            assert_eq!(
                registry.get(strategy).at_once(),
                AtOnce::DEFAULT,
                "{strategy}"
            );
        }
    }
}
