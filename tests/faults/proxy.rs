//! A loopback TCP proxy that delays every byte by a fixed latency in each
//! direction (a delay line: throughput is unchanged, only later).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub struct Proxy {
    port: u16,
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
        let acceptor = {
            let (stop, sockets) = (stop.clone(), sockets.clone());
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
                            pump(client.try_clone().unwrap(), server.try_clone().unwrap(), latency);
                            pump(server, client, latency);
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Proxy { port, stop, sockets, acceptor: Some(acceptor) }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// Copies `from` to `to`, each chunk `latency` after it was read.
fn pump(mut from: TcpStream, mut to: TcpStream, latency: Duration) {
    let (sender, receiver) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer) {
            if sender.send((Instant::now() + latency, buffer[..n].to_vec())).is_err() {
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
