//! Which of a connection's release subscriptions acts on a message.
//!
//! One server, or Sentinel's primary, has one subscription. A Redis Cluster
//! has one per seed node: a `PUBLISH` reaches every node, but a node other
//! than the publisher relays it over the cluster bus, whose connections Redis
//! 7.0 opens without `TCP_NODELAY`, so a relayed notification waited 26–41 ms
//! behind Nagle's algorithm and the peer's delayed ACK (redis/redis#11869;
//! BENCHMARKS.md, "Cluster hand-off"). With a subscription on the publishing
//! primary, the notification comes straight from it. Each message thus
//! arrives once per subscription, and exactly one acts on it: the one on
//! the key's primary when that is a seed whose subscription is up, else the
//! first one up. (A duplicate would wake a waiter for a try that fails.)

use std::sync::Mutex;

/// The subscriptions of one connection, by index: up or not.
pub(crate) struct Subscriptions {
    live: Mutex<Vec<bool>>,
}

impl Subscriptions {
    pub fn new(count: usize) -> Subscriptions {
        Subscriptions { live: Mutex::new(vec![false; count]) }
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    pub fn set(&self, index: usize, up: bool) {
        self.lock()[index] = up;
    }

    /// True while any subscription is up.
    pub fn any(&self) -> bool {
        self.lock().iter().any(|&up| up)
    }

    /// Whether subscription `index` acts on a message whose key is served by
    /// the subscription `serving` names (the seed that is the key's primary,
    /// if the slot map knows it and it is a seed).
    pub fn acts_on(&self, index: usize, serving: Option<usize>) -> bool {
        let live = self.lock();
        match serving {
            Some(serving) if live.get(serving) == Some(&true) => serving == index,
            _ => live.iter().position(|&up| up) == Some(index),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<bool>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_up(up: &[bool]) -> Subscriptions {
        let subscriptions = Subscriptions::new(up.len());
        up.iter().enumerate().for_each(|(i, &up)| subscriptions.set(i, up));
        subscriptions
    }

    #[test]
    fn the_subscription_on_the_key_s_primary_acts_alone() {
        let subscriptions = with_up(&[true, true, true]);
        assert_eq!((0..3).map(|i| subscriptions.acts_on(i, Some(2))).collect::<Vec<_>>(), [false, false, true]);
    }

    #[test]
    fn without_a_live_subscription_on_the_primary_the_first_live_one_acts() {
        let subscriptions = with_up(&[false, true, true]);
        // The primary's subscription is down, or the primary is no seed, or the map does not know.
        for serving in [Some(0), None] {
            assert_eq!((0..3).map(|i| subscriptions.acts_on(i, serving)).collect::<Vec<_>>(), [false, true, false]);
        }
        assert!(subscriptions.any());
        assert!(!with_up(&[false, false]).any());
    }

    #[test]
    fn one_subscription_acts_on_every_message_while_up() {
        let subscriptions = with_up(&[true]);
        assert!(subscriptions.acts_on(0, None));
        subscriptions.set(0, false);
        assert!(!subscriptions.acts_on(0, None));
    }
}
