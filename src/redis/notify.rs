//! Release notifications: one pub/sub connection per Redis connection (in
//! a cluster, one per seed node: see [`super::transport::subscriptions`]), subscribed
//! to the release channel of each namespace that uses it (not one
//! subscription per key). A message names a released lock key and wakes
//! the head waiter of that key in this process.
//!
//! While the subscription is down, [`run`] reconnects with a capped backoff
//! and waiters fall back to `pollIntervalMs`.

use std::sync::Arc;

use super::keys::is_older_layout;
use super::store::Shared;
use super::transport::listening::Listening;
use super::transport::{RETRY_MAX, RETRY_MIN};
use crate::store::StoreConnection;

/// Keeps subscription `index` alive until the connection shuts down.
pub(crate) async fn run(shared: Arc<Shared>, channels: Vec<String>, index: usize) {
    let connection = shared.connection();
    let mut stopped = connection.stopped();
    let mut switches = connection.switches();
    let mut retry = RETRY_MIN;
    loop {
        let subscribe = async {
            let mut pubsub = connection.subscriber(index).await?.get_async_pubsub().await?;
            for channel in &channels {
                pubsub.subscribe(channel).await?;
            }
            Ok::<_, redis::RedisError>(pubsub)
        };
        let bound = connection.connect_timeout() + connection.command_timeout();
        if let Ok(Ok(pubsub)) = tokio::time::timeout(bound, subscribe).await {
            retry = RETRY_MIN;
            connection.set_subscribed(index, true);
            // Releases may have happened while we were not listening.
            shared.waiters.wake_all();
            let mut messages = Listening::new(pubsub, connection.command_timeout());
            loop {
                tokio::select! {
                    message = messages.next() => match message {
                        Some(message) => {
                            if let Ok(lock_key) = std::str::from_utf8(message.get_payload_bytes()) {
                                if is_older_layout(lock_key) {
                                    shared.older_layout.heard_on(message.get_channel_name());
                                } else if connection.acts_on(index, lock_key) {
                                    shared.waiters.wake(lock_key);
                                }
                            }
                        }
                        None => break,
                    },
                    _ = stopped.wait_for(|stop| *stop) => {
                        connection.set_subscribed(index, false);
                        return;
                    }
                    // The primary moved (Sentinel): releases are published there now.
                    _ = switches.changed() => break,
                }
            }
            connection.set_subscribed(index, false);
            shared.waiters.wake_all();
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}
