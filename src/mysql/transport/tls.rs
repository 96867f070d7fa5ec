//! What TLS to MySQL needs beyond mysql_async's options: the second tries
//! of a connection (`PREFERRED` in the clear when the server has no TLS;
//! `VERIFY_CA` under a name the certificate carries), and rustls's reason
//! for a failed handshake, which mysql_async passes up as an I/O error,
//! alike to a network's.

use std::error::Error;
use std::net::IpAddr;

use mysql_async::Conn;
use rustls::CertificateError;

use super::url::{SslMode, Target};
use crate::store::error_chain;

/// A new connection to `target`, under its `ssl-mode`, its files checked
/// first.
///
/// `VERIFY_CA` checks the chain, not the name: mysql_async's
/// `skip_domain_validation` should let a certificate for another name
/// through, but it looks for `NotValidForName` in the error's text, which
/// rustls 0.23 no longer writes (mysql_async 0.37.1; its issue 404), so
/// such a certificate fails. Its chain was checked before its name (webpki
/// checks the name last), and the second try checks the chain again, under
/// a name the certificate carries.
pub(crate) async fn open(target: &Target) -> Result<Conn, mysql_async::Error> {
    // mysql_async reads them at each connection, and passes a file that
    // cannot be read up as an I/O error, which reads as the server down.
    for (parameter, path) in &target.files {
        if let Err(cause) = std::fs::File::open(path) {
            return Err(mysql_async::Error::Other(Box::new(UnreadableFile { parameter, cause })));
        }
    }
    match Conn::new(target.opts.clone()).await {
        Err(mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer)) if target.mode == SslMode::Preferred => {
            Conn::new(target.in_the_clear()).await
        }
        Err(err) if target.mode == SslMode::VerifyCa => match carried_name(&err) {
            Some(name) => Conn::new(target.under_name(name)).await,
            None => Err(err),
        },
        outcome => outcome,
    }
}

/// A file of the TLS settings that cannot be opened: its parameter (e.g.
/// `ssl-ca`) and why.
#[derive(Debug)]
pub(crate) struct UnreadableFile {
    pub parameter: &'static str,
    pub cause: std::io::Error,
}

impl std::fmt::Display for UnreadableFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} file cannot be read: {}", self.parameter, self.cause)
    }
}

impl Error for UnreadableFile {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.cause)
    }
}

/// rustls's error in `err`, when a TLS handshake (or the first reads over
/// it: under TLS 1.3 a server refuses a client certificate after the
/// client's part of the handshake is done) failed: the server answered.
pub(crate) fn handshake_failure(err: &mysql_async::Error) -> Option<&rustls::Error> {
    // rustls's errors in making the configuration, before any handshake.
    if matches!(err, mysql_async::Error::Io(mysql_async::IoError::Tls(_))) {
        return None;
    }
    error_chain::find_in_chain(err)
}

/// A name the server's certificate carries, when `err` refused it for not
/// naming the host: webpki lists them as `DnsName("db.example")` and
/// `IpAddress(10.0.0.5)`. A wildcard matches any one label.
fn carried_name(err: &mysql_async::Error) -> Option<String> {
    let Some(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { presented, .. })) = handshake_failure(err) else {
        return None;
    };
    presented.iter().find_map(|name| {
        if let Some(dns) = name.strip_prefix("DnsName(\"").and_then(|rest| rest.strip_suffix("\")")) {
            return Some(dns.strip_prefix("*.").map_or_else(|| dns.to_owned(), |parent| format!("any.{parent}")));
        }
        let ip = name.strip_prefix("IpAddress(")?.strip_suffix(')')?;
        ip.parse::<IpAddr>().is_ok().then(|| ip.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mismatch(presented: &[&str]) -> mysql_async::Error {
        let rustls = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: rustls::pki_types::ServerName::try_from("10.0.0.9").unwrap(),
            presented: presented.iter().map(|name| (*name).to_owned()).collect(),
        });
        mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, rustls)))
    }

    #[test]
    fn a_certificate_s_names_are_read_from_webpki_s_list() {
        assert_eq!(carried_name(&mismatch(&["DnsName(\"db.example\")", "IpAddress(10.0.0.5)"])).as_deref(), Some("db.example"));
        assert_eq!(carried_name(&mismatch(&["DirectoryName", "IpAddress(10.0.0.5)"])).as_deref(), Some("10.0.0.5"));
        assert_eq!(carried_name(&mismatch(&["DnsName(\"*.db.example\")"])).as_deref(), Some("any.db.example"));
        assert_eq!(carried_name(&mismatch(&[])), None);
        let other = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
        assert!(handshake_failure(&other).is_none());
    }
}
