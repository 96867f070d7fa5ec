//! The holders a renewal may meet on a server whose clock is behind the
//! one its lease expired on, shared by the SQL drivers' tests.

/// A holder row's kind: shared, limit, weight.
pub type Kind = (bool, i32, i32);

/// A renewal's row beside holders of other tokens: the renewed row's kind,
/// the others', and whether a take of the renewed row's kind would join
/// them (then it is extended).
pub const CASES: [(&str, Kind, &[Kind], bool); 7] = [
    ("a reader beside a writer", (true, 1, 1), &[(false, 1, 1)], false),
    ("a reader beside readers", (true, 1, 1), &[(true, 1, 1), (true, 1, 1)], true),
    ("a writer beside a reader", (false, 1, 1), &[(true, 1, 1)], false),
    ("a writer beside a writer", (false, 1, 1), &[(false, 1, 1)], false),
    ("a counted holder past the limit", (false, 3, 2), &[(false, 3, 2)], false),
    ("a counted holder within the limit", (false, 3, 1), &[(false, 3, 2)], true),
    ("a counted holder beside another limit", (false, 3, 1), &[(false, 5, 1)], false),
];
