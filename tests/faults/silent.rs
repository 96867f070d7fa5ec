//! A loopback port that takes every connection and never answers, nor
//! closes one: a server behind a stalled link, as a driver sees it. Each
//! connect of the driver runs out its `connectTimeoutMs` there, the same
//! way on every machine (no blackholed address or firewall rule needed).

#![allow(dead_code)] // each suite uses different parts

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub struct Silent {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Silent {
    /// Listens on a fresh port; the connections stay open until the test
    /// process ends.
    pub fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Silent { port, accepted }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// How many connections it took so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}
