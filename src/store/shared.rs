//! What the backends of one connection share in a driver whose backends
//! need nothing more of each other (postgres, mysql; Redis's share its
//! scripts and clock too, see `crate::redis::store::Shared`).

use std::sync::Arc;

use super::waiters::Waiters;
use super::Store;

/// One connection (`C`) and this process's queues of its keys.
pub(crate) struct Shared<S: Store, C> {
    pub connection: Arc<C>,
    pub waiters: Arc<Waiters<S>>,
}

impl<S: Store, C> Shared<S, C> {
    pub fn new(connection: Arc<C>) -> Shared<S, C> {
        Shared { connection, waiters: Arc::default() }
    }
}
