//! The mysql driver's TLS against a private MariaDB that has it (its
//! certificate signed by an authority of the test's own, for `localhost`
//! and 127.0.0.1, listening on 127.0.0.2 too: an address the certificate
//! does not name), each `ssl-mode` through an acquire and a release of a
//! key; and `PREFERRED` and `REQUIRED` against one without TLS. A session
//! is shown to be encrypted by a user the server takes over TLS only
//! (`REQUIRE SSL`), and to carry the client certificate by one that takes
//! only a certificate its authority signed (`REQUIRE X509`).

mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;
#[path = "support/pki.rs"]
mod pki;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, LockError, Provider};
use futures::executor::block_on;
use mysql_server::{PrivateServer, GRANTS};
use pki::Pki;

/// The password of the users below, which no message may quote.
const PASSWORD: &str = "tls-secret-5821";

/// Takes and gives back key `k` through a provider on `url`; the error of
/// the acquire, else.
fn take(url: &str) -> Result<(), LockError> {
    let provider = Provider::from_yaml(&mysql::yaml("dl_tls", "").replace(&mysql::url(), url))?;
    let wait = AcquireOptions { wait_timeout: Some(Duration::from_millis(0)), ..AcquireOptions::default() };
    let taken = block_on(provider.backend("shared").unwrap().acquire("k", wait)).map(|lease| assert!(block_on(lease.release()).unwrap()));
    block_on(provider.close());
    taken
}

/// [`take`] succeeds, or the panic says why not (the causes included).
fn taken(url: &str, case: &str) {
    if let Err(err) = take(url) {
        let mut chain = format!("{err}");
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&err);
        while let Some(cause) = source {
            chain += &format!(" / {cause}");
            source = cause.source();
        }
        panic!("{case}: {chain}");
    }
}

/// [`take`] fails as a server that answered refuses (never unreachable,
/// which a policy would fall back on), with `words` in the message and no
/// password anywhere (the causes and the fix included).
fn refused(url: &str, case: &str, words: &str) -> LockError {
    let err = take(url).err().unwrap_or_else(|| panic!("{case}: taken"));
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{case}: {err}");
    assert!(err.to_string().contains(words), "{case}: {err}");
    assert!(err.details().and_then(|details| details.get("unreachable")).is_none(), "{case}: {err} {:?}", err.details());
    let everything = format!("{err} {err:?} {}", err.fix());
    assert!(!everything.contains(PASSWORD), "{case}: the password appears in {everything}");
    err
}

/// The server with TLS and the authority that signed its certificate.
struct TlsServer {
    server: PrivateServer,
    pki: Pki,
}

impl TlsServer {
    fn start() -> TlsServer {
        let pki = Pki::new("mysql");
        pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
        pki.issue("client", "DNS:client", None, true);
        let tls = [
            format!("--ssl-ca={}", pki.path("ca.pem")),
            format!("--ssl-cert={}", pki.path("server.pem")),
            format!("--ssl-key={}", pki.path("server.key")),
        ];
        let mut args = vec![GRANTS, "--bind-address=127.0.0.1,127.0.0.2"];
        args.extend(tls.iter().map(String::as_str));
        let server = PrivateServer::start(&args);
        server
            .run(&format!(
                "CREATE USER plain@'%' IDENTIFIED BY '{PASSWORD}';
                 CREATE USER tls@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL;
                 CREATE USER x509@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE X509;
                 GRANT ALL ON test.* TO plain@'%', tls@'%', x509@'%'"
            ))
            .expect("the users are created");
        TlsServer { server, pki }
    }

    /// The URL of `user` on `host` with `query`, where `@CA`, `@CERT` and
    /// `@KEY` stand for the authority's certificate and the client's
    /// certificate and key.
    fn url(&self, user: &str, host: &str, query: &str) -> String {
        let query = query
            .replace("@CA", &self.pki.path("ca.pem"))
            .replace("@CERT", &self.pki.path("client.pem"))
            .replace("@KEY", &self.pki.path("client.key"));
        format!("mysql://{user}:{PASSWORD}@{host}:{}/test?{query}", self.server.port())
    }
}

#[test]
fn each_ssl_mode_against_a_server_with_tls() {
    let tls = TlsServer::start();
    let url = |user: &str, query: &str| tls.url(user, "127.0.0.1", query);
    // PREFERRED (the default) and REQUIRED encrypt, DISABLED does not: the
    // server counts the TLS handshakes it accepted, and refuses the clear
    // to a user created REQUIRE SSL.
    let handshakes = || tls.server.column("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'", "Value").unwrap().parse::<u64>().unwrap();
    let before = handshakes();
    taken(&url("plain", "ssl-mode=DISABLED"), "plain, DISABLED");
    assert_eq!(handshakes(), before, "DISABLED made a TLS handshake");
    taken(&url("plain", ""), "plain, no ssl-mode");
    assert!(handshakes() > before, "PREFERRED made no TLS handshake");
    taken(&url("tls", ""), "REQUIRE SSL, no ssl-mode");
    taken(&url("tls", "ssl-mode=PREFERRED"), "REQUIRE SSL, PREFERRED");
    taken(&url("tls", "ssl-mode=REQUIRED"), "REQUIRE SSL, REQUIRED");
    let err = refused(&url("tls", "ssl-mode=DISABLED"), "REQUIRE SSL, DISABLED", "refused the credentials of user 'tls'");
    assert!(format!("{err:?}").contains("1045"), "{err:?}");

    // VERIFY_CA checks the chain, not the name.
    taken(&url("tls", "ssl-mode=VERIFY_CA&ssl-ca=@CA"), "VERIFY_CA");
    taken(&url("tls", "ssl-ca=@CA"), "ssl-ca alone");
    // Refused as unreachable before src/mysql/transport/tls.rs: mysql_async
    // 0.37.1 does not skip the name check rustls 0.23 fails.
    let unnamed = tls.url("tls", "127.0.0.2", "ssl-mode=VERIFY_CA&ssl-ca=@CA");
    taken(&unnamed, "VERIFY_CA, a host the certificate does not name");
    statements_past_their_bound_are_killed(&tls.server, &unnamed);
    let other = Pki::new("mysql-other");
    for query in ["ssl-mode=VERIFY_CA&ssl-ca=", "ssl-mode=VERIFY_IDENTITY&ssl-ca=", "ssl-ca="] {
        let err = refused(&url("tls", &format!("{query}{}", other.path("ca.pem"))), &format!("another authority, {query}"), "certificate");
        assert!(err.fix().contains("ssl-ca"), "{}", err.fix());
    }

    // VERIFY_IDENTITY checks the chain and the name.
    taken(&url("tls", "ssl-mode=VERIFY_IDENTITY&ssl-ca=@CA"), "VERIFY_IDENTITY, 127.0.0.1");
    taken(&tls.url("tls", "localhost", "ssl-mode=VERIFY_IDENTITY&ssl-ca=@CA"), "VERIFY_IDENTITY, localhost");
    refused(&tls.url("tls", "127.0.0.2", "ssl-mode=VERIFY_IDENTITY&ssl-ca=@CA"), "VERIFY_IDENTITY, 127.0.0.2", "certificate");

    // A client certificate, for a user that takes none other.
    let identity = "ssl-cert=@CERT&ssl-key=@KEY";
    taken(&url("x509", &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca=@CA&{identity}")), "REQUIRE X509, a certificate");
    taken(&url("x509", &format!("ssl-mode=REQUIRED&{identity}")), "REQUIRE X509, a certificate, REQUIRED");
    refused(&url("x509", "ssl-mode=VERIFY_IDENTITY&ssl-ca=@CA"), "REQUIRE X509, no certificate", "refused the credentials of user 'x509'");
    refused(&url("x509", "ssl-mode=DISABLED"), "REQUIRE X509, DISABLED", "refused the credentials of user 'x509'");
    other.issue("stranger", "DNS:client", None, true);
    let stranger = format!("ssl-mode=REQUIRED&ssl-cert={}&ssl-key={}", other.path("stranger.pem"), other.path("stranger.key"));
    refused(&url("x509", &stranger), "REQUIRE X509, a certificate another authority signed", "TLS handshake");

    // Files that cannot be used are the settings' fault, not the network's.
    refused(&url("tls", "ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/ca.pem"), "ssl-ca missing", "ssl-ca");
    refused(
        &url("tls", &format!("ssl-mode=REQUIRED&ssl-cert=@CERT&ssl-key={}", other.path("stranger.key"))),
        "a key not the certificate's",
        "TLS settings",
    );
}

#[test]
fn preferred_falls_back_to_the_clear_and_required_is_refused_without_tls_on_the_server() {
    let server = PrivateServer::start(&[]);
    assert_eq!(server.column("SHOW GLOBAL VARIABLES LIKE 'have_ssl'", "Value").as_deref(), Some("DISABLED"));
    let url = |query: &str| format!("{}?{query}", server.url());
    taken(&url(""), "no ssl-mode");
    taken(&url("ssl-mode=PREFERRED"), "PREFERRED");
    taken(&url("ssl-mode=DISABLED"), "DISABLED");
    let pki = Pki::new("mysql-clear");
    for query in ["ssl-mode=REQUIRED".to_owned(), format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", pki.path("ca.pem"))] {
        let err = refused(&url(&query), &query, "has no TLS");
        assert!(err.fix().contains("ssl-mode"), "{}", err.fix());
    }
    statements_past_their_bound_are_killed(&server, &url(""));
}

/// `REQUIRED` takes any issuer and name, but the server must still sign the
/// handshake with its certificate's key: a key rustls cannot check (RSA of
/// 1024 bits, which a server at OpenSSL's security level 0 loads) is
/// refused, and the error names the keys taken, not `ssl-ca` or a lower
/// `ssl-mode` (which would not help).
#[test]
fn required_refuses_a_key_it_cannot_check_and_names_the_keys_it_takes() {
    let pki = Pki::new("mysql-weak-key");
    pki.weak_key("server");
    let (cert, key) = (format!("--ssl-cert={}", pki.path("server.pem")), format!("--ssl-key={}", pki.path("server.key")));
    let server = PrivateServer::start_under_openssl_conf(&[&cert, &key], &pki.dir.join("openssl.cnf"));
    assert_eq!(server.column("SHOW GLOBAL VARIABLES LIKE 'have_ssl'", "Value").as_deref(), Some("YES"), "the server loaded the key");
    let err =
        refused(&format!("{}?ssl-mode=REQUIRED", server.url()), "a key of 1024 bits", "signature made with its key could not be checked");
    assert!(err.fix().contains("RSA of 2048") && err.fix().contains("ssl-mode=REQUIRED"), "{}", err.fix());
}

/// A statement that outlasts `commandTimeoutMs` has its connection ended
/// (`KILL`) from a new connection of its own, which `PREFERRED` opens in
/// the clear too: here a take held up by a row lock another session holds.
fn statements_past_their_bound_are_killed(server: &PrivateServer, url: &str) {
    let config = mysql::yaml("dl_tls", "").replace(&mysql::url(), url).replace("commandTimeoutMs: 2000", "commandTimeoutMs: 300");
    let provider = Provider::from_yaml(&config).unwrap();
    let kills = || server.column("SHOW GLOBAL STATUS LIKE 'Com_kill'", "Value").unwrap().parse::<u64>().unwrap();
    let before = kills();
    let (locked, is_locked) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = {
        let url = server.url();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                use mysql_async::prelude::Queryable;
                let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false);
                let mut conn = mysql_async::Conn::new(opts).await.unwrap();
                conn.query_drop("START TRANSACTION; SELECT * FROM test.dl_tls WHERE ns = 'dokebi-lock' AND k = 'k' FOR UPDATE")
                    .await
                    .unwrap();
                locked.send(()).unwrap();
                let _ = tokio::task::spawn_blocking(move || released.recv()).await;
                conn.query_drop("ROLLBACK").await.unwrap();
            });
        })
    };
    is_locked.recv().expect("the row is locked");
    let wait = AcquireOptions { wait_timeout: Some(Duration::from_millis(0)), ..AcquireOptions::default() };
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutcomeUnknown, "{err}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while kills() == before {
        assert!(std::time::Instant::now() < deadline, "the statement past its bound was not killed");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(release);
    holder.join().unwrap();
    block_on(provider.close());
}
