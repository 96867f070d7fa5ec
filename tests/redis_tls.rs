//! TLS (`rediss://`) against real `redis-server --tls-port`s whose
//! certificates a private authority made with `openssl` in the test: the
//! server's certificate must chain to an authority the connection trusts
//! (the system's, `SSL_CERT_FILE`, the surface's extra ones such as Node's
//! `NODE_EXTRA_CA_CERTS`, or the connection's own `tls.ca`), carry the name
//! connected to (or `tls.servername`) and be valid now; a server that
//! demands a client certificate gets `tls.cert`/`key`. Each refusal is its
//! own message and fix, never "Redis is unreachable".
//! (Its own binary: one test sets `SSL_CERT_FILE`.)

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Hooks, LockError, Options, Provider};
use futures::executor::block_on;
use support::pki::Pki;
use support::redis_server::RedisServer;
use support::{open_redis, recording_logger, redis_yaml, wait};

impl Pki {
    /// A redis-server with a TLS port serving certificate `name`, asking
    /// for client certificates of this authority when `mutual`. Returns
    /// it and its TLS port.
    fn server(&self, name: &str, mutual: bool) -> (RedisServer, u16) {
        self.server_with(name, mutual, &[])
    }

    /// [`Pki::server`] with `extra` arguments.
    fn server_with(&self, name: &str, mutual: bool, extra: &[&str]) -> (RedisServer, u16) {
        let tls_port = free_port();
        let mut args = vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            self.path(&format!("{name}.pem")),
            "--tls-key-file".to_owned(),
            self.path(&format!("{name}.key")),
            "--tls-ca-cert-file".to_owned(),
            self.path("ca.pem"),
            "--tls-auth-clients".to_owned(),
            if mutual { "yes" } else { "no" }.to_owned(),
        ];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        let server = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (server, tls_port)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `condition` for up to 10 s.
fn within_10s(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens a provider on `url` with the connection fields `connection`
/// (YAML lines, e.g. `tls: { caFile: ... }`).
fn open(url: &str, connection: &str) -> Provider {
    let yaml = redis_yaml(url, "        leaseMs: 10000\n", &format!("        connectTimeoutMs: 3000\n{connection}"));
    Provider::from_yaml(&yaml).unwrap()
}

fn acquire(provider: &Provider) -> Result<(), LockError> {
    let lease = block_on(provider.backend("shared").unwrap().acquire("k", wait(0)))?;
    assert!(block_on(lease.release()).unwrap());
    Ok(())
}

/// The error is a TLS refusal: `PROVIDER_FAILED`, not unreachable, with
/// `message` and `fix` containing the given texts.
fn assert_refused(err: &LockError, message: &[&str], fix: &[&str]) {
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err:?}");
    assert!(!err.message().contains("unreachable"), "not unreachable: {err:?}");
    for text in message {
        assert!(err.message().contains(text), "message has {text:?}: {err:?}");
    }
    for text in fix {
        assert!(err.fix().contains(text), "fix has {text:?}: {}", err.fix());
    }
}

/// `#insecure` takes any issuer and name, but the server must still sign
/// the handshake with its certificate's key: a key that cannot be checked
/// (RSA of 1024 bits, which a redis-server at OpenSSL's security level 0
/// loads) is refused, and the error says which keys are taken. Its fix
/// named a trusted authority before (review of e711d4a).
#[test]
fn insecure_refuses_a_key_it_cannot_check_and_names_the_keys_it_takes() {
    let pki = Pki::new("weak-key");
    pki.weak_key("weak");
    let port = free_port();
    let _server = Killed(
        Command::new("redis-server")
            .env("OPENSSL_CONF", pki.dir.join("openssl.cnf"))
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &pki.path("weak.pem"),
                "--tls-key-file",
                &pki.path("weak.key"),
            ])
            .args(["--tls-auth-clients", "no", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    within_10s("the TLS port answers", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let provider = open(&format!("rediss://127.0.0.1:{port}/#insecure"), "");
    assert_refused(&acquire(&provider).unwrap_err(), &["signature made with its key could not be checked"], &["RSA of 2048", "#insecure"]);
}

#[test]
fn a_rediss_connection_is_verified_against_the_trusted_authorities() {
    let pki = Pki::new("verified");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    let (server, tls_port) = pki.server("server", false);
    let url = format!("rediss://localhost:{tls_port}/0");

    // Our test authority is not in the system's store: the certificate is refused.
    let (untrusting, _) = open_redis(&url, &[("leaseMs", "10000")], &[("connectTimeoutMs", "2000")]);
    let refused = block_on(untrusting.backend("shared").unwrap().acquire("k", wait(0))).expect_err("an unknown authority is refused");
    assert_refused(&refused, &["unknown issuer", &format!("localhost:{tls_port}")], &["connections.main.tls.caFile"]);
    let cause = refused.cause().map(ToString::to_string).unwrap_or_default();
    assert!(cause.contains("certificate"), "refused for its certificate: {cause}");

    // Trusted through SSL_CERT_FILE, as with OpenSSL: the same URL works.
    std::env::set_var("SSL_CERT_FILE", pki.path("ca.pem"));
    let (trusting, _) = open_redis(&url, &[("leaseMs", "10000")], &[]);
    let lease = block_on(trusting.backend("shared").unwrap().acquire("k", wait(0))).expect("a trusted authority is accepted");
    assert_eq!(server.keys().iter().filter(|k| k.starts_with("test:lock:")).count(), 1);
    assert!(block_on(lease.release()).unwrap());
}

#[test]
fn a_private_authority_is_trusted_per_connection_as_a_file_or_as_pem_text() {
    let pki = Pki::new("private-ca");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    let (_server, tls_port) = pki.server("server", false);
    let url = format!("rediss://127.0.0.1:{tls_port}/0");
    acquire(&open(&url, &format!("        tls: {{ caFile: '{}' }}\n", pki.path("ca.pem")))).expect("caFile is trusted");
    let text: String = pki.text("ca.pem").lines().map(|line| format!("            {line}\n")).collect();
    acquire(&open(&url, &format!("        tls:\n          ca: |\n{text}"))).expect("ca as PEM text is trusted");
}

/// An authority of the same name but another key (every test authority is
/// "dokebi test CA") fails the chain's signature, which rustls answers as
/// it answers a handshake signature it cannot check (`BadSignature`): the
/// refusal says the certificate is not trusted, not that its key is of a
/// kind this client does not take (said so after ae83639).
#[test]
fn an_authority_of_the_same_name_and_another_key_is_not_called_a_weak_key() {
    let pki = Pki::new("same-name");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    let (_server, tls_port) = pki.server("server", false);
    let other = Pki::new("same-name-other");
    let err =
        acquire(&open(&format!("rediss://127.0.0.1:{tls_port}/0"), &format!("        tls: {{ caFile: '{}' }}\n", other.path("ca.pem"))))
            .unwrap_err();
    assert_refused(&err, &["certificate"], &["trusted authority"]);
    assert!(!err.message().contains("could not be checked"), "{err:?}");
}

#[test]
fn the_surface_s_extra_authorities_are_trusted_as_node_s_extra_ca_certs() {
    let pki = Pki::new("extra-ca");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    let (_server, tls_port) = pki.server("server", false);
    let options = Options::from_yaml(&redis_yaml(&format!("rediss://localhost:{tls_port}/0"), "        leaseMs: 10000\n", "")).unwrap();
    let hooks = Hooks { extra_authorities: Some(pki.path("ca.pem").into()), ..Hooks::default() };
    acquire(&Provider::open_with(options.clone(), hooks).unwrap()).expect("the extra authority is trusted");

    // A file that cannot be read is logged and left out, as Node does.
    let (logger, records) = recording_logger();
    let hooks = Hooks { logger, extra_authorities: Some(pki.path("missing.pem").into()), ..Hooks::default() };
    let provider = Provider::open_with(options, hooks).unwrap();
    assert!(records.lock().unwrap().iter().any(|r| r.code == "REDIS_EXTRA_CA_IGNORED"), "{:?}", records.lock().unwrap());
    assert_refused(&acquire(&provider).unwrap_err(), &["unknown issuer"], &[]);
}

#[test]
fn a_certificate_for_another_name_is_refused_naming_both_and_servername_accepts_it() {
    let pki = Pki::new("name");
    pki.issue("server", "DNS:redis.internal", None, false);
    let (_server, tls_port) = pki.server("server", false);
    let url = format!("rediss://localhost:{tls_port}/0");
    let ca = format!("caFile: '{}'", pki.path("ca.pem"));
    let err = acquire(&open(&url, &format!("        tls: {{ {ca} }}\n"))).unwrap_err();
    assert_refused(&err, &["not valid for the name localhost", "redis.internal"], &["connections.main.tls.servername"]);
    acquire(&open(&url, &format!("        tls: {{ {ca}, servername: redis.internal }}\n")))
        .expect("servername names the certificate's name");
}

#[test]
fn an_expired_certificate_is_refused_as_expired() {
    let pki = Pki::new("expired");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", Some(("20200101000000Z", "20200102000000Z")), false);
    let (_server, tls_port) = pki.server("server", false);
    let err =
        acquire(&open(&format!("rediss://localhost:{tls_port}/0"), &format!("        tls: {{ caFile: '{}' }}\n", pki.path("ca.pem"))))
            .unwrap_err();
    assert_refused(&err, &["expired"], &["Renew the server's certificate"]);
}

#[test]
fn mutual_tls_needs_the_client_certificate_and_says_so_without_one() {
    let pki = Pki::new("mutual");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    pki.issue("client", "DNS:client", None, true);
    let (_server, tls_port) = pki.server("server", true);
    let url = format!("rediss://localhost:{tls_port}/0");
    let ca = format!("caFile: '{}'", pki.path("ca.pem"));
    let err = acquire(&open(&url, &format!("        tls: {{ {ca} }}\n"))).unwrap_err();
    assert_refused(&err, &["demands a client certificate"], &["connections.main.tls.certFile"]);
    let client = format!("certFile: '{}', keyFile: '{}'", pki.path("client.pem"), pki.path("client.key"));
    acquire(&open(&url, &format!("        tls: {{ {ca}, {client} }}\n"))).expect("the client certificate is accepted");

    // A client certificate of another authority is refused by the server.
    let other = Pki::new("mutual-other");
    other.issue("client", "DNS:client", None, true);
    let client = format!("certFile: '{}', keyFile: '{}'", other.path("client.pem"), other.path("client.key"));
    let err = acquire(&open(&url, &format!("        tls: {{ {ca}, {client} }}\n"))).unwrap_err();
    assert_refused(&err, &["refused this client's certificate"], &["connections.main.tls.cert"]);
}

#[test]
fn tls_files_that_cannot_be_read_or_hold_no_pem_are_invalid_options_at_their_path() {
    let pki = Pki::new("files");
    std::fs::write(pki.dir.join("empty.pem"), "nothing here\n").unwrap();
    for (tls, path) in [
        (format!("caFile: '{}'", pki.path("missing.pem")), "connections.main.tls.caFile"),
        (format!("caFile: '{}'", pki.path("empty.pem")), "connections.main.tls.caFile"),
    ] {
        let yaml = redis_yaml("rediss://localhost:1/0", "        leaseMs: 10000\n", &format!("        tls: {{ {tls} }}\n"));
        let err = Provider::from_yaml(&yaml).err().expect("invalid");
        assert_eq!(err.code(), ErrorCode::InvalidOptions, "{err:?}");
        assert_eq!(err.issues()[0].path, path);
    }
    // Checked at load: both forms, a lone key, no TLS link to apply to, text that is no PEM.
    for (connection, path) in [
        ("url: rediss://localhost:1/0\n        tls: { ca: x, caFile: y }", "connections.main.tls"),
        ("url: rediss://localhost:1/0\n        tls: { keyFile: k }", "connections.main.tls"),
        ("url: redis://localhost:1/0\n        tls: { caFile: y }", "connections.main.tls"),
        ("url: rediss://localhost:1/0\n        tls: { ca: not-pem }", "connections.main.tls.ca"),
    ] {
        let yaml = support::redis_yaml_at(connection, "        leaseMs: 10000\n", "");
        let err = Options::from_yaml(&yaml).expect_err("invalid");
        assert_eq!(err.code(), ErrorCode::InvalidOptions, "{err:?}");
        assert!(err.issues().iter().any(|issue| issue.path == path), "{path}: {:?}", err.issues());
    }
}

#[test]
fn a_private_key_never_appears_in_the_options_debug_text() {
    let key = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n";
    let cert = "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n";
    let indent = |pem: &str| -> String { pem.lines().map(|line| format!("            {line}\n")).collect() };
    let yaml = support::redis_yaml_at(
        &format!("url: rediss://localhost:1/0\n        tls:\n          cert: |\n{}          key: |\n{}", indent(cert), indent(key)),
        "        leaseMs: 10000\n",
        "",
    );
    let options = Options::from_yaml(&yaml).unwrap();
    assert!(!format!("{options:?}").contains("c2VjcmV0"), "{options:?}");
}

#[test]
fn a_cluster_over_tls_uses_the_connection_s_tls_on_every_node() {
    let pki = Pki::new("cluster");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    // One node serving every slot, its cluster port TLS too (the slot map names the TLS port).
    let nodes = pki.dir.join("nodes.conf").to_str().unwrap().to_owned();
    let dir = pki.dir.to_str().unwrap().to_owned();
    let (server, tls_port) = pki.server_with(
        "server",
        false,
        &["--cluster-enabled", "yes", "--cluster-config-file", &nodes, "--dir", &dir, "--tls-cluster", "yes"],
    );
    let _: () = redis::cmd("CLUSTER").arg(&["ADDSLOTSRANGE", "0", "16383"]).query(&mut server.client()).unwrap();
    within_10s("the cluster is ok", || {
        redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut server.client()).unwrap().contains("cluster_state:ok")
    });
    let endpoint = format!("cluster: {{ nodes: ['rediss://localhost:{tls_port}'] }}");
    let open_cluster = |tls: &str| {
        let options = Options::from_yaml(&support::redis_yaml_at(&endpoint, "        leaseMs: 10000\n", tls)).unwrap();
        Provider::open_with(options, Hooks::default()).unwrap()
    };
    assert_refused(&acquire(&open_cluster("")).unwrap_err(), &["unknown issuer"], &["connections.main.tls.caFile"]);
    acquire(&open_cluster(&format!("        tls: {{ caFile: '{}' }}\n", pki.path("ca.pem")))).expect("the cluster's nodes are trusted");
}

#[test]
fn a_sentinel_and_its_primary_over_tls_use_the_connection_s_tls() {
    let pki = Pki::new("sentinel");
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    let (_primary, primary_tls) = pki.server("server", false);
    // One sentinel, with a TLS port of its own, watching the primary over TLS.
    let (sentinel_port, sentinel_tls) = (free_port(), free_port());
    let config = pki.dir.join("sentinel.conf");
    std::fs::write(
        &config,
        format!(
            "port {sentinel_port}\nbind 127.0.0.1\ntls-port {sentinel_tls}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\nsentinel monitor mymaster 127.0.0.1 {primary_tls} 1\n",
            pki.path("server.pem"),
            pki.path("server.key"),
            pki.path("ca.pem"),
        ),
    )
    .unwrap();
    let _sentinel =
        Killed(Command::new("redis-server").arg(&config).arg("--sentinel").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    within_10s("the sentinel knows the primary", || {
        let asked = redis::Client::open(format!("redis://127.0.0.1:{sentinel_port}")).and_then(|client| {
            let mut connection = client.get_connection()?;
            redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg("mymaster").query::<Option<(String, u16)>>(&mut connection)
        });
        matches!(asked, Ok(Some((_, port))) if port == primary_tls)
    });
    let endpoint = format!("sentinel: {{ nodes: ['rediss://localhost:{sentinel_tls}'], primaryName: mymaster, tls: true }}");
    let open_sentinel = |tls: &str| {
        let options = Options::from_yaml(&support::redis_yaml_at(&endpoint, "        leaseMs: 10000\n", tls)).unwrap();
        Provider::open_with(options, Hooks::default()).unwrap()
    };
    assert_refused(&acquire(&open_sentinel("")).unwrap_err(), &["unknown issuer"], &["connections.main.tls.caFile"]);
    acquire(&open_sentinel(&format!("        tls: {{ caFile: '{}' }}\n", pki.path("ca.pem"))))
        .expect("the sentinel and the primary are trusted");
}
