//! The path fields of an agent's JSON lines, rewritten through `[paths]`:
//! Claude Code and Codex both record the folder a session ran in as
//! `"cwd":"…"` and resume only a session of the folder they run in;
//! OpenCode's rows name theirs as `directory`, `cwd` and `root`.

/// `raw` with the value of every `"cwd":"…"` passed through `f` (bytes
/// untouched where `f` leaves the path as it is). Claude Code checks that
/// a session it resumes is from the directory it runs in, by the `cwd` its
/// lines record, so a session pulled into another checkout has them
/// rewritten; the rewrite is undone before ids and content are taken
/// ([`super::Agent::canonical`]), so both sides agree on both.
pub fn map_cwd<'a>(raw: &'a [u8], f: impl Fn(&str) -> String) -> std::borrow::Cow<'a, [u8]> {
    map_string_fields(raw, &["cwd"], f)
}

/// `raw` with the value of every `"<key>":"…"`, for each of `keys`, passed
/// through `f`, bytes untouched where `f` leaves the path as it is (see
/// [`map_cwd`]).
pub fn map_string_fields<'a>(
    raw: &'a [u8],
    keys: &[&str],
    f: impl Fn(&str) -> String,
) -> std::borrow::Cow<'a, [u8]> {
    let needles: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| format!("\"{k}\":\"").into_bytes())
        .collect();
    // The next `"key":"` of any of `keys` from `at`: where, and its length.
    let next = |at: usize| {
        needles
            .iter()
            .filter_map(|n| memfind(&raw[at..], n).map(|p| (p + at, n.len())))
            .min()
    };
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut at = 0;
    while let Some((pos, len)) = next(at) {
        let start = pos + len - 1;
        let Some(end) = string_end(raw, start + 1) else {
            break;
        };
        at = end + 1;
        let Ok(path) = serde_json::from_slice::<String>(&raw[start..=end]) else {
            continue;
        };
        let mapped = f(&path);
        if mapped == path {
            continue;
        }
        let o = out.get_or_insert_with(|| Vec::with_capacity(raw.len() + 64));
        o.extend_from_slice(&raw[copied..start]);
        o.extend_from_slice(serde_json::to_string(&mapped).expect("a string").as_bytes());
        copied = end + 1;
    }
    match out {
        None => std::borrow::Cow::Borrowed(raw),
        Some(mut o) => {
            o.extend_from_slice(&raw[copied..]);
            std::borrow::Cow::Owned(o)
        }
    }
}

fn memfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The index of the `"` closing the JSON string whose content starts at `i`.
fn string_end(raw: &[u8], mut i: usize) -> Option<usize> {
    while i < raw.len() {
        match raw[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_field_is_mapped_and_nothing_else() {
        let f = |p: &str| p.replace("/a/", "/b/");
        let raw = br#"{"directory":"/a/x","data":{"path":{"cwd":"/a/x","root":"/a/"},"text":"\"cwd\":\"/a/y\""},"other":"/a/z"}"#;
        let out = map_string_fields(raw, &["directory", "cwd", "root"], f);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"directory":"/b/x","data":{"path":{"cwd":"/b/x","root":"/b/"},"text":"\"cwd\":\"/a/y\""},"other":"/a/z"}"#
        );
        // Only `cwd` for Claude Code and Codex; untouched bytes borrowed.
        let out = map_cwd(raw, f);
        assert!(
            std::str::from_utf8(&out)
                .unwrap()
                .starts_with(r#"{"directory":"/a/x""#)
        );
        assert!(matches!(
            map_cwd(br#"{"cwd":"/c"}"#, f),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
