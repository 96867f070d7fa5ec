//! Which keys a rule takes: a prefix, or a glob matched against the whole key.

/// A rule's pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Keys that start with this text.
    Prefix(String),
    /// Keys this glob matches whole: `*` any run of characters (none
    /// included), `?` one character, anything else itself.
    Glob(String),
}

impl Pattern {
    /// Whether `key` falls under this pattern.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            Pattern::Prefix(prefix) => key.starts_with(prefix.as_str()),
            Pattern::Glob(glob) => glob_matches(glob, key),
        }
    }

    /// How options and reports write it: `prefix:<text>` or `glob:<text>`.
    pub fn describe(&self) -> String {
        match self {
            Pattern::Prefix(prefix) => format!("prefix:{prefix}"),
            Pattern::Glob(glob) => format!("glob:{glob}"),
        }
    }
}

/// Matches with one backtrack point (the last `*`): time at most the
/// product of the two lengths, with no recursion a long key could exhaust.
fn glob_matches(glob: &str, key: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let key: Vec<char> = key.chars().collect();
    let (mut g, mut k) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while k < key.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, k));
                g += 1;
            }
            Some(&c) if c == '?' || c == key[k] => {
                g += 1;
                k += 1;
            }
            _ => match star {
                // The last `*` takes one character more, and matching goes on after it.
                Some((star_g, star_k)) => {
                    star = Some((star_g, star_k + 1));
                    g = star_g + 1;
                    k = star_k + 1;
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_takes_the_keys_that_start_with_it() {
        let pattern = Pattern::Prefix("billing:".into());
        assert!(pattern.matches("billing:42"));
        assert!(pattern.matches("billing:"));
        assert!(!pattern.matches("bill"));
        assert!(!pattern.matches("x-billing:42"));
    }

    #[test]
    fn a_glob_matches_the_whole_key() {
        let glob = |g: &str, k: &str| Pattern::Glob(g.into()).matches(k);
        assert!(glob("orders:*:pay", "orders:42:pay"));
        assert!(glob("orders:*:pay", "orders::pay"));
        assert!(!glob("orders:*:pay", "orders:42:payment"));
        assert!(glob("orders:*", "orders:a:b:c"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*", ""));
        assert!(glob("**a**", "xxa"));
        assert!(!glob("*a*b", "xxaxxc"));
        assert!(glob("é?*", "éü"));
    }

    #[test]
    fn a_long_key_against_many_stars_ends_quickly() {
        let key = "a".repeat(100_000);
        let started = std::time::Instant::now();
        assert!(!Pattern::Glob("*a*a*a*a*b".into()).matches(&key));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
