//! A pub/sub connection that notices a server gone silent. A server that
//! hangs (stopped, overloaded, cut off by a partition that leaves the socket
//! open) keeps a subscription open and says nothing: its messages are lost
//! while the subscription counts as live, and a sentinel's `+switch-master`
//! is never heard. So after [`QUIET`] without a message the connection is
//! asked a `PING`; no answer within `commandTimeoutMs` ends it, and its
//! owner subscribes again (elsewhere, where there is another node).

use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSub, PubSubSink, PubSubStream};
use redis::{Msg, Value};

/// How long a subscription may stay silent before it is asked a `PING`.
const QUIET: Duration = Duration::from_secs(1);

/// The messages of a pub/sub connection, while its server answers.
pub(crate) struct Listening {
    sink: PubSubSink,
    messages: PubSubStream,
    /// How long a `PING` may go unanswered (`commandTimeoutMs`).
    bound: Duration,
}

impl Listening {
    pub fn new(pubsub: PubSub, bound: Duration) -> Listening {
        let (sink, messages) = pubsub.split();
        Listening { sink, messages, bound }
    }

    /// The next message; `None` once the connection ended or its server
    /// stopped answering.
    pub async fn next(&mut self) -> Option<Msg> {
        loop {
            tokio::select! {
                message = self.messages.next() => return message,
                _ = tokio::time::sleep(QUIET) => {
                    if !matches!(tokio::time::timeout(self.bound, self.sink.ping::<Value>()).await, Ok(Ok(_))) {
                        return None;
                    }
                }
            }
        }
    }
}
