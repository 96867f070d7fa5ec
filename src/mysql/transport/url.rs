//! A connection URL, `mysql://user:password@host:port/database`, with the
//! MySQL command-line client's TLS settings (`ssl-mode`, `ssl-ca`,
//! `ssl-cert`, `ssl-key`, as its `--ssl-*` options mean them); any other
//! parameter goes to mysql_async. Messages never quote the URL: it may
//! carry a password.

use std::path::PathBuf;

use mysql_async::{ClientIdentity, Opts, OptsBuilder, SslOpts};

use crate::error::{ErrorCode, LockError, Result};
use crate::store::url_query;

/// The MySQL client's `--ssl-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// In the clear.
    Disabled,
    /// TLS when the server offers it, else in the clear; no check of the
    /// certificate (the client's default).
    Preferred,
    /// TLS or nothing; no check of the certificate.
    Required,
    /// TLS, the certificate signed by `ssl-ca`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host of the URL.
    VerifyIdentity,
}

/// What one URL says: the client options (TLS included) and the mode.
#[derive(Clone)]
pub(crate) struct Target {
    pub opts: Opts,
    pub mode: SslMode,
    /// The user, for messages (never the password).
    pub user: String,
    /// The database, for messages and the `GRANT` a fix names.
    pub database: String,
    /// The files of `ssl-ca`, `ssl-cert` and `ssl-key` given: the
    /// parameter and the path.
    pub files: Vec<(&'static str, PathBuf)>,
}

impl Target {
    /// The options without TLS: `PREFERRED`'s second try, when the server
    /// has none.
    pub fn in_the_clear(&self) -> Opts {
        OptsBuilder::from_opts(self.opts.clone()).ssl_opts(None::<SslOpts>).into()
    }

    /// The options with the server's certificate checked for `name` in
    /// place of the URL's host: `VERIFY_CA`'s second try (see
    /// `super::tls::open`).
    pub fn under_name(&self, name: String) -> Opts {
        let ssl = self.opts.ssl_opts().cloned().map(|ssl| ssl.with_danger_tls_hostname_override(Some(name)));
        OptsBuilder::from_opts(self.opts.clone()).ssl_opts(ssl).into()
    }
}

/// Reads `url` (`what`: the option that holds it, for messages).
pub(crate) fn target(url: &str, what: &str) -> Result<Target> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut mode, mut ca, mut cert, mut key) = (None, None, None, None);
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || url_query::decoded(name, value).map_err(|problem| invalid(what, &problem));
        match name {
            "ssl-mode" => mode = Some(value.to_ascii_uppercase()),
            "ssl-ca" => ca = Some(decoded()?),
            "ssl-cert" => cert = Some(decoded()?),
            "ssl-key" => key = Some(decoded()?),
            _ => rest.push(pair),
        }
    }
    // The client's rule: ssl-ca without ssl-mode means VERIFY_CA.
    let mode = match mode.as_deref().unwrap_or(if ca.is_some() { "VERIFY_CA" } else { "PREFERRED" }) {
        "DISABLED" => SslMode::Disabled,
        "PREFERRED" => SslMode::Preferred,
        "REQUIRED" => SslMode::Required,
        "VERIFY_CA" => SslMode::VerifyCa,
        "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
        _ => return Err(invalid(what, "ssl-mode must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY")),
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyIdentity) && ca.is_none() {
        return Err(LockError::new(
            ErrorCode::ProviderFailed,
            format!("{what}: ssl-mode={mode:?} needs ssl-ca, the authority to check the server's certificate against"),
        )
        .with_fix(format!("Add ssl-ca=/path/ca.pem to {what}, or lower ssl-mode (as the mysql client).")));
    }
    if cert.is_some() != key.is_some() {
        return Err(invalid(what, "ssl-cert and ssl-key go together: give both or neither"));
    }
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    let opts = Opts::from_url(&url).map_err(|err| invalid(what, &format!("not a MySQL connection URL: {err}")))?;
    let user = opts.user().unwrap_or("").to_owned();
    let database = opts.db_name().unwrap_or("").to_owned();
    if database.is_empty() {
        return Err(invalid(what, "names no database: the lock tables live in the URL's database"));
    }
    let mut files = Vec::new();
    let ssl = match mode {
        SslMode::Disabled => None,
        _ => {
            let mut ssl = SslOpts::default();
            if let Some(ca) = ca {
                let ca = PathBuf::from(ca);
                ssl = ssl.with_root_certs(vec![ca.clone().into()]).with_disable_built_in_roots(true);
                files.push(("ssl-ca", ca));
            }
            if let (Some(cert), Some(key)) = (cert, key) {
                let (cert, key) = (PathBuf::from(cert), PathBuf::from(key));
                ssl = ssl.with_client_identity(Some(ClientIdentity::new(cert.clone().into(), key.clone().into())));
                files.extend([("ssl-cert", cert), ("ssl-key", key)]);
            }
            match mode {
                SslMode::Preferred | SslMode::Required => ssl.with_danger_accept_invalid_certs(true),
                SslMode::VerifyCa => ssl.with_danger_skip_domain_validation(true),
                _ => ssl,
            }
            .into()
        }
    };
    // No statement cache (every statement is text, nothing prepared), no
    // switch to the server's Unix socket behind the URL's back.
    let opts = OptsBuilder::from_opts(opts).ssl_opts(ssl).stmt_cache_size(0).prefer_socket(false).into();
    Ok(Target { opts, mode, user, database, files })
}

fn invalid(what: &str, problem: &str) -> LockError {
    LockError::new(ErrorCode::ProviderFailed, format!("{what}: {problem}"))
        .with_fix("Write it as mysql://user:password@host:port/database[?ssl-mode=VERIFY_IDENTITY&ssl-ca=/path/ca.pem].")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_are_the_mysql_clients() {
        let read = target("mysql://u:secret@h:3307/db?ssl-mode=verify_identity&ssl-ca=%2Ftmp%2Fca.pem", "url").unwrap();
        assert_eq!(read.mode, SslMode::VerifyIdentity);
        assert_eq!((read.user.as_str(), read.database.as_str(), read.opts.tcp_port()), ("u", "db", 3307));
        assert!(read.opts.ssl_opts().is_some());
        assert_eq!(target("mysql://u@h/db?ssl-ca=/tmp/ca.pem", "url").unwrap().mode, SslMode::VerifyCa);
        assert_eq!(target("mysql://u@h/db", "url").unwrap().mode, SslMode::Preferred);
        assert!(target("mysql://u@h/db?ssl-mode=DISABLED", "url").unwrap().opts.ssl_opts().is_none());
        let err = target("mysql://u:secret@h/db?ssl-mode=VERIFY_CA", "connections.main.url").err().unwrap();
        assert!(!err.to_string().contains("secret"));
        let err = target("mysql://u:secret@h/db?ssl-mode=bogus", "connections.main.url").err().unwrap();
        assert!(!err.to_string().contains("secret"));
        assert!(target("mysql://u:secret@h", "url").is_err());
    }
}
