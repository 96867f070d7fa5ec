//! A connection refused for who we are (credentials, permissions) or for
//! what the server showed (its TLS certificate): the server was reached,
//! so this is never "Redis is unreachable", and the fix names what to
//! change (the user, the option, the authority), never a password.
//!
//! A refusal is found where the context is known (which server, which
//! user, which option) and travels to [`super::connection`] inside the
//! Redis error it explains (see [`Refusal::into_redis`], [`Refusal::find`]).

use std::io;
use std::sync::Arc;

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError};

use crate::store::error_chain::find_in_chain;
pub(crate) use crate::store::Refusal;

impl Refusal {
    /// A Redis error carrying the refusal, for paths typed `RedisResult`.
    pub fn into_redis(self) -> RedisError {
        RedisError::from(io::Error::other(self))
    }

    /// The refusal `err` carries, if any.
    pub fn find(err: &RedisError) -> Option<&Refusal> {
        find_in_chain(err)
    }
}

/// Who a link logs in as, and where: what a credentials refusal names.
#[derive(Debug, Clone)]
pub(crate) struct Login {
    /// `Redis` or `the sentinel`.
    pub role: &'static str,
    /// `host:port` (or the unix socket's path).
    pub server: String,
    /// The ACL user (`default` when none is given).
    pub user: String,
    /// Whether a password is given.
    pub has_password: bool,
    /// The option that sets them, e.g. `connections.main.url`.
    pub option: String,
}

impl Login {
    /// The login of a link to `info`, whose credentials `option` sets.
    pub fn of(info: &ConnectionInfo, role: &'static str, option: String) -> Login {
        let settings = info.redis_settings();
        Login {
            role,
            server: address(info.addr()),
            user: settings.username().unwrap_or("default").to_owned(),
            has_password: settings.password().is_some(),
            option,
        }
    }

    /// The refusal `err` is, when the server refused the credentials
    /// (`WRONGPASS`, a failed `AUTH`), wants some (`NOAUTH`), or the user
    /// lacks a permission (`NOPERM`).
    pub fn refusal(&self, err: &RedisError) -> Option<Refusal> {
        let Login { role, server, user, option, .. } = self;
        let code = err.code().unwrap_or_default();
        let (message, fix) = if code == "NOAUTH" || (code == "WRONGPASS" && !self.has_password) {
            (
                format!("{role} at {server} requires a password and {option} gives none"),
                format!("Put the user and password in {option}; without a user the password is the default user's (requirepass)."),
            )
        } else if code == "WRONGPASS" || err.kind() == ErrorKind::AuthenticationFailed {
            (
                format!("{role} at {server} refused the credentials of user \"{user}\" (a wrong password, or no such enabled user)"),
                format!(
                    "Check the password of user \"{user}\" in {option} against {role}'s (requirepass, or ACL SETUSER {user} on >...); the password is never shown."
                ),
            )
        } else if code == "NOPERM" {
            (
                format!("{role} user \"{user}\" at {server} lacks a permission dokebi-lock needs (the cause names it)"),
                format!(
                    "Grant user \"{user}\" the commands, keys and channels dokebi-lock uses, e.g. ACL SETUSER {user} +@scripting +@read +@write +@pubsub +time +info +wait +cluster|slots ~<namespace>:* &<namespace>:*, or connect as a user that has them."
                ),
            )
        } else {
            return None;
        };
        Some(Refusal { message, fix, cause: Arc::new(err.clone()) })
    }
}

/// `host:port`, or the unix socket's path.
pub(crate) fn address(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Cause;

    #[test]
    fn a_refusal_is_found_inside_the_redis_error_that_carries_it() {
        let cause: Cause = Arc::new(io::Error::other("x"));
        let err = Refusal { message: "m".into(), fix: "f".into(), cause }.into_redis();
        assert_eq!(Refusal::find(&err).map(|refusal| refusal.fix.as_str()), Some("f"));
        assert!(Refusal::find(&RedisError::from(io::Error::other("plain"))).is_none());
    }

    #[test]
    fn a_tls_error_is_found_inside_the_io_error_of_a_redis_error() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let err = RedisError::from(io::Error::new(io::ErrorKind::InvalidData, tls.clone()));
        assert_eq!(find_in_chain::<rustls::Error>(&err), Some(&tls));
    }
}
