//! A connection URL: libpq's TLS settings (`sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`) are read here (tokio-postgres knows only part of
//! them), the rest by tokio-postgres. Messages never quote the URL: it may
//! carry a password.

use std::str::FromStr;

use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

use super::tls::{TlsSettings, Verify};
use crate::error::{ErrorCode, LockError, Result};
use crate::store::url_query;

/// The client settings of `url` and its TLS settings (`what`: the option
/// that holds it, for messages).
pub(crate) fn config(url: &str, what: &str) -> Result<(Config, TlsSettings)> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut tls = TlsSettings::default();
    let mut sslmode = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || url_query::decoded(name, value).map_err(|problem| invalid(what, &problem));
        match name {
            "sslmode" => sslmode = Some(value.to_owned()),
            "sslrootcert" => tls.root_cert = Some(decoded()?),
            "sslcert" => tls.cert = Some(decoded()?),
            "sslkey" => tls.key = Some(decoded()?),
            _ => rest.push(pair),
        }
    }
    // libpq 16: sslrootcert=system makes verify-full the default and
    // refuses any weaker mode.
    let system = tls.root_cert.as_deref() == Some("system");
    let sslmode = sslmode.unwrap_or_else(|| if system { "verify-full" } else { "prefer" }.to_owned());
    if system && sslmode != "verify-full" {
        return Err(invalid(what, &format!("sslrootcert=system needs sslmode=verify-full, not {sslmode} (as libpq)")));
    }
    let mode;
    (mode, tls.verify, tls.allow) = match sslmode.as_str() {
        "disable" => (SslMode::Disable, None, false),
        // In the clear first, TLS when the server refuses that.
        "allow" => (SslMode::Disable, Some(Verify::Nothing), true),
        "prefer" => (SslMode::Prefer, Some(Verify::Nothing), false),
        "require" => (SslMode::Require, Some(Verify::Nothing), false),
        "verify-ca" => (SslMode::Require, Some(Verify::Authority), false),
        "verify-full" => (SslMode::Require, Some(Verify::Name), false),
        _ => return Err(invalid(what, "sslmode must be disable, allow, prefer, require, verify-ca or verify-full")),
    };
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    let mut config = Config::from_str(&url).map_err(|err| invalid(what, &format!("not a PostgreSQL connection URL: {err}")))?;
    // libpq uses no TLS on a Unix-domain socket, whatever sslmode says
    // (the server refuses it there).
    if unix_sockets_only(&config) {
        return Ok((config.ssl_mode(SslMode::Disable).clone(), TlsSettings::default()));
    }
    config.ssl_mode(mode);
    if tls.verify.is_none() {
        tls = TlsSettings::default();
    } else if tls.root_cert.is_none() {
        // libpq's default authorities: ~/.postgresql/root.crt when it
        // exists (then every mode checks the chain, as with sslrootcert);
        // verify-ca and verify-full refuse to run without one.
        let default = std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".postgresql").join("root.crt"));
        match default.filter(|file| file.is_file()) {
            Some(file) => tls.root_cert = Some(file.to_string_lossy().into_owned()),
            None if tls.verify != Some(Verify::Nothing) => {
                return Err(LockError::new(
                    ErrorCode::ProviderFailed,
                    format!("{what}: sslmode={sslmode} needs authorities to check the server's certificate against, and ~/.postgresql/root.crt does not exist"),
                )
                .with_fix(format!(
                    "Add sslrootcert=/path/ca.pem (or sslrootcert=system for the system's authorities) to {what}, or lower sslmode (as libpq)."
                )))
            }
            None => {}
        }
    }
    Ok((config, tls))
}

/// True when every host of `config` is a Unix-domain socket.
fn unix_sockets_only(config: &Config) -> bool {
    #[cfg(unix)]
    return !config.get_hosts().is_empty() && config.get_hosts().iter().all(|host| matches!(host, tokio_postgres::config::Host::Unix(_)));
    // Windows has no Unix-domain hosts in tokio-postgres' config.
    #[cfg(not(unix))]
    return {
        let _ = config;
        false
    };
}

fn invalid(what: &str, problem: &str) -> LockError {
    LockError::new(ErrorCode::ProviderFailed, format!("{what}: {problem}"))
        .with_fix("Write it as postgres://user:password@host:port/database[?sslmode=verify-full&sslrootcert=/path/ca.pem].")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_are_read_and_the_rest_goes_to_tokio_postgres() {
        let (read, tls) =
            config("postgres://u:secret@h/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x", "url").unwrap();
        assert_eq!(tls.verify, Some(Verify::Name));
        assert_eq!(tls.root_cert.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(read.get_application_name(), Some("x"));
        let (_, tls) = config("postgres://u@h/db?sslmode=disable", "url").unwrap();
        assert_eq!(tls.verify, None);
        let err = config("postgres://u:secret@h/db?sslmode=bogus", "connections.main.url").unwrap_err();
        assert_eq!(err.code(), ErrorCode::ProviderFailed);
        assert!(!err.to_string().contains("secret"));
    }
}
