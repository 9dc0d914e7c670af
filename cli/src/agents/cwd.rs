//! The `cwd` fields of an agent's JSON lines, rewritten through `[paths]`:
//! Claude Code and Codex both record the folder a session ran in as
//! `"cwd":"…"` and resume only a session of the folder they run in.

/// `raw` with the value of every `"cwd":"…"` passed through `f` (bytes
/// untouched where `f` leaves the path as it is). Claude Code checks that
/// a session it resumes is from the directory it runs in, by the `cwd` its
/// lines record, so a session pulled into another checkout has them
/// rewritten; the rewrite is undone before ids and content are taken
/// ([`super::Agent::canonical`]), so both sides agree on both.
pub fn map_cwd<'a>(raw: &'a [u8], f: impl Fn(&str) -> String) -> std::borrow::Cow<'a, [u8]> {
    const KEY: &[u8] = b"\"cwd\":\"";
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut at = 0;
    while let Some(pos) = memfind(&raw[at..], KEY).map(|p| p + at) {
        let start = pos + KEY.len() - 1;
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
