//! TLS to the machine's PostgreSQL (Debian's default: `ssl = on` with the
//! snakeoil certificate, self-signed for `localhost`), with libpq's
//! `sslmode` and `sslrootcert` in the URL; client certificates (`sslcert`,
//! `sslkey`) to a private server that takes no other login; and SCRAM bound
//! to the TLS link (`channel_binding=require`) on another.

#[path = "support/pki.rs"]
mod pki;
mod postgres;
#[path = "postgres/server.rs"]
mod server;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, count, wait, Schema};

/// The server's own certificate, which is its own authority.
const SNAKEOIL: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";

fn open(schema: &Schema, url: &str) -> Provider {
    Provider::from_yaml(&postgres::yaml_on(url, &schema.0, "", "")).unwrap()
}

/// Takes and gives back a key; answers how many of the server's sessions
/// named `application` were encrypted while it was held.
fn encrypted_sessions(provider: &Provider, application: &str) -> i64 {
    let lease = match block_on(backend(provider).acquire("k", wait(0))) {
        Ok(lease) => lease,
        Err(err) => {
            let mut chain = format!("{err:?}");
            let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&err);
            while let Some(cause) = source {
                chain += &format!(" / {cause:?}");
                source = cause.source();
            }
            panic!("{application}: {chain}");
        }
    };
    let encrypted = count(&format!(
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE ssl AND application_name = '{application}'"
    ));
    assert!(block_on(lease.release()).unwrap());
    encrypted
}

#[test]
fn verify_full_connects_to_the_name_the_certificate_carries() {
    let schema = Schema::fresh();
    let url = format!(
        "postgres://postgres@localhost:5432/test?hostaddr=127.0.0.1&application_name=dl_full&sslmode=verify-full&sslrootcert={SNAKEOIL}"
    );
    let provider = open(&schema, &url);
    assert!(encrypted_sessions(&provider, "dl_full") >= 1);
    block_on(provider.close());
}

#[test]
fn verify_full_refuses_a_certificate_for_another_name_and_verify_ca_accepts_it() {
    let schema = Schema::fresh();
    let refused = open(&schema, &format!("postgres://postgres@127.0.0.1:5432/test?sslmode=verify-full&sslrootcert={SNAKEOIL}"));
    let err = block_on(backend(&refused).acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
    block_on(refused.close());
    let url = format!("postgres://postgres@127.0.0.1:5432/test?application_name=dl_ca&sslmode=verify-ca&sslrootcert={SNAKEOIL}");
    let provider = open(&schema, &url);
    assert!(encrypted_sessions(&provider, "dl_ca") >= 1);
    block_on(provider.close());
}

#[test]
fn a_certificate_another_authority_signed_is_refused() {
    let schema = Schema::fresh();
    // Any authority but the snakeoil certificate's own (Debian's ca-certificates).
    let url = "postgres://postgres@localhost:5432/test?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert=/etc/ssl/certs/ISRG_Root_X1.pem";
    let provider = open(&schema, url);
    let err = block_on(backend(&provider).acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
    assert!(err.fix().contains("sslrootcert"), "{}", err.fix());
    block_on(provider.close());
}

#[test]
fn require_encrypts_without_checking_and_disable_stays_in_the_clear() {
    let schema = Schema::fresh();
    let provider = open(&schema, "postgres://postgres@127.0.0.1:5432/test?application_name=dl_require&sslmode=require");
    assert!(encrypted_sessions(&provider, "dl_require") >= 1);
    block_on(provider.close());
    let provider = open(&schema, "postgres://postgres@127.0.0.1:5432/test?application_name=dl_clear&sslmode=disable");
    assert_eq!(encrypted_sessions(&provider, "dl_clear"), 0);
    block_on(provider.close());
}

/// Takes and gives back a key through a provider on `url`, its tables in
/// `schema`.
fn take_once(url: &str, schema: &str) -> Result<(), dokebi_lock::LockError> {
    let provider = Provider::from_yaml(&postgres::yaml_on(url, schema, "", "")).unwrap();
    let taken = block_on(backend(&provider).acquire("k", wait(0))).map(|lease| assert!(block_on(lease.release()).unwrap()));
    block_on(provider.close());
    taken
}

/// A private server that takes only certificate logins (tests/postgres/server.rs),
/// with an authority of the test's own (tests/support/pki.rs).
mod client_certificates {
    use super::*;

    use crate::pki::Pki;
    use crate::server::PrivateServer;

    fn take(url: &str) -> Result<(), dokebi_lock::LockError> {
        take_once(url, "dl_cert")
    }

    #[test]
    fn a_server_that_asks_for_a_client_certificate_gets_sslcert_and_sslkey() {
        let pki = Pki::new("pg-client");
        pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
        pki.issue("postgres", "DNS:postgres", None, true);
        pki.issue("someone", "DNS:someone", None, true);
        let mut server = PrivateServer::start("client-certificates", &[]);
        server.require_client_certificates(&pki.dir);
        let base = format!(
            "postgres://postgres@localhost:{}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}",
            server.port(),
            pki.path("ca.pem")
        );
        let with = |name: &str| format!("{base}&sslcert={}&sslkey={}", pki.path(&format!("{name}.pem")), pki.path(&format!("{name}.key")));
        take(&with("postgres")).expect("the certificate of user postgres logs in");
        // Without one, or with another user's, the server refuses who we are.
        for url in [base.clone(), with("someone")] {
            let err = take(&url).unwrap_err();
            assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
            assert!(err.to_string().contains("refused the credentials"), "{err}");
        }
    }
}

/// `sslmode=require` takes any issuer and name, but the server must still
/// sign the handshake with its certificate's key: a key rustls cannot check
/// (RSA of 1024 bits, which a server at OpenSSL's security level 0 loads)
/// is refused, and the error names the keys taken, not `sslrootcert` or a
/// lower `sslmode` (which would not help).
#[test]
fn require_refuses_a_key_it_cannot_check_and_names_the_keys_it_takes() {
    let pki = pki::Pki::new("pg-weak-key");
    pki.weak_key("server");
    let mut server = server::PrivateServer::start("weak-key", &[]);
    server.serve_tls_under_openssl_conf(&pki.dir);
    let err = take_once(&format!("postgres://postgres@127.0.0.1:{}/postgres?sslmode=require", server.port()), "dl_weak").unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(err.to_string().contains("signature made with its key could not be checked"), "{err}");
    assert!(err.fix().contains("RSA of 2048") && err.fix().contains("sslmode=require"), "{}", err.fix());
}

/// A private server that takes only SCRAM logins over TLS, with certificates
/// signed by each hash a `tls-server-end-point` binding is made with.
mod channel_binding {
    use super::*;

    use crate::pki::openssl;
    use crate::server::PrivateServer;

    const PASSWORD: &str = "open-sesame-7431";

    fn take(url: &str) -> Result<(), dokebi_lock::LockError> {
        take_once(url, "dl_binding")
    }

    #[test]
    fn scram_is_bound_to_the_tls_link_whatever_hash_signed_the_certificate() {
        let dir = std::env::temp_dir().join(format!("dokebi-lock-binding-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = PrivateServer::start("channel-binding", &[]);
        postgres::batch_on(&server.url(), &format!("ALTER ROLE postgres PASSWORD '{PASSWORD}'"));
        // Self-signed: sslmode=require checks no certificate, which is
        // what channel binding guards (a relay with any certificate).
        let keys: [(&str, &[&str]); 3] = [
            ("-sha256", &["-newkey", "rsa:2048"]),
            ("-sha384", &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp384r1"]),
            ("-sha512", &["-newkey", "rsa:2048"]),
        ];
        for (digest, key) in keys {
            let mut args = vec!["req", "-x509", digest, "-nodes", "-days", "1", "-subj", "/CN=localhost"];
            args.extend_from_slice(key);
            args.extend_from_slice(&["-keyout", "server.key", "-out", "server.pem"]);
            openssl(&dir, &args);
            server.require_scram_over_tls(&dir);
            let url = |password: &str| {
                format!("postgres://postgres:{password}@127.0.0.1:{}/postgres?sslmode=require&channel_binding=require", server.port())
            };
            // tokio-postgres refuses `require` unless SCRAM-SHA-256-PLUS
            // ran, and the server refuses a binding that is not its own
            // certificate's hash.
            take(&url(PASSWORD)).unwrap_or_else(|err| panic!("{digest}: {err:?}"));
            let err = take(&url("not-the-password")).unwrap_err();
            assert_eq!(err.code(), ErrorCode::ProviderFailed, "{digest}: {err}");
            assert!(!format!("{err:?}").contains("not-the-password"), "{digest}: the password appears in {err:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// libpq uses no TLS on a Unix-domain socket (the server refuses it there),
/// whatever `sslmode` asks.
#[test]
fn a_unix_domain_socket_connects_in_the_clear() {
    let schema = Schema::fresh();
    // The socket of the machine's PostgreSQL (Debian's directory).
    let socket = "%2Fvar%2Frun%2Fpostgresql";
    for mode in ["prefer", "disable", "require"] {
        let application = format!("dl_unix_{mode}");
        let url = format!("postgres://postgres@/test?host={socket}&application_name={application}&sslmode={mode}");
        let provider = open(&schema, &url);
        assert_eq!(encrypted_sessions(&provider, &application), 0, "sslmode={mode}");
        let local = count(&format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}' AND client_port = -1"));
        assert!(local >= 1, "sslmode={mode}: the sessions came through the socket");
        block_on(provider.close());
    }
}

/// Takes and gives back a key through a provider on `url`: how many of the
/// server's sessions named `application` were encrypted, or why it failed
/// (when the provider is opened or at the acquire).
fn outcome(schema: &Schema, url: &str, application: &str) -> Result<i64, dokebi_lock::LockError> {
    let provider = Provider::from_yaml(&postgres::yaml_on(url, &schema.0, "", ""))?;
    let taken = block_on(backend(&provider).acquire("k", wait(0))).map(|lease| {
        let encrypted = count(&format!(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE ssl AND application_name = '{application}'"
        ));
        assert!(block_on(lease.release()).unwrap());
        encrypted
    });
    block_on(provider.close());
    taken
}

/// libpq 16's table of `sslmode` and `sslrootcert`, row by row, against the
/// machine's PostgreSQL (TLS offered, clear connections taken, the
/// snakeoil certificate self-signed for `localhost`).
#[test]
fn sslmode_and_sslrootcert_behave_as_libpq_16_row_by_row() {
    let schema = Schema::fresh();
    assert!(
        !std::path::Path::new(&std::env::var("HOME").unwrap_or_default()).join(".postgresql/root.crt").exists(),
        "the rows below assume no ~/.postgresql/root.crt"
    );
    const ISRG: &str = "/etc/ssl/certs/ISRG_Root_X1.pem";
    #[derive(Debug, PartialEq)]
    enum Expect {
        Clear,
        Encrypted,
        /// Refused, with these words in the message.
        Refused(&'static str),
    }
    use Expect::*;
    let rows: &[(&str, &str, &str, Expect)] = &[
        ("disable", "", "127.0.0.1", Clear),
        ("allow", "", "127.0.0.1", Clear),
        ("prefer", "", "127.0.0.1", Encrypted),
        ("require", "", "127.0.0.1", Encrypted),
        ("verify-ca", "", "127.0.0.1", Refused("root.crt")),
        ("verify-full", "", "localhost", Refused("root.crt")),
        // With authorities every mode with TLS checks the chain (not the name).
        ("prefer", SNAKEOIL, "127.0.0.1", Encrypted),
        ("require", SNAKEOIL, "127.0.0.1", Encrypted),
        ("verify-ca", SNAKEOIL, "127.0.0.1", Encrypted),
        ("verify-full", SNAKEOIL, "127.0.0.1", Refused("certificate")),
        ("verify-full", SNAKEOIL, "localhost", Encrypted),
        ("prefer", ISRG, "127.0.0.1", Refused("certificate")),
        ("require", ISRG, "127.0.0.1", Refused("certificate")),
        ("verify-ca", ISRG, "127.0.0.1", Refused("certificate")),
        // sslrootcert=system: verify-full, and nothing weaker (Debian's
        // system store, /etc/ssl/certs, holds the snakeoil certificate).
        ("", "system", "localhost", Encrypted),
        ("", "system", "127.0.0.1", Refused("certificate")),
        ("verify-full", "system", "localhost", Encrypted),
        ("disable", "system", "localhost", Refused("verify-full")),
        ("allow", "system", "localhost", Refused("verify-full")),
        ("prefer", "system", "localhost", Refused("verify-full")),
        ("require", "system", "localhost", Refused("verify-full")),
        ("verify-ca", "system", "localhost", Refused("verify-full")),
    ];
    for (at, (mode, root, host, expect)) in rows.iter().enumerate() {
        let application = format!("dl_row_{at}");
        let mut url = format!("postgres://postgres@{host}:5432/test?hostaddr=127.0.0.1&application_name={application}");
        if !mode.is_empty() {
            url += &format!("&sslmode={mode}");
        }
        if !root.is_empty() {
            url += &format!("&sslrootcert={root}");
        }
        let row = format!("sslmode={mode:?} sslrootcert={root:?} host={host}");
        match (outcome(&schema, &url, &application), expect) {
            (Ok(0), Clear) => {}
            (Ok(n), Encrypted) if n > 0 => {}
            (Err(err), Refused(words)) => {
                assert_eq!(err.code(), ErrorCode::ProviderFailed, "{row}: {err}");
                assert!(format!("{err} {}", err.fix()).contains(words), "{row}: {err} / {}", err.fix());
            }
            (got, _) => panic!("{row}: expected {expect:?}, got {got:?}"),
        }
    }
}

/// sslrootcert=system alone is verify-full: a server without TLS is refused,
/// not used in the clear.
#[test]
fn sslrootcert_system_alone_refuses_a_server_without_tls() {
    let server = server::PrivateServer::start("no-tls", &[]);
    let url = format!("postgres://postgres@localhost:{}/postgres?hostaddr=127.0.0.1&sslrootcert=system", server.port());
    let err = take_once(&url, "dl_system").unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    // The same server in the clear, as a check that it is up.
    take_once(&format!("postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable", server.port()), "dl_system").unwrap();
}

/// sslmode=allow: in the clear first, then TLS when the server takes only TLS.
#[test]
fn allow_uses_tls_when_the_server_refuses_the_clear() {
    let dir = std::env::temp_dir().join(format!("dokebi-lock-allow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    pki::openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-sha256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-newkey",
            "rsa:2048",
            "-keyout",
            "server.key",
            "-out",
            "server.pem",
        ],
    );
    let mut server = server::PrivateServer::start("allow", &[]);
    postgres::batch_on(&server.url(), "ALTER ROLE postgres PASSWORD 'allow-7431'");
    server.require_scram_over_tls(&dir);
    take_once(&format!("postgres://postgres:allow-7431@127.0.0.1:{}/postgres?sslmode=allow", server.port()), "dl_allow")
        .expect("the second try, with TLS, logs in");
    let err =
        take_once(&format!("postgres://postgres:allow-7431@127.0.0.1:{}/postgres?sslmode=disable", server.port()), "dl_allow").unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
