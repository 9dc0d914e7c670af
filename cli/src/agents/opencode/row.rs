//! A row as an entry's line, and back.
//!
//! The line is `{"table":"<table>","row":{<column>:<value>,…}}`, the columns
//! in the table's own order. A column's value is its SQLite value: `null`,
//! a number, a string; a text column holding a JSON object or array on one
//! line (OpenCode's `data`) is the JSON itself, byte for byte, so that its
//! path fields can be mapped and the row written back exactly. A part's
//! line also carries `"role"`, its message's role, for readers (a part row
//! does not say whose it is); it is no column.
//!
//! The bytes are fixed by the row: the same row gives the same line on
//! every device, which is how a device knows a row it holds is one the
//! stream has ([`Line::key`]).

use rusqlite::types::{Value, ValueRef};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The tables a session's stream holds, in the order rows go in (each
/// after what it refers to).
pub const TABLES: [&str; 3] = ["session", "message", "part"];

/// The line of a row: `cols` and `vals` in the table's order.
pub fn line(table: &str, role: Option<&str>, cols: &[String], vals: &[ValueRef<'_>]) -> Vec<u8> {
    let mut out = String::with_capacity(256);
    out.push_str("{\"table\":");
    out.push_str(&json_str(table));
    if let Some(role) = role {
        out.push_str(",\"role\":");
        out.push_str(&json_str(role));
    }
    out.push_str(",\"row\":{");
    for (i, (c, v)) in cols.iter().zip(vals).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_str(c));
        out.push(':');
        push_value(&mut out, *v);
    }
    out.push_str("}}");
    out.into_bytes()
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

fn push_value(out: &mut String, v: ValueRef<'_>) {
    match v {
        ValueRef::Null => out.push_str("null"),
        ValueRef::Integer(i) => out.push_str(&i.to_string()),
        ValueRef::Real(f) => out.push_str(&serde_json::Value::from(f).to_string()),
        ValueRef::Text(t) => {
            // Checked whole first: the lossy reading goes a character at a
            // time, and was a fifth of making a line.
            let t = match std::str::from_utf8(t) {
                Ok(t) => std::borrow::Cow::Borrowed(t),
                Err(_) => String::from_utf8_lossy(t),
            };
            if embeds(&t) {
                out.push_str(&t);
            } else {
                out.push_str(&json_str(&t));
            }
        }
        // OpenCode keeps no blobs in these tables; one would travel as text.
        ValueRef::Blob(b) => out.push_str(&json_str(&String::from_utf8_lossy(b))),
    }
}

/// Whether a text value goes into the line as the JSON it holds: an object
/// or array on one line that parses.
fn embeds(t: &str) -> bool {
    (t.starts_with('{') || t.starts_with('['))
        && !t.contains(['\n', '\r'])
        && serde_json::from_str::<&RawValue>(t).is_ok()
}

/// What an import reads first of a row's line: its table, id and time,
/// the columns passed over unparsed ([`Line::parse`] reads them whole).
pub struct Head {
    pub table: &'static str,
    pub id: String,
    /// `time_updated`, 0 without one.
    pub time_updated: i64,
}

impl Head {
    /// `None` when `raw` is no row line, or its row has no string `id`.
    pub fn parse(raw: &[u8]) -> Option<Self> {
        #[derive(Deserialize)]
        struct H<'a> {
            #[serde(borrow)]
            table: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            row: R<'a>,
        }
        #[derive(Deserialize)]
        struct R<'a> {
            id: Option<String>,
            #[serde(borrow)]
            time_updated: Option<&'a RawValue>,
        }
        let h: H<'_> = serde_json::from_slice(raw).ok()?;
        let table = TABLES.into_iter().find(|t| *t == h.table)?;
        let time_updated = (h.row.time_updated)
            .and_then(|v| serde_json::from_str::<i64>(v.get()).ok())
            .unwrap_or(0);
        Some(Self {
            table,
            id: h.row.id?,
            time_updated,
        })
    }
}

/// A row's line read back.
#[derive(Debug)]
pub struct Line<'a> {
    pub table: String,
    pub role: Option<String>,
    /// The row's columns as the line holds them, in order.
    pub row: Vec<(String, &'a RawValue)>,
    /// The row object's bytes.
    pub row_text: &'a str,
}

#[derive(Deserialize)]
struct Raw<'a> {
    table: String,
    #[serde(default)]
    role: Option<String>,
    #[serde(borrow)]
    row: &'a RawValue,
}

impl<'a> Line<'a> {
    /// `None` when `raw` is no row line (pull's `id`/`parentId` in front
    /// are passed over).
    pub fn parse(raw: &'a [u8]) -> Option<Self> {
        let r: Raw<'a> = serde_json::from_slice(raw).ok()?;
        if !TABLES.contains(&r.table.as_str()) {
            return None;
        }
        let cols: indexmap_lite::Ordered<'a> = serde_json::from_str(r.row.get()).ok()?;
        Some(Self {
            table: r.table,
            role: r.role,
            row: cols.0,
            row_text: r.row.get(),
        })
    }

    /// What identifies this version of the row: its table and its bytes.
    pub fn key(&self) -> (String, String) {
        (self.table.clone(), self.row_text.to_owned())
    }

    fn get(&self, col: &str) -> Option<&'a RawValue> {
        self.row.iter().find(|(c, _)| c == col).map(|(_, v)| *v)
    }

    /// A column holding a string.
    pub fn text(&self, col: &str) -> Option<String> {
        serde_json::from_str::<String>(self.get(col)?.get()).ok()
    }

    /// A column holding an integer.
    pub fn int(&self, col: &str) -> Option<i64> {
        serde_json::from_str::<i64>(self.get(col)?.get()).ok()
    }

    /// The row's `id`.
    pub fn id(&self) -> Option<String> {
        self.text("id")
    }

    /// The JSON a column holds (a string column's text parsed, an embedded
    /// value as it is): OpenCode's `data`.
    pub fn json(&self, col: &str) -> Option<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(self.get(col)?.get()).ok()?;
        match v {
            serde_json::Value::String(s) => serde_json::from_str(&s).ok(),
            other => Some(other),
        }
    }

    /// The row's values as SQLite takes them, by column.
    pub fn values(&self) -> Vec<(String, Value)> {
        self.row
            .iter()
            .map(|(c, v)| (c.clone(), sql_value(v)))
            .collect()
    }
}

fn sql_value(v: &RawValue) -> Value {
    let t = v.get();
    if t.starts_with('{') || t.starts_with('[') {
        return Value::Text(t.to_owned());
    }
    match serde_json::from_str::<serde_json::Value>(t) {
        Ok(serde_json::Value::String(s)) => Value::Text(s),
        Ok(serde_json::Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Real(n.as_f64().unwrap_or(0.0)),
        },
        Ok(serde_json::Value::Bool(b)) => Value::Integer(i64::from(b)),
        _ => Value::Null,
    }
}

/// An object's members in order, values raw.
mod indexmap_lite {
    use serde::de::{Deserializer, MapAccess, Visitor};
    use serde_json::value::RawValue;

    pub struct Ordered<'a>(pub Vec<(String, &'a RawValue)>);

    impl<'de: 'a, 'a> serde::Deserialize<'de> for Ordered<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = Ordered<'a>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Self::Value, M::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = m.next_entry::<String, &'de RawValue>()? {
                        out.push((k, v));
                    }
                    Ok(Ordered(out))
                }
            }
            d.deserialize_map(V(std::marker::PhantomData))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_round_trips_byte_for_byte() {
        let cols: Vec<String> = ["id", "n", "cost", "data", "note", "gone"]
            .map(String::from)
            .to_vec();
        let data = r#"{"role":"assistant","path":{"cwd":"/p","root":"/p"},"x":"a\nb"}"#;
        let vals = [
            ValueRef::Text(b"msg_1"),
            ValueRef::Integer(7),
            ValueRef::Real(0.0),
            ValueRef::Text(data.as_bytes()),
            ValueRef::Text(b"[not json"),
            ValueRef::Null,
        ];
        let l = line("message", None, &cols, &vals);
        let parsed = Line::parse(&l).unwrap();
        assert_eq!(parsed.table, "message");
        assert_eq!(parsed.id().as_deref(), Some("msg_1"));
        assert_eq!(parsed.json("data").unwrap()["role"], "assistant");
        let back: Vec<Value> = parsed.values().into_iter().map(|(_, v)| v).collect();
        assert_eq!(
            back,
            vec![
                Value::Text("msg_1".into()),
                Value::Integer(7),
                Value::Real(0.0),
                Value::Text(data.into()),
                Value::Text("[not json".into()),
                Value::Null,
            ]
        );
        // With pull's ids in front, the same row.
        let with_ids = format!(
            "{{\"id\":\"e\",\"parentId\":null,{}",
            std::str::from_utf8(&l[1..]).unwrap()
        );
        assert_eq!(
            Line::parse(with_ids.as_bytes()).unwrap().key(),
            parsed.key()
        );
        assert!(Line::parse(br#"{"table":"event","row":{}}"#).is_none());
        // The head an import reads first says what the whole line says.
        for raw in [&l[..], with_ids.as_bytes()] {
            let head = Head::parse(raw).unwrap();
            let line = Line::parse(raw).unwrap();
            assert_eq!(head.table, line.table);
            assert_eq!(Some(head.id), line.id());
            assert_eq!(head.time_updated, line.int("time_updated").unwrap_or(0));
        }
        assert!(Head::parse(br#"{"table":"event","row":{"id":"x"}}"#).is_none());
        assert!(Head::parse(br#"{"table":"part","row":{"id":7}}"#).is_none());
    }
}
