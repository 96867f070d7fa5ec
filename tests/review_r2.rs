//! Review R2 of the change after 30fc439: `Failure::in_set_up` (a lock
//! wait in the mysql and postgres set-up is a refusal), the settings read
//! with one `SHOW` at every mysql connect, and the ping of a pooled mysql
//! connection idle for 1 s or more. Each test failed on the change as
//! reviewed (two holders through a `fallBack` policy), against a private
//! MariaDB 10.11 (tests/mysql/server.rs), and passes since the set-up's
//! lock wait is `Failure::SetUpLocked` and a ping without an answer ends
//! the call as an unanswered statement did.

mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;
use mysql::{url, yaml, Table};
use mysql_server::PrivateServer;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// Finding 1: a set-up that waits out a DDL lock moves a policy's key, and
/// two processes hold it. A backup blocks DDL while it copies (mariabackup's
/// `BACKUP STAGE BLOCK_DDL`; `LOCK TABLES`, `FLUSH TABLES WITH READ LOCK`
/// and an `ALTER` do too), while the procedures' DML runs on: the holders
/// of keys keep them and renew them. A process that starts meanwhile and
/// finds a procedure missing or older (a rolling upgrade that adds or
/// changes one; here one dropped) installs it: `CREATE PROCEDURE` waits
/// for the metadata lock, and with a `lock_wait_timeout` shorter than the
/// installer's 10 s bound the server refuses it (1205). Before the change
/// that was contention: the acquire was `LOCK_BUSY` and a policy stopped.
/// `Failure::in_set_up` makes it a refusal, `PROVIDER_FAILED`, which a
/// policy that falls back reads as the member unavailable: it serves the
/// key from its next member while the first process holds it on the
/// member that was "unavailable", and passes that member over for
/// `reprobeCooldownMs`, moving every key of the process.
#[test]
fn a_set_up_that_waits_out_a_backup_s_ddl_lock_never_moves_a_held_key() {
    let server = PrivateServer::start(&["--lock-wait-timeout=2"]);
    let table = Table::fresh();
    let config = yaml(&table.0, "").replace(&url(), &server.url()).replace("leaseMs: 5000", "leaseMs: 60000")
        + &format!(
            "      spare: {{ driver: mysql, connection: main, table: {}, leaseMs: 60000 }}\n      locks:\n        driver: policy\n        default: {{ backends: [shared, spare], minTier: shared, onUnavailable: fallBack }}\n",
            table.named("b")
        );
    let first = Provider::from_yaml(&config).unwrap();
    // Both members installed before the backup.
    for member in ["shared", "spare"] {
        let lease = block_on(first.backend(member).unwrap().acquire("warm-up", wait(0))).unwrap();
        assert!(block_on(lease.release()).unwrap());
    }
    let held = block_on(first.backend("locks").unwrap().acquire("k", wait(0))).unwrap();
    assert_eq!(held.served().unwrap().member.name, "shared");
    server.run(&format!("DROP PROCEDURE test.`{}_withdraw`", table.0)).unwrap();
    let backup = hold_session(&server, "BACKUP STAGE START; BACKUP STAGE BLOCK_DDL", "BACKUP STAGE END", Duration::from_secs(8));

    let second = Provider::from_yaml(&config).unwrap();
    let served = block_on(second.backend("locks").unwrap().acquire("k", wait(0)));
    // The first process's lease is intact on shared meanwhile.
    let renewed = block_on(held.renew());
    backup.join().unwrap();
    let outcome = match &served {
        Ok(lease) => format!("granted by {} (fence {})", lease.served().map_or("?", |served| served.member.name.as_str()), lease.fence()),
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    assert!(
        !(served.is_ok() && matches!(renewed, Ok(true))),
        "two holders of k: the first process on shared (renewed: {renewed:?}), the second {outcome}"
    );
}

/// Runs `start` on a connection of its own to `server`, keeps the session
/// for `held` (its locks with it), then runs `end`: answers once `start`
/// ran.
fn hold_session(server: &PrivateServer, start: &str, end: &str, held: Duration) -> std::thread::JoinHandle<()> {
    let (url, start, end) = (server.url(), start.to_owned(), end.to_owned());
    let (done, is_done) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        use mysql_async::prelude::Queryable;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false);
            let mut conn = mysql_async::Conn::new(opts).await.unwrap();
            conn.query_drop(start).await.unwrap();
            done.send(()).unwrap();
            tokio::time::sleep(held).await;
            conn.query_drop(end).await.unwrap();
            let _ = conn.disconnect().await;
        });
    });
    is_done.recv().unwrap();
    holder
}

/// Finding 2: a server that stalls (a `SIGSTOP`, a disk or hypervisor
/// stall, a saturated thread pool: slow, not down) longer than
/// `commandTimeoutMs` + `connectTimeoutMs` moves a policy's key from a
/// process whose pooled connection sat idle for a second, while the holder
/// keeps it. The ping times out, is read as a dead connection, a new one
/// cannot be made in time, and the try is "unreachable", `PROVIDER_FAILED`:
/// the policy falls back. Before the change the statement went out on the
/// pooled connection and timed out, `OUTCOME_UNKNOWN`, which never moves a
/// key. When the server resumes the first holder renews: two holders,
/// both processes reaching the member all along. (A process with no pooled
/// connection moved so before too: the change extends it to every process
/// that was idle for 1 s. Liveness: the try took ping bound + connect
/// bound, 3 s here, where it took the statement's 2 s.)
#[test]
fn a_ping_that_times_out_on_a_stalled_server_never_moves_a_held_key() {
    let server = PrivateServer::start(&[]);
    let table = Table::fresh();
    let config = format!(
        "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: '{}', commandTimeoutMs: 2000, connectTimeoutMs: 1000, poolSize: 1 }}\n      other: {{ url: '{}' }}\n  dokebi-lock:\n    backends:\n      shared: {{ driver: mysql, connection: main, table: {}, leaseMs: 60000 }}\n      spare: {{ driver: mysql, connection: other, table: {}, leaseMs: 60000 }}\n      locks:\n        driver: policy\n        default: {{ backends: [shared, spare], minTier: shared, onUnavailable: fallBack }}\n",
        server.url(),
        url(),
        table.0,
        table.named("b")
    );
    let (first, second) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    for provider in [&first, &second] {
        for member in ["shared", "spare"] {
            let lease = block_on(provider.backend(member).unwrap().acquire("warm-up", wait(0))).unwrap();
            assert!(block_on(lease.release()).unwrap());
        }
    }
    let held = block_on(first.backend("locks").unwrap().acquire("k", wait(0))).unwrap();
    assert_eq!(held.served().unwrap().member.name, "shared");
    std::thread::sleep(Duration::from_millis(1200));

    let pid = std::fs::read_to_string(server.first::<String>("SELECT @@pid_file").unwrap().unwrap()).unwrap();
    let signal = |name: &str| assert!(std::process::Command::new("kill").args([name, pid.trim()]).status().unwrap().success());
    signal("-STOP");
    let started = std::time::Instant::now();
    let served = block_on(second.backend("locks").unwrap().acquire("k", wait(0)));
    let took = started.elapsed();
    signal("-CONT");
    let renewed = block_on(held.renew());
    let outcome = match &served {
        Ok(lease) => format!("granted by {} (fence {})", lease.served().map_or("?", |served| served.member.name.as_str()), lease.fence()),
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    assert!(
        !(served.is_ok() && matches!(renewed, Ok(true))),
        "two holders of k: the first process on shared (renewed after the stall: {renewed:?}), the second {outcome} after {took:?}"
    );
}
