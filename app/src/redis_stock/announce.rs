//! Announcing news of a product to every instance (see [`crate::product_memory`]), on two Redis
//! channels every instance listens to: `<prefix>products:restocked` when its units came back (an order
//! expired or was cancelled: every instance forgets that it was sold out, and keeps its rules),
//! `<prefix>products:forget` when it was reset or repaired (every instance forgets all it
//! remembered of it). Units given back by a script announce themselves from inside the script;
//! a return to the database, a reset or a reconciliation announces after its writes.
//!
//! Pub/sub delivers at most once, to whoever listens at that moment: a listener that was
//! reconnecting misses the message. The memory's lifetime bounds what a missed announcement
//! costs; the announcement only makes the common case immediate.

use std::time::Duration;

use deadpool_redis::redis;
use futures::StreamExt;

/// How long a listener waits before connecting again after its connection failed.
const RECONNECT: Duration = Duration::from_millis(500);

/// What an announcement says of its product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum News {
    /// Its units came back: it is no longer sold out; its rules are unchanged.
    Restocked,
    /// It was reset or repaired: its rules or its stock may have changed.
    Changed,
}

/// The two channels of the announcements, by the prefix's keys.
#[derive(Debug, Clone)]
pub struct Channels {
    pub restocked: String,
    pub changed: String,
}

impl Channels {
    pub fn of(keys: &super::keys::Keys) -> Channels {
        Channels {
            restocked: keys.restocked(),
            changed: keys.forget(),
        }
    }
}

/// Listens on both `channels` of the Redis at `url` for ever, calling `heard` with each
/// announced product id and its news; reconnects after a failure.
pub async fn listen(url: String, channels: Channels, heard: impl Fn(u64, News) + Send + 'static) {
    loop {
        if let Err(e) = listen_once(&url, &channels, &heard).await {
            tracing::warn!(error = %e, "the announcement channels failed; listening again");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

async fn listen_once(
    url: &str,
    channels: &Channels,
    heard: &impl Fn(u64, News),
) -> Result<(), redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(&channels.restocked).await?;
    pubsub.subscribe(&channels.changed).await?;
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let news = match message.get_channel_name() == channels.restocked {
            true => News::Restocked,
            false => News::Changed,
        };
        match message.get_payload::<u64>() {
            Ok(product) => heard(product, news),
            Err(e) => tracing::warn!(error = %e, "an announcement of no product"),
        }
    }
    Ok(())
}
