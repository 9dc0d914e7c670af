//! What a device name may hold. A name is shown in every device list of the
//! account, so it must show what it is (no control, reordering or
//! line-breaking character) and show something (not only invisible
//! characters). The rule is two tables of character ranges: the check and
//! the OpenAPI document's `pattern` are both made from them, so the
//! document says exactly what the server takes. Lengths count characters,
//! as JSON Schema's `maxLength` does.

use evi_shared::limits::DEVICE_NAME_MAX_LEN;

/// Never allowed: control characters (Unicode Cc), bidirectional
/// embeddings, overrides, isolates and marks, and line and paragraph
/// separators: a name holding one could show as another name in a list.
const FORBIDDEN: &[(char, char)] = &[
    ('\u{0000}', '\u{001F}'),
    ('\u{007F}', '\u{009F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{200E}', '\u{200F}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2066}', '\u{2069}'),
];

/// Show nothing: white space (Unicode White_Space), the default ignorable
/// code points (zero-width spaces and joiners, fillers, variation
/// selectors, tags), and the blank braille pattern. A name needs at least
/// one character outside this table and [`FORBIDDEN`].
const INVISIBLE: &[(char, char)] = &[
    ('\u{0009}', '\u{000D}'),
    ('\u{0020}', '\u{0020}'),
    ('\u{0085}', '\u{0085}'),
    ('\u{00A0}', '\u{00A0}'),
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{2000}', '\u{200F}'),
    ('\u{2028}', '\u{202F}'),
    ('\u{205F}', '\u{206F}'),
    ('\u{2800}', '\u{2800}'),
    ('\u{3000}', '\u{3000}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

fn within(table: &[(char, char)], c: char) -> bool {
    table.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Whether `name` is a device name the server takes.
pub fn is_valid(name: &str) -> bool {
    let chars = name.chars().count();
    (1..=DEVICE_NAME_MAX_LEN).contains(&chars)
        && !name.chars().any(|c| within(FORBIDDEN, c))
        && name.chars().any(|c| !within(INVISIBLE, c))
}

/// `name` as a list shows it, for telling names apart: without the
/// characters that show nothing (zero-width spaces and joiners, soft
/// hyphens, variation selectors, …), its runs of white space one space, and
/// trimmed. `laptop` and `lap\u{200B}top` show alike, so an account's second
/// one is named `lap\u{200B}top-2` as a second `laptop` would be; `Laptop`
/// still shows as another name.
pub fn shown(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_whitespace() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
        } else if !within(INVISIBLE, c) {
            out.push(c);
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// The rule as a regular expression (ECMA-262 `\uXXXX` escapes, and
/// `\UXXXXXXXX` past the BMP as Python's and Rust's engines read it), for
/// the document's `pattern`; the length goes in `minLength`/`maxLength`.
pub fn pattern() -> String {
    fn escape(c: char) -> String {
        match u32::from(c) {
            n @ 0..=0xFFFF => format!("\\u{n:04X}"),
            n => format!("\\U{n:08X}"),
        }
    }
    fn ranges(tables: &[&[(char, char)]]) -> String {
        let mut out = String::new();
        for &(lo, hi) in tables.iter().flat_map(|t| t.iter()) {
            out += &escape(lo);
            if hi != lo {
                out.push('-');
                out += &escape(hi);
            }
        }
        out
    }
    let allowed = format!("[^{}]", ranges(&[FORBIDDEN]));
    let visible = format!("[^{}]", ranges(&[FORBIDDEN, INVISIBLE]));
    format!("^{allowed}*{visible}{allowed}*$")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_show_alike_are_one_name() {
        for (a, b) in [
            ("laptop", "lap\u{200B}top"),
            ("laptop", "laptop\u{FE0F}"),
            ("laptop", "\u{2060}laptop "),
            ("my laptop", "my\u{00A0}\u{00A0}laptop"),
            ("laptop", "lap\u{00AD}top"),
        ] {
            assert_eq!(shown(a), shown(b), "{a:?} and {b:?}");
        }
        for (a, b) in [
            ("laptop", "Laptop"),
            ("my laptop", "mylaptop"),
            ("pc-1", "pc-2"),
        ] {
            assert_ne!(shown(a), shown(b), "{a:?} and {b:?}");
        }
    }

    #[test]
    fn device_names_must_show_what_they_are() {
        for ok in [
            "laptop",
            "Büro-PC",
            "laptop 💻",
            "👩\u{200D}💻",
            "a\u{00A0}b",
            "ノート",
        ] {
            assert!(is_valid(ok), "{ok:?}");
        }
        for bad in [
            "",
            " ",
            "\u{202E}abc",
            "a\u{2067}b",
            "\u{200B}\u{200C}",
            "\u{E0041}",
            "x\u{2029}y",
            "\u{1B}[31m",
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_length_counts_characters() {
        assert!(is_valid(&"é".repeat(DEVICE_NAME_MAX_LEN)));
        assert!(!is_valid(&"a".repeat(DEVICE_NAME_MAX_LEN + 1)));
    }

    /// The tables cover what the standard library calls control and white
    /// space, so no such character slips through a gap in a table.
    #[test]
    fn the_tables_cover_control_and_white_space() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            if c.is_control() {
                assert!(within(FORBIDDEN, c), "{c:?} is a control character");
            }
            if c.is_whitespace() {
                assert!(
                    within(INVISIBLE, c) || within(FORBIDDEN, c),
                    "{c:?} is white space"
                );
            }
        }
    }

    #[test]
    fn the_pattern_is_made_of_the_tables() {
        let p = pattern();
        assert!(p.starts_with("^[^\\u0000-\\u001F\\u007F-\\u009F"), "{p}");
        assert!(p.contains("\\U000E0000-\\U000E0FFF"), "{p}");
    }
}
