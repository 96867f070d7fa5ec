//! The TLS of a connection (`connections.<name>.tls`), made by the driver
//! itself with rustls so that each connection has its own trusted
//! authorities, client certificate and server name, and so that a refused
//! certificate is told apart from an unreachable server.
//!
//! Trust, as Node's `tls` has it: the connection's `ca` replaces the
//! system's authorities (those of the platform store, or of `SSL_CERT_FILE`
//! / `SSL_CERT_DIR`); without it, the system's are trusted, plus the extra
//! authorities the surface passes (Node: `NODE_EXTRA_CA_CERTS`). A private
//! key is read into rustls and never printed.
//!
//! `rediss://...#insecure` verifies nothing (tests only), but its link is
//! the driver's all the same: redis-rs's own would tell only once made
//! whether its socket came up, and a server that took it and did not
//! answer would read as unreachable (review R39).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::refusal::Refusal;
use crate::error::{Issue, LockError, Result};
use crate::options::{Pem, TlsOptions};
use crate::store::any_certificate::AnyCertificate;
use crate::store::tls_keys::{self, Signed};

/// How one connection's TLS links are made.
pub(crate) struct Tls {
    connector: TlsConnector,
    /// For `#insecure` links: the same, verifying no certificate.
    insecure: TlsConnector,
    servername: Option<ServerName<'static>>,
    /// `connections.<name>.tls`, for fixes.
    path: String,
    /// Trusts its own `ca` (not the system's authorities).
    own_ca: bool,
    /// Presents a client certificate.
    client_cert: bool,
    /// Set once a server asked for a client certificate this connection
    /// has none of.
    asked: Arc<AtomicBool>,
}

impl Tls {
    /// The TLS of connection `name`: its `tls` options (files read now),
    /// over the system's authorities plus `extra` ones. A file that cannot
    /// be read or holds no PEM of its kind is `INVALID_OPTIONS` at its path.
    pub fn new(name: &str, options: Option<&TlsOptions>, extra: &[CertificateDer<'static>]) -> Result<Tls> {
        let path = format!("connections.{name}.tls");
        let default = TlsOptions::default();
        let options = options.unwrap_or(&default);
        let mut roots = RootCertStore::empty();
        match &options.ca {
            Some(ca) => {
                let (at, pem) = read(ca, &path, "ca")?;
                let certificates = certificates(&pem, &at)?;
                let (added, _) = roots.add_parsable_certificates(certificates);
                if added == 0 {
                    return Err(invalid(&at, "holds no usable CA certificate"));
                }
            }
            None => {
                // Unreadable entries of the store are skipped, as OpenSSL does.
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                roots.add_parsable_certificates(extra.iter().cloned());
            }
        }
        // Without any authority (no `ca`, none in the system's store) no
        // verified link can succeed, and rustls' verifier cannot be made:
        // its refusals are then "unknown issuer" only.
        let roots = Arc::new(roots);
        let builder = match WebPkiServerVerifier::builder(roots.clone()).build() {
            Ok(verifier) => ClientConfig::builder().dangerous().with_custom_certificate_verifier(Arc::new(Signed(verifier))),
            Err(_) => ClientConfig::builder().with_root_certificates(roots),
        };
        let asked = Arc::new(AtomicBool::new(false));
        let config = match (&options.cert, &options.key) {
            (Some(cert), Some(key)) => {
                let (at, pem) = read(cert, &path, "cert")?;
                let chain = certificates(&pem, &at)?;
                let (at, pem) = read(key, &path, "key")?;
                let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| invalid(&at, "holds no PEM private key"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|err| invalid(&path, "the client certificate and key do not go together").with_cause(err))?
            }
            _ => builder.with_client_cert_resolver(Arc::new(NoClientCert(asked.clone()))),
        };
        let servername = match &options.servername {
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|_| invalid(&format!("{path}.servername"), "is not a DNS name or IP address"))?,
            ),
            None => None,
        };
        let mut insecure = config.clone();
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        insecure.dangerous().set_certificate_verifier(Arc::new(Signed(Arc::new(AnyCertificate(algorithms)))));
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            insecure: TlsConnector::from(Arc::new(insecure)),
            servername,
            path,
            own_ca: options.ca.is_some(),
            client_cert: options.cert.is_some(),
            asked,
        })
    }

    /// The TLS handshake with `host` over `stream`; the certificate must
    /// carry `servername`, else `host` (unless `insecure`: `#insecure`).
    pub async fn connect(&self, host: &str, stream: TcpStream, insecure: bool) -> std::io::Result<TlsStream<TcpStream>> {
        let name = match &self.servername {
            Some(name) => name.clone(),
            None => ServerName::try_from(host.to_owned()).map_err(std::io::Error::other)?,
        };
        let connector = if insecure { &self.insecure } else { &self.connector };
        connector.connect(name, stream).await
    }

    /// The refusal `err` is when a TLS error of the link to `server`
    /// (`host:port`, reached as `host`) is its cause: a certificate either
    /// side refused, or a failed handshake.
    pub fn refusal(&self, server: &str, host: &str, err: &redis::RedisError) -> Option<Refusal> {
        let tls = crate::store::error_chain::find_in_chain::<rustls::Error>(err)?;
        let path = &self.path;
        let name = self.servername.as_ref().map_or_else(|| host.to_owned(), |name| name.to_str().into_owned());
        let refused = format!("the TLS certificate of Redis at {server} was refused");
        let (message, fix) = match tls {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => (
                format!("{refused}: no authority this connection trusts signed it (unknown issuer)"),
                if self.own_ca {
                    format!("Set {path}.ca (or caFile) to the authority that signed the server's certificate (the server's tls-ca-cert-file), or fix the server's certificate chain.")
                } else {
                    format!("Trust the authority that signed the server's certificate: set {path}.caFile (or ca) to its PEM; in Node, NODE_EXTRA_CA_CERTS adds it too.")
                },
            ),
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => {
                let presented = match tls {
                    rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { presented, .. }) if !presented.is_empty() => {
                        // Each as rustls spells it, e.g. `DnsName("redis.internal")`: the name alone.
                        let names: Vec<&str> = presented
                            .iter()
                            .map(|name| name.split_once('(').map_or(name.as_str(), |(_, inner)| inner.trim_end_matches(')').trim_matches('"')))
                            .collect();
                        format!(" (it names {})", names.join(", "))
                    }
                    _ => String::new(),
                };
                (
                    format!("{refused}: it is not valid for the name {name}{presented}"),
                    format!("Connect by a name the server's certificate carries, or set {path}.servername to it; or reissue the certificate for {name}."),
                )
            }
            rustls::Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
                let ago = match tls {
                    rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { time, not_after }) => {
                        match time.as_secs().saturating_sub(not_after.as_secs()) {
                            secs if secs >= 2 * 86_400 => format!(" {} days ago", secs / 86_400),
                            secs => format!(" {secs} s ago"),
                        }
                    }
                    _ => String::new(),
                };
                (
                    format!("{refused}: it expired{ago}"),
                    "Renew the server's certificate (or, if it has not expired, correct this host's clock).".to_owned(),
                )
            }
            rustls::Error::InvalidCertificate(CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. }) => (
                format!("{refused}: it is not valid yet"),
                "Correct this host's clock, or the server certificate's validity period.".to_owned(),
            ),
            uncheckable if tls_keys::uncheckable(uncheckable) => (format!("{refused}: {}", tls_keys::UNCHECKABLE), tls_keys::fix("#insecure")),
            rustls::Error::InvalidCertificate(other) => (
                format!("{refused} ({other:?})"),
                "Give the server a certificate that a trusted authority signed for its name (see cause).".to_owned(),
            ),
            rustls::Error::AlertReceived(alert) if !self.client_cert && (self.asked.load(Ordering::Relaxed) || *alert == AlertDescription::CertificateRequired) => (
                format!("Redis at {server} demands a client certificate (mutual TLS) and {path} gives none"),
                format!("Set {path}.certFile and keyFile (or cert and key) to a client certificate the server trusts (signed by its tls-ca-cert-file)."),
            ),
            rustls::Error::AlertReceived(
                alert @ (AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::AccessDenied),
            ) => (
                format!("Redis at {server} refused this client's certificate (TLS alert {alert:?})"),
                format!("Set {path}.cert and key to a client certificate the server trusts: signed by its tls-ca-cert-file, not expired."),
            ),
            other => (
                format!("the TLS handshake with Redis at {server} failed ({other})"),
                "Check that the port speaks TLS (rediss:// to a TLS port, redis:// to a plain one) with TLS 1.2 or 1.3.".to_owned(),
            ),
        };
        Some(Refusal { message, fix, cause: Arc::new(err.clone()) })
    }
}

/// The PEM of setting `kind` (`ca`, `cert`, `key`): the text, or the file's.
/// Returns the option's path for messages.
fn read(pem: &Pem, path: &str, kind: &str) -> Result<(String, Vec<u8>)> {
    match pem {
        Pem::Text(text) => Ok((format!("{path}.{kind}"), text.as_bytes().to_vec())),
        Pem::File(file) => {
            let at = format!("{path}.{kind}File");
            let bytes = std::fs::read(file).map_err(|err| invalid(&at, &format!("cannot read {file}: {err}")))?;
            Ok((at, bytes))
        }
    }
}

/// The certificates of a PEM text; none is an error at `at`.
fn certificates(pem: &[u8], at: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|err| invalid(at, "is not PEM certificates").with_cause(err))?;
    if certificates.is_empty() {
        return Err(invalid(at, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
    }
    Ok(certificates)
}

/// The certificates of a PEM file of extra authorities (`NODE_EXTRA_CA_CERTS`).
pub(crate) fn extra_authorities(file: &std::path::Path) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(file).map_err(|err| err.to_string())?;
    let certificates = CertificateDer::pem_slice_iter(&pem).collect::<std::result::Result<Vec<_>, _>>().map_err(|err| err.to_string())?;
    if certificates.is_empty() {
        return Err("it holds no PEM certificate".to_owned());
    }
    Ok(certificates)
}

fn invalid(at: &str, message: &str) -> LockError {
    LockError::invalid_options(vec![Issue::new(at, message)])
}

/// No client certificate: remembers that a server asked for one.
#[derive(Debug)]
struct NoClientCert(Arc<AtomicBool>);

impl ResolvesClientCert for NoClientCert {
    fn resolve(&self, _issuers: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}
