//! A hit's snippet: a short window of the message text around the first
//! match, on one line, with every token of the query marked.
//!
//! The index stores no text (it is contentless), so the snippet is cut from
//! the transcript line itself; marking compares lower-cased tokens, as the
//! index's tokenizer does (a match through diacritic folding is found but
//! not marked).

use std::collections::HashSet;

use serde::Serialize;

use super::query::tokens;

/// Characters of context before the first match.
const BEFORE: usize = 60;
/// Characters of a whole snippet.
const WIDTH: usize = 200;
/// Bytes of a message searched for the first match: past that (a huge tool
/// output) the snippet shows the start.
const SCAN: usize = 1 << 20;

/// A piece of a snippet: matched or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Part {
    pub text: String,
    #[serde(rename = "match")]
    pub hit: bool,
}

/// The snippet of `text` for the query tokens `wanted` (lower case).
pub fn snippet<'a>(text: &str, wanted: impl IntoIterator<Item = &'a str>) -> Vec<Part> {
    let wanted: HashSet<&str> = wanted.into_iter().collect();
    let head = &text[..floor_boundary(text, SCAN)];
    let flat = head.split_whitespace().collect::<Vec<_>>().join(" ");
    let is_wanted = |t: &str| wanted.contains(t.to_lowercase().as_str());
    let first = tokens(&flat)
        .find(|(_, t)| is_wanted(t))
        .map_or(0, |(at, _)| at);
    let mut start = flat[..first]
        .char_indices()
        .rev()
        .nth(BEFORE.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    if start > 0 {
        // Start at a word, not inside one.
        start = flat[start..]
            .find(' ')
            .map_or(start, |s| start + s + 1)
            .min(first);
    }
    let end = flat[start..]
        .char_indices()
        .nth(WIDTH)
        .map_or(flat.len(), |(i, _)| start + i);
    let window = &flat[start..end];
    let mut parts = Vec::new();
    let mut plain = String::new();
    if start > 0 {
        plain.push('…');
    }
    let mut pos = 0;
    for (at, t) in tokens(window) {
        if is_wanted(t) {
            plain.push_str(&window[pos..at]);
            if !plain.is_empty() {
                parts.push(Part {
                    text: std::mem::take(&mut plain),
                    hit: false,
                });
            }
            parts.push(Part {
                text: t.to_owned(),
                hit: true,
            });
            pos = at + t.len();
        }
    }
    plain.push_str(&window[pos..]);
    if end < flat.len() || head.len() < text.len() {
        plain.push('…');
    }
    if !plain.is_empty() {
        parts.push(Part {
            text: plain,
            hit: false,
        });
    }
    parts
}

/// How marks look: bold and colour on a terminal, `«…»` in a pipe or under
/// `NO_COLOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marks {
    Ansi,
    Plain,
}

/// One line of text with the matches marked.
pub fn render(parts: &[Part], marks: Marks) -> String {
    let (open, close) = match marks {
        Marks::Ansi => ("\x1b[1;33m", "\x1b[0m"),
        Marks::Plain => ("«", "»"),
    };
    let mut out = String::new();
    for p in parts {
        if p.hit {
            out.push_str(open);
            out.push_str(&p.text);
            out.push_str(close);
        } else {
            out.push_str(&p.text);
        }
    }
    out
}

fn floor_boundary(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_every_query_token_around_the_first_match() {
        let text = format!(
            "{} we fixed the Auth\n middleware today",
            "word ".repeat(40)
        );
        let s = render(&snippet(&text, ["auth", "middleware"]), Marks::Plain);
        assert!(s.starts_with('…'), "{s}");
        assert!(s.ends_with("we fixed the «Auth» «middleware» today"), "{s}");
    }

    #[test]
    fn no_match_shows_the_start() {
        let s = render(&snippet("café au lait", ["cafe"]), Marks::Plain);
        assert_eq!(s, "café au lait");
    }
}
