//! A line of another agent's session as a `Value` of the few keys its
//! reader looks at, built in one pass: the fields an agent keeps beside
//! its messages (Claude Code's `toolUseResult`, a second copy of every
//! tool's output, its usage counts, ids and versions) are skipped, never
//! built.
//!
//! It answers only where reading the whole line would give the same
//! message: the line is an object (nothing after it), names none of eVi's
//! head fields twice (see [`crate::transcript::line::parse_head`], which
//! refuses such a line) and is not pull's wrapper; a key given twice keeps
//! its last value, as `Value` does.

use std::fmt;

use serde::Deserializer as _;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The keys of eVi's line head.
const HEAD: [&str; 6] = ["id", "parentId", "ts", "role", "eviRawLine", "type"];

/// `raw` as an object of its values of `keys`; `None` where the line is to
/// be read whole (see the module doc).
pub(super) fn trimmed(raw: &[u8], keys: &[&str]) -> Option<Value> {
    struct V<'k>(&'k [&'k str]);
    impl<'de> Visitor<'de> for V<'_> {
        type Value = Option<Map<String, Value>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut out = Map::new();
            let mut seen = [false; HEAD.len()];
            let (mut id, mut wrapper) = (false, false);
            // A key with an escape is no borrowed `&str`: the line is then
            // read whole.
            while let Some(key) = m.next_key::<&'de str>()? {
                if let Some(h) = HEAD.iter().position(|h| *h == key)
                    && std::mem::replace(&mut seen[h], true)
                {
                    m.next_value::<IgnoredAny>()?;
                    while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    return Ok(None);
                }
                if self.0.contains(&key) || key == "id" || key == "eviRawLine" {
                    let v: Value = m.next_value()?;
                    match key {
                        "id" => id = v.is_string(),
                        "eviRawLine" => wrapper = v.is_string(),
                        _ => {}
                    }
                    if self.0.contains(&key) {
                        out.insert(key.to_owned(), v);
                    }
                } else {
                    m.next_value::<IgnoredAny>()?;
                }
            }
            Ok((!(id && wrapper)).then_some(out))
        }
    }
    if !super::outline::is_object(raw) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    let map = de.deserialize_map(V(keys)).ok()??;
    de.end().ok()?;
    Some(Value::Object(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_keys_asked_for_and_refuses_what_the_head_refuses() {
        let v = trimmed(br#"{"a":1,"b":{"c":[2]},"a":3,"d":"x"}"#, &["a", "b"]).unwrap();
        assert_eq!(v, serde_json::json!({"a":3,"b":{"c":[2]}}));
        for refused in [
            &br#"{"type":"a","type":"b"}"#[..],
            br#"{"id":"d","eviRawLine":"eA=="}"#,
            br#"{"a":1} x"#,
            br#"{"a\u0062":1}"#,
            b"[1]",
            b"not json",
        ] {
            assert!(
                trimmed(refused, &["a"]).is_none(),
                "{}",
                String::from_utf8_lossy(refused)
            );
        }
    }
}
