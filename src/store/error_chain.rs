//! An error's causes, as the store clients nest them: rustls's errors (and
//! our refusals) travel inside `io::Error`s, whose `source()` skips the
//! error they wrap, so `Error::source` alone never reaches them.

use std::error::Error;
use std::io;
use std::sync::Arc;

/// `err` and its causes, each wrapped error included.
pub(crate) fn causes<'a>(err: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(err), |cause| next(*cause))
}

/// The first error of type `E` among `err` and its causes.
pub(crate) fn find_in_chain<'a, E: Error + 'static>(err: &'a (dyn Error + 'static)) -> Option<&'a E> {
    causes(err).find_map(|cause| cause.downcast_ref::<E>())
}

fn next<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    if let Some(io) = err.downcast_ref::<io::Error>() {
        io.get_ref().map(|inner| inner as &(dyn Error + 'static))
    } else if let Some(shared) = err.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
        // redis-rs keeps an io::Error's cause in an Arc.
        Some(&**shared as &(dyn Error + 'static))
    } else {
        err.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_error_is_found_inside_an_io_error_inside_another_error() {
        #[derive(Debug)]
        struct Outer(io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("outer")
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let err = Outer(io::Error::new(io::ErrorKind::InvalidData, tls.clone()));
        assert_eq!(find_in_chain::<rustls::Error>(&err), Some(&tls));
        assert_eq!(causes(&err).count(), 3);
        assert!(find_in_chain::<rustls::Error>(&Outer(io::Error::other("plain"))).is_none());
    }
}
