//! The service's integration tests, one module per subject, in one test binary (one link and one
//! compile of the shared helpers instead of one per file). Each test starts its own app instance on
//! a free port, against the shared or throwaway servers (`sandbox`).

mod common;

mod backend_down;
mod batched;
mod binary;
mod buyer_identity;
mod buyer_rates;
mod db_lock_lease;
mod doors;
mod ended_replays;
mod expiry_sweep;
mod first_come;
mod galera_partition;
mod galera_reads;
mod hang_ups;
mod idempotency;
mod idempotency_keys;
mod lock_backends;
mod locked;
mod locked_commit;
mod metrics_listener;
mod mixed_strategies;
mod order_cancellation;
mod order_payment;
mod overload;
mod per_user_limit;
mod postgres;
mod postgres_locks;
mod product_memory;
mod product_page;
mod product_reads;
mod product_strategies;
mod purchase_stages;
mod reconcile_mid_sale;
mod redis_restart;
mod redis_split;
mod redis_stock;
mod redis_stock_cluster;
mod redis_stock_sentinel;
mod replica_pages;
mod request_identity;
mod requests;
mod returns_under_lock;
mod safe_strategies;
mod sale_rules;
mod semi_sync_required;
mod sharded;
mod slow_clients;
mod sold_out_memory;
mod unsafe_strategies;
