//! Reading the options file: YAML text to the JSON value the validator reads.
//!
//! Whatever the text, reading it costs time linear in its length and ends in
//! either a value or `INVALID_OPTIONS`: the size and the nesting are checked
//! before the parser runs (its cost grows with the square of the flow depth),
//! and the values and depth an alias expands to are counted as they are built.
//! A key given twice in one mapping is an issue at its path, not a silent
//! overwrite, and an integer beyond 64 bits reaches the validator (as the
//! nearest float) to be reported at its field like any other out-of-range value.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::scan::{check_nesting, TooDeep};
use super::{LOCK_SECTION, REDIS_SECTION};
use crate::error::{Issue, LockError, Result};

/// Largest YAML text accepted, in bytes (1 MiB; a real file is a few KiB).
pub const MAX_YAML_BYTES: usize = 1 << 20;
/// Deepest nesting accepted: block and flow collections together.
pub const MAX_DEPTH: usize = 64;
/// Most values (scalars, sequences, mappings, keys) a document may hold once
/// its aliases are expanded.
pub const MAX_VALUES: usize = 100_000;

/// Parses the YAML text of the options file.
pub(crate) fn parse(text: &str) -> Result<Value> {
    if text.len() > MAX_YAML_BYTES {
        return Err(whole_text(format!("the YAML text is {} bytes; the limit is {MAX_YAML_BYTES} bytes (1 MiB)", text.len())));
    }
    if let Err(TooDeep { line }) = check_nesting(text, MAX_DEPTH) {
        return Err(whole_text(format!("nested more than {MAX_DEPTH} levels deep at line {line}")));
    }
    let mut build = Build::default();
    let read = Node(&mut build).deserialize(serde_yaml_ng::Deserializer::from_str(text));
    let value = read.map_err(|err| match build.exceeded {
        Some(Exceeded::Values) => whole_text(format!("expands to more than {MAX_VALUES} values (aliases included)")),
        Some(Exceeded::Depth) => whole_text(format!("nested more than {MAX_DEPTH} levels deep once aliases are expanded")),
        None => {
            let at = err.location().map(|l| format!(" at line {}, column {}", l.line(), l.column())).unwrap_or_default();
            whole_text(format!("not valid YAML{at}")).with_cause(err)
        }
    })?;
    if !build.duplicates.is_empty() {
        return Err(LockError::invalid_options(build.duplicates));
    }
    Ok(value)
}

fn whole_text(message: String) -> LockError {
    LockError::invalid_options(vec![Issue::new(String::new(), message)])
}

/// The state of one document's reading, shared by every node.
#[derive(Default)]
struct Build {
    /// Keys and sequence indices from the root to the node being read.
    path: Vec<String>,
    values: usize,
    exceeded: Option<Exceeded>,
    duplicates: Vec<Issue>,
}

/// Which limit stopped the reading.
#[derive(Clone, Copy)]
enum Exceeded {
    Values,
    Depth,
}

impl Build {
    fn count<E: de::Error>(&mut self) -> std::result::Result<(), E> {
        self.values += 1;
        if self.values > MAX_VALUES {
            self.exceeded = Some(Exceeded::Values);
            return Err(E::custom("too many values"));
        }
        Ok(())
    }

    /// Counts a collection, one level below the node at `path`. The scan
    /// bounded the text's nesting; an alias to a collection nests it again.
    fn enter<E: de::Error>(&mut self) -> std::result::Result<(), E> {
        if self.path.len() >= MAX_DEPTH {
            self.exceeded = Some(Exceeded::Depth);
            return Err(E::custom("too deep"));
        }
        self.count()
    }

    /// The path of an issue: relative to the plugin section inside this
    /// plugin's two sections (as the validator reports), from the root elsewhere.
    fn issue_path(&self) -> String {
        match self.path.as_slice() {
            [options, section, rest @ ..]
                if options == "options" && (section == LOCK_SECTION || section == REDIS_SECTION) && !rest.is_empty() =>
            {
                rest.join(".")
            }
            all => all.join("."),
        }
    }
}

/// Reads one node into a JSON value.
struct Node<'b>(&'b mut Build);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(Value::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(Value::from(value))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(i64::try_from(value).map_or_else(|_| Value::from(value as f64), Value::from))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(u64::try_from(value).map_or_else(|_| Value::from(value as f64), Value::from))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> std::result::Result<Value, E> {
        self.0.count()?;
        // NaN and the infinities have no JSON number: null, as serde_json reads them.
        Ok(Value::from(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Value, E> {
        self.0.count()?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> std::result::Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        self.0.enter()?;
        let mut items = Vec::new();
        loop {
            self.0.path.push(items.len().to_string());
            let item = seq.next_element_seed(Node(&mut *self.0))?;
            self.0.path.pop();
            match item {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        self.0.enter()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.count()?;
            self.0.path.push(key);
            let value = map.next_value_seed(Node(&mut *self.0))?;
            if object.contains_key(self.0.path.last().expect("pushed above")) {
                let path = self.0.issue_path();
                self.0.duplicates.push(Issue::new(path, "duplicate key: given more than once in the same mapping"));
            }
            let key = self.0.path.pop().expect("pushed above");
            object.entry(key).or_insert(value);
        }
        Ok(Value::Object(object))
    }
}
