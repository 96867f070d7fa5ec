//! TLS to PostgreSQL through rustls, with libpq's settings in the URL:
//! `sslmode` as libpq 16 (`disable`; `allow`: in the clear, TLS when the
//! server refuses that; `prefer`: TLS when the server offers it, the
//! certificate not checked; `require`: encrypted, the certificate not checked;
//! `verify-ca`: signed by a trusted authority; `verify-full`: and naming
//! the host; with authorities, every mode with TLS checks the chain, as
//! `verify-ca`), `sslrootcert` (a PEM file of authorities, else
//! `~/.postgresql/root.crt` when it exists, which `verify-ca` and
//! `verify-full` need; or `system`, the system's authorities, which implies
//! `verify-full` and refuses weaker modes), `sslcert` and `sslkey` (a client
//! certificate). A private key is read into rustls and never printed.
//! `channel_binding` is tokio-postgres's: SCRAM bound to the link, with the
//! binding this module computes (see [`RustlsStream`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::TlsConnector;

use crate::error::{ErrorCode, LockError, Result};
use crate::store::any_certificate::AnyCertificate;
use crate::store::tls_keys::Signed;

/// How much of the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing: encrypted against a passive listener only.
    Nothing,
    /// Signed by a trusted authority, for any name.
    Authority,
    /// Signed by a trusted authority, for the host connected to.
    Name,
}

/// The TLS settings libpq users write in the URL (paths, no secrets).
#[derive(Debug, Default)]
pub(crate) struct TlsSettings {
    /// `sslmode=require` or stricter: `None` when the link is in the clear.
    pub verify: Option<Verify>,
    /// `sslmode=allow`: in the clear first, TLS when the server refuses that.
    pub allow: bool,
    pub root_cert: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
}

/// Makes the TLS link of each new connection (one connector per
/// PostgreSQL connection; cheap to clone).
#[derive(Clone)]
pub(crate) struct MakeRustls {
    connector: Option<TlsConnector>,
}

impl MakeRustls {
    /// The connector of `settings` (`what`: the option, for messages);
    /// files that cannot be read are `PROVIDER_FAILED` now.
    pub fn new(settings: &TlsSettings, what: &str) -> Result<MakeRustls> {
        let Some(verify) = settings.verify else { return Ok(MakeRustls { connector: None }) };
        let verify = match (verify, &settings.root_cert) {
            (Verify::Nothing, Some(_)) => Verify::Authority,
            (verify, _) => verify,
        };
        let mut roots = RootCertStore::empty();
        match settings.root_cert.as_deref() {
            Some("system") | None => {
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            }
            Some(file) => {
                let (added, _) = roots.add_parsable_certificates(certificates(file, "sslrootcert", what)?);
                if added == 0 {
                    return Err(unusable(what, "sslrootcert", "holds no usable certificate"));
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match verify {
            // `sslmode=require` without `sslrootcert`.
            Verify::Nothing => Arc::new(AnyCertificate(algorithms)),
            Verify::Authority | Verify::Name => {
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|err| unusable(what, "sslrootcert", &err.to_string()))?;
                if verify == Verify::Authority {
                    Arc::new(AnyName(webpki))
                } else {
                    webpki
                }
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| unusable(what, "sslmode", &err.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Signed(verifier)));
        let config = match (&settings.cert, &settings.key) {
            (Some(cert), Some(key)) => {
                let key = PrivateKeyDer::from_pem_file(key).map_err(|_| unusable(what, "sslkey", "holds no readable private key"))?;
                builder
                    .with_client_auth_cert(certificates(cert, "sslcert", what)?, key)
                    .map_err(|err| unusable(what, "sslcert", &err.to_string()))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(unusable(what, "sslcert", "needs sslkey (and sslkey needs sslcert)")),
        };
        Ok(MakeRustls { connector: Some(TlsConnector::from(Arc::new(config))) })
    }
}

fn certificates(file: &str, name: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certificates: Vec<_> = CertificateDer::pem_file_iter(file)
        .map_err(|_| unusable(what, name, "cannot be read as PEM"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| unusable(what, name, "cannot be read as PEM"))?;
    if certificates.is_empty() {
        return Err(unusable(what, name, "holds no certificate"));
    }
    Ok(certificates)
}

fn unusable(what: &str, name: &str, problem: &str) -> LockError {
    LockError::new(ErrorCode::ProviderFailed, format!("{what}: the {name} file {problem}"))
        .with_fix(format!("Point {name} in {what} at a readable PEM file."))
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for MakeRustls {
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    /// Asked for every connection, TLS or not (`sslmode=disable` never
    /// connects it): a host that is no server name (a Unix-domain
    /// socket's is empty) fails only a handshake that is tried.
    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnect> {
        Ok(RustlsConnect { connector: self.connector.clone(), name: ServerName::try_from(domain.to_owned()).ok() })
    }
}

/// The TLS handshake of one connection.
pub(crate) struct RustlsConnect {
    connector: Option<TlsConnector>,
    name: Option<ServerName<'static>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for RustlsConnect {
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let connector = self.connector.ok_or_else(|| io::Error::other("this connection has no TLS (sslmode=disable)"))?;
            let name = self.name.ok_or_else(|| io::Error::other("the host is not a valid TLS server name"))?;
            Ok(RustlsStream(connector.connect(name, stream).await?))
        })
    }
}

/// A TLS link, as tokio-postgres reads and writes it.
pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    /// `tls-server-end-point` (RFC 5929), what PostgreSQL offers for
    /// `SCRAM-SHA-256-PLUS`: it ties the password exchange to this TLS
    /// link, so that a party in the middle holding a certificate the
    /// client accepts (`sslmode=require` checks none) cannot relay the
    /// login. With `channel_binding=require` in the URL a server that
    /// cannot bind is refused.
    fn channel_binding(&self) -> ChannelBinding {
        let certificate = self.0.get_ref().1.peer_certificates().and_then(|chain| chain.first());
        certificate.and_then(|der| end_point_hash(der)).map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

/// The `tls-server-end-point` binding of a certificate (DER): its hash by
/// the hash function of its signature algorithm, SHA-256 for MD5 and SHA-1
/// (RFC 5929 §4.1). `None` for an algorithm with no such hash (Ed25519,
/// RSASSA-PSS, whose hash is in its parameters), as PostgreSQL 15's
/// server has none for them either; SCRAM then runs without `-PLUS`.
fn end_point_hash(der: &[u8]) -> Option<Vec<u8>> {
    use sha2::{Digest, Sha256, Sha384, Sha512};
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, ... };
    // AlgorithmIdentifier ::= SEQUENCE { algorithm OBJECT IDENTIFIER, ... }.
    let (certificate, _) = der_element(der, 0x30)?;
    let (_, after_tbs) = der_element(certificate, 0x30)?;
    let (algorithm, _) = der_element(after_tbs, 0x30)?;
    let (oid, _) = der_element(algorithm, 0x06)?;
    let (last, arcs) = oid.split_last()?;
    Some(match (arcs, last) {
        // md5, sha1 and sha256WithRSAEncryption; ecdsa-with-SHA1, -SHA256.
        (RSA_PKCS1, 0x04 | 0x05 | 0x0b) | (ECDSA, 0x01) | (ECDSA_SHA2, 0x02) => Sha256::digest(der).to_vec(),
        (RSA_PKCS1, 0x0c) | (ECDSA_SHA2, 0x03) => Sha384::digest(der).to_vec(),
        (RSA_PKCS1, 0x0d) | (ECDSA_SHA2, 0x04) => Sha512::digest(der).to_vec(),
        _ => return None,
    })
}

/// 1.2.840.113549.1.1 (PKCS #1), without its last arc.
const RSA_PKCS1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
/// 1.2.840.10045.4 (ECDSA signatures; ecdsa-with-SHA1 is its arc 1).
const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
/// ecdsa-with-SHA2 (1.2.840.10045.4.3), without its last arc.
const ECDSA_SHA2: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];

/// The contents of the DER element at the start of `bytes`, which must
/// have tag `tag`, and what follows it.
fn der_element(bytes: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    if found != tag {
        return None;
    }
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // The long form: the next `first & 0x7f` bytes, big-endian.
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (digits, rest) = rest.split_at(count);
        (digits.iter().fold(0usize, |length, digit| length << 8 | usize::from(*digit)), rest)
    };
    (rest.len() >= length).then(|| rest.split_at(length))
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// `sslmode=verify-ca`: the chain must lead to a trusted authority; the
/// name in the certificate is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
