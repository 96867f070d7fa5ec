//! The TCP side of every link to Redis: `TCP_NODELAY`, so a small command is
//! never held back waiting for the ACK of the previous one (Nagle's
//! algorithm costs a hand-off tens of ms), and keepalive probes, so a peer
//! that vanished without closing (the pub/sub connection is otherwise
//! silent) is noticed within about 30 s.
//!
//! A system may refuse part of the keepalive: Windows before 10 version
//! 1703 (and Wine) has no `TCP_KEEPCNT` and answers `WSAENOPROTOOPT`. That
//! must not cost the connection: the driver sets the fullest keepalive the
//! system takes (every setting; then without the probe count, left to the
//! system; then the idle time alone; then none), decided once per process,
//! and says once in the log what it left out.

use std::io;
use std::sync::OnceLock;
use std::time::Duration;

use redis::io::tcp::socket2::{Domain, SockRef, Socket, TcpKeepalive, Type};

/// The keepalive the driver asks for, fullest first, each with what it
/// leaves out compared with the first.
fn levels() -> [(TcpKeepalive, &'static str); 3] {
    let time = TcpKeepalive::new().with_time(Duration::from_secs(15));
    let interval = time.clone().with_interval(Duration::from_secs(5));
    [
        (interval.clone().with_retries(3), ""),
        (interval, "probe count (TCP_KEEPCNT)"),
        (time, "probe count and interval (TCP_KEEPCNT, TCP_KEEPINTVL)"),
    ]
}

/// What the system took: the index in [`levels`] (`levels().len()`: no
/// keepalive at all), and what it refused, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chosen {
    level: usize,
    /// What was left out and why; `None` when everything was taken.
    pub refused: Option<String>,
}

static CHOSEN: OnceLock<Chosen> = OnceLock::new();

/// Tries each level with `set` until one is taken.
fn choose(mut set: impl FnMut(&TcpKeepalive) -> io::Result<()>) -> Chosen {
    let levels = levels();
    let mut first_error = None;
    for (level, (keepalive, left_out)) in levels.iter().enumerate() {
        match set(keepalive) {
            Ok(()) => {
                let refused = first_error
                    .map(|err| format!("the system refused the TCP keepalive {left_out} ({err}); keepalive is on with the system's own"));
                return Chosen { level, refused };
            }
            Err(err) => first_error = first_error.or(Some(err)),
        }
    }
    let err = first_error.map_or_else(String::new, |err| err.to_string());
    Chosen {
        level: levels.len(),
        refused: Some(format!("the system refused TCP keepalive ({err}); a vanished server is noticed by commandTimeoutMs only")),
    }
}

/// The keepalive this process's system takes, decided once on a socket of
/// its own; the second value is true for the one call that decided it
/// (which logs what was refused).
pub(crate) fn chosen() -> (&'static Chosen, bool) {
    let mut decided = false;
    let chosen = CHOSEN.get_or_init(|| {
        decided = true;
        match Socket::new(Domain::IPV4, Type::STREAM, None) {
            Ok(socket) => choose(|keepalive| socket.set_tcp_keepalive(keepalive)),
            // No probe socket: decide on the first real one (all levels tried there).
            Err(_) => Chosen { level: 0, refused: None },
        }
    });
    (chosen, decided)
}

/// The keepalive to hand to redis-rs for links it makes itself.
pub(crate) fn keepalive() -> Option<TcpKeepalive> {
    levels().into_iter().nth(chosen().0.level).map(|(keepalive, _)| keepalive)
}

/// Sets `TCP_NODELAY` and the chosen keepalive on `stream` (a lesser one
/// if this socket refuses it). Fails only if `TCP_NODELAY` does.
pub(crate) fn configure(stream: &tokio::net::TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = SockRef::from(stream);
    let levels = levels();
    let from = chosen().0.level;
    for (keepalive, _) in levels.iter().skip(from) {
        if socket.set_tcp_keepalive(keepalive).is_ok() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WSAENOPROTOOPT, as Windows before 10 version 1703 answers TCP_KEEPCNT.
    fn no_keepcnt() -> io::Error {
        io::Error::other("An unknown, invalid, or unsupported option or level was specified (os error 10042)")
    }

    #[test]
    fn a_system_that_takes_every_setting_gets_them_all_and_nothing_is_logged() {
        assert_eq!(choose(|_| Ok(())), Chosen { level: 0, refused: None });
    }

    #[test]
    fn a_refused_probe_count_keeps_the_rest_of_the_keepalive_and_says_what_was_left_out() {
        let mut calls = 0;
        let chosen = choose(|_| {
            calls += 1;
            if calls == 1 {
                Err(no_keepcnt())
            } else {
                Ok(())
            }
        });
        assert_eq!(chosen.level, 1);
        let refused = chosen.refused.unwrap();
        assert!(refused.contains("TCP_KEEPCNT") && refused.contains("10042"), "{refused}");
    }

    #[test]
    fn a_system_that_refuses_every_keepalive_still_connects_without_one() {
        let chosen = choose(|_| Err(no_keepcnt()));
        assert_eq!(chosen.level, levels().len());
        assert!(chosen.refused.unwrap().contains("refused TCP keepalive"));
    }
}
