use dokebi_lock::{AcquireOptions, LockError, Provider};

const CONFIG: &str = "
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      jobs: { driver: file, directory: /tmp/quickstart-locks }
";

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let provider = Provider::from_yaml(CONFIG)?; // or Provider::from_yaml(&std::fs::read_to_string("app.yaml")?)
    let jobs = provider.backend("jobs")?;
    let lease = jobs.acquire("nightly-report", AcquireOptions::default()).await?;
    // critical section: pass lease.fence() along with writes to other stores
    println!("holding nightly-report, fence {}", lease.fence());
    lease.release().await?;
    provider.close().await;
    Ok(())
}
