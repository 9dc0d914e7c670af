//! A query as people type it, turned into an FTS5 `MATCH` expression that
//! can only mean "these words, these phrases".
//!
//! Nothing a person types reaches FTS5's query syntax: the text is cut into
//! terms (a bare word, or a `"quoted phrase"`; an unbalanced quote runs to
//! the end), each term into tokens (runs of letters and digits, as FTS5's
//! `unicode61` tokenizer cuts them), and every term is written back as one
//! quoted phrase of those tokens. `AND`, `NEAR(`, `*`, `^`, column filters
//! and quotes therefore search for themselves (or, being punctuation, for
//! nothing), never change the query. A word with inner punctuation
//! (`auth_middleware`, `v1.2`) becomes a phrase of its parts, which is what
//! the index holds.

/// At most this many bytes of query text: a longer one is a mistake (a
/// pasted file), not a search.
pub const MAX_QUERY_BYTES: usize = 1000;

/// At most this many tokens in all: each is one more posting list to join.
pub const MAX_TOKENS: usize = 32;

/// A query that cannot be searched, with what to do about it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    #[error("the query is {bytes} bytes long; at most {MAX_QUERY_BYTES} are searched")]
    TooLong { bytes: usize },
    #[error("the query has {count} words; at most {MAX_TOKENS} are searched")]
    TooManyWords { count: usize },
    #[error("the query has no word to search for (only punctuation or spaces)")]
    NoWords,
}

/// One term of a query: a word (one token, or several for a word with
/// inner punctuation) or a quoted phrase. Its tokens must appear in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// Lower-case tokens.
    pub tokens: Vec<String>,
}

/// A parsed query: every term must match (AND).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub terms: Vec<Term>,
}

impl Query {
    pub fn parse(text: &str) -> Result<Self, QueryError> {
        if text.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong { bytes: text.len() });
        }
        let mut terms = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
            rest = &rest[start..];
            let (raw, next) = if let Some(quoted) = rest.strip_prefix('"') {
                match quoted.find('"') {
                    Some(end) => (&quoted[..end], &quoted[end + 1..]),
                    None => (quoted, ""),
                }
            } else {
                let end = rest
                    .find(|c: char| c.is_whitespace() || c == '"')
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            let tokens = tokens(raw)
                .map(|(_, t)| t.to_lowercase())
                .collect::<Vec<_>>();
            if !tokens.is_empty() {
                terms.push(Term { tokens });
            }
            rest = next;
        }
        let count: usize = terms.iter().map(|t| t.tokens.len()).sum();
        if count == 0 {
            return Err(QueryError::NoWords);
        }
        if count > MAX_TOKENS {
            return Err(QueryError::TooManyWords { count });
        }
        Ok(Self { terms })
    }

    /// The FTS5 expression: every term a quoted phrase. Tokens hold only
    /// letters and digits, so no quote needs escaping.
    pub fn to_match(&self) -> String {
        self.terms
            .iter()
            .map(|t| format!("\"{}\"", t.tokens.join(" ")))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// The FTS5 expression of every token on its own, in any order: what a
    /// line must hold to hold the query (see `find`'s phrase search).
    pub fn words_match(&self) -> String {
        self.all_tokens()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// Every token of every term, for marking matches in a snippet.
    pub fn all_tokens(&self) -> impl Iterator<Item = &str> {
        self.terms
            .iter()
            .flat_map(|t| t.tokens.iter().map(String::as_str))
    }
}

/// The tokens of `text` with their byte offsets: maximal runs of letters and
/// digits, everything else a separator (NUL included).
pub fn tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let rest = &text[pos..];
        let start = pos + rest.find(char::is_alphanumeric)?;
        let len = text[start..]
            .find(|c: char| !c.is_alphanumeric())
            .unwrap_or(text.len() - start);
        pos = start + len;
        Some((start, &text[start..start + len]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(q: &str) -> String {
        Query::parse(q).unwrap().to_match()
    }

    #[test]
    fn words_and_phrases() {
        assert_eq!(m("auth middleware"), r#""auth" AND "middleware""#);
        assert_eq!(
            m(r#"fix "the auth" now"#),
            r#""fix" AND "the auth" AND "now""#
        );
        assert_eq!(m("auth_middleware"), r#""auth middleware""#);
        assert_eq!(m("Café"), r#""café""#);
        let q = Query::parse(r#"fix "the auth""#).unwrap();
        assert_eq!(q.words_match(), r#""fix" AND "the" AND "auth""#);
    }

    #[test]
    fn fts_syntax_is_literal() {
        assert_eq!(m("a AND b"), r#""a" AND "and" AND "b""#);
        assert_eq!(m("NEAR(a b)"), r#""near a" AND "b""#);
        assert_eq!(m("body:x* ^y -z"), r#""body x" AND "y" AND "z""#);
        assert_eq!(
            m(r#"open "quote never closes"#),
            r#""open" AND "quote never closes""#
        );
        assert_eq!(m("nul\0byte"), r#""nul byte""#);
        assert_eq!(m(r#""""a""""#), r#""a""#);
    }

    #[test]
    fn hostile_queries_are_clear_errors() {
        assert_eq!(Query::parse("* \" ( )"), Err(QueryError::NoWords));
        assert_eq!(Query::parse(""), Err(QueryError::NoWords));
        let long = "a ".repeat(50_000);
        assert!(matches!(
            Query::parse(&long),
            Err(QueryError::TooLong { .. })
        ));
        let many = "w ".repeat(40);
        assert_eq!(
            Query::parse(&many),
            Err(QueryError::TooManyWords { count: 40 })
        );
    }
}
