//! TLS (`rediss://`) through rustls, verified: the server's certificate must
//! chain to a trusted authority, taken from the system's store or from
//! `SSL_CERT_FILE`. (Its own binary: the test sets that variable.)

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use dokebi_lock::ErrorCode;
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{open_redis, wait};

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl").args(args).current_dir(dir).stderr(Stdio::null()).stdout(Stdio::null()).status().unwrap();
    assert!(status.success(), "openssl {args:?}");
}

/// A certificate authority and a server certificate it signed for
/// `localhost` and 127.0.0.1: (ca.pem, server.pem, server.key) in `dir`.
fn make_certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=dokebi test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            "server.pem",
            "-extfile",
            "san.ext",
        ],
    );
}

#[test]
fn a_rediss_connection_is_verified_against_the_trusted_authorities() {
    let dir = std::env::temp_dir().join(format!("dokebi-lock-tls-verified-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    make_certificates(&dir);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &path("server.pem"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.pem"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://localhost:{tls_port}/0");

    // Our test authority is not in the system's store: the certificate is refused.
    let (untrusting, _) = open_redis(&url, &[("leaseMs", "10000")], &[("connectTimeoutMs", "2000")]);
    let refused = block_on(untrusting.backend("shared").unwrap().acquire("k", wait(0))).expect_err("an unknown authority is refused");
    assert_eq!(refused.code(), ErrorCode::ProviderFailed, "{refused}");
    let cause = refused.cause().map(ToString::to_string).unwrap_or_default();
    assert!(cause.contains("certificate"), "refused for its certificate: {cause}");

    // Trusted through SSL_CERT_FILE, as with OpenSSL: the same URL works.
    std::env::set_var("SSL_CERT_FILE", path("ca.pem"));
    let (trusting, _) = open_redis(&url, &[("leaseMs", "10000")], &[]);
    let lease = block_on(trusting.backend("shared").unwrap().acquire("k", wait(0))).expect("a trusted authority is accepted");
    assert_eq!(server.keys().iter().filter(|k| k.starts_with("test:lock:")).count(), 1);
    assert!(block_on(lease.release()).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
