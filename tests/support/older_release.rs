//! An older release's Redis scripts, and what the reviews of owner tokens
//! of several lengths (tests/review_r59.rs, review_r60.rs) drive them with:
//! today's scripts, read from src/redis/scripts.rs with their macros
//! expanded, and `KINDS_ACQUIRE` as the release before holder labels ran
//! it (its prune at its own token's length, no recount of a refused key's
//! units).

use dokebi_lock::AcquireOptions;

use super::redis_server::RedisServer;
use super::wait;

// ---------------------------------------------------------------------
// A tiny expander of the scripts module's `concat!` and `macro_rules!`.
// ---------------------------------------------------------------------

pub const SCRIPTS: &str = include_str!("../../src/redis/scripts.rs");

pub enum Item {
    Text(String),
    Param(String),
    Call(String, Vec<Item>),
}

pub fn skip_ws(src: &str, mut at: usize) -> usize {
    while at < src.len() && src.as_bytes()[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// One item of a macro body at `at`; the position after it.
pub fn parse(src: &str, at: usize) -> (Item, usize) {
    let at = skip_ws(src, at);
    let rest = &src[at..];
    if let Some(raw) = rest.strip_prefix("r\"") {
        let end = raw.find('"').unwrap();
        return (Item::Text(raw[..end].to_owned()), at + 2 + end + 1);
    }
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => return (Item::Text(out), at + 1 + i + 1),
                '\\' => match chars.next().unwrap().1 {
                    'n' => out.push('\n'),
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        panic!("an unterminated string");
    }
    if let Some(param) = rest.strip_prefix('$') {
        let len = param.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap();
        return (Item::Param(param[..len].to_owned()), at + 1 + len);
    }
    let bang = rest.find("!(").unwrap();
    let name = rest[..bang].trim().to_owned();
    let mut pos = at + bang + 2;
    let mut args = Vec::new();
    loop {
        pos = skip_ws(src, pos);
        if src.as_bytes()[pos] == b')' {
            pos += 1;
            break;
        }
        let (item, next) = parse(src, pos);
        args.push(item);
        pos = skip_ws(src, next);
        if src.as_bytes()[pos] == b',' {
            pos += 1;
        }
    }
    (Item::Call(name, args), pos)
}

/// `item` of the scripts module `src` with its macros expanded, `bound`
/// giving the macro's parameters.
pub fn expand_in(src: &str, item: &Item, bound: &[(String, String)]) -> String {
    match item {
        Item::Text(text) => text.clone(),
        Item::Param(name) => bound.iter().find(|(n, _)| n == name).unwrap().1.clone(),
        Item::Call(name, args) if name == "concat" => args.iter().map(|arg| expand_in(src, arg, bound)).collect(),
        Item::Call(name, args) => {
            let start = src.find(&format!("macro_rules! {name} {{")).unwrap_or_else(|| panic!("no macro {name}"));
            let open = start + src[start..].find('(').unwrap();
            let close = open + src[open..].find(')').unwrap();
            let params: Vec<String> = src[open + 1..close]
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| p.trim().trim_start_matches('$').split(':').next().unwrap().to_owned())
                .collect();
            assert_eq!(params.len(), args.len(), "{name}");
            let values: Vec<(String, String)> = params.into_iter().zip(args.iter().map(|arg| expand_in(src, arg, bound))).collect();
            let body = close + src[close..].find("=> {").unwrap() + 4;
            expand_in(src, &parse(src, body).0, &values)
        }
    }
}

/// The Lua of the `const name` of the scripts module `src`.
pub fn script_in(src: &str, name: &str) -> String {
    let head = format!("const {name}: &str = ");
    let start = src.find(&head).unwrap() + head.len();
    expand_in(src, &parse(src, start).0, &[])
}

/// The Lua of today's scripts module's `const name`.
pub fn script(name: &str) -> String {
    script_in(SCRIPTS, name)
}

pub const FIXED_PRUNE: &str = "pruned = pruned + (tonumber(string.match(m, ':(%d+)$')) or 0)";
pub const OLDER_PRUNE: &str = "pruned = pruned + (tonumber(string.sub(m, #token + 2)) or 0)";

/// Where a refused request counts the units again (the fix of this
/// review), and what the previous release did there.
pub const RECOUNT_FROM: &str = "              -- Refused: the units are counted again";
pub const RECOUNT_TO: &str = "              free = units + weight <= limit\n";
pub const OLDER_REFUSAL: &str = "              free = false\n";

/// The previous release's `KINDS_ACQUIRE`: today's, its prune as it was
/// before 05ad865 and its refusal as it was before the recount (4c69111
/// changed only `INSPECT` in the scripts).
pub fn older_kinds_acquire() -> String {
    let today = script("KINDS_ACQUIRE");
    assert_eq!(today.matches(FIXED_PRUNE).count(), 1);
    let older = today.replace(FIXED_PRUNE, OLDER_PRUNE);
    assert_eq!((older.matches(RECOUNT_FROM).count(), older.matches(RECOUNT_TO).count()), (1, 1), "the recount moved");
    let (from, to) = (older.find(RECOUNT_FROM).unwrap(), older.find(RECOUNT_TO).unwrap() + RECOUNT_TO.len());
    format!("{}{OLDER_REFUSAL}{}", &older[..from], &older[to..])
}

/// An older release's token: 32 hex digits.
pub const OLDER_TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// `weight` units of a key counted to `limit`, waiting at most `ms`.
pub fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

/// The channel the reviews' script calls publish releases on.
pub const CHANNEL: &str = "test:lock-released";

/// One EVAL of a kinds script (its Lua, `lua`) on the key `lock`, with the
/// arguments every kinds script takes: the reply (the call must not fail).
#[allow(clippy::too_many_arguments)]
pub fn kinds_eval(
    client: &mut redis::Connection,
    lua: &str,
    lock: &str,
    token: &str,
    lease_ms: u64,
    waiting_ms: u64,
    mode: &str,
    limit: u32,
    weight: u32,
    ticket: i64,
    retention: u64,
) -> redis::Value {
    let mut command = redis::cmd("EVAL");
    command.arg(lua).arg(5).arg(&names_of(lock));
    command.arg(token).arg(lease_ms).arg(waiting_ms).arg(mode).arg(limit).arg(weight).arg(ticket).arg(CHANNEL).arg(retention);
    command.query(client).unwrap()
}

/// The five Redis names of the key whose lock name is `lock`.
pub fn names_of(lock: &str) -> [String; 5] {
    ["lock", "lock-fence", "lock-waiting", "lock-kind", "lock-queue"].map(|infix| lock.replacen(":lock:{", &format!(":{infix}:{{"), 1))
}

/// The one lock name on `server` (namespace `test`).
pub fn the_lock(server: &RedisServer) -> String {
    server.keys().into_iter().find(|k| k.starts_with("test:lock:{")).expect("a lock name")
}
