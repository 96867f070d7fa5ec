//! Release wake-ups: one `LISTEN` connection per `dokebi-postgres`
//! connection (`listenUrl`, else `url`: it must reach the server directly,
//! not through a pooler in transaction mode), listening on the channel of
//! each table its backends use. A notification names a released key of its
//! channel's table, which together name the key's queue (see
//! [`super::store::queue_name`]), and wakes this process's head waiter of
//! it; an empty one wakes every waiter.
//!
//! A listener counts as up (`status().postgres.listening`) once it heard a
//! `NOTIFY` of its own sent through `url`: through a pooler in transaction
//! mode LISTEN runs on a server connection lent to others next, and hears
//! nothing. While the listener is down, [`run`] reconnects with a capped
//! backoff (30 s when it heard nothing) and waiters poll at `pollIntervalMs`. A connection that died without a word
//! (no reset from a dead host) is found by a probe every few seconds.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::types::Type;
use tokio_postgres::AsyncMessage;

use super::store::{queue_name, Shared};
use super::transport::{RETRY_MAX, RETRY_MIN};
use crate::store::StoreConnection;

/// How often an idle listener checks that its connection still answers.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// How long a listener that did not hear its own probe waits before it
/// tries again.
const UNHEARD_RETRY: Duration = Duration::from_secs(30);

/// Sends a `NOTIFY` on `channel` through the statement pool (`url`) and
/// waits up to `bound` to hear it on the listener: true when it came, so
/// that `status()` says listening only when releases reach this process;
/// `None` when the probe could not be sent. Notifications heard meanwhile
/// wake their waiters as usual. The payload starts with no digit, so no
/// listener takes it for a released key.
async fn hears_itself(
    shared: &Shared,
    channel: &str,
    notifications: &mut mpsc::UnboundedReceiver<(String, String)>,
    bound: Duration,
) -> Option<bool> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let payload = format!("probe:{}:{nanos}", std::process::id());
    let sent =
        shared.connection.query("SELECT pg_catalog.pg_notify($1, $2)", &[(&channel, Type::TEXT), (&payload.as_str(), Type::TEXT)]).await;
    if sent.is_err() {
        return None;
    }
    let heard = async {
        while let Some((on, notified)) = notifications.recv().await {
            if notified == payload {
                return true;
            }
            wake(shared, &on, &notified);
        }
        false
    };
    Some(tokio::time::timeout(bound, heard).await.unwrap_or(false))
}

/// Wakes the waiters of the key a release notified on `channel` (its
/// queue), or every waiter when the payload is empty (a key too long to
/// name).
fn wake(shared: &Shared, channel: &str, notified: &str) {
    if notified.is_empty() {
        shared.waiters.wake_all();
    } else {
        shared.waiters.wake(&queue_name(channel, notified));
    }
}

/// Keeps the listener alive until the connection shuts down.
pub(crate) async fn run(shared: Arc<Shared>, channels: Vec<String>) {
    let connection = &shared.connection;
    let mut stopped = connection.stopped();
    if connection.is_shut_down() {
        return;
    }
    let mut retry = RETRY_MIN;
    let listen: String = channels.iter().map(|channel| format!("LISTEN \"{}\";", channel.replace('"', "\"\""))).collect();
    loop {
        if let Ok((client, mut link)) = connection.connect(true).await {
            // The link's messages (notifications) come through a channel;
            // the task ends when the link does.
            let (sender, mut notifications) = mpsc::unbounded_channel();
            let pump = tokio::spawn(async move {
                let mut messages = futures_util::stream::poll_fn(move |cx| link.poll_message(cx));
                while let Some(Ok(message)) = messages.next().await {
                    if let AsyncMessage::Notification(notification) = message {
                        let _ = sender.send((notification.channel().to_owned(), notification.payload().to_owned()));
                    }
                }
            });
            let bound = connection.command_timeout();
            let mut listening = matches!(tokio::time::timeout(bound, client.batch_execute(&listen)).await, Ok(Ok(())));
            if listening {
                match hears_itself(&shared, &channels[0], &mut notifications, bound).await {
                    Some(true) => {}
                    // The probe could not be sent: try again as after any failure.
                    None => listening = false,
                    Some(false) => {
                        // A pooler in transaction mode ran LISTEN on a server
                        // connection it lends to others: nothing will come.
                        // Waiters poll; try again (the pooler may be gone)
                        // much later.
                        pump.abort();
                        tokio::select! {
                            _ = tokio::time::sleep(UNHEARD_RETRY) => {}
                            _ = stopped.changed() => return,
                        }
                        continue;
                    }
                }
            }
            if listening {
                retry = RETRY_MIN;
                connection.health().set_listening(true);
                // Releases may have happened while we were not listening.
                shared.waiters.wake_all();
                let mut probe = tokio::time::interval(PROBE_EVERY);
                probe.tick().await;
                loop {
                    tokio::select! {
                        notification = notifications.recv() => match notification {
                            Some((on, notified)) => wake(&shared, &on, &notified),
                            None => break,
                        },
                        _ = probe.tick() => {
                            if !matches!(tokio::time::timeout(bound, client.simple_query("")).await, Ok(Ok(_))) {
                                break;
                            }
                        }
                        // The one change there is: shut down.
                        _ = stopped.changed() => {
                            connection.health().set_listening(false);
                            pump.abort();
                            return;
                        }
                    }
                }
                connection.health().set_listening(false);
                shared.waiters.wake_all();
            }
            pump.abort();
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stopped.changed() => return,
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}
