//! Redaction inside the strings of a JSON line, leaving every other byte.

/// Whether `raw` is one valid JSON value.
pub(super) fn is_json(raw: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(raw).is_ok()
}

/// `raw` (valid JSON) with each string that `redact` changes (given its
/// decoded text) encoded again in its place; `None` when none changed.
/// Only strings that `may_hold` passes as they are written, or that hold an
/// escape (which may hide a keyword: `:\/\/`), are decoded.
pub(super) fn redact_strings(
    raw: &[u8],
    may_hold: impl Fn(&[u8]) -> bool,
    mut redact: impl FnMut(&[u8]) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'"' {
            i += 1;
            continue;
        }
        // Outside a string every `"` opens one (the line is valid JSON).
        let start = i;
        i += 1;
        while i < raw.len() && raw[i] != b'"' {
            i += if raw[i] == b'\\' { 2 } else { 1 };
        }
        let end = (i + 1).min(raw.len());
        i = end;
        let token = &raw[start..end];
        if !token.contains(&b'\\') && !may_hold(token) {
            continue;
        }
        let Ok(text) = serde_json::from_slice::<String>(token) else {
            continue;
        };
        let Some(new) = redact(text.as_bytes()) else {
            continue;
        };
        // Replacements are ASCII and cut only at rule matches of ASCII
        // patterns, so the text stays UTF-8; lossy only as a guard.
        let new = String::from_utf8_lossy(&new);
        let encoded = serde_json::to_string(&new).expect("a string encodes");
        let o = out.get_or_insert_with(|| Vec::with_capacity(raw.len()));
        o.extend_from_slice(&raw[copied..start]);
        o.extend_from_slice(encoded.as_bytes());
        copied = end;
    }
    let mut o = out?;
    o.extend_from_slice(&raw[copied..]);
    Some(o)
}
