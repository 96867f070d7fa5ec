//! Candidate A: the etcd-client crate (tonic gRPC over HTTP/2).

use etcd_client::{Compare, CompareOp, ConnectOptions, EventType, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse};

pub use etcd_client;
pub use etcd_client::Client;

/// The candidate's name in reports.
pub const NAME: &str = "grpc";

/// How `for_task` shares a connection, for reports.
pub const SHARING: &str = "one HTTP/2 channel, multiplexed";

/// A client for one more concurrent task: a clone on the same channel.
pub async fn for_task(client: &mut Client) -> Result<Client, etcd_client::Error> {
    Ok(client.clone())
}

/// The outcome of "create the key if absent, with a lease, else read it".
#[derive(Debug)]
pub struct Claim {
    pub created: bool,
    /// The txn's header revision.
    pub header_revision: i64,
    /// The key's create_revision: ours when created, the holder's when read.
    pub create_revision: i64,
}

pub async fn connect(endpoint: &str, tls: bool) -> Result<Client, etcd_client::Error> {
    let mut options = ConnectOptions::new();
    if tls {
        options = options.with_tls(TlsOptions::new().domain_name("localhost"));
    }
    Client::connect([endpoint], Some(options)).await
}

pub async fn grant(client: &mut Client, ttl: i64) -> Result<i64, etcd_client::Error> {
    Ok(client.lease_grant(ttl, None).await?.id())
}

pub async fn claim(client: &mut Client, key: &[u8], value: &[u8], lease: i64) -> Result<Claim, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))])
        .or_else([TxnOp::get(key, None)]);
    let resp = client.txn(txn).await?;
    let header_revision = resp.header().map(|h| h.revision()).unwrap_or(0);
    if resp.succeeded() {
        return Ok(Claim { created: true, header_revision, create_revision: header_revision });
    }
    let create_revision = match resp.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.create_revision()).unwrap_or(0),
        _ => 0,
    };
    Ok(Claim { created: false, header_revision, create_revision })
}

pub async fn read_create_revision(client: &mut Client, key: &[u8]) -> Result<Option<i64>, etcd_client::Error> {
    Ok(client.get(key, None).await?.kvs().first().map(|kv| kv.create_revision()))
}

pub async fn delete(client: &mut Client, key: &[u8]) -> Result<i64, etcd_client::Error> {
    Ok(client.delete(key, None).await?.deleted())
}

/// A watch on one key; yields (is_delete) per event.
pub struct Watch(etcd_client::WatchStream);

impl Watch {
    pub async fn start(client: &mut Client, key: &[u8]) -> Result<Watch, etcd_client::Error> {
        let mut stream = client.watch(key, None).await?;
        // The first response confirms the watch is created.
        let _created = stream.message().await?;
        Ok(Watch(stream))
    }

    pub async fn next_events(&mut self) -> Result<Vec<bool>, etcd_client::Error> {
        loop {
            let Some(resp) = self.0.message().await? else { return Ok(Vec::new()) };
            if !resp.events().is_empty() {
                return Ok(resp.events().iter().map(|e| e.event_type() == EventType::Delete).collect());
            }
        }
    }
}

pub async fn keep_alive_once(client: &mut Client, lease: i64) -> Result<i64, etcd_client::Error> {
    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
    keeper.keep_alive().await?;
    Ok(stream.message().await?.map(|r| r.ttl()).unwrap_or(0))
}

/// Everything the driver would call, once, so the cdylib keeps it all.
async fn exercise(port: u16, tls: bool) -> Result<i64, etcd_client::Error> {
    let mut client = connect(&format!("127.0.0.1:{port}"), tls).await?;
    let lease = grant(&mut client, 10).await?;
    let claim = claim(&mut client, b"k", b"v", lease).await?;
    let mut watch = Watch::start(&mut client, b"k").await?;
    delete(&mut client, b"k").await?;
    let events = watch.next_events().await?;
    let ttl = keep_alive_once(&mut client, lease).await?;
    client.lease_revoke(lease).await?;
    Ok(claim.create_revision + events.len() as i64 + ttl + read_create_revision(&mut client, b"k").await?.unwrap_or(0))
}

/// The exported function of the candidate's cdylib.
#[no_mangle]
pub extern "C" fn spike_grpc(port: u16, tls: bool) -> i64 {
    let rt = spike_base::runtime();
    let base = rt.block_on(spike_base::base_work(&format!("127.0.0.1:{port}"), tls)).unwrap_or(0) as i64;
    rt.block_on(exercise(port, tls)).unwrap_or(-1) + base
}
