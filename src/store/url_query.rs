//! The values of an SQL driver's URL query (postgres `sslrootcert`, mysql
//! `ssl-ca`, ...): percent-encoded, as both servers' clients write them.

/// `value` %XX-decoded, or what is wrong with it as the value of `name`.
pub(crate) fn decoded(name: &str, value: &str) -> Result<String, String> {
    decode(value).ok_or_else(|| format!("the value of {name} is not valid percent-encoded UTF-8"))
}

/// `%XX`-decoded `value`; `None` when that is not UTF-8.
fn decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' && at + 2 < bytes.len() {
            out.push(u8::from_str_radix(std::str::from_utf8(&bytes[at + 1..at + 3]).ok()?, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}
