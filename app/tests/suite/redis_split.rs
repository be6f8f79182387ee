//! `redis-split`: a product's stock in several Redis counters (parts). Buyers spread over the
//! parts by a hash of their id; one whose home part is empty moves units home from the others,
//! so every unit sells and none twice; without that fallback buyers are refused while other
//! parts hold units (undersell). Units moved between parts are neither created nor lost, and a
//! cancelled order's unit goes back to its buyer's part.

use crate::common;

use app::config::Config;
use app::redis_stock::RedisStock;
use app::redis_stock::split::{MOVE_OUT, home_part};
use common::life::{act, buy};
use common::{drop_database, fresh_database_url, ledger, sells_exactly_the_stock_on, spawn_app};
use deadpool_redis::redis;
use serde_json::json;

const PARTS: u32 = 4;

async fn shared_redis() -> String {
    tokio::task::spawn_blocking(sandbox::shared::redis_url)
        .await
        .expect("sandbox Redis")
}

fn config_with(database_url: &str, redis_url: String) -> Config {
    let mut config = common::test_config(database_url);
    config.redis_url = Some(redis_url);
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    config
}

fn redis_of(config: &Config) -> RedisStock {
    let url = config.redis_url.as_deref().expect("redis configured");
    RedisStock::open(url, &config.lock_prefix, 4).expect("redis pool")
}

/// `n` user ids whose home part, of [`PARTS`], is `part`.
fn buyers_homed_in(part: u32, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("buyer-{i}"))
        .filter(|user| home_part(user, PARTS) == part)
        .take(n)
        .collect()
}

/// The units each part holds and was allotted.
async fn parts(redis: &RedisStock, product: u64) -> Vec<(i64, i64)> {
    (redis.part_states(product, PARTS).await.expect("parts"))
        .into_iter()
        .map(|p| (p.counter.expect("a counter"), p.allotted))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_split_sells_exactly_the_stock_from_two_instances() {
    let redis = shared_redis().await;
    sells_exactly_the_stock_on(2, "redis-split", |c| c.redis_url = Some(redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_of_one_part_buy_every_unit_of_the_others_and_nothing_is_created_or_lost() {
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    let body = json!({ "stock": 16, "home": "redis-split", "buckets": PARTS, "per_user_limit": 1 });
    app.reset_with(5, &body).await;
    assert_eq!(parts(&redis, 5).await, vec![(4, 4); PARTS as usize]);

    // Twenty buyers all homed in part 0: its 4 units, then the 12 of the other parts, moved home.
    let buyers = buyers_homed_in(0, 20);
    let (status, answer) = buy(&app, 5, &buyers[0], "r-0", "redis-split").await;
    assert_eq!(status.as_u16(), 201, "{answer}");
    // The limit is counted in the buyer's home part: a second unit is refused.
    let (status, answer) = buy(&app, 5, &buyers[0], "again", "redis-split").await;
    assert_eq!(status.as_u16(), 409, "{answer}");
    assert_eq!(answer["error"], "limit_reached", "{answer}");
    let mut created = 1;
    for (n, user) in buyers.iter().enumerate().skip(1) {
        let (status, answer) = buy(&app, 5, user, &format!("r-{n}"), "redis-split").await;
        match status.as_u16() {
            201 => created += 1,
            409 => assert_eq!(answer["error"], "sold_out", "{answer}"),
            other => panic!("{other}: {answer}"),
        }
    }
    assert_eq!(created, 16);
    let found = parts(&redis, 5).await;
    assert!(found.iter().all(|&(left, _)| left == 0), "{found:?}");
    // Part 0 was allotted its own units and every unit moved in; the others gave all theirs.
    assert_eq!(found[0].1, 16, "{found:?}");
    assert_eq!(found.iter().map(|&(_, a)| a).sum::<i64>(), 16, "{found:?}");
    let truth = ledger(&database_url, 5).await;
    assert_eq!((truth.sold, truth.orders), (16, 16), "{truth:?}");

    // A cancelled order's unit goes back to its buyer's part, and sells again.
    let (status, cancelled) = act(&app, 5, &buyers[0], "r-0", "cancel", &[]).await;
    assert_eq!(status.as_u16(), 200, "{cancelled}");
    assert_eq!(parts(&redis, 5).await[0].0, 1);
    let late = buyers_homed_in(2, 1);
    let (status, answer) = buy(&app, 5, &late[0], "late", "redis-split").await;
    assert_eq!(status.as_u16(), 201, "{answer}");
    let view = app.drained(5).await;
    assert_eq!(view.stock, 0, "{view:?}");
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_fallback_buyers_are_told_sold_out_while_other_parts_hold_units() {
    let database_url = fresh_database_url().await;
    let mut config = config_with(&database_url, shared_redis().await);
    config.split_fallback = false;
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    let body = json!({ "stock": 16, "home": "redis-split", "buckets": PARTS, "per_user_limit": 1 });
    app.reset_with(6, &body).await;
    let buyers = buyers_homed_in(0, 10);
    let mut sold_out = 0;
    for (n, user) in buyers.iter().enumerate() {
        let (status, answer) = buy(&app, 6, user, &format!("r-{n}"), "redis-split").await;
        match status.as_u16() {
            201 => {}
            409 if answer["error"] == "sold_out" => sold_out += 1,
            other => panic!("{other}: {answer}"),
        }
    }
    // Six buyers refused while twelve units sit in the other parts: undersell.
    assert_eq!(sold_out, 6);
    let left: i64 = parts(&redis, 6).await.iter().map(|&(left, _)| left).sum();
    assert_eq!(left, 12);
    assert_eq!(ledger(&database_url, 6).await.sold, 4);
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_finishes_a_move_left_half_way_and_lowers_a_part_above_its_orders() {
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    let body = json!({ "stock": 16, "home": "redis-split", "buckets": PARTS, "per_user_limit": 1 });
    app.reset_with(8, &body).await;
    let epoch: u64 = redis
        .query(redis::cmd("GET").arg(&redis.keys().part(8, 1).counter.epoch))
        .await
        .expect("a marker");
    // A move out of part 1 whose instance died before it arrived in part 0: two units in the
    // record of the move, in no counter.
    let source = redis.keys().part(8, 1);
    let mut out = MOVE_OUT.prepare_invoke();
    out.key(&source.counter.stock)
        .key(&source.counter.epoch)
        .key(&source.allotted)
        .key(&source.sent)
        .arg("lost-move")
        .arg(2)
        .arg(0)
        .arg(epoch);
    assert_eq!(redis.invoke::<i64>(&out).await.expect("moved out"), 2);
    assert_eq!(parts(&redis, 8).await[..2], [(4, 4), (2, 2)]);
    // Part 2 offers three units more than it was given (a failover that lost decrements).
    let _: i64 = redis
        .query(
            redis::cmd("INCRBY")
                .arg(&redis.keys().part(8, 2).counter.stock)
                .arg(3),
        )
        .await
        .expect("raised");
    let buyer = &buyers_homed_in(2, 1)[0];
    let (status, answer) = buy(&app, 8, buyer, "r-1", "redis-split").await;
    assert_eq!(status.as_u16(), 201, "{answer}");

    let done = app.reconcile(8).await;
    assert!(done.repaired, "{done:?}");
    assert_eq!((done.initial_stock, done.ordered), (16, 1), "{done:?}");
    assert_eq!(
        parts(&redis, 8).await,
        vec![(6, 6), (2, 2), (3, 4), (4, 4)],
        "the move arrived once, and part 2 holds its allotment less its one order"
    );
    // Reconciled again, nothing moves: the move is not delivered twice.
    let again = app.reconcile(8).await;
    assert_eq!(again.counter_after, 15, "{again:?}");
    assert_eq!(parts(&redis, 8).await[0], (6, 6));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_product_redis_lost_is_refused_until_reconcile_rebuilds_its_parts_from_the_orders()
{
    sandbox::require_faults!();
    let server = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("join")
        .expect("a private Redis");
    let server = std::sync::Arc::new(server);
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, server.url());
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    let body = json!({ "stock": 8, "home": "redis-split", "buckets": PARTS, "per_user_limit": 1 });
    app.reset_with(9, &body).await;
    // Three buyers of part 0 (its two units and one moved home) and one of part 1.
    let mut buyers = buyers_homed_in(0, 3);
    buyers.extend(buyers_homed_in(1, 1));
    for user in &buyers {
        let (status, answer) = buy(&app, 9, user, "first", "redis-split").await;
        assert_eq!(status.as_u16(), 201, "{user}: {answer}");
    }

    let restarting = server.clone();
    tokio::task::spawn_blocking(move || restarting.server().restart())
        .await
        .expect("join")
        .expect("Redis restarted empty");
    let (status, answer) = buy(&app, 9, "newcomer", "n-1", "redis-split").await;
    assert_eq!(
        status.as_u16(),
        503,
        "nothing sold while the parts are lost: {answer}"
    );

    let done = app.reconcile(9).await;
    assert!(done.rebuilt, "{done:?}");
    assert_eq!((done.ordered, done.counter_after), (4, 4), "{done:?}");
    let found = parts(&redis, 9).await;
    assert_eq!(
        found.iter().map(|&(left, _)| left).sum::<i64>(),
        4,
        "{found:?}"
    );
    assert_eq!(found.iter().map(|&(_, a)| a).sum::<i64>(), 8, "{found:?}");
    assert_eq!(
        found[0].1 - found[0].0,
        3,
        "part 0's buyers hold 3: {found:?}"
    );

    // Each buyer is still at her limit, in her own part; her purchase sent again replays.
    let (status, answer) = buy(&app, 9, &buyers[0], "second", "redis-split").await;
    assert_eq!(
        (status.as_u16(), answer["error"].as_str()),
        (409, Some("limit_reached")),
        "{answer}"
    );
    let (status, answer) = buy(&app, 9, &buyers[3], "first", "redis-split").await;
    assert_eq!(
        status.as_u16(),
        200,
        "the original order replayed: {answer}"
    );
    // The rest sells exactly once.
    let mut created = 0;
    for n in 0..6 {
        let (status, answer) = buy(&app, 9, &format!("late-{n}"), "l", "redis-split").await;
        match status.as_u16() {
            201 => created += 1,
            409 => assert_eq!(answer["error"], "sold_out", "{answer}"),
            other => panic!("{other}: {answer}"),
        }
    }
    assert_eq!(created, 4);
    let truth = ledger(&database_url, 9).await;
    assert_eq!((truth.sold, truth.orders), (8, 8), "{truth:?}");
    app.stop().await;
    drop_database(&database_url).await;
}
