//! Candidate B: etcd's gRPC gateway (JSON over HTTP/1.1, /v3/...) through
//! hyper 1's client connections, TLS by tokio-rustls over our own socket.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// The candidate's name in reports.
pub const NAME: &str = "http";

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// One HTTP/1.1 connection to the gateway: one request at a time.
pub struct Client {
    endpoint: String,
    tls: bool,
    sender: SendRequest<Full<Bytes>>,
}

async fn open(endpoint: &str, tls: bool) -> Result<SendRequest<Full<Bytes>>, Error> {
    let tcp = tokio::net::TcpStream::connect(endpoint).await?;
    tcp.set_nodelay(true)?;
    if tls {
        let connector = tokio_rustls::TlsConnector::from(spike_base::tls_config());
        let name = rustls::pki_types::ServerName::try_from("localhost")?;
        let stream = connector.connect(name, tcp).await?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        return Ok(sender);
    }
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

pub async fn connect(endpoint: &str, tls: bool) -> Result<Client, Error> {
    Ok(Client { endpoint: endpoint.to_owned(), tls, sender: open(endpoint, tls).await? })
}

fn request(endpoint: &str, path: &str, body: &Value) -> Request<Full<Bytes>> {
    Request::post(path)
        .header(hyper::header::HOST, endpoint)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).expect("json"))))
        .expect("request")
}

async fn check(resp: Response<Incoming>) -> Result<Value, Error> {
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    let value: Value = serde_json::from_slice(&body)?;
    if !status.is_success() || value.get("error").is_some() {
        return Err(format!("gateway: {status} {value}").into());
    }
    Ok(value)
}

impl Client {
    /// POST a unary call; the gateway answers with JSON (int64 as strings).
    pub async fn call(&mut self, path: &str, body: Value) -> Result<Value, Error> {
        if self.sender.ready().await.is_err() {
            self.sender = open(&self.endpoint, self.tls).await?;
        }
        let resp = self.sender.send_request(request(&self.endpoint, path, &body)).await?;
        check(resp).await
    }
}

/// An int64 of the gateway's JSON: a string, or absent for 0.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// How `for_task` shares a connection, for reports.
pub const SHARING: &str = "one HTTP/1.1 connection per task";

/// A client for one more concurrent task: HTTP/1.1 carries one request at a
/// time, so a connection of its own.
pub async fn for_task(client: &mut Client) -> Result<Client, Error> {
    connect(&client.endpoint, client.tls).await
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

pub async fn grant(client: &mut Client, ttl: i64) -> Result<i64, Error> {
    let v = client.call("/v3/lease/grant", json!({ "TTL": ttl })).await?;
    Ok(int(&v["ID"]))
}

pub async fn claim(client: &mut Client, key: &[u8], value: &[u8], lease: i64) -> Result<Claim, Error> {
    let key = B64.encode(key);
    let body = json!({
        "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": 0 }],
        "success": [{ "request_put": { "key": key, "value": B64.encode(value), "lease": lease.to_string() } }],
        "failure": [{ "request_range": { "key": key } }],
    });
    let v = client.call("/v3/kv/txn", body).await?;
    let header_revision = int(&v["header"]["revision"]);
    if v["succeeded"].as_bool().unwrap_or(false) {
        return Ok(Claim { created: true, header_revision, create_revision: header_revision });
    }
    let create_revision = int(&v["responses"][0]["response_range"]["kvs"][0]["create_revision"]);
    Ok(Claim { created: false, header_revision, create_revision })
}

pub async fn read_create_revision(client: &mut Client, key: &[u8]) -> Result<Option<i64>, Error> {
    let v = client.call("/v3/kv/range", json!({ "key": B64.encode(key) })).await?;
    Ok(v["kvs"].get(0).map(|kv| int(&kv["create_revision"])))
}

pub async fn delete(client: &mut Client, key: &[u8]) -> Result<i64, Error> {
    let v = client.call("/v3/kv/deleterange", json!({ "key": B64.encode(key) })).await?;
    Ok(int(&v["deleted"]))
}

/// A lease keep-alive: the gateway maps the bidirectional stream onto one
/// POST; a body with one request gets one response, then the stream ends.
pub async fn keep_alive_once(client: &mut Client, lease: i64) -> Result<i64, Error> {
    let v = client.call("/v3/lease/keepalive", json!({ "ID": lease.to_string() })).await?;
    Ok(int(&v["result"]["TTL"]))
}

pub async fn revoke(client: &mut Client, lease: i64) -> Result<(), Error> {
    client.call("/v3/lease/revoke", json!({ "ID": lease.to_string() })).await?;
    Ok(())
}

/// A watch on one key: a connection of its own (HTTP/1.1 cannot share it),
/// whose response body is newline-delimited JSON, one `{"result": ...}` a line.
pub struct Watch {
    body: Incoming,
    buf: BytesMut,
}

impl Watch {
    pub async fn start(client: &mut Client, key: &[u8]) -> Result<Watch, Error> {
        let mut sender = open(&client.endpoint, client.tls).await?;
        let body = json!({ "create_request": { "key": B64.encode(key) } });
        let resp = sender.send_request(request(&client.endpoint, "/v3/watch", &body)).await?;
        if !resp.status().is_success() {
            return Err(format!("gateway: watch {}", resp.status()).into());
        }
        let mut watch = Watch { body: resp.into_body(), buf: BytesMut::new() };
        let created = watch.next_message().await?;
        if !created["result"]["created"].as_bool().unwrap_or(false) {
            return Err(format!("gateway: watch not created: {created}").into());
        }
        Ok(watch)
    }

    async fn next_message(&mut self) -> Result<Value, Error> {
        loop {
            if let Some(at) = self.buf.iter().position(|&b| b == b'\n') {
                let line = self.buf.split_to(at + 1);
                if line.len() > 1 {
                    return Ok(serde_json::from_slice(&line[..line.len() - 1])?);
                }
                continue;
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(mut data) = frame?.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
                None => return Ok(Value::Null),
            }
        }
    }

    pub async fn next_events(&mut self) -> Result<Vec<bool>, Error> {
        loop {
            let m = self.next_message().await?;
            if m.is_null() {
                return Ok(Vec::new());
            }
            if let Some(err) = m.get("error") {
                return Err(format!("gateway: watch {err}").into());
            }
            if let Some(events) = m["result"]["events"].as_array() {
                if !events.is_empty() {
                    return Ok(events.iter().map(|e| e["type"].as_str() == Some("DELETE")).collect());
                }
            }
        }
    }
}

/// Everything the driver would call, once, so the cdylib keeps it all.
async fn exercise(port: u16, tls: bool) -> Result<i64, Error> {
    let mut client = connect(&format!("127.0.0.1:{port}"), tls).await?;
    let lease = grant(&mut client, 10).await?;
    let claim = claim(&mut client, b"k", b"v", lease).await?;
    let mut watch = Watch::start(&mut client, b"k").await?;
    delete(&mut client, b"k").await?;
    let events = watch.next_events().await?;
    let ttl = keep_alive_once(&mut client, lease).await?;
    revoke(&mut client, lease).await?;
    Ok(claim.create_revision + events.len() as i64 + ttl + read_create_revision(&mut client, b"k").await?.unwrap_or(0))
}

/// The exported function of the candidate's cdylib.
#[no_mangle]
pub extern "C" fn spike_http(port: u16, tls: bool) -> i64 {
    let rt = spike_base::runtime();
    let base = rt.block_on(spike_base::base_work(&format!("127.0.0.1:{port}"), tls)).unwrap_or(0) as i64;
    rt.block_on(exercise(port, tls)).unwrap_or(-1) + base
}
