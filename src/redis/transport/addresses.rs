//! Connecting to a host name, which may resolve to several addresses.
//! Tokio, like the standard library, tries them one after another, each
//! until it fails: a first address that silently drops packets uses up the
//! whole `connectTimeoutMs`, and the connect reads unreachable while the
//! server answers on the next one (review R36: a `fallBack` policy would
//! move a key another process holds there). RFC 8305 ("Happy Eyeballs")
//! staggers them by 250 ms instead, which still hides the third address
//! from a `connectTimeoutMs` of 500 (review R37). So every address is
//! tried at once, each with the whole connect time; the first socket up
//! wins and the others are closed. A name has a few addresses, and a
//! connection is made once and kept.

use std::io;
use std::net::SocketAddr;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::net::TcpStream;

use crate::store::reach::no_sign_of_down;

/// A TCP socket to `host:port`: to the first of its addresses that takes it.
pub(crate) async fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    first_up(&addrs).await
}

/// A socket to the first of `addrs` that takes one. When none does, the
/// error of one that said the most: one that is no sign its server is
/// down (a reset after the handshake, say) over one that is.
async fn first_up(addrs: &[SocketAddr]) -> io::Result<TcpStream> {
    let mut trying: FuturesUnordered<_> = addrs.iter().map(|addr| TcpStream::connect(*addr)).collect();
    let mut failure: Option<io::Error> = None;
    while let Some(tried) = trying.next().await {
        match tried {
            Ok(stream) => return Ok(stream),
            Err(err) => {
                failure = Some(match failure {
                    Some(kept) if no_sign_of_down(&kept) => kept,
                    _ => err,
                })
            }
        }
    }
    Err(failure.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the name resolved to no address")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A listener whose accept queue is full: a SYN to it gets no answer,
    /// as from a host that drops packets. Keep the streams.
    fn silent() -> (std::net::TcpListener, Vec<std::net::TcpStream>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut kept = Vec::new();
        while let Ok(stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            kept.push(stream);
            assert!(kept.len() < 10_000, "the accept queue never filled");
        }
        (listener, kept)
    }

    fn refused() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    }

    #[tokio::test]
    async fn a_first_address_that_drops_packets_does_not_hide_the_next_one() {
        let (dropping, _kept) = silent();
        let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = [dropping.local_addr().unwrap(), up.local_addr().unwrap()];
        let stream = tokio::time::timeout(Duration::from_secs(10), first_up(&addrs)).await.expect("connected before the timeout").unwrap();
        assert_eq!(stream.peer_addr().unwrap(), addrs[1]);
    }

    #[tokio::test]
    async fn a_refused_address_gives_way_to_the_next_at_once_and_all_refused_fails_refused() {
        let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = first_up(&[refused(), up.local_addr().unwrap()]).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap(), up.local_addr().unwrap());
        let err = first_up(&[refused(), refused()]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        assert_eq!(first_up(&[]).await.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
