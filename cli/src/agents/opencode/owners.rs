//! Which rows of a session evi wrote into OpenCode's database, and which are
//! OpenCode's own, kept beside the session's mirror (`<session
//! id>.rows.json`): an import writes a pulled version over a row only where
//! the row is still exactly what evi wrote ([`super::mirror`]).
//!
//! A row is known by 16 bytes of the SHA-256 of its table and id, what evi
//! wrote by 16 bytes of the SHA-256 of the row's text: the file is one JSON
//! object of them in hex, `null` for OpenCode's. For a session of 150,000
//! rows that is 9 MB on disk and under 10 MB in memory, where the row ids
//! and whole hashes in text took 20 MB and 37 MB. A file in the earlier
//! form (`"<table>/<id>"` keys, whole hashes) reads the same.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

type Hash16 = [u8; 16];

/// Who wrote each row here: `Some(hash)` evi (of the text it wrote), `None`
/// OpenCode.
#[derive(Default)]
pub struct Owners(HashMap<Hash16, Option<Hash16>>);

/// What evi knows of who wrote one row.
pub enum Owner {
    Unknown,
    OpenCode,
    /// Evi, these bytes ([`Owners::wrote_this`] tells whether the row is
    /// still them).
    Evi(Hash16),
}

fn row_hash(table: &str, id: &str) -> Hash16 {
    let mut h = Sha256::new();
    h.update(table.as_bytes());
    h.update(b"/");
    h.update(id.as_bytes());
    h.finalize()[..16].try_into().expect("16 bytes")
}

fn text_hash(text: &str) -> Hash16 {
    Sha256::digest(text.as_bytes())[..16]
        .try_into()
        .expect("16 bytes")
}

pub fn path(mirror: &Path) -> PathBuf {
    mirror.with_extension("rows.json")
}

impl Owners {
    /// Those kept beside `mirror`; none when the file is absent or does not
    /// read (learned again: an unknown row the database holds counts as
    /// OpenCode's).
    pub fn load(mirror: &Path) -> Self {
        std::fs::read(path(mirror))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, table: &str, id: &str) -> Owner {
        match self.0.get(&row_hash(table, id)) {
            None => Owner::Unknown,
            Some(None) => Owner::OpenCode,
            Some(Some(h)) => Owner::Evi(*h),
        }
    }

    /// Whether `text` is what evi wrote, by its hash `wrote`.
    pub fn wrote_this(wrote: &Hash16, text: &str) -> bool {
        text_hash(text) == *wrote
    }

    pub fn evis(&mut self, table: &str, id: &str, text: &str) {
        self.0.insert(row_hash(table, id), Some(text_hash(text)));
    }

    pub fn opencodes(&mut self, table: &str, id: &str) {
        self.0.insert(row_hash(table, id), None);
    }

    /// A row the database holds: OpenCode's unless evi knows it.
    pub fn know(&mut self, table: &str, id: &str) {
        self.0.entry(row_hash(table, id)).or_insert(None);
    }

    /// Writes them to `tmp` (the caller renames it into place); the file,
    /// for the caller to make durable.
    pub fn write(&self, tmp: &Path) -> std::io::Result<std::fs::File> {
        let mut w = std::io::BufWriter::new(crate::fsutil::create_private(tmp)?);
        w.write_all(b"{")?;
        // In hex without a String each (formatting them was a tenth of a
        // first push).
        let mut hexed = [0u8; 32];
        for (i, (row, by)) in self.0.iter().enumerate() {
            w.write_all(if i > 0 { b",\"" } else { b"\"" })?;
            hex::encode_to_slice(row, &mut hexed).expect("32 hex digits");
            w.write_all(&hexed)?;
            w.write_all(b"\":")?;
            match by {
                Some(h) => {
                    hex::encode_to_slice(h, &mut hexed).expect("32 hex digits");
                    w.write_all(b"\"")?;
                    w.write_all(&hexed)?;
                    w.write_all(b"\"")?;
                }
                None => w.write_all(b"null")?,
            }
        }
        w.write_all(b"}")?;
        w.into_inner().map_err(|e| e.into_error())
    }
}

impl<'de> serde::Deserialize<'de> for Owners {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Owners;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of rows and who wrote them")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Owners, M::Error> {
                let mut out = HashMap::with_capacity(m.size_hint().unwrap_or(0));
                while let Some((k, v)) = m
                    .next_entry::<std::borrow::Cow<'de, str>, Option<std::borrow::Cow<'de, str>>>(
                    )?
                {
                    // The earlier form: "<table>/<id>", whole hashes.
                    let row = match k.split_once('/') {
                        Some((table, id)) => row_hash(table, id),
                        None => sixteen(&k).ok_or_else(|| serde::de::Error::custom("a row"))?,
                    };
                    let by = match v {
                        None => None,
                        Some(h) => {
                            Some(sixteen(&h).ok_or_else(|| serde::de::Error::custom("a hash"))?)
                        }
                    };
                    out.insert(row, by);
                }
                Ok(Owners(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The first 16 bytes of a hash in hex.
fn sixteen(hex_text: &str) -> Option<Hash16> {
    let mut out = [0u8; 16];
    hex::decode_to_slice(hex_text.get(..32)?, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_in_either_form_reads_the_same() {
        let text = r#"{"id":"prt_1"}"#;
        let whole = hex::encode(Sha256::digest(text.as_bytes()));
        let earlier = format!(r#"{{"part/prt_1":"{whole}","message/msg_1":null}}"#);
        let dir = tempfile::tempdir().unwrap();
        let mirror = dir.path().join("ses_x.jsonl");
        for form in [earlier.clone(), String::new()] {
            if form.is_empty() {
                // The form written now, from the earlier one read.
                let o: Owners = serde_json::from_str(&earlier).unwrap();
                let f = o.write(&path(&mirror)).unwrap();
                drop(f);
            } else {
                std::fs::write(path(&mirror), &form).unwrap();
            }
            let o = Owners::load(&mirror);
            assert_eq!(o.len(), 2);
            match o.get("part", "prt_1") {
                Owner::Evi(h) => {
                    assert!(Owners::wrote_this(&h, text));
                    assert!(!Owners::wrote_this(&h, r#"{"id":"prt_2"}"#));
                }
                _ => panic!("evi wrote prt_1"),
            }
            assert!(matches!(o.get("message", "msg_1"), Owner::OpenCode));
            assert!(matches!(o.get("part", "prt_2"), Owner::Unknown));
        }
    }
}
