//! Following a Sentinel failover as it happens. A primary that the sentinels
//! replaced while it was alive (a planned `SENTINEL FAILOVER`, a partition)
//! goes on taking writes until they demote it, seconds later: a connection
//! opened before the switch would go on locking there while everyone else
//! locks on the new primary. So the driver listens to the sentinels'
//! `+switch-master` and drops its connections the moment its primary moves.

use std::sync::Arc;

use super::connection::RedisConnection;
use super::listening::Listening;
use super::{RETRY_MAX, RETRY_MIN};
use crate::store::StoreConnection;

/// The channel on which sentinels announce a new primary:
/// `<name> <old ip> <old port> <new ip> <new port>`.
const SWITCH_CHANNEL: &str = "+switch-master";

/// Listens to one sentinel at a time (the next one when it goes away) until
/// the connection shuts down; nothing for a connection without Sentinel.
pub(crate) async fn follow(connection: Arc<RedisConnection>) {
    let mut stopped = connection.stopped();
    let mut retry = RETRY_MIN;
    for attempt in 0.. {
        let Some((sentinel, name)) = connection.sentinel(attempt) else { return };
        let subscribe = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let bound = connection.connect_timeout() + connection.command_timeout();
        if let Ok(Ok(pubsub)) = tokio::time::timeout(bound, subscribe).await {
            retry = RETRY_MIN;
            // No sentinel was heard for a while: a switch may have happened.
            if attempt > 0 {
                connection.primary_switched().await;
            }
            let mut messages = Listening::new(pubsub, connection.command_timeout());
            loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    _ = stopped.wait_for(|stop| *stop) => return,
                };
                let Some(message) = message else { break };
                if String::from_utf8_lossy(message.get_payload_bytes()).split(' ').next() == Some(name.as_str()) {
                    connection.primary_switched().await;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}
