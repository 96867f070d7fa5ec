//! Release wake-ups: one `LISTEN` connection per `dokebi-postgres`
//! connection (`listenUrl`, else `url`: it must reach the server directly,
//! not through a pooler in transaction mode), listening on the channel of
//! each table its backends use. A notification names a released key of its
//! channel's table, which together name the key's queue (see
//! [`super::store::queue_name`]), and wakes this process's head waiter of
//! it; an empty one wakes every waiter.
//!
//! While the listener is down, [`run`] reconnects with a capped backoff and
//! waiters poll at `pollIntervalMs`. A connection that died without a word
//! (no reset from a dead host) is found by a probe every few seconds.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::store::{queue_name, Shared};
use super::transport::{RETRY_MAX, RETRY_MIN};

/// How often an idle listener checks that its connection still answers.
const PROBE_EVERY: Duration = Duration::from_secs(5);

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
                        let payload = notification.payload();
                        let _ = sender.send((!payload.is_empty()).then(|| queue_name(notification.channel(), payload)));
                    }
                }
            });
            let bound = connection.command_timeout();
            if let Ok(Ok(())) = tokio::time::timeout(bound, client.batch_execute(&listen)).await {
                retry = RETRY_MIN;
                connection.set_listening(true);
                // Releases may have happened while we were not listening.
                shared.waiters.wake_all();
                let mut probe = tokio::time::interval(PROBE_EVERY);
                probe.tick().await;
                loop {
                    tokio::select! {
                        payload = notifications.recv() => match payload {
                            Some(None) => shared.waiters.wake_all(),
                            Some(Some(name)) => shared.waiters.wake(&name),
                            None => break,
                        },
                        _ = probe.tick() => {
                            if !matches!(tokio::time::timeout(bound, client.simple_query("")).await, Ok(Ok(_))) {
                                break;
                            }
                        }
                        // The one change there is: shut down.
                        _ = stopped.changed() => {
                            connection.set_listening(false);
                            pump.abort();
                            return;
                        }
                    }
                }
                connection.set_listening(false);
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
