//! What the addon already links, kept alive by one exported function, so the
//! candidates' cdylibs differ from this one by the candidate alone.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The project's store runtime: multi-thread with one worker (src/store/runtime.rs).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("dokebi-lock-io")
        .enable_io()
        .enable_time()
        .build()
        .expect("runtime")
}

/// A TLS client config over rustls + ring with the system's roots.
pub fn tls_config() -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Uses tokio's sockets, rustls, tokio-rustls and serde_json once.
pub async fn base_work(addr: &str, tls: bool) -> std::io::Result<usize> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut buf = vec![0u8; 64];
    if tls {
        let connector = tokio_rustls::TlsConnector::from(tls_config());
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut stream = connector.connect(name, tcp).await?;
        stream.write_all(b"x").await?;
        let n = stream.read(&mut buf).await?;
        return Ok(n);
    }
    tcp.write_all(b"x").await?;
    let n = tcp.read(&mut buf).await?;
    let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap_or_default();
    Ok(v.to_string().len() + base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &buf[..n]).len())
}

/// The exported function of the base cdylib.
#[no_mangle]
pub extern "C" fn spike_base(port: u16, tls: bool) -> i64 {
    let rt = runtime();
    rt.block_on(base_work(&format!("127.0.0.1:{port}"), tls)).map(|n| n as i64).unwrap_or(-1)
}
