//! What the session tree keeps of another agent's line, read in one pass
//! over borrowed raw JSON fields: its ids, whether it is a message (and
//! then its role, time and fault), a title or hidden, and the project it
//! names. Building a whole [`super::Message`] (every text, tool call and
//! tool output decoded and copied) is left to the lines a reader shows.
//!
//! An outline is a shortcut, never a second set of rules: it agrees with
//! [`super::Message::read`] on every line it answers for, and answers for
//! none it is unsure of (not an object, pull's wrapper, a duplicate key, a
//! value of an unusual type): for those the tree reads the line the long
//! way. The per-agent readers sit beside the rules they mirror
//! (`claude_code::outline`, `codex::outline`).
//!
//! One difference is left, as eVi's line head leaves it: a line that is an
//! object serde reads only without building it (nested deeper than
//! serde_json's 128 levels, or holding a number beyond `f64`) outlines as
//! what its fields say, while the message built of it is its raw text.

use std::borrow::Cow;

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::transcript::entry_id::ExplicitIds;
use crate::transcript::line::{LineFault, Role};

/// What a line is to the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outline {
    /// A message ([`super::Reading::Message`]): what the tree keeps of it,
    /// and the entry it is shown under when that is not its parent.
    Message {
        role: Role,
        /// Epoch milliseconds of its RFC 3339 time.
        ts: Option<i64>,
        fault: Option<LineFault>,
        shown_parent: Option<String>,
    },
    /// The session's title ([`super::Reading::Title`]).
    Title,
    /// Nothing to read ([`super::Reading::Hidden`]).
    Hidden,
}

/// One line's outline and what else the tree takes from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineOutline {
    /// The line's own ids ([`crate::source::Agent::explicit_ids`] of the
    /// line as it is).
    pub ids: ExplicitIds,
    pub outline: Outline,
    /// The project the line names: Claude Code's `cwd` (an absolute path),
    /// or a Codex `session_meta`'s (`Some(None)`: a meta without `cwd`).
    pub project: Option<Option<String>>,
}

/// The fields of pull's wrapper and of eVi's line head, which every
/// agent's line is read for first ([`crate::transcript::line::parse_head`]).
/// Each agent's outline declares them (and `type`) among its own fields,
/// so that a line the head refuses (a duplicate of one) is refused there
/// too, and takes from them the ids of a line without its agent's own.
pub(crate) struct EviHead<'a> {
    pub id: Option<&'a RawValue>,
    pub parent_id: Option<&'a RawValue>,
    pub raw_line: Option<&'a RawValue>,
}

impl EviHead<'_> {
    /// Pull's wrapper for a line that was no object: it reads as eVi's.
    pub fn wrapped(&self) -> bool {
        self.id.and_then(string).is_some() && self.raw_line.and_then(string).is_some()
    }

    /// The ids eVi's head gives: a string `id`, and `parentId` when present
    /// (`null`, or any other value that is no string: a root).
    pub fn ids(&self) -> ExplicitIds {
        ExplicitIds {
            id: self.id.and_then(string).map(Cow::into_owned),
            parent: self.parent_id.map(|p| string(p).map(Cow::into_owned)),
        }
    }
}

/// Declares a struct whose listed fields borrow their raw JSON values
/// (`Some` when present, `null` included: see [`present`]), `name =
/// "key"` where the key is another than the field's name; fields of other
/// types follow a `;` as written.
macro_rules! raw_fields {
    ($(#[$m:meta])* struct $name:ident<$a:lifetime> {
        $($(#[$fm:meta])* $f:ident $(= $key:literal)?),* $(,)?
        $(; $($rest:tt)*)?
    }) => {
        $(#[$m])*
        #[derive(serde::Deserialize)]
        struct $name<$a> {
            $(
                $(#[$fm])*
                #[serde(
                    borrow,
                    default,
                    deserialize_with = "crate::message::outline::present"
                    $(, rename = $key)?
                )]
                $f: Option<&$a serde_json::value::RawValue>,
            )*
            $($($rest)*)?
        }
    };
}
pub(crate) use raw_fields;

/// Declares an agent's outline line as [`raw_fields!`] does, with the
/// fields of eVi's head and `type` first (`kind`; see [`EviHead`], which
/// its `head()` returns): every agent's line is read for those.
macro_rules! agent_line {
    ($(#[$m:meta])* struct $name:ident<$a:lifetime> { $($body:tt)* }) => {
        $crate::message::outline::raw_fields! {
            $(#[$m])*
            struct $name<$a> {
                id, parent_id = "parentId", _ts = "ts", _role = "role",
                raw_line = "eviRawLine", kind = "type",
                $($body)*
            }
        }

        impl<$a> $name<$a> {
            fn head(&self) -> $crate::message::outline::EviHead<$a> {
                $crate::message::outline::EviHead {
                    id: self.id,
                    parent_id: self.parent_id,
                    raw_line: self.raw_line,
                }
            }
        }
    };
}
pub(crate) use agent_line;

/// A struct read only from a JSON object: serde would read one from an
/// array too, where [`super::Message::read`] finds no field.
pub(crate) struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A field that is present (possibly `null`), as opposed to absent.
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The text of a raw JSON string (`None` for any other value), borrowed
/// when it holds no escape.
pub(crate) fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    let s = raw.get();
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(s).ok().map(Cow::Owned)
}

/// Whether a raw value is a string, and then whether it is non-empty
/// (without decoding it: any escape stands for at least one character).
pub(crate) fn str_nonempty(raw: &RawValue) -> Option<bool> {
    let s = raw.get();
    s.starts_with('"').then(|| s != "\"\"")
}

/// Whether a raw value is `true` (what `v[key] == true` asks of a `Value`).
pub(crate) fn is_true(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get() == "true")
}

/// Whether a raw value is a string equal to `want`.
pub(crate) fn is_str(raw: Option<&RawValue>, want: &str) -> bool {
    raw.and_then(string).is_some_and(|s| s == want)
}

/// Whether an optional raw value is absent or `null` (`Value::is_null` of
/// `v[key]`).
pub(crate) fn is_null(raw: Option<&RawValue>) -> bool {
    raw.is_none_or(|r| r.get() == "null")
}

/// The first non-white-space byte is `{`: the only lines an outline reads
/// (serde would read a struct from an array too).
pub(crate) fn is_object(raw: &[u8]) -> bool {
    raw.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Whether a text joined from `pieces` with `\n` is non-empty, given each
/// piece's emptiness in order: two pieces or more always are.
pub(crate) fn joined_nonempty(pieces: impl IntoIterator<Item = bool>) -> bool {
    let mut pieces = pieces.into_iter();
    match pieces.next() {
        None => false,
        Some(first) => first || pieces.next().is_some(),
    }
}

/// Whether [`super::output_text`] of a raw value (`None`: absent) is
/// non-empty; `None` when the value has a shape the check does not read
/// (the line is then read whole).
pub(crate) fn output_nonempty(raw: Option<&RawValue>) -> Option<bool> {
    #[derive(Deserialize)]
    struct Part<'a> {
        #[serde(borrow, default, rename = "type", deserialize_with = "present")]
        kind: Option<&'a RawValue>,
        #[serde(borrow, default, deserialize_with = "present")]
        text: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Wrapped<'a> {
        #[serde(borrow, default, deserialize_with = "present")]
        content: Option<&'a RawValue>,
    }
    let Some(raw) = raw else {
        return Some(false);
    };
    let s = raw.get();
    Some(match s.as_bytes().first()? {
        b'"' => str_nonempty(raw)?,
        b'n' => false,
        b'[' => {
            let parts: Vec<Obj<Part<'_>>> = serde_json::from_str(s).ok()?;
            // `parts_text`: an image type reads `[image]`, else a string
            // `text` (parts without one add nothing).
            joined_nonempty(parts.iter().filter_map(|Obj(p)| {
                if p.kind
                    .and_then(string)
                    .is_some_and(|t| t.ends_with("image"))
                {
                    return Some(true);
                }
                p.text.and_then(str_nonempty)
            }))
        }
        b'{' => {
            let w: Wrapped<'_> = serde_json::from_str(s).ok()?;
            match w.content {
                Some(c) => output_nonempty(Some(c))?,
                // The object as JSON text.
                None => true,
            }
        }
        // A number or boolean as JSON text.
        _ => true,
    })
}

/// Epoch milliseconds of a raw RFC 3339 string.
pub(crate) fn time(raw: Option<&RawValue>) -> Option<i64> {
    raw.and_then(string)
        .as_deref()
        .and_then(crate::transcript::line::parse_ts)
}
