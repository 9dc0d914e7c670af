//! Parse-don't-validate newtypes for every id that names a file or a record.
//!
//! A value of one of these types has been checked against the strict format,
//! so code holding one may build a path component from it without further
//! checks: none can be empty, contain a path separator, start with a dot, or
//! hold a percent-encoded or non-ASCII character.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

use crate::limits::{KEYED_ID_HEX_LEN, SESSION_ID_MAX_LEN};

/// Why a string is not a well-formed id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error(
        "session id {0:?} is not valid: use 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot"
    )]
    Session(String),
    #[error("day {0:?} is not a valid date in YYYY-MM-DD form")]
    Day(String),
    #[error("keyed id {0:?} is not 64 lowercase hex characters")]
    Keyed(String),
}

macro_rules! string_newtype {
    ($name:ident) => {
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A session id: `[A-Za-z0-9._-]{1,128}`, no leading dot. It names the
/// transcript file `<day>/<session_id>.jsonl` on every device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);
string_newtype!(SessionId);

impl FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let ok = !s.is_empty()
            && s.len() <= SESSION_ID_MAX_LEN
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::Session(s.to_owned()))
        }
    }
}

/// A calendar day `YYYY-MM-DD` that names a transcript folder. Ordering of the
/// text is chronological order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day([u8; 10]);

impl Day {
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and '-' are ever stored.
        std::str::from_utf8(&self.0).expect("day is ASCII")
    }

    /// The (year, month, day) numbers.
    pub fn ymd(&self) -> (u32, u32, u32) {
        let s = self.as_str();
        (
            s[0..4].parse().unwrap_or(0),
            s[5..7].parse().unwrap_or(0),
            s[8..10].parse().unwrap_or(0),
        )
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Day {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Day {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        _ => 0,
    }
}

impl FromStr for Day {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let err = || IdError::Day(s.to_owned());
        let b = s.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return Err(err());
        }
        let digits = [0, 1, 2, 3, 5, 6, 8, 9];
        if !digits.iter().all(|&i| b[i].is_ascii_digit()) {
            return Err(err());
        }
        let mut raw = [0u8; 10];
        raw.copy_from_slice(b);
        let day = Day(raw);
        let (y, m, d) = day.ymd();
        if y == 0 || d == 0 || d > days_in_month(y, m) {
            return Err(err());
        }
        Ok(day)
    }
}

/// An id as the server sees it: lowercase hex of an HMAC-SHA256 under a key
/// only the user's devices hold. Used for stream (session) ids, entry ids and
/// blob names, so the server can merge and dedupe without learning content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyedId(String);
string_newtype!(KeyedId);

impl KeyedId {
    /// Wraps the raw 32 MAC bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(KEYED_ID_HEX_LEN);
        for b in bytes {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        Self(s)
    }

    /// The raw 32 MAC bytes, as stores index them. Decoded by hand: the
    /// text is 64 lowercase hex digits by construction, and a server turns
    /// every entry id of every record into these (the `hex` crate's
    /// iterator decode was a tenth of a server's CPU on a first push).
    pub fn to_bytes(&self) -> [u8; 32] {
        fn nibble(c: u8) -> u8 {
            if c <= b'9' { c - b'0' } else { c - b'a' + 10 }
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(self.0.as_bytes().chunks_exact(2)) {
            *o = (nibble(pair[0]) << 4) | nibble(pair[1]);
        }
        out
    }
}

impl FromStr for KeyedId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let ok = s.len() == KEYED_ID_HEX_LEN
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::Keyed(s.to_owned()))
        }
    }
}

#[cfg(feature = "openapi")]
mod openapi {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

    impl utoipa::PartialSchema for super::KeyedId {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[0-9a-f]{64}$"))
                .description(Some("64 lowercase hex characters (an HMAC-SHA256)"))
                .into()
        }
    }
    impl utoipa::ToSchema for super::KeyedId {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        for ok in ["a", "S1", "0193a-b_c.d", &"x".repeat(128)] {
            assert!(ok.parse::<SessionId>().is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "../../x",
            "a/b",
            "a%2Fb",
            "é",
            &"x".repeat(129),
            "a b",
        ] {
            assert!(bad.parse::<SessionId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn days() {
        for ok in ["2026-06-08", "2024-02-29", "2026-12-31"] {
            assert_eq!(ok.parse::<Day>().unwrap().as_str(), ok);
        }
        for bad in [
            "2026-13-99",
            "2025-02-29",
            "2026-6-08",
            "2026-06-08x",
            "abcd-ef-gh",
            "0000-01-01",
        ] {
            assert!(bad.parse::<Day>().is_err(), "{bad}");
        }
    }

    #[test]
    fn keyed_ids() {
        let k = KeyedId::from_bytes([0xab; 32]);
        assert_eq!(k.as_str().len(), 64);
        let raw: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5c);
        assert_eq!(KeyedId::from_bytes(raw).to_bytes(), raw);
        let text = "00ff10a09f0b1c2d3e4f5a6b7c8d9e0f1234567890abcdef00112233445566ff";
        let k: KeyedId = text.parse().unwrap();
        assert_eq!(k.to_bytes()[..4], [0x00, 0xff, 0x10, 0xa0]);
        assert_eq!(KeyedId::from_bytes(k.to_bytes()), k);
        assert_eq!(k.as_str().parse::<KeyedId>().unwrap(), k);
        for bad in [
            "",
            "../x",
            &"A".repeat(64),
            &"a".repeat(63),
            &"a".repeat(65),
        ] {
            assert!(bad.parse::<KeyedId>().is_err(), "{bad}");
        }
    }
}
