//! Resource check: 10000 acquires of one redis key in one process queue
//! behind a holder and drain in the order they arrived (FIFO), each once,
//! with every Redis key of the namespace gone at the end but the fence.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Context;
use std::time::Duration;

use dokebi_lock::AcquireOptions;
use futures::executor::block_on;
use futures::task::noop_waker_ref;
use support::open_redis;
use support::redis_server::RedisServer;

const WAITERS: usize = 10_000;

#[test]
fn ten_thousand_waiters_on_one_key_drain_in_fifo_order() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "60000"), ("waitTimeoutMs", "120000"), ("maxWaiters", "10001")], &[]);
    let backend = provider.backend("shared").unwrap();
    let held = block_on(
        backend.acquire("crowded", AcquireOptions { wait_timeout: Some(Duration::ZERO), signal: None, ..AcquireOptions::default() }),
    )
    .unwrap();
    let first_fence = held.fence();

    let order = Arc::new(Mutex::new(Vec::with_capacity(WAITERS)));
    let mut waiters: Vec<Pin<Box<dyn Future<Output = u64>>>> = (0..WAITERS)
        .map(|i| {
            let (backend, order) = (backend.clone(), order.clone());
            Box::pin(async move {
                let lease = backend.acquire("crowded", AcquireOptions::default()).await.unwrap();
                order.lock().unwrap().push(i);
                let fence = lease.fence();
                assert!(lease.release().await.unwrap());
                fence
            }) as Pin<Box<dyn Future<Output = u64>>>
        })
        .collect();
    // Arrive one after another: the first poll of an acquire joins the queue.
    let mut context = Context::from_waker(noop_waker_ref());
    for waiter in &mut waiters {
        assert!(waiter.as_mut().poll(&mut context).is_pending());
    }
    assert!(block_on(held.release()).unwrap());
    let fences = block_on(futures::future::join_all(waiters));

    let order = order.lock().unwrap();
    assert_eq!(order.len(), WAITERS);
    let out_of_order = order.iter().enumerate().filter(|(at, i)| at != *i).count();
    assert_eq!(out_of_order, 0, "{out_of_order} waiters were served out of arrival order");
    assert!(fences.windows(2).all(|w| w[0] < w[1]) && fences[0] > first_fence, "fences grow with every grant");
    block_on(provider.close());
    assert_eq!(server.keys().iter().filter(|k| !k.starts_with("test:lock-fence:")).count(), 0, "only the fence counter stays");
}
