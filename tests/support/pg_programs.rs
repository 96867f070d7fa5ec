//! PostgreSQL's programs (`initdb`, `pg_ctl`, `pg_basebackup`), run as the
//! unprivileged `postgres` user (PostgreSQL refuses to run as root; the
//! tests run as root), for the tests that start private servers
//! (tests/postgres/server.rs, tests/partitions/pg.rs).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The path of `program`: in the newest version under Debian's
/// /usr/lib/postgresql, or in `DOKEBI_PG_BIN`.
pub fn bin(program: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("DOKEBI_PG_BIN") {
        return Path::new(&dir).join(program);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's programs in /usr/lib/postgresql (or DOKEBI_PG_BIN)")
        .map(|entry| entry.unwrap().path().join("bin"))
        .filter(|dir| dir.join("initdb").exists())
        .collect();
    versions.sort_by_key(|dir| dir.parent().unwrap().file_name().unwrap().to_string_lossy().parse::<u32>().unwrap_or(0));
    versions.pop().expect("an initdb under /usr/lib/postgresql").join(program)
}

/// Runs `program args` as the `postgres` user, in network namespace `ns`
/// when given; panics with its output on failure.
pub fn run_as_postgres(ns: Option<&str>, program: &str, args: &[&str]) {
    run_as_postgres_with(ns, program, args, &[]);
}

/// [`run_as_postgres`] with `env` added to the program's environment
/// (`runuser` passes it on).
pub fn run_as_postgres_with(ns: Option<&str>, program: &str, args: &[&str], env: &[(&str, &Path)]) {
    let mut command = Command::new(if ns.is_some() { "ip" } else { "runuser" });
    command.envs(env.iter().copied());
    if let Some(ns) = ns {
        command.args(["netns", "exec", ns, "runuser"]);
    }
    let output = command.args(["-u", "postgres", "--"]).arg(bin(program)).args(args).output().expect("runuser (util-linux)");
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A fresh directory `<prefix>-<pid>-<name>` under the system's temporary
/// one, owned by `postgres`.
pub fn postgres_dir(prefix: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().unwrap();
    assert!(status.success(), "chown of {}", dir.display());
    dir
}
