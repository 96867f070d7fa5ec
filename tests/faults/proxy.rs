//! A loopback TCP proxy that delays every byte by a latency in each
//! direction (a delay line: throughput is unchanged, only later). The
//! latency can change while it runs; bytes keep their order, so a long
//! latency for a moment stalls a connection until those bytes are through.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub struct Proxy {
    port: u16,
    latency_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    /// Proxies a new loopback port to `127.0.0.1:upstream`.
    pub fn start(upstream: u16, latency: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let latency_us = Arc::new(AtomicU64::new(latency.as_micros() as u64));
        let acceptor = {
            let (stop, sockets, latency) = (stop.clone(), sockets.clone(), latency_us.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            client.set_nonblocking(false).unwrap();
                            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                            for socket in [&client, &server] {
                                socket.set_nodelay(true).unwrap();
                                sockets.lock().unwrap().push(socket.try_clone().unwrap());
                            }
                            pump(client.try_clone().unwrap(), server.try_clone().unwrap(), latency.clone());
                            pump(server, client, latency.clone());
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Proxy { port, latency_us, stop, sockets, acceptor: Some(acceptor) }
    }

    /// The latency of bytes read from now on.
    pub fn set_latency(&self, latency: Duration) {
        self.latency_us.store(latency.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// Copies `from` to `to`, each chunk the current latency after it was read.
fn pump(mut from: TcpStream, mut to: TcpStream, latency: Arc<AtomicU64>) {
    let (sender, receiver) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer) {
            let due = Instant::now() + Duration::from_micros(latency.load(Ordering::Relaxed));
            if sender.send((due, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    thread::spawn(move || {
        for (due, chunk) in receiver {
            thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for socket in self.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}
