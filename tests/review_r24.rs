//! Review R24: an adversarial read of 0b20fc5 (with e106142 and 14947dc),
//! looking for two holders of a key or a repeated fence.
//!
//! 1. Connect classification (PostgreSQL: `classify_connect`,
//!    `socket_failed`, `came_up`, the probe `any_socket_up`; Redis: `Reach`):
//!    a connect reads as unreachable, and a `fallBack` policy moves the key,
//!    when its socket never came up. A listening socket whose backlog is
//!    full does not come up, yet the server is up and may serve a holder:
//!    - a Unix-domain socket answers the connect with `EAGAIN` at once
//!      (`WouldBlock`; libpq's "Resource temporarily unavailable"): not a
//!      refused socket, and no timeout passed, yet it reads as unreachable
//!      on PostgreSQL (`socket_failed`; a one-socket URL is not probed, and
//!      the probe counts `WouldBlock` as not up) and on Redis (`Reach`);
//!    - over TCP the accept queue drops the SYN and the connect times out:
//!      unreachable by the stated rule ("no socket within
//!      `connectTimeoutMs`"), though docs/policy.md counts a Redis server
//!      stalled behind a script as up; it is so only until its queue fills.
//!
//!    Confirmed below on a private PostgreSQL 15 (its postmaster stopped
//!    with SIGSTOP while the holder's own backend runs on: a stand-in for a
//!    postmaster behind a burst of new connections) and on private
//!    redis-servers behind a 4 s script (`busy-reply-threshold` above it),
//!    each backlog filled with bare non-blocking connects. The Unix-socket
//!    cases failed every run (11 of 11, 5 of 5). Fixed: a connect error
//!    that is no sign the server is down (`store::reach::no_sign_of_down`:
//!    `EAGAIN`, a reset) counts as a socket that came up, on both drivers.
//!    The TCP case stays the stated limit (docs/guarantees.md: a full
//!    accept queue), its test ignored.
//! 2. 0b20fc5's merge of a split claim's give-back (`Claim::give_back`),
//!    and the other per-group merges (`give_back_groups` through `settled`,
//!    `extend`, `take`, `withdraw`; the hand-over is not used on a
//!    Cluster): read, no lost attempt dropped that could free a live grant
//!    of its token (a lease's token is never granted again after its
//!    release; a late acquire or renewal only grants or extends a token
//!    whose acquire is done: at worst a key held until `leaseMs`).

mod postgres;
#[path = "postgres/server.rs"]
mod server;
mod support;

use futures::executor::block_on;
use server::PrivateServer;
use support::fall_back::FallBackToHost;
use support::wait;

/// Opens non-blocking Unix-domain connects to `path` until one is turned
/// away with `EAGAIN` (the listen backlog is full); answers the sockets,
/// which keep the backlog full while they stay open.
fn fill_backlog(path: &std::path::Path) -> Vec<libc::c_int> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let mut sockets = Vec::new();
    for _ in 0..20_000 {
        // SAFETY: plain socket calls on a sockaddr_un of the right size.
        unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
            assert!(fd >= 0);
            let mut addr: libc::sockaddr_un = std::mem::zeroed();
            addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (i, b) in bytes.iter().enumerate() {
                addr.sun_path[i] = *b as libc::c_char;
            }
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let rc = libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len);
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "connect: {err}");
                return sockets;
            }
            sockets.push(fd);
        }
    }
    panic!("the backlog never filled");
}

fn postmaster_pid(dir: &std::path::Path) -> libc::pid_t {
    let pid = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
    pid.lines().next().unwrap().trim().parse().unwrap()
}

/// The private server's postmaster, stopped (SIGSTOP) until dropped.
struct Stopped(libc::pid_t);

impl Stopped {
    fn new(pid: libc::pid_t) -> Stopped {
        // SAFETY: a signal to the private server's postmaster.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// `k` is held on a private PostgreSQL by a holder connected through the
/// server's Unix socket. The postmaster then stops accepting (SIGSTOP; the
/// holder's backend runs on) and its socket's backlog fills. A fresh
/// process's policy over the same URL (`db`, falling back to `host`): its
/// connect meets `EAGAIN`, which reads as unreachable, and the policy
/// serves `k` from `host` while the holder's lease holds it on PostgreSQL.
#[test]
fn postgres_a_unix_socket_with_a_full_backlog_is_up_and_never_moves_a_held_key() {
    let server = PrivateServer::start("r24-backlog", &["max_connections = 10"]);
    let socket_dir = server.dir().to_path_buf();
    let url = format!("postgres://postgres@/postgres?host={}&port={}", socket_dir.display(), server.port());
    let schema = "r24_backlog";
    let holder = dokebi_lock::Provider::from_yaml(&postgres::yaml_on(&url, schema, "", "")).unwrap();
    let lease = block_on(postgres::backend(&holder).acquire("k", wait(0))).unwrap();
    let pid = postmaster_pid(&socket_dir);
    let stopped = Stopped::new(pid);
    let sockets = fill_backlog(&socket_dir.join(format!(".s.PGSQL.{}", server.port())));
    eprintln!("backlog full after {} connects", sockets.len());
    let direct = dokebi_lock::Provider::from_yaml(&postgres::yaml_on(&url, schema, "", "")).unwrap();
    let met = block_on(postgres::backend(&direct).acquire("k", wait(0))).map(|_| ());
    eprintln!("a direct acquire: {met:?}");
    block_on(direct.close());
    let policy = FallBackToHost::open_on(
        "postgres",
        &format!("url: '{url}', connectTimeoutMs: 500, commandTimeoutMs: 2000"),
        &format!("schema: {schema}, leaseMs: 10000"),
        5000,
    );
    let served = match block_on(policy.locks().acquire("k", wait(3000))) {
        Ok(other) => {
            let member = other.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(other.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    for fd in sockets {
        // SAFETY: sockets opened above.
        unsafe { libc::close(fd) };
    }
    drop(stopped);
    drop(policy);
    // The holder's session (its own backend) answered throughout.
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert_ne!(served, "host", "k was held on PostgreSQL and the policy's acquire was served by host");
}

/// The same on Redis, whose driver opens its own sockets and reads a
/// connect as unreachable only when its socket never came up: `k` is held
/// on a private redis-server listening on a Unix socket; another client's
/// script then runs for 3 s (docs/policy.md counts a server stalled behind
/// a script as up), during which the server accepts nothing, and the
/// socket's backlog fills. A fresh process's policy over `unix://` (`db`,
/// falling back to `host`): its connect meets `EAGAIN`, the socket never
/// came up, unreachable, and the policy serves `k` from `host` while the
/// holder's lease holds it on Redis.
#[test]
fn redis_a_unix_socket_with_a_full_backlog_is_up_and_never_moves_a_held_key() {
    let socket = std::env::temp_dir().join(format!("dokebi-r24-{}.sock", std::process::id()));
    let server = support::redis_server::RedisServer::start_with(&[
        "--unixsocket",
        socket.to_str().unwrap(),
        "--unixsocketperm",
        "700",
        "--busy-reply-threshold",
        "20000",
    ]);
    let url = format!("unix://{}", socket.display());
    let holder = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{url}' }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, leaseMs: 20000 }}\n"
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire("k", wait(0))).unwrap();
    let busy_url = server.url();
    let script = std::thread::spawn(move || {
        let mut client = redis::Client::open(busy_url).unwrap().get_connection().unwrap();
        let lua = "local s = tonumber(redis.call('TIME')[1]) while tonumber(redis.call('TIME')[1]) < s + 4 do end return 1";
        let _: redis::RedisResult<i64> = redis::cmd("EVAL").arg(lua).arg(0).query(&mut client);
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let sockets = fill_backlog(&socket);
    eprintln!("backlog full after {} connects", sockets.len());
    let policy = FallBackToHost::open_on("redis", &format!("url: '{url}', connectTimeoutMs: 500"), "leaseMs: 10000", 5000);
    let served = match block_on(policy.locks().acquire("k", wait(1000))) {
        Ok(other) => {
            let member = other.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(other.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    for fd in sockets {
        // SAFETY: sockets opened above.
        unsafe { libc::close(fd) };
    }
    script.join().unwrap();
    drop(policy);
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    let _ = std::fs::remove_file(&socket);
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert_ne!(served, "host", "k was held on Redis and the policy's acquire was served by host");
}

/// Opens `count` non-blocking TCP connects to 127.0.0.1:`port` (those past
/// the server's accept queue stay pending: their SYNs are dropped).
fn crowd_tcp(port: u16, count: usize) -> Vec<libc::c_int> {
    let mut sockets = Vec::new();
    for _ in 0..count {
        // SAFETY: plain socket calls on a sockaddr_in of the right size.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
            assert!(fd >= 0);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = port.to_be();
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            libc::connect(fd, (&addr as *const libc::sockaddr_in).cast(), std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t);
            sockets.push(fd);
        }
    }
    sockets
}

/// The TCP form of the Redis case above: the server's accept queue full
/// behind a 4 s script, a new socket never comes up within
/// `connectTimeoutMs` (its SYN dropped), which is unreachable by the stated
/// rule ("no socket within connectTimeoutMs"), though docs/policy.md also
/// counts a server stalled behind a script as up.
#[test]
#[ignore = "a Redis (behind a script) whose TCP accept queue is full reads as unreachable: a fallBack policy serves a held key from host (within the stated timeout rule)"]
fn redis_a_full_accept_queue_is_up_and_never_moves_a_held_key() {
    let server = support::redis_server::RedisServer::start_with(&["--busy-reply-threshold", "20000", "--maxclients", "10000"]);
    let url = server.url();
    let holder = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{url}' }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, leaseMs: 20000 }}\n"
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire("k", wait(0))).unwrap();
    let busy_url = server.url();
    let script = std::thread::spawn(move || {
        let mut client = redis::Client::open(busy_url).unwrap().get_connection().unwrap();
        let lua = "local s = tonumber(redis.call('TIME')[1]) while tonumber(redis.call('TIME')[1]) < s + 4 do end return 1";
        let _: redis::RedisResult<i64> = redis::cmd("EVAL").arg(lua).arg(0).query(&mut client);
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let sockets = crowd_tcp(server.port(), 1500);
    let policy = FallBackToHost::open_on("redis", &format!("url: '{url}', connectTimeoutMs: 500"), "leaseMs: 10000", 5000);
    let served = match block_on(policy.locks().acquire("k", wait(1000))) {
        Ok(other) => {
            let member = other.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(other.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    eprintln!("served: {served}");
    for fd in sockets {
        // SAFETY: sockets opened above.
        unsafe { libc::close(fd) };
    }
    script.join().unwrap();
    drop(policy);
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert_ne!(served, "host", "k was held on Redis and the policy's acquire was served by host");
}
