//! A connection URL, as tokio-postgres reads it, with libpq's TLS settings
//! looked at first: the driver has no TLS yet, so a URL that asks for it
//! (`sslmode=require` and stricter) is refused at open instead of being
//! connected in the clear or failing on every statement.

use std::str::FromStr;

use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

use crate::error::{ErrorCode, LockError, Result};

/// The client settings of `url` (`what`: the option that holds it, for
/// messages, which never quote the URL: it may carry a password).
pub(crate) fn config(url: &str, what: &str) -> Result<Config> {
    for (name, value) in query_pairs(url) {
        let tls = match name {
            "sslmode" => !matches!(value, "disable" | "allow" | "prefer"),
            "sslrootcert" | "sslcert" | "sslkey" => true,
            _ => false,
        };
        if tls {
            return Err(LockError::new(
                ErrorCode::ProviderFailed,
                format!("{what}: {name}={value} asks for TLS, which the postgres driver does not support yet"),
            )
            .with_fix(
                "Connect without TLS (sslmode=disable or prefer) on a trusted network, or use driver: redis until postgres TLS lands.",
            ));
        }
    }
    let config = Config::from_str(url).map_err(|err| {
        LockError::new(ErrorCode::ProviderFailed, format!("{what} is not a PostgreSQL connection URL: {err}"))
            .with_fix("Write it as postgres://user:password@host:port/database.")
    })?;
    // Prefer without a TLS connector would try TLS and fall back; say
    // plainly that this link is in the clear.
    let mut config = config;
    config.ssl_mode(SslMode::Disable);
    Ok(config)
}

/// The `name=value` pairs of the URL's query (not decoded: every value we
/// look at is a plain word).
fn query_pairs(url: &str) -> impl Iterator<Item = (&str, &str)> {
    let query = url.split_once('?').map_or("", |(_, query)| query);
    query.split('&').filter_map(|pair| pair.split_once('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_that_asks_for_tls_is_refused_without_showing_the_url() {
        let err = config("postgres://u:secret@h/db?sslmode=verify-full", "connections.main.url").unwrap_err();
        assert_eq!(err.code(), ErrorCode::ProviderFailed);
        assert!(!err.to_string().contains("secret"));
        assert!(config("postgres://u:secret@h/db?sslmode=disable", "url").is_ok());
    }
}
