//! The keys a server's certificate may have. The server signs the TLS
//! handshake with its certificate's key, and rustls (ring) checks that
//! signature on every link, also one told to take any certificate (redis'
//! `#insecure`, postgres' `sslmode=require`, mysql's `REQUIRED`), so a key
//! it cannot check is refused there too. Every driver says so in the same
//! words, which name the keys it takes: "lower the mode" or "trust the
//! authority" would not help.
//!
//! rustls answers `BadSignature` both for such a handshake signature and
//! for a chain whose certificate another key signed (an authority of the
//! same name), so the verifiers the drivers make mark the first
//! ([`Signed`]); a link whose verifier is not ours can tell them apart only
//! where it checks no chain ([`refused_signature`]).

use rustls::CertificateError;

#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) use signed::{uncheckable, Signed};

/// The verifiers the drivers make themselves (redis, postgres) mark their
/// refusals of the handshake's signature.
#[cfg(any(feature = "redis", feature = "postgres"))]
mod signed {
    use std::fmt;
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};

    use super::refused_signature;

    /// A verifier whose refusals of the handshake's signature are marked so
    /// that [`uncheckable`] finds them.
    #[derive(Debug)]
    pub(crate) struct Signed(pub Arc<dyn ServerCertVerifier>);

    impl ServerCertVerifier for Signed {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss).map_err(mark)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss).map_err(mark)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }

    /// The handshake's signature refused (rustls' error kept as the cause).
    #[derive(Debug)]
    struct UncheckableKey(rustls::Error);

    impl fmt::Display for UncheckableKey {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the handshake's signature could not be checked with the certificate's key")
        }
    }

    impl std::error::Error for UncheckableKey {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn mark(err: rustls::Error) -> rustls::Error {
        if refused_signature(&err) {
            return rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(UncheckableKey(err)))));
        }
        err
    }

    /// True when a [`Signed`] verifier refused the handshake's signature.
    pub(crate) fn uncheckable(err: &rustls::Error) -> bool {
        matches!(err, rustls::Error::InvalidCertificate(CertificateError::Other(other)) if other.0.downcast_ref::<UncheckableKey>().is_some())
    }
}

/// True when `err` refused a signature: the handshake's, on a link that
/// checks no chain.
pub(crate) fn refused_signature(err: &rustls::Error) -> bool {
    matches!(
        err,
        rustls::Error::InvalidCertificate(
            CertificateError::BadSignature
                | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
                | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. }
        )
    )
}

/// What was wrong with such a certificate.
pub(crate) const UNCHECKABLE: &str =
    "a signature made with its key could not be checked (a key of a kind or size this client does not take)";

/// The fix; `unchecked`: the setting of the driver that takes any issuer
/// and name (but not any key).
pub(crate) fn fix(unchecked: &str) -> String {
    format!(
        "Give the server a certificate whose key is RSA of 2048 to 8192 bits, ECDSA P-256 or P-384, or Ed25519 ({unchecked} takes any issuer and name, not any key)."
    )
}
