//! A loopback TCP proxy that delays every byte by a latency in each
//! direction (a delay line: throughput is unchanged, only later). The
//! latency can change while it runs; bytes keep their order, so a long
//! latency for a moment stalls a connection until those bytes are through.
//!
//! It can also hold every byte (`hold`: connections stay open, nothing goes
//! through until `release`), as a replication link that lags does, and be
//! pointed at another upstream (`retarget`: open connections are cut, new
//! ones go to the new upstream), as a failover moves clients. And it can
//! drop a client while still delivering, late, a chunk it read from it
//! (`stall`), as a proxy that cuts its client side does with what it had
//! already taken in.

#![allow(dead_code)] // the fault suite and tests/redis_fences.rs use different parts

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What every connection of one proxy reads while it forwards.
struct Flow {
    latency_us: AtomicU64,
    held: AtomicBool,
    stop: AtomicBool,
    /// Armed stalls, each for the next client chunk that contains its pattern.
    stalls: Mutex<Vec<Arc<Stall>>>,
}

/// One client chunk the proxy keeps from its server (see [`Proxy::stall`]).
pub struct Stall {
    pattern: Vec<u8>,
    caught: AtomicBool,
    delivered: AtomicBool,
}

impl Stall {
    /// True once a chunk was caught (and its client cut).
    pub fn caught(&self) -> bool {
        self.caught.load(Ordering::SeqCst)
    }

    /// Sends the caught chunk on to the server, then closes the server's end.
    pub fn deliver(&self) {
        self.delivered.store(true, Ordering::SeqCst);
    }
}

impl Flow {
    /// The armed stall whose pattern `chunk` contains, disarmed.
    fn stall_for(&self, chunk: &[u8]) -> Option<Arc<Stall>> {
        let mut stalls = self.stalls.lock().unwrap();
        let at = stalls.iter().position(|stall| chunk.windows(stall.pattern.len()).any(|window| window == stall.pattern))?;
        Some(stalls.remove(at))
    }
}

pub struct Proxy {
    port: u16,
    upstream: Arc<AtomicU16>,
    flow: Arc<Flow>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    /// Proxies a new loopback port to `127.0.0.1:upstream`.
    pub fn start(upstream: u16, latency: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let flow = Arc::new(Flow {
            latency_us: AtomicU64::new(latency.as_micros() as u64),
            held: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            stalls: Mutex::new(Vec::new()),
        });
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (upstream, flow, sockets) = (upstream.clone(), flow.clone(), sockets.clone());
            thread::spawn(move || {
                while !flow.stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            client.set_nonblocking(false).unwrap();
                            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream.load(Ordering::Relaxed))) else { continue };
                            for socket in [&client, &server] {
                                socket.set_nodelay(true).unwrap();
                                sockets.lock().unwrap().push(socket.try_clone().unwrap());
                            }
                            pump(client.try_clone().unwrap(), server.try_clone().unwrap(), flow.clone(), client.try_clone().ok());
                            pump(server, client, flow.clone(), None);
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Proxy { port, upstream, flow, sockets, acceptor: Some(acceptor) }
    }

    /// The latency of bytes read from now on.
    pub fn set_latency(&self, latency: Duration) {
        self.flow.latency_us.store(latency.as_micros() as u64, Ordering::Relaxed);
    }

    /// Stops forwarding: every byte read from now on (and any not yet
    /// written) waits, connections stay open, until [`Proxy::release`].
    pub fn hold(&self) {
        self.flow.held.store(true, Ordering::SeqCst);
    }

    pub fn release(&self) {
        self.flow.held.store(false, Ordering::SeqCst);
    }

    /// New connections go to `127.0.0.1:upstream`; the open ones are cut
    /// (their clients see the connection drop and reconnect).
    pub fn retarget(&self, upstream: u16) {
        self.upstream.store(upstream, Ordering::SeqCst);
        self.cut();
    }

    /// New connections go to `127.0.0.1:upstream`; the open ones stay
    /// where they were (a DNS name or a load balancer that follows a
    /// failover: a client's open connection to the old primary lives on).
    pub fn redirect(&self, upstream: u16) {
        self.upstream.store(upstream, Ordering::SeqCst);
    }

    /// The next chunk a client sends that contains `pattern` is kept from
    /// the server and that client's connection is cut (it sees it drop),
    /// while the server's end stays open; [`Stall::deliver`] sends the chunk
    /// on and then closes the server's end: a proxy that dropped its client
    /// but still delivers, late, what it had read from it.
    pub fn stall(&self, pattern: &[u8]) -> Arc<Stall> {
        let stall = Arc::new(Stall { pattern: pattern.to_vec(), caught: AtomicBool::new(false), delivered: AtomicBool::new(false) });
        self.flow.stalls.lock().unwrap().push(stall.clone());
        stall
    }

    /// Cuts every open connection (both directions).
    pub fn cut(&self) {
        for socket in self.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// Copies `from` to `to`, each chunk the current latency after it was read,
/// and not while the proxy holds its bytes; `client` (the client's socket,
/// for its chunks to the server) is cut when a chunk of it is stalled.
fn pump(mut from: TcpStream, mut to: TcpStream, flow: Arc<Flow>, client: Option<TcpStream>) {
    let (sender, receiver) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_flow = flow.clone();
    thread::spawn(move || {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer) {
            let due = Instant::now() + Duration::from_micros(reader_flow.latency_us.load(Ordering::Relaxed));
            if sender.send((due, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    thread::spawn(move || {
        for (due, chunk) in receiver {
            thread::sleep(due.saturating_duration_since(Instant::now()));
            while flow.held.load(Ordering::SeqCst) && !flow.stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(1));
            }
            if let Some((client, stall)) = client.as_ref().and_then(|client| Some((client, flow.stall_for(&chunk)?))) {
                let _ = client.shutdown(Shutdown::Both);
                stall.caught.store(true, Ordering::SeqCst);
                while !stall.delivered.load(Ordering::SeqCst) && !flow.stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            if flow.stop.load(Ordering::Relaxed) || to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flow.stop.store(true, Ordering::Relaxed);
        self.cut();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}
