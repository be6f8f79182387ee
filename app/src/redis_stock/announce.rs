//! Announcing that a product's stock came back, so that every instance forgets it was sold out
//! (see [`crate::shelf`]): a Redis channel (`<prefix>products:forget`) every instance listens
//! to. Units given back by a script announce themselves from inside the script; a reset or a
//! reconciliation announces after its writes.
//!
//! Pub/sub delivers at most once, to whoever listens at that moment: a listener that was
//! reconnecting misses the message. The memory's lifetime bounds what a missed announcement
//! costs; the announcement only makes the common case immediate.

use std::time::Duration;

use deadpool_redis::redis;
use futures::StreamExt;

/// How long a listener waits before connecting again after its connection failed.
const RECONNECT: Duration = Duration::from_millis(500);

/// Listens on `channel` of the Redis at `url` for ever, calling `forget` with each announced
/// product id; reconnects after a failure.
pub async fn listen(url: String, channel: String, forget: impl Fn(u64) + Send + 'static) {
    loop {
        if let Err(e) = listen_once(&url, &channel, &forget).await {
            tracing::warn!(error = %e, "the stock-back channel failed; listening again");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

async fn listen_once(
    url: &str,
    channel: &str,
    forget: &impl Fn(u64),
) -> Result<(), redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        match message.get_payload::<u64>() {
            Ok(product) => forget(product),
            Err(e) => tracing::warn!(error = %e, "an announcement of no product"),
        }
    }
    Ok(())
}
