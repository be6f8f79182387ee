//! The strategy is chosen per request, so one product can be sold through several strategies
//! at once. Every *safe* strategy must stay safe in any such mix: a buyer of one strategy must
//! never overwrite a sale made through another.

use crate::common;

use app::api::{Home, Safety, Strategy};
use app::db::Engine;
use common::{Crowd, flash_sale_mixed, fresh_database_url, ledger, spawn_app, test_config};

const STOCK: i64 = 100;
const BUYERS: usize = 200;

async fn server<T: Send + 'static>(start: fn() -> T) -> T {
    tokio::task::spawn_blocking(start).await.expect("sandbox")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_random_mix_of_every_safe_strategy_on_one_product_across_two_instances_sells_exactly_the_stock()
 {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.redis_url = Some(server(sandbox::shared::redis_url).await);
    config.zookeeper = Some(server(sandbox::shared::zookeeper).await);
    config.etcd = server(sandbox::shared::etcd).await;
    config.memcached = Some(server(sandbox::shared::memcached).await);
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    let safe: Vec<Strategy> = Engine::MySql
        .strategies()
        .into_iter()
        // One product's stock lives in one home: the strategies of the row.
        .filter(|s| s.safety() == Safety::Safe && s.home() == Home::Row)
        .collect();
    assert!(safe.len() >= 9, "{safe:?}");

    let mut oversold = Vec::new();
    for product in 1..=3 {
        a.reset(product, STOCK).await;
        let crowd = Crowd {
            buyers: BUYERS,
            hold_ms: Some(2),
            busy_retries: 400,
        };
        let tally = flash_sale_mixed(&[&a, &b], product, &safe, crowd).await;
        let truth = ledger(&database_url, product).await;
        assert!(tally.unexpected.is_empty(), "{:?}", tally.unexpected);
        if (truth.sold, truth.stock, truth.unaccounted()) != (STOCK, 0, 0) {
            oversold.push((product, truth, tally));
        }
    }
    assert!(
        oversold.is_empty(),
        "a mix of safe strategies sold something other than exactly the stock: {oversold:?}"
    );
    a.stop().await;
    b.stop().await;
    common::drop_database(&database_url).await;
}
