//! The bodies of the fuzz targets: what `fuzz/` (cargo-fuzz, nightly) runs
//! on generated inputs, and what the stable test below replays on every
//! committed corpus file and regression, so CI exercises them without a
//! nightly toolchain. Each takes any bytes, must never panic, hang or
//! allocate without bound on them, and checks that what it parsed reads
//! back the same.
//!
//! - [`transcript_lines`]: the transcript reader (two day files of a
//!   session, read into a tree, every line fetched back by position);
//! - [`segment`]: the segment decoder, on a plaintext as age and zstd hand
//!   it over, and (first byte odd) a seal and open round trip;
//! - [`frames`]: the framed pull page and push batch parser;
//! - [`wire_types`]: the JSON requests and answers of the API;
//! - [`ids`]: session ids, days, keyed ids, journal names, segment kinds,
//!   timestamps and identity files.

use std::ops::ControlFlow;
use std::sync::OnceLock;

use evi_shared::api::{
    AuthResponse, BlobNames, BlobStored, Capabilities, DevicesResponse, EntryIds, ErrorBody,
    KeyCheckRequest, KeyCheckResponse, KnownEntries, LoginRequest, MissingResponse,
    PasswordChangeRequest, PasswordChangeResponse, PullQuery, PullResponse, PurgeResponse,
    PushRequest, PushResponse, RegisterRequest, StatusQuery, StatusResponse,
};
use evi_shared::frames::{self, FrameReader, SegmentHead, Tag};
use evi_shared::{Day, KeyedId, SessionId};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::sync::seal::segment::{check_device, open_plaintext_bytes};
use crate::sync::{Entry, Identity, SegmentKind, SyncKeys, open, seal};
use crate::transcript::catalog::{SessionFile, starts_with_ignore_case};
use crate::transcript::lines::{LineFetcher, walk_reader};
use crate::transcript::tree::SessionTree;

/// A target's body: any bytes in, a panic on a broken promise.
pub type Target = fn(&[u8]);

/// Every target by the name its `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/` carry.
pub const TARGETS: &[(&str, Target)] = &[
    ("transcript_lines", transcript_lines),
    ("segment", segment),
    ("frames", frames),
    ("wire_types", wire_types),
    ("ids", ids),
];

fn keys() -> &'static (Identity, SyncKeys) {
    static KEYS: OnceLock<(Identity, SyncKeys)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let identity = Identity::from_secret_str(crate::sync::TEST_IDENTITY)
            .expect("the test identity parses");
        let keys = SyncKeys::derive(&identity);
        (identity, keys)
    })
}

thread_local! {
    /// One scratch folder per thread for the transcript files.
    static SCRATCH: tempfile::TempDir = tempfile::tempdir().expect("a temp dir");
}

/// The first byte says where the input splits into two day files of one
/// session; the reader must find in them exactly the complete non-blank
/// lines, at the offsets it reports, and fetch each back by position.
pub fn transcript_lines(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = rest.len() * usize::from(cut) / 256;
    let days: [(Day, &[u8]); 2] = [
        ("2026-01-01".parse().unwrap(), &rest[..cut]),
        ("2026-01-02".parse().unwrap(), &rest[cut..]),
    ];

    // The walk over one file, against the obvious split.
    for (_, bytes) in &days {
        let mut seen = Vec::new();
        let end = walk_reader(*bytes, 0, |offset, line| {
            seen.push((offset, line.to_vec()));
            ControlFlow::Continue(())
        })
        .expect("reading from memory cannot fail");
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        assert_eq!(end.offset, complete as u64, "offset past the last line");
        assert_eq!(end.pending_bytes, (bytes.len() - complete) as u64);
        let mut want = Vec::new();
        let mut offset = 0;
        for line in bytes[..complete].split_inclusive(|&b| b == b'\n') {
            let raw = &line[..line.len() - 1];
            if !raw.iter().all(u8::is_ascii_whitespace) {
                want.push((offset as u64, raw.to_vec()));
            }
            offset += line.len();
        }
        assert_eq!(seen, want, "the lines of one file");
    }

    // The whole reader over files on disk.
    let files = SCRATCH.with(|dir| {
        days.iter()
            .map(|(day, bytes)| {
                let path = dir.path().join(format!("{}.jsonl", day.as_str()));
                std::fs::write(&path, bytes).expect("write a scratch file");
                SessionFile {
                    day: *day,
                    path,
                    len: bytes.len() as u64,
                    mtime: std::time::SystemTime::UNIX_EPOCH,
                }
            })
            .collect::<Vec<_>>()
    });
    let id: SessionId = "fuzz".parse().unwrap();
    let tree = SessionTree::load(id, files.clone()).expect("read the scratch files");
    let mut fetcher = LineFetcher::new(&files);
    for e in &tree.entries {
        let line = fetcher.fetch(e.at).expect("fetch a line the walk found");
        let file = days[e.at.file].1;
        let start = e.at.offset as usize;
        assert_eq!(&file[start..start + line.len()], &line[..]);
        assert_eq!(file.get(start + line.len()), Some(&b'\n'));
    }
    let branch = tree.active_branch();
    assert!(branch.iter().all(|&i| i < tree.entries.len()));
    for leaf in tree.leaves() {
        assert!(tree.path_to(leaf).len() <= tree.entries.len());
    }
}

/// A stream id no segment of the fuzzer's can be sealed for.
fn nobody() -> KeyedId {
    KeyedId::from_bytes([0; 32])
}

/// First byte even: the rest is a plaintext as age and zstd hand it to the
/// parser; whatever it holds, opening fails cleanly or returns content.
/// Odd: the rest, cut into lines, is sealed as one session's entries and
/// opened again, which must give back exactly what was sealed.
pub fn segment(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (identity, keys) = keys();
    if mode % 2 == 0 {
        for kind in [SegmentKind::Entries, SegmentKind::Journal] {
            let _ = open_plaintext_bytes(keys, rest, &nobody(), kind, &[]);
        }
        return;
    }
    let session: SessionId = "fuzz-session".parse().unwrap();
    let day: Day = "2026-01-01".parse().unwrap();
    let mut entries: Vec<Entry> = Vec::new();
    for (n, line) in rest.split(|&b| b == b'\n').enumerate().take(64) {
        entries.push(Entry {
            id: format!("e{n}"),
            parent: n.checked_sub(1).map(|p| format!("e{p}")),
            day,
            line: line.to_vec(),
            line_blob: None,
        });
    }
    let sealed = match seal(keys, identity, &session, &entries) {
        Ok(s) => s,
        Err(e) => panic!("sealing plain lines failed: {e}"),
    };
    let opened = open(
        keys,
        identity,
        &sealed.stream,
        sealed.kind,
        &sealed.entry_ids,
        &sealed.ciphertext,
    )
    .expect("a sealed segment opens");
    match opened {
        crate::sync::OpenedSegment::Entries {
            session: s,
            entries: e,
        } => assert_eq!((s, e), (session, entries)),
        other => panic!("entries came back as {other:?}"),
    }
    // Under any other ids it is refused.
    assert!(
        open(
            keys,
            identity,
            &nobody(),
            sealed.kind,
            &sealed.entry_ids,
            &sealed.ciphertext
        )
        .is_err()
    );
}

/// A framed body as the client reads a pull page and the server a push
/// batch; a page that reads writes back to a body that reads the same.
pub fn frames(data: &[u8]) {
    const MAX_BODY: u32 = 1 << 16;
    if let Ok(page) = crate::sync::remote::records::read_framed_page(data, MAX_BODY) {
        let mut body = frames::start_body();
        for r in &page.records {
            frames::write_frame(&mut body, Tag::Record, &r.head, &r.ciphertext);
        }
        let end = frames::PageEnd {
            next_after: page.next_after,
            more: page.more,
        };
        frames::write_frame(&mut body, Tag::End, &end, &[]);
        let again = crate::sync::remote::records::read_framed_page(&body[..], MAX_BODY)
            .expect("a written page reads");
        assert_eq!(again, page);
    }
    let mut reader = FrameReader::new(data, MAX_BODY);
    while let Ok(Some(frame)) = reader.next_frame() {
        assert!(frame.body.len() <= MAX_BODY as usize);
        if frame.tag == Tag::Segment
            && let Ok(head) = frame.head::<SegmentHead>()
        {
            let mut body = frames::start_body();
            frames::write_frame(&mut body, Tag::Segment, &head, &frame.body);
            let got = FrameReader::new(&body[..], MAX_BODY)
                .next_frame()
                .expect("a written frame reads")
                .expect("one frame");
            assert_eq!(got.head::<SegmentHead>().unwrap(), head);
            assert_eq!(got.body, frame.body);
        }
    }
}

/// `T` from JSON; if it parses, it writes back to JSON that parses to the
/// same value.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<T>(data) {
        let text = serde_json::to_vec(&v).expect("a parsed value serializes");
        let again: T = serde_json::from_slice(&text).expect("what was written parses");
        assert_eq!(again, v, "{}", String::from_utf8_lossy(&text));
    }
}

/// Every request and answer of the API, from the same bytes.
pub fn wire_types(data: &[u8]) {
    round_trip::<RegisterRequest>(data);
    round_trip::<LoginRequest>(data);
    round_trip::<AuthResponse>(data);
    round_trip::<DevicesResponse>(data);
    round_trip::<PasswordChangeRequest>(data);
    round_trip::<PasswordChangeResponse>(data);
    round_trip::<KeyCheckRequest>(data);
    round_trip::<KeyCheckResponse>(data);
    round_trip::<PushRequest>(data);
    round_trip::<PushResponse>(data);
    round_trip::<EntryIds>(data);
    round_trip::<KnownEntries>(data);
    round_trip::<PullQuery>(data);
    round_trip::<PullResponse>(data);
    round_trip::<StatusQuery>(data);
    round_trip::<StatusResponse>(data);
    round_trip::<BlobNames>(data);
    round_trip::<MissingResponse>(data);
    round_trip::<BlobStored>(data);
    round_trip::<PurgeResponse>(data);
    round_trip::<Capabilities>(data);
    round_trip::<ErrorBody>(data);
}

/// Every id parser on the same text: what parses prints back as itself
/// and parses again; a day's numbers are a real date.
pub fn ids(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    if let Ok(s) = text.parse::<SessionId>() {
        assert_eq!(s.as_str(), text);
        assert!(!text.starts_with('.') && (1..=128).contains(&text.len()));
        assert!(check_device(text).is_ok());
    } else {
        assert!(check_device(text).is_err());
    }
    if let Ok(d) = text.parse::<Day>() {
        assert_eq!(d.as_str(), text);
        let (y, m, day) = d.ymd();
        assert!(
            chrono::NaiveDate::from_ymd_opt(y as i32, m, day).is_some(),
            "{text}"
        );
    }
    if let Ok(k) = text.parse::<KeyedId>() {
        assert_eq!(k.as_str(), text);
        assert_eq!(k.as_str().parse::<KeyedId>().unwrap(), k);
    }
    if let Ok(kind) = text.parse::<SegmentKind>() {
        assert_eq!(kind.as_str(), text);
    }
    let _ = crate::transcript::line::parse_ts(text);
    let _ = Identity::parse_file(text);
    // An id prefix as typed (`evi sessions show 01JB…`), against an id.
    if let Some((id, prefix)) = text.split_once('\0') {
        assert_eq!(
            starts_with_ignore_case(id, prefix),
            id.to_ascii_lowercase()
                .starts_with(&prefix.to_ascii_lowercase()),
            "{id:?} {prefix:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every committed corpus file and regression of each target, through
    /// the same body the fuzzer runs.
    #[test]
    fn the_committed_corpora_replay_without_a_crash() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut replayed = 0;
        for (name, target) in TARGETS {
            let mut any = false;
            for sub in ["corpus", "regressions"] {
                let Ok(dir) = std::fs::read_dir(root.join(sub).join(name)) else {
                    continue;
                };
                for file in dir {
                    let path = file.unwrap().path();
                    let data = std::fs::read(&path).unwrap();
                    let run = std::panic::catch_unwind(|| target(&data));
                    assert!(run.is_ok(), "{name} panics on {}", path.display());
                    replayed += 1;
                    any = true;
                }
            }
            assert!(any, "no corpus for fuzz target {name}");
        }
        eprintln!("replayed {replayed} corpus files");
    }
}
