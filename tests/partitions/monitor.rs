//! Which server granted a section: each Redis server's own record of what
//! it was sent (`MONITOR`, read by a process in the server's namespace, so
//! that no partition cuts it). After the heal the minority's client may be
//! granted by the old primary, still a primary until the sentinels demote
//! it, or by the new one; only the first is a documented window, so the
//! checks must know which.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

use crate::log::Hold;
use crate::names::digest;

/// `partitions monitor <ip>`: prints every command the server at `ip:6379`
/// is sent, as `MONITOR` gives it, one line each, flushed.
pub fn run(args: &[String]) {
    let client = redis::Client::open(format!("redis://{}:6379/0", args[0])).unwrap();
    let mut connection = client.get_connection().expect("the server answers MONITOR");
    connection.send_packed_command(&redis::cmd("MONITOR").get_packed_command()).unwrap();
    let mut out = std::io::stdout().lock();
    while let Ok(value) = connection.recv_response() {
        if let redis::Value::SimpleString(line) = value {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// One script call a client sent a server for a key: when (the server's
/// clock, microseconds), from which address, on which key.
struct Call {
    at_us: i64,
    client: String,
    key: String,
}

/// The script calls in one server's `MONITOR` log naming one of `keys`.
fn calls(log: &str, keys: &[String]) -> Vec<Call> {
    let digests: Vec<(String, String)> = keys.iter().map(|k| (k.clone(), format!("{{{}}}", digest(k)))).collect();
    log.lines()
        .filter_map(|line| {
            // `1733353200.123456 [0 10.77.0.21:45678] "EVALSHA" "…" …`
            let (at, rest) = line.split_once(' ')?;
            let (seconds, micros) = at.split_once('.')?;
            let at_us = seconds.parse::<i64>().ok()? * 1_000_000 + micros.parse::<i64>().ok()?;
            let client = rest.strip_prefix('[')?.split_once(' ')?.1.split_once(']')?.0.rsplit_once(':')?.0.to_string();
            let command = rest.split_once("] \"")?.1.split('"').next()?.to_ascii_uppercase();
            if !matches!(command.as_str(), "EVALSHA" | "EVAL" | "EVALSHA_RO" | "FCALL") {
                return None;
            }
            let key = digests.iter().find(|(_, d)| line.contains(d.as_str()))?.0.clone();
            Some(Call { at_us, client, key })
        })
        .collect()
}

/// The sections of `client` (at address `ip`) that server `old` granted:
/// of the script calls the client sent any server for the section's key
/// between its acquire's call and its section's start, the last went to
/// `old`. `logs` are (server, its `MONITOR` log); `offset_us` turns a
/// monotonic time of the clients' into the servers' clock.
pub fn granted_by(old: &str, client: &str, ip: &str, holds: &[Hold], logs: &[(String, String)], offset_us: i64) -> BTreeSet<(String, u64)> {
    let keys: BTreeSet<String> = holds.iter().map(|h| h.key.clone()).collect();
    let keys: Vec<String> = keys.into_iter().collect();
    let calls: Vec<(&str, Call)> =
        logs.iter().flat_map(|(server, log)| calls(log, &keys).into_iter().map(move |c| (server.as_str(), c))).collect();
    holds
        .iter()
        .filter(|h| h.worker == client)
        .filter(|h| {
            let (from, to) = (h.asked as i64 + offset_us, h.start as i64 + offset_us);
            let last = calls
                .iter()
                .filter(|(_, c)| c.client == ip && c.key == h.key && (from..=to).contains(&c.at_us))
                .max_by_key(|(_, c)| c.at_us);
            last.is_some_and(|(server, _)| *server == old)
        })
        .map(|h| (h.key.clone(), h.start))
        .collect()
}

/// Every server's `MONITOR` log in `dir`.
pub fn logs(dir: &Path, servers: &[&str]) -> Vec<(String, String)> {
    servers.iter().map(|s| (s.to_string(), std::fs::read_to_string(dir.join(format!("monitor-{s}"))).unwrap_or_default())).collect()
}
