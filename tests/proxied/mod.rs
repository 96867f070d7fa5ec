//! A provider whose statements go through a proxy (tests/faults/proxy.rs)
//! to the machine's MariaDB or PostgreSQL, beside one of "another process"
//! that reaches the server directly: the setting of the reviews that lose
//! or delay a statement with its connection (review_r10, review_r13,
//! review_r15). A test crate that uses it declares `mod mysql`, `mod
//! postgres` and `mod proxy` (tests/faults/proxy.rs).

// Each test crate uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use dokebi_lock::{Backend, Provider};
use futures::executor::block_on;

use super::proxy::Proxy;
use super::{mysql, postgres};

/// The port of a `scheme://user@host:port/db` URL.
pub fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().and_then(|tail| tail.split('/').next()).and_then(|port| port.parse().ok()).unwrap()
}

/// A provider whose statements go through `proxy` to the machine's
/// server, and one (`direct`, another process's) that does not; leases of
/// 30 s, `commandTimeoutMs` 2000.
pub struct Proxied {
    pub proxy: Proxy,
    pub through: Backend,
    pub direct: Backend,
    providers: [Provider; 2],
}

impl Proxied {
    pub fn mysql(table: &mysql::Table) -> Proxied {
        Proxied::mysql_with(table, "")
    }

    /// `fields`: more options of the proxied provider's backend (`, name: value`).
    pub fn mysql_with(table: &mysql::Table, fields: &str) -> Proxied {
        Proxied::mysql_on(table, fields, 2_000)
    }

    /// As [`Proxied::mysql_with`], the proxied provider's statements
    /// answered within `command_timeout_ms`.
    pub fn mysql_on(table: &mysql::Table, fields: &str, command_timeout_ms: u64) -> Proxied {
        let proxy = Proxy::start(port_of(&mysql::url()), Duration::ZERO);
        let config = mysql::yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 30000");
        let proxied = mysql::yaml(&table.0, fields)
            .replace("leaseMs: 5000", "leaseMs: 30000")
            .replace("commandTimeoutMs: 2000", &format!("commandTimeoutMs: {command_timeout_ms}"));
        let through =
            Provider::from_yaml(&proxied.replace(&mysql::url(), &format!("mysql://root@127.0.0.1:{}/test", proxy.port()))).unwrap();
        let direct = Provider::from_yaml(&config).unwrap();
        Proxied {
            proxy,
            through: through.backend("shared").unwrap(),
            direct: direct.backend("shared").unwrap(),
            providers: [through, direct],
        }
    }

    pub fn postgres(schema: &postgres::Schema) -> Proxied {
        Proxied::postgres_with(schema, "")
    }

    /// `lines`: more option lines of the proxied provider's backend.
    pub fn postgres_with(schema: &postgres::Schema, lines: &str) -> Proxied {
        let proxy = Proxy::start(port_of(&postgres::url()), Duration::ZERO);
        let url = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", proxy.port());
        let listen = format!("        listenUrl: '{}'\n", postgres::url());
        let through =
            Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, &format!("        leaseMs: 30000\n{lines}"), &listen)).unwrap();
        let direct = schema.open("        leaseMs: 30000\n");
        Proxied { proxy, through: postgres::backend(&through), direct: postgres::backend(&direct), providers: [through, direct] }
    }

    pub fn close(self) {
        for provider in &self.providers {
            block_on(provider.close());
        }
    }
}
