//! Review R26: ways to get two holders of a key, or a repeated fence, on the
//! Redis driver or through a `fallBack` policy over Redis, after d18a742
//! (`store::reach::no_sign_of_down` counts this host out of descriptors,
//! buffers or local ports as no sign the server is down), the spent token
//! (7a8d7d8, 0b20fc5, e106142, fd25357) and the hold-back of a head's next
//! try by a release (8ac64d7, dfc277d), against private redis-servers.
//!
//! Finding (two holders through a policy): `no_sign_of_down` still reads a
//! connect refused by this host's own access checks as a server that is
//! down. A Unix socket the process may not open (`EACCES`: Redis's
//! `unixsocketperm 770`, the socket's group not the process's) is
//! `ErrorKind::PermissionDenied`, not in the list: the socket never came up,
//! the connect reads as unreachable (`details.unreachable`), and a
//! `fallBack` policy serves from its fallback member a key that another
//! process holds on that Redis, which is up and serving it. Nothing of the
//! server was learnt (the kernel checks the socket file's mode before it
//! looks for a listener), as with `EMFILE` (review R25); and it is the
//! filesystem's refusal of this process's credentials, where Redis's own
//! refusal of them (`WRONGPASS`, `NOPERM`) never moves a key
//! (docs/policy.md: "refused credentials or certificates"). How it happens:
//! a rolling deploy whose new processes run under another user or group
//! (a container image whose UID changed), or a Redis restarted with a
//! stricter `unixsocketperm`, while processes of the old version hold keys.
//! The same path, not confirmed here: `EPERM` or `EACCES` at a TCP connect
//! (a seccomp or LSM policy of this host: SELinux's `name_connect`). The
//! PostgreSQL driver's `socket_failed` already excludes `PermissionDenied`
//! (for `target_session_attrs`), so there it is not unreachable; the MySQL
//! driver reads any I/O error at connect as unreachable (stated). Confirmed
//! below: the test (run as root) holds `k` on a private redis-server over
//! its Unix socket and runs a policy in a child process as `nobody` (uid
//! 65534), whose plain connect meets `EACCES` (os error 13): served by
//! `host`, 7 of 7 runs. Fixed: `no_sign_of_down` counts
//! `ErrorKind::PermissionDenied` (the acquire ends `PROVIDER_FAILED`, `db`
//! not skipped).
//!
//! Read and held (no second holder or repeated fence found):
//! - The spent token: every give-back by a token sent while its acquire
//!   still waits (`give_back_untold`, `give_back_groups`, and the store's
//!   `cleaned_up_after` after a lost try, which keeps the token only on an
//!   answered first attempt) spends it or ends the acquire unknown; the other
//!   give-backs are of a token that is done (a lease's release, a clean-up,
//!   a hand-over's released lease, a grant delivered to a request that gave
//!   up). A release's hand-over sent twice (`Freed::first_attempt_lost`)
//!   delivers unanswered, and its late first attempt only grants tokens
//!   (at worst a done token, held until `leaseMs`: review R15's liveness
//!   class).
//! - Two backends on one connection differing in `leaseMs`,
//!   `fenceRetentionMs` or `replicaAcks`: a hand-over grants each request on
//!   its own claim's terms, and the grant is confirmed (`replicated`) and
//!   timed (`valid_until`) by the request's own core, not the releaser's
//!   (the `leaseMs` case probed below, both paths of the hand-off script,
//!   5 of 5 held).
//! - The Redis driver never runs `cleaned_up_after`'s give-back and retry
//!   (`lost_with_its_connection` is false there): a lost try ends the
//!   acquire unknown.
//! - The hold-back (8ac64d7, dfc277d) orders a head's next try after a
//!   release's call; it decides no grant.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::redis_server::RedisServer;
use support::wait;

/// The `unix://` URL the child process's policy connects to (set only in
/// that child).
const CHILD_URL: &str = "DOKEBI_R26_POLICY_URL";

/// `k` is held on a private redis-server, through its Unix socket (mode
/// 770, owned by root), by this process. A second process, running as
/// `nobody`, acquires `k` through a policy over that socket (`db`, falling
/// back to a file backend `host`): its connect meets `EACCES`, the socket
/// never came up, unreachable, and the policy serves `k` from `host` while
/// the holder's lease holds it on Redis.
#[test]
fn redis_a_unix_socket_this_process_may_not_open_never_moves_a_held_key() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "runs as root: it starts a process as another user");
    let dir = std::env::temp_dir().join(format!("dokebi-r26-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join("redis.sock");
    let server = RedisServer::start_with(&["--unixsocket", socket.to_str().unwrap(), "--unixsocketperm", "770"]);
    let url = format!("unix://{}", socket.display());
    let holder = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{url}' }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, leaseMs: 20000 }}\n"
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire("k", wait(0))).unwrap();
    // The child runs a copy of this binary, and keeps its files, where
    // `nobody` may (this clone's path may not be open to it).
    let program = dir.join("review_r26");
    std::fs::copy(std::env::current_exe().unwrap(), &program).unwrap();
    let child_tmp = dir.join("tmp");
    std::fs::create_dir(&child_tmp).unwrap();
    std::fs::set_permissions(&child_tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let child = Command::new(&program)
        .args(["--exact", "policy_of_another_user", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, &url)
        .env("TMPDIR", &child_tmp)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    // The harness prints the test's name on the same line.
    let served = stdout.lines().find_map(|line| line.split_once("served: ").map(|(_, member)| member.to_owned()));
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let served = served.unwrap_or_else(|| panic!("the child said nothing: {stdout}\n{}", String::from_utf8_lossy(&child.stderr)));
    eprintln!("the policy of another user: {served}");
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    assert!(!served.starts_with("host"), "k was held on Redis (which is up) and the policy's acquire was served by {served}");
}

/// The child of the test above (does nothing without its URL): acquires `k`
/// through a policy over the URL, falling back to the host, and says which
/// member served it.
#[test]
#[ignore = "run by redis_a_unix_socket_this_process_may_not_open_never_moves_a_held_key as another user"]
fn policy_of_another_user() {
    let Ok(url) = std::env::var(CHILD_URL) else { return };
    let policy = FallBackToHost::open_on("redis", &format!("url: '{url}', connectTimeoutMs: 1000"), "leaseMs: 10000", 5000);
    let served = match block_on(policy.locks().acquire("k", wait(1000))) {
        Ok(lease) => {
            let member = lease.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(lease.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    // What the connect met, as a plain client sees it.
    let met = std::os::unix::net::UnixStream::connect(url.trim_start_matches("unix://")).err();
    println!("served: {served} (a plain connect: {met:?})");
}

/// A counted acquire waiting on backend `long` (leaseMs 20000) is granted
/// by the hand-over of a release of backend `short` (leaseMs 1000) on the
/// same connection and namespace: the grant must carry `long`'s lease, not
/// `short`'s, or the key's units lapse under a valid lease and a third
/// process is granted them. Both paths of the hand-off script: the straight
/// one (same limit and weight) and the general one (another weight).
#[test]
fn redis_a_hand_over_between_backends_of_one_connection_grants_on_the_waiter_s_lease() {
    let server = RedisServer::start();
    let provider = dokebi_lock::Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{}', commandTimeoutMs: 200 }}\n  dokebi-lock:\n    backends:\n      short: {{ driver: redis, connection: main, namespace: test, leaseMs: 1000 }}\n      long: {{ driver: redis, connection: main, namespace: test, leaseMs: 20000 }}\n",
        server.url()
    ))
    .unwrap();
    let (other, _) = support::open_redis(&server.url(), &[("leaseMs", "20000")], &[]);
    let counted = |limit: u32, weight: u32, ms: u64| dokebi_lock::AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) };
    for (key, weight) in [("straight", 2), ("general", 1)] {
        let held = block_on(provider.backend("short").unwrap().acquire(key, counted(2, 2, 0))).unwrap();
        let granted = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| block_on(provider.backend("long").unwrap().acquire(key, counted(2, weight, 5000))));
            std::thread::sleep(std::time::Duration::from_millis(150));
            let released = block_on(held.release());
            assert!(matches!(released, Ok(true)), "{key}: short's release: {released:?}");
            waiter.join().unwrap().unwrap()
        });
        // Past `short`'s lease: `long`'s grant still fills the key.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let third = block_on(other.backend("shared").unwrap().acquire(key, counted(2, 3 - weight, 0)));
        assert!(third.is_err(), "{key}: a third holder was granted units held by a lease of long (its grant lapsed with short's leaseMs)");
        assert!(block_on(granted.release()).unwrap(), "{key}: long's lease was lost");
    }
    block_on(other.close());
    block_on(provider.close());
}
