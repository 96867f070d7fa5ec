//! The local driver from Rust: two tasks contend for one key; the second
//! waits its turn (FIFO) and gets a larger fencing token.
//!
//! Run: cargo run --example local

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

const CONFIG: &str = "
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      orders:
        waitTimeoutMs: 2000
";

fn main() -> Result<(), dokebi_lock::LockError> {
    let provider = Provider::from_yaml(CONFIG)?;
    let orders = provider.backend("orders")?;

    let first = block_on(orders.acquire("order:42", AcquireOptions::default()))?;
    println!("first holder, fence {}", first.fence());

    let waiter = {
        let orders = orders.clone();
        std::thread::spawn(move || block_on(orders.acquire("order:42", AcquireOptions::default())))
    };
    std::thread::sleep(Duration::from_millis(50));
    println!("released: {}", block_on(first.release())?);

    let second = waiter.join().expect("waiter thread")?;
    println!("second holder, fence {} (larger)", second.fence());
    assert!(second.fence() > first.fence());
    block_on(second.release())?;
    block_on(provider.close());
    Ok(())
}
