//! Review R28: ways to get two holders of a key, or a repeated fence, after
//! e6d6a88 (PostgreSQL functions 11, MySQL procedures 9: a release's
//! clean-up passes over a key with a row of the caller's token) and 6a10437
//! (`store::reach::no_sign_of_down` counts `PermissionDenied`, `EACCES` or
//! `EPERM` at connect, as no sign the server is down).
//!
//! Finding (two holders through a policy, Redis Sentinel): the sentinels
//! are asked in turn and the lookup's failure is the last error met
//! (`topology::Sentinel::primary` keeps an earlier one only when it is a
//! refusal of credentials or certificates, and not even that once
//! `connectTimeoutMs` passes: "no sentinel answered" then replaces
//! whatever was kept). So a sentinel that says nothing of the primary being
//! down decides nothing once another sentinel is listed after it:
//! - a sentinel this process may not connect to (`EACCES`, 6a10437's "no
//!   sign of down"), then one that is down (`ECONNREFUSED`): unreachable;
//! - the same, then one that is stalled (takes the connection, never
//!   answers): unreachable at `connectTimeoutMs`;
//! - a sentinel refusing this process's credentials (`NOAUTH`: a password
//!   rotated on the sentinels), then a stalled one: unreachable at
//!   `connectTimeoutMs`, where docs/guarantees.md says a member refusing
//!   credentials is never read as unavailable.
//!
//! - (not a permission) the only sentinel answers that it knows no primary
//!   by the process's `primaryName` (`SENTINEL get-master-addr-by-name`
//!   answers nil: a deploy whose `primaryName` is not the sentinels', a
//!   sentinel restarted without its `monitor` line): `no_primary` is an
//!   `io::ErrorKind::NotFound` error and the connect's `Reach` never heard
//!   of the sentinel's socket: unreachable. The sentinel is up and answered,
//!   as a server refusing credentials (which never moves a key).
//!
//! A `fallBack` policy then serves from its fallback member a key held on
//! the primary, which is up and serving it; the first sentinel is up too
//! and names that primary. Alone, each of those first sentinels does not
//! move the key (`PROVIDER_FAILED`, held below), nor does the refusing one
//! followed by one that is down (held below). None is docs/guarantees.md's
//! stated "every sentinel down or stalled while the primary serves": one
//! sentinel is up and refused this process. Confirmed below against private
//! redis-servers (a primary and a sentinel): the test holds `k` through the
//! sentinel and runs a policy in a child process whose TCP connects are
//! restricted by a Landlock ruleset (connects to any port but the ones
//! allowed fail `EACCES`, os error 13, as an LSM or a seccomp policy of the
//! host would): served by `host`, 5 of 5 runs each (the first also 7 of 7
//! before).
//!
//! Fixed: `Sentinel::primary` answers the most telling of the sentinels'
//! failures (a refusal, then an error reply, then a socket error that is no
//! sign of down, then the rest), kept over the end of `connectTimeoutMs`,
//! and a nil answer is a refusal naming `primaryName`; the four tests
//! below failed before it, and pass.
//!
//! The reviewer's suggested fix: as the PostgreSQL driver does for a URL of several hosts
//! (`any_socket_up`), do not let the last error speak for all sentinels:
//! keep over any later error (a socket error, and the end of
//! `connectTimeoutMs`) an error that is no sign of down (`no_sign_of_down`)
//! or that came from a sentinel that answered (a refusal, an error reply),
//! and read the lookup as unreachable only when every sentinel's socket
//! failed with a sign of down (or none came up in time); a sentinel that
//! answered nil is up (refused: "the sentinels know no primary named …",
//! with the fix naming `primaryName`), not unreachable.
//!
//! Read and held (no second holder or repeated fence found):
//! - e6d6a88: the clean-up's new condition only keeps more key rows (a key
//!   with a row of the caller's token is passed over); a kept row keeps its
//!   fence counter, so the next grant's fence is `max(counter + 1, clock)`,
//!   above every earlier one. The delete itself still re-checks, with the
//!   rows locked, that no holder is live and no mark waits. PostgreSQL's
//!   `hand_over` runs `give_back`'s clean-up with the call's own key rows
//!   locked (SKIP LOCKED does not skip its own): it may delete a just
//!   inserted row of a key it grants next (`fence_until` is the insert's
//!   clock), which `take`'s `lock_keys` inserts again, fence 0, so the grant's
//!   fence is the clock; an older row it deletes there had its retention
//!   pass, as for any release (the stated limit: a clock stepped back
//!   further than `fenceRetentionMs`). MySQL's hand-over cleans nothing
//!   (`p_clean` 0). Functions 10 / procedures 8 callers against 11 / 9: the
//!   signatures and answers are unchanged, the new clean-up only skips more.
//! - 6a10437, PostgreSQL: a URL of two hosts, the first up but refused to
//!   the process (`EACCES` at its TCP connect), the second down: tokio-postgres
//!   reports the second's refused connect, and `any_socket_up`'s probe of the
//!   first counts `EACCES` as up: refused, not moved (run below, held). A
//!   single host refused so is `PermissionDenied`, not `socket_failed`.
//! - 6a10437, Redis over a link redis-rs makes itself (`rediss://…/#insecure`)
//!   refused `EACCES`: the wrapped error is still found (`io_error`):
//!   refused, not moved (run below, held).
//! - 6a10437, Redis Cluster (read, not run): `fetch_slots` keeps the first
//!   failure that is not unreachable (`reached_first`), also over its own
//!   timeout, so a seed node refused `EACCES` is not overridden by a later
//!   one that is down. The TCP `EPERM` of a local netfilter `DROP` is not
//!   what a connect meets on Linux (the SYN is retried: a timeout), so a
//!   firewall reads as a stalled network, not a permission.

mod postgres;
mod support;

use std::process::Command;

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::lone_sentinel::{free_port, LoneSentinel as Sentinel};
use support::redis_server::RedisServer;
use support::wait;

/// The child process's policy member `db`: its driver, its connection
/// (YAML flow mapping entries) and its fields; and the ports its TCP
/// connects may reach (comma-separated; any other port is refused `EACCES`
/// by a Landlock ruleset). Set only in that child.
const CHILD_DRIVER: &str = "DOKEBI_R28_DRIVER";
const CHILD_CONNECTION: &str = "DOKEBI_R28_CONNECTION";
const CHILD_FIELDS: &str = "DOKEBI_R28_FIELDS";
const CHILD_PORTS: &str = "DOKEBI_R28_ALLOWED_PORTS";

/// What the child's policy served `k` from (or its error), its TCP
/// connects restricted to the ports `allowed`; `probe`: an address whose
/// plain connect the child reports.
fn served_to_a_restricted_child(driver: &str, connection: &str, fields: &str, allowed: &[u16], probe: &str) -> String {
    let ports: Vec<String> = allowed.iter().map(u16::to_string).collect();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "policy_of_a_restricted_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_DRIVER, driver)
        .env(CHILD_CONNECTION, connection)
        .env(CHILD_FIELDS, fields)
        .env(CHILD_PORTS, ports.join(","))
        .env("DOKEBI_R28_PROBE", probe)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let served = stdout.lines().find_map(|line| line.split_once("served: ").map(|(_, member)| member.to_owned()));
    served.unwrap_or_else(|| panic!("the child said nothing: {stdout}\n{}", String::from_utf8_lossy(&child.stderr)))
}

/// Holds `k` on a private primary, found through a private sentinel (of
/// password `password`, none when empty), and runs a policy in a child
/// process whose TCP connects reach only the ports `allowed` (Landlock: any
/// other is refused `EACCES`), over the sentinels `nodes`: answers the
/// member that served the child's acquire (or its error), and the holder's
/// release. `nodes` and `allowed` are given the sentinel, and a second
/// port: nothing listens there, or (`stalled`) a socket that takes
/// connections and never answers.
fn served_through_sentinels(
    password: &str,
    stalled: bool,
    nodes: impl Fn(&Sentinel, u16) -> String,
    allowed: impl Fn(&Sentinel, u16) -> Vec<u16>,
) -> (String, String) {
    let primary = RedisServer::start();
    let extra = if password.is_empty() { String::new() } else { format!("requirepass {password}\n") };
    let sentinel = Sentinel::start(free_port(), primary.port(), 1, &extra);
    let holder = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ sentinel: {{ nodes: ['{}'], primaryName: mymaster }} }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, leaseMs: 20000 }}\n",
        sentinel.authed_url()
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire("k", wait(0))).unwrap();
    // A listener never accepted: the kernel completes the handshakes (up to
    // its backlog), and nothing is ever answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let second = listener.local_addr().unwrap().port();
    if !stalled {
        drop(listener);
    }
    let served = served_to_a_restricted_child(
        "redis",
        &format!("sentinel: {{ nodes: {}, primaryName: mymaster }}, connectTimeoutMs: 1000", nodes(&sentinel, second)),
        "leaseMs: 10000",
        &allowed(&sentinel, second),
        &format!("127.0.0.1:{}", sentinel.port),
    );
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(sentinel);
    drop(primary);
    eprintln!("the policy of the process refused the sentinel: {served}");
    (served, format!("{still_held:?}"))
}

/// Held (6a10437): the only sentinel is one this process may not connect
/// to (`EACCES`): the acquire is not moved to `host`.
#[test]
fn redis_sentinel_only_a_sentinel_this_process_may_not_reach_never_moves_a_held_key() {
    let (served, released) = served_through_sentinels("", false, |up, _| format!("['{}']", up.url()), |_, down| vec![down]);
    assert_eq!(released, "Ok(true)", "the holder's release");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Finding: the same sentinel followed by one that is down: the refused
/// connect of the second is the lookup's failure, unreachable, and the
/// policy serves `k` from `host` while the holder's lease holds it on the
/// primary.
#[test]
fn redis_sentinel_a_sentinel_this_process_may_not_reach_then_one_down_never_moves_a_held_key() {
    let (served, released) =
        served_through_sentinels("", false, |up, down| format!("['{}', 'redis://127.0.0.1:{down}']", up.url()), |_, down| vec![down]);
    assert_eq!(released, "Ok(true)", "the holder's release");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Finding, the same with a second sentinel that is stalled (takes the
/// connection, never answers) rather than down: `connectTimeoutMs` passes
/// and its "no sentinel answered" replaces the first sentinel's error, so
/// the lookup is unreachable again.
#[test]
fn redis_sentinel_a_sentinel_this_process_may_not_reach_then_one_stalled_never_moves_a_held_key() {
    let (served, released) = served_through_sentinels(
        "",
        true,
        |up, stalled| format!("['{}', 'redis://127.0.0.1:{stalled}']", up.url()),
        |_, stalled| vec![stalled],
    );
    assert_eq!(released, "Ok(true)", "the holder's release");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Held: a sentinel that refuses the process's credentials (its URL has no
/// password, the sentinel requires one: `NOAUTH`), alone: the acquire ends
/// denied, not moved.
#[test]
fn redis_sentinel_only_a_sentinel_refusing_the_credentials_never_moves_a_held_key() {
    let (served, released) = served_through_sentinels("s3cret", false, |up, _| format!("['{}']", up.url()), |up, _| vec![up.port]);
    assert_eq!(released, "Ok(true)", "the holder's release");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Held: the same sentinel refusing the credentials, then one that is down:
/// the refusal is kept over the later socket error, denied, not moved.
#[test]
fn redis_sentinel_a_sentinel_refusing_the_credentials_then_one_down_never_moves_a_held_key() {
    let (served, released) = served_through_sentinels(
        "s3cret",
        false,
        |up, down| format!("['{}', 'redis://127.0.0.1:{down}']", up.url()),
        |up, down| vec![up.port, down],
    );
    assert_eq!(released, "Ok(true)", "the holder's release");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Finding: the same sentinel refusing the credentials, then a stalled
/// one: `primary` keeps a refusal over a later socket error ("a sentinel
/// that refused us says more than one that is down"), but not over the
/// end of `connectTimeoutMs`, whose "no sentinel answered" replaces it: the
/// lookup is unreachable and the key moves, where docs/guarantees.md says
/// a member refusing credentials never moves a name.
#[test]
fn redis_sentinel_a_sentinel_refusing_the_credentials_then_one_stalled_never_moves_a_held_key() {
    let (served, released) = served_through_sentinels(
        "s3cret",
        true,
        |up, stalled| format!("['{}', 'redis://127.0.0.1:{stalled}']", up.url()),
        |up, stalled| vec![up.port, stalled],
    );
    assert_eq!(released, "Ok(true)", "the holder's release");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Finding: the only sentinel answers, but knows no primary by the name
/// the process gives (`primaryName` of a new deploy not the sentinels', a
/// sentinel restarted without the `monitor` line): it answered, so it is
/// up, and it says nothing of the primary being down; the key is held on
/// that primary, and the policy serves it from `host`.
#[test]
fn redis_sentinel_answering_it_knows_no_such_primary_never_moves_a_held_key() {
    let primary = RedisServer::start();
    let sentinel = Sentinel::start(free_port(), primary.port(), 1, "");
    let holder = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ sentinel: {{ nodes: ['{}'], primaryName: mymaster }} }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, leaseMs: 20000 }}\n",
        sentinel.authed_url()
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire("k", wait(0))).unwrap();
    let served = served_to_a_restricted_child(
        "redis",
        &format!("sentinel: {{ nodes: ['{}'], primaryName: mymaster2 }}, connectTimeoutMs: 1000", sentinel.authed_url()),
        "leaseMs: 10000",
        &[sentinel.port, primary.port()],
        &format!("127.0.0.1:{}", sentinel.port),
    );
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(sentinel);
    drop(primary);
    eprintln!("the policy of the process naming another primary: {served}");
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert!(!served.starts_with("host"), "k was held on the primary (which is up) and the policy's acquire was served by {served}");
}

/// Probe: one server, over a link redis-rs makes itself (`rediss://` with
/// `#insecure`), that this process may not connect to (`EACCES`): the
/// error redis-rs wraps must still read as no sign of down.
#[test]
fn redis_insecure_tls_link_this_process_may_not_open_never_moves_a_held_key() {
    let server = RedisServer::start();
    let holder = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{}' }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, leaseMs: 20000 }}\n",
        server.url()
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire("k", wait(0))).unwrap();
    let served = served_to_a_restricted_child(
        "redis",
        &format!("url: 'rediss://127.0.0.1:{}/#insecure', connectTimeoutMs: 1000", server.port()),
        "leaseMs: 10000",
        &[free_port()],
        &format!("127.0.0.1:{}", server.port()),
    );
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    eprintln!("the policy of the process refused the server: {served}");
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert!(!served.starts_with("host"), "k was held on the server (which is up) and the policy's acquire was served by {served}");
}

/// Restricts this process's TCP connects to the ports `allowed` (Landlock,
/// ABI 4 or later: a connect to any other port fails `EACCES`).
fn allow_only(allowed: &[u64]) {
    const CONNECT_TCP: u64 = 1 << 1;
    const RULE_NET_PORT: libc::c_long = 2;
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
        handled_access_net: u64,
    }
    #[repr(C)]
    struct NetPortAttr {
        allowed_access: u64,
        port: u64,
    }
    let attr = RulesetAttr { handled_access_fs: 0, handled_access_net: CONNECT_TCP };
    // SAFETY: the Landlock system calls, with pointers to live values of
    // the sizes given; prctl with an integer argument.
    unsafe {
        let fd = libc::syscall(libc::SYS_landlock_create_ruleset, &attr as *const RulesetAttr, std::mem::size_of::<RulesetAttr>(), 0u32);
        assert!(fd >= 0, "landlock_create_ruleset: {}", std::io::Error::last_os_error());
        for &port in allowed {
            let rule = NetPortAttr { allowed_access: CONNECT_TCP, port };
            let added = libc::syscall(libc::SYS_landlock_add_rule, fd, RULE_NET_PORT, &rule as *const NetPortAttr, 0u32);
            assert_eq!(added, 0, "landlock_add_rule: {}", std::io::Error::last_os_error());
        }
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let restricted = libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32);
        assert_eq!(restricted, 0, "landlock_restrict_self: {}", std::io::Error::last_os_error());
        libc::close(fd as i32);
    }
}

/// Held (6a10437, PostgreSQL): a URL of two hosts, the first up (holding
/// `k`) but refused to this process (`EACCES`), the second down: the last
/// host's refused connect is checked by `any_socket_up`, whose probe of the
/// first counts `EACCES` as up: not moved.
#[test]
fn postgres_first_host_this_process_may_not_reach_with_the_next_host_down_never_moves_a_held_key() {
    let schema = postgres::Schema::fresh();
    let holder = schema.open("");
    let lease = block_on(postgres::backend(&holder).acquire("k", wait(0))).unwrap();
    let down = free_port();
    let url = postgres::url().replacen("127.0.0.1:5432", &format!("127.0.0.1:5432,127.0.0.1:{down}"), 1);
    let served = served_to_a_restricted_child(
        "postgres",
        &format!("url: '{url}', commandTimeoutMs: 2000, connectTimeoutMs: 1000"),
        &format!("schema: {}, leaseMs: 10000", schema.0),
        &[down],
        "127.0.0.1:5432",
    );
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(schema);
    eprintln!("the policy of the process refused the first host: {served}");
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert!(!served.starts_with("host"), "k was held on the first host (which is up) and the policy's acquire was served by {served}");
}

/// The child of the tests above (does nothing without its member): its TCP
/// connects restricted to the allowed ports, acquires `k` through a policy
/// over `db`, falling back to the host, and says which member served it.
#[test]
#[ignore = "run by the tests above in a child process"]
fn policy_of_a_restricted_process() {
    let (Ok(driver), Ok(connection), Ok(fields), Ok(ports)) =
        (std::env::var(CHILD_DRIVER), std::env::var(CHILD_CONNECTION), std::env::var(CHILD_FIELDS), std::env::var(CHILD_PORTS))
    else {
        return;
    };
    allow_only(&ports.split(',').map(|port| port.parse().unwrap()).collect::<Vec<u64>>());
    let policy = FallBackToHost::open_on(&driver, &connection, &fields, 5000);
    let served = match block_on(policy.locks().acquire("k", wait(3000))) {
        Ok(lease) => {
            let member = lease.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(lease.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    // What a plain connect to the refused address met.
    let met = std::env::var("DOKEBI_R28_PROBE").ok().and_then(|probe| std::net::TcpStream::connect(probe).err());
    println!("served: {served} (a plain connect to the refused address: {met:?})");
}
