//! Opening one link to a node, the same way for every connection the
//! driver makes (commands, release notifications, the sentinels): TCP set
//! up by [`super::tcp`], TLS over it by [`super::tls`] (a `rediss://` URL,
//! `sentinel.tls`), or a unix socket. A TLS failure comes back as the
//! [`Refusal`] it is, not as an unreachable server.
//!
//! Only a unix socket's link is left to redis-rs.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use redis::aio::{MultiplexedConnection, PubSub};
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::addresses;
use super::refusal::{address, Refusal};
use super::tcp;
use super::tls::Tls;
use crate::store::reach::Reach;

/// How one connection's links are made.
pub(crate) struct Links {
    /// `None` for a connection without TLS links.
    tls: Option<Tls>,
}

/// An open link: TLS or not.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Links {
    pub fn new(tls: Option<Tls>) -> Links {
        Links { tls }
    }

    /// A TCP link to `host:port` ([`addresses`]), set up by [`tcp::configure`];
    /// `reach` is told once its socket is up, before that (which may fail
    /// on a socket the peer reset at once).
    pub async fn tcp(host: &str, port: u16, reach: Option<&Reach>) -> io::Result<TcpStream> {
        let stream = addresses::connect(host, port).await?;
        if let Some(reach) = reach {
            reach.socket_up();
        }
        tcp::configure(&stream)?;
        Ok(stream)
    }

    /// A TLS link to `host:port`, verified unless `#insecure` (`None` for
    /// an address that is not TLS); `reach` is told once its socket is up,
    /// before the handshake.
    pub async fn tls(&self, addr: &ConnectionAddr, reach: Option<&Reach>) -> Option<RedisResult<Stream>> {
        let ConnectionAddr::TcpTls { host, port, insecure, .. } = addr else { return None };
        let tls = self.tls.as_ref()?;
        let connect = async {
            let stream = Links::tcp(host, *port, reach).await?;
            tls.connect(host, stream, *insecure).await
        };
        Some(match connect.await {
            Ok(stream) => Ok(Stream::Tls(Box::new(stream))),
            Err(err) => Err(self.explain(addr, RedisError::from(err))),
        })
    }

    /// `err` with the TLS refusal it is (a certificate either side
    /// refused, a failed handshake) when the link to `addr` is TLS.
    pub fn explain(&self, addr: &ConnectionAddr, err: RedisError) -> RedisError {
        let (ConnectionAddr::TcpTls { host, .. }, Some(tls)) = (addr, &self.tls) else { return err };
        if Refusal::find(&err).is_some() {
            return err;
        }
        match tls.refusal(&address(addr), host, &err) {
            Some(refusal) => refusal.into_redis(),
            None => err,
        }
    }

    /// A command connection to `info` over a link of any kind, its reader
    /// on the current runtime (for the sentinels; command connections of
    /// their own are [`super::connection`]'s); `reach` is told once its
    /// socket is up.
    pub async fn command(&self, info: &ConnectionInfo, config: AsyncConnectionConfig, reach: &Reach) -> RedisResult<MultiplexedConnection> {
        let settings = info.redis_settings();
        let addr = info.addr();
        let stream = match addr {
            ConnectionAddr::Tcp(host, port) => Stream::Tcp(Links::tcp(host, *port, Some(reach)).await?),
            _ => match self.tls(addr, Some(reach)).await {
                Some(stream) => stream?,
                None => {
                    // redis-rs made the socket (a unix socket): up, now
                    // that it answered.
                    let connection = redis_client(info.clone())?.get_multiplexed_async_connection_with_config(&config).await?;
                    reach.socket_up();
                    return Ok(connection);
                }
            },
        };
        let (connection, reader) =
            MultiplexedConnection::new_with_config(settings, stream, config).await.map_err(|err| self.explain(addr, err))?;
        tokio::spawn(reader);
        Ok(connection)
    }

    /// A link to `info` of any kind (TCP, TLS, unix socket) for a pub/sub
    /// connection.
    pub async fn pubsub(&self, info: &ConnectionInfo) -> RedisResult<PubSub> {
        let settings = info.redis_settings();
        let addr = info.addr();
        match addr {
            ConnectionAddr::Tcp(host, port) => PubSub::new(settings, Links::tcp(host, *port, None).await?).await,
            _ => match self.tls(addr, None).await {
                Some(stream) => PubSub::new(settings, stream?).await.map_err(|err| self.explain(addr, err)),
                None => redis_client(info.clone())?.get_async_pubsub().await,
            },
        }
    }
}

/// A redis-rs client for `info`, for the links it makes itself (unix
/// sockets), with the keepalive this system takes.
pub(crate) fn redis_client(info: ConnectionInfo) -> RedisResult<Client> {
    let settings = TcpSettings::default().set_nodelay(true);
    let settings = match tcp::keepalive() {
        Some(keepalive) => settings.set_keepalive(keepalive),
        None => settings,
    };
    Client::open(info.set_tcp_settings(settings))
}

/// A node to subscribe on (release notifications, a sentinel's switches).
pub(crate) struct Dial {
    pub links: Arc<Links>,
    pub info: ConnectionInfo,
}

impl Dial {
    /// A pub/sub connection to the node.
    pub async fn get_async_pubsub(&self) -> RedisResult<PubSub> {
        self.links.pubsub(&self.info).await
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(stream) => stream.is_write_vectored(),
            Stream::Tls(stream) => stream.is_write_vectored(),
        }
    }
}
