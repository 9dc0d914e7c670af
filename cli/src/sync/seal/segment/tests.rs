use std::io::{Read, Write};
use std::iter;

use super::*;
use crate::sync::TEST_IDENTITY;
use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::SyncKeys;

fn fixture() -> (SyncKeys, Identity) {
    let id = Identity::from_secret_str(TEST_IDENTITY).unwrap();
    (SyncKeys::derive(&id), id)
}

fn sid(s: &str) -> SessionId {
    s.parse().unwrap()
}

fn day(s: &str) -> Day {
    s.parse().unwrap()
}

pub(crate) fn sample_entries() -> Vec<Entry> {
    vec![
        Entry {
            id: "a1".into(),
            parent: None,
            day: day("2026-06-08"),
            line: br#"{"role":"user","content":"hello"}"#.to_vec(),
            line_blob: None,
        },
        Entry {
            id: "b2".into(),
            parent: Some("a1".into()),
            day: day("2026-06-08"),
            line: vec![0xff, 0xfe, b'x', b'\r'],
            line_blob: None,
        },
        Entry {
            id: "c3".into(),
            parent: Some("b2".into()),
            day: day("2026-06-09"),
            line: b"not json".to_vec(),
            line_blob: None,
        },
    ]
}

fn sealed() -> (SyncKeys, Identity, SealedSegment) {
    let (k, id) = fixture();
    let s = seal(&k, &id, &sid("sess-1"), &sample_entries()).unwrap();
    (k, id, s)
}

fn reopen(k: &SyncKeys, id: &Identity, s: &SealedSegment) -> Result<OpenedSegment, SegmentError> {
    open(k, id, &s.stream, s.kind, &s.entry_ids, &s.ciphertext)
}

#[test]
fn round_trip_entries() {
    let (k, id, s) = sealed();
    assert_eq!(s.kind, SegmentKind::Entries);
    assert_eq!(s.stream, k.session_key(&sid("sess-1")));
    let expect: Vec<_> = sample_entries()
        .iter()
        .map(|e| k.entry_key(&sid("sess-1"), &e.id))
        .collect();
    assert_eq!(s.entry_ids, expect);
    assert_eq!(
        reopen(&k, &id, &s).unwrap(),
        OpenedSegment::Entries {
            session: sid("sess-1"),
            entries: sample_entries()
        }
    );
}

#[test]
fn round_trip_journal() {
    let (k, id) = fixture();
    let lines = vec![
        JournalLine {
            seq: 1,
            line: br#"{"seq":1,"path":"a.rs","op":"write"}"#.to_vec(),
        },
        JournalLine {
            seq: 7,
            line: b"{}".to_vec(),
        },
        // A rewind reuses numbers: same seq, other content, another entry.
        JournalLine {
            seq: 7,
            line: br#"{"seq":7}"#.to_vec(),
        },
    ];
    let s = seal_journal(&k, &id, "laptop-01abcdef", &lines).unwrap();
    assert_eq!(s.kind, SegmentKind::Journal);
    assert_eq!(s.stream, k.journal_stream_key("laptop-01abcdef"));
    let ids: Vec<_> = lines
        .iter()
        .map(|l| k.journal_line_key("laptop-01abcdef", &l.line))
        .collect();
    assert_eq!(s.entry_ids, ids);
    assert_eq!(
        reopen(&k, &id, &s).unwrap(),
        OpenedSegment::Journal {
            device: "laptop-01abcdef".into(),
            lines
        }
    );
    assert!(matches!(
        seal_journal(&k, &id, "../evil", &[]),
        Err(SegmentError::BadDevice(_))
    ));
}

#[test]
fn identical_journal_lines_are_one_entry() {
    let (k, id) = fixture();
    let l = |seq: u64, line: &[u8]| JournalLine {
        seq,
        line: line.to_vec(),
    };
    let lines = [l(1, b"{\"a\":1}"), l(2, b"{\"b\":2}"), l(3, b"{\"a\":1}")];
    let s = seal_journal(&k, &id, "laptop-01abcdef", &lines).unwrap();
    assert_eq!(s.entry_ids.len(), 2);
    match reopen(&k, &id, &s).unwrap() {
        // The first of the two is kept, with its seq.
        OpenedSegment::Journal { lines: got, .. } => assert_eq!(got, lines[..2]),
        other => panic!("{other:?}"),
    }
    // A segment listing one content twice was not sealed by evi: refused.
    let body = BodyRef::Journal {
        device: b"laptop-01abcdef",
        lines: &lines,
    };
    let s = seal_raw_for_test(&k, &id, FORMAT_VERSION, &body).unwrap();
    let err = reopen(&k, &id, &s).unwrap_err();
    assert!(matches!(err, SegmentError::Duplicate(_)), "{err}");
}

fn blob_entry() -> Entry {
    Entry {
        id: "big".into(),
        parent: Some("c3".into()),
        day: day("2026-06-09"),
        line: Vec::new(),
        line_blob: Some(LineBlob {
            sha256_hex: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
            len: 12 << 20,
        }),
    }
}

#[test]
fn round_trip_entries_with_a_line_blob() {
    let (k, id) = fixture();
    let mut entries = sample_entries();
    entries.push(blob_entry());
    // A root entry whose line is a blob too: both flag bits apart.
    entries.push(Entry {
        id: "root-big".into(),
        parent: None,
        ..blob_entry()
    });
    let s = seal(&k, &id, &sid("sess-1"), &entries).unwrap();
    assert_eq!(
        reopen(&k, &id, &s).unwrap(),
        OpenedSegment::Entries {
            session: sid("sess-1"),
            entries
        }
    );
}

#[test]
fn bad_line_blobs_are_refused() {
    let (k, id) = fixture();
    let with = |f: fn(&mut Entry)| {
        let mut e = blob_entry();
        f(&mut e);
        seal(&k, &id, &sid("s"), &[e])
    };
    let cases: [fn(&mut Entry); 5] = [
        |e| {
            e.line_blob
                .as_mut()
                .unwrap()
                .sha256_hex
                .make_ascii_uppercase()
        },
        |e| e.line_blob.as_mut().unwrap().sha256_hex.truncate(62),
        |e| {
            e.line_blob
                .as_mut()
                .unwrap()
                .sha256_hex
                .replace_range(..1, "g")
        },
        |e| e.line_blob.as_mut().unwrap().len = 0,
        |e| e.line = b"also here".to_vec(),
    ];
    for (i, f) in cases.into_iter().enumerate() {
        let err = with(f).unwrap_err();
        assert!(
            matches!(err, SegmentError::BadLineBlob { .. }),
            "{i}: {err}"
        );
    }
    // Sealed anyway (not by evi): a zero length does not open.
    let body = BodyRef::Entries {
        session: b"s",
        entries: vec![RawEntry {
            id: b"a1",
            parent: None,
            day: b"2026-06-08",
            line: b"",
            blob: Some((0, [7; 32])),
        }],
    };
    let s = seal_raw_for_test(&k, &id, FORMAT_VERSION, &body).unwrap();
    let err = reopen(&k, &id, &s).unwrap_err();
    assert!(matches!(err, SegmentError::BadLineBlob { .. }), "{err}");
    // Format 1 has no line blobs to write.
    assert!(seal_raw_for_test(&k, &id, 1, &body).is_err());
}

/// `plain` as the ciphertext of a segment (valid age, valid zstd).
fn encrypt_plain(id: &Identity, plain: &[u8]) -> Vec<u8> {
    let enc =
        age::Encryptor::with_recipients(iter::once(id.recipient() as &dyn age::Recipient)).unwrap();
    let mut w = enc.wrap_output(Vec::new()).unwrap();
    w.write_all(&zstd::encode_all(plain, 3).unwrap()).unwrap();
    w.finish().unwrap()
}

/// The plaintext of `body` in format `version` and its outer ids.
fn plaintext(
    k: &SyncKeys,
    id: &Identity,
    version: u8,
    body: &BodyRef<'_>,
) -> (Vec<u8>, SealedSegment) {
    let s = seal_raw_for_test(k, id, version, body).unwrap();
    let (plain, _) =
        write_plaintext(k, version, body, &s.stream, &s.entry_ids, Vec::new()).unwrap();
    (plain, s)
}

#[test]
fn format_1_still_opens() {
    let (k, id) = fixture();
    let sample = sample_entries();
    let body = BodyRef::Entries {
        session: b"sess-1",
        entries: sample
            .iter()
            .map(|e| RawEntry::try_from(e).unwrap())
            .collect(),
    };
    let (plain, s) = plaintext(&k, &id, 1, &body);
    assert!(plain.starts_with(b"EVISEG\x01\x01"));
    assert_eq!(
        reopen(&k, &id, &s).unwrap(),
        OpenedSegment::Entries {
            session: sid("sess-1"),
            entries: sample
        }
    );
    // Format 1 journals: named by the bare device, lines by number.
    let lines = vec![
        JournalLine {
            seq: 1,
            line: b"{}".to_vec(),
        },
        JournalLine {
            seq: 2,
            line: b"{}".to_vec(),
        },
    ];
    let body = BodyRef::Journal {
        device: b"laptop",
        lines: &lines,
    };
    let s = seal_raw_for_test(&k, &id, 1, &body).unwrap();
    assert_eq!(s.stream, k.journal_stream_key("laptop"));
    assert_eq!(
        s.entry_ids,
        vec![
            k.journal_entry_key("laptop", 1),
            k.journal_entry_key("laptop", 2)
        ]
    );
    assert_eq!(
        reopen(&k, &id, &s).unwrap(),
        OpenedSegment::Journal {
            device: "laptop".into(),
            lines: lines.clone()
        }
    );
    // ... where a number, not a content, must not repeat.
    let twice = [lines[0].clone(), lines[0].clone()];
    let s = seal_raw_for_test(
        &k,
        &id,
        1,
        &BodyRef::Journal {
            device: b"laptop",
            lines: &twice,
        },
    )
    .unwrap();
    let err = reopen(&k, &id, &s).unwrap_err();
    assert!(matches!(err, SegmentError::Duplicate(_)), "{err}");
}

#[test]
fn version_byte_is_bound_and_flags_are_checked() {
    let (k, id) = fixture();
    let sample = sample_entries();
    let body = BodyRef::Entries {
        session: b"sess-1",
        entries: sample
            .iter()
            .map(|e| RawEntry::try_from(e).unwrap())
            .collect(),
    };
    let open_plain = |s: &SealedSegment, plain: &[u8]| {
        open(
            &k,
            &id,
            &s.stream,
            s.kind,
            &s.entry_ids,
            &encrypt_plain(&id, plain),
        )
    };
    // Format 1 bytes relabelled as format 2 parse alike (a 0|1 parent byte
    // is valid flags), but the MAC covers the version.
    let (mut plain, s) = plaintext(&k, &id, 1, &body);
    assert!(open_plain(&s, &plain).is_ok());
    plain[6] = 2;
    assert!(matches!(open_plain(&s, &plain), Err(SegmentError::Mac)));
    plain[6] = 3;
    assert!(matches!(
        open_plain(&s, &plain),
        Err(SegmentError::Version(3))
    ));
    // The first entry's flags byte: after magic, version, kind,
    // lp("sess-1"), count and lp("a1").
    let flags_at = 8 + 4 + 6 + 4 + 4 + 2;
    let (mut plain, s) = plaintext(&k, &id, 2, &body);
    assert_eq!(plain[flags_at], 0);
    plain[flags_at] = 4;
    assert!(matches!(
        open_plain(&s, &plain),
        Err(SegmentError::Malformed(_))
    ));
    let (mut plain, s) = plaintext(&k, &id, 1, &body);
    plain[flags_at] = 2;
    assert!(matches!(
        open_plain(&s, &plain),
        Err(SegmentError::Malformed(_))
    ));
}

#[test]
fn ciphertext_is_a_standard_age_file_of_zstd_plaintext() {
    let (k, id, s) = sealed();
    let dec = age::Decryptor::new(&s.ciphertext[..]).unwrap();
    let mut compressed = Vec::new();
    dec.decrypt(iter::once(id.age_identity() as &dyn age::Identity))
        .unwrap()
        .read_to_end(&mut compressed)
        .unwrap();
    let plain = zstd::decode_all(&compressed[..]).unwrap();
    let sample = sample_entries();
    let body = BodyRef::Entries {
        session: b"sess-1",
        entries: sample
            .iter()
            .map(|e| RawEntry::try_from(e).unwrap())
            .collect::<Vec<_>>(),
    };
    let (expected, _) = write_plaintext(
        &k,
        FORMAT_VERSION,
        &body,
        &s.stream,
        &s.entry_ids,
        Vec::new(),
    )
    .unwrap();
    assert_eq!(plain, expected);
    assert!(plain.starts_with(b"EVISEG\x02\x01"));
}

#[test]
fn seal_refuses_bad_input() {
    let (k, id) = fixture();
    assert!(matches!(
        seal(&k, &id, &sid("s"), &[]),
        Err(SegmentError::Empty)
    ));
    let mut dup = sample_entries();
    dup[2].id = "a1".into();
    assert!(matches!(
        seal(&k, &id, &sid("s"), &dup),
        Err(SegmentError::Duplicate(_))
    ));
    let mut nl = sample_entries();
    nl[0].line = b"two\nlines".to_vec();
    assert!(matches!(
        seal(&k, &id, &sid("s"), &nl),
        Err(SegmentError::NewlineInLine(_))
    ));
}

// --- tampering ---------------------------------------------------------------

#[test]
fn flipped_bits_anywhere_fail_to_decrypt() {
    let (k, id, s) = sealed();
    // Header, nonce, and payload positions.
    for pos in [10, s.ciphertext.len() / 2, s.ciphertext.len() - 1] {
        let mut t = s.clone();
        t.ciphertext[pos] ^= 0x01;
        let err = reopen(&k, &id, &t).unwrap_err();
        assert!(matches!(err, SegmentError::Decrypt(_)), "at {pos}: {err}");
    }
    let mut t = s.clone();
    t.ciphertext.truncate(t.ciphertext.len() - 5);
    assert!(matches!(reopen(&k, &id, &t), Err(SegmentError::Decrypt(_))));
}

#[test]
fn other_identity_cannot_open() {
    let (k, _, s) = sealed();
    let other = Identity::generate();
    assert!(matches!(
        reopen(&k, &other, &s),
        Err(SegmentError::Decrypt(_))
    ));
}

#[test]
fn served_under_another_stream_id() {
    let (k, id, s) = sealed();
    // Another real stream of the same user (a swap), and a random id.
    for other in [k.session_key(&sid("sess-2")), KeyedId::from_bytes([9; 32])] {
        let err = open(&k, &id, &other, s.kind, &s.entry_ids, &s.ciphertext).unwrap_err();
        assert!(matches!(err, SegmentError::StreamMismatch { .. }), "{err}");
    }
}

#[test]
fn served_with_reordered_other_or_fewer_entry_ids() {
    let (k, id, s) = sealed();
    let mut reordered = s.entry_ids.clone();
    reordered.swap(0, 1);
    let mut replaced = s.entry_ids.clone();
    replaced[2] = k.entry_key(&sid("sess-1"), "zz");
    let fewer = s.entry_ids[..2].to_vec();
    let mut more = s.entry_ids.clone();
    more.push(k.entry_key(&sid("sess-1"), "d4"));
    for (ids, index) in [(reordered, 0), (replaced, 2), (fewer, 2), (more, 3)] {
        let err = open(&k, &id, &s.stream, s.kind, &ids, &s.ciphertext).unwrap_err();
        match err {
            SegmentError::EntryIdsMismatch { index: i } => assert_eq!(i, index),
            other => panic!("expected EntryIdsMismatch, got {other}"),
        }
    }
}

#[test]
fn served_as_another_kind() {
    let (k, id, s) = sealed();
    let err = open(
        &k,
        &id,
        &s.stream,
        SegmentKind::Journal,
        &s.entry_ids,
        &s.ciphertext,
    )
    .unwrap_err();
    assert!(matches!(err, SegmentError::KindMismatch { .. }), "{err}");
}

#[test]
fn replayed_segment_from_another_session_is_refused() {
    let (k, id) = fixture();
    let a = seal(&k, &id, &sid("sess-a"), &sample_entries()).unwrap();
    let b = seal(&k, &id, &sid("sess-b"), &sample_entries()).unwrap();
    // The server answers b's record with a's ciphertext.
    let err = open(&k, &id, &b.stream, b.kind, &b.entry_ids, &a.ciphertext).unwrap_err();
    assert!(matches!(err, SegmentError::StreamMismatch { .. }), "{err}");
}

#[test]
fn encrypted_to_the_recipient_without_the_mac_key() {
    let (k, id) = fixture();
    // The forger knows the recipient and even the right outer ids, but not
    // the segment MAC key.
    let forger = k.with_other_mac_key();
    let s = seal(&forger, &id, &sid("sess-1"), &sample_entries()).unwrap();
    let err = reopen(&k, &id, &s).unwrap_err();
    assert!(matches!(err, SegmentError::Mac), "{err}");
}

#[test]
fn not_a_segment_inside_valid_age() {
    let (k, id, s) = sealed();
    let seal_plain = |plain: &[u8]| {
        let enc =
            age::Encryptor::with_recipients(iter::once(id.recipient() as &dyn age::Recipient))
                .unwrap();
        let mut w = enc.wrap_output(Vec::new()).unwrap();
        w.write_all(plain).unwrap();
        w.finish().unwrap()
    };
    let open_ct = |ct: &[u8]| open(&k, &id, &s.stream, s.kind, &s.entry_ids, ct);
    assert!(matches!(
        open_ct(&seal_plain(b"plain text, not zstd")),
        Err(SegmentError::Decompress(_))
    ));
    let z = |b: &[u8]| zstd::encode_all(b, 3).unwrap();
    assert!(matches!(
        open_ct(&seal_plain(&z(b"XXXXXX\x01\x01"))),
        Err(SegmentError::Malformed(_))
    ));
    assert!(matches!(
        open_ct(&seal_plain(&z(b"EVISEG\x09\x01"))),
        Err(SegmentError::Version(9))
    ));
    assert!(matches!(
        open_ct(&seal_plain(&z(b"EVISEG\x01\x01\x00\x00"))),
        Err(SegmentError::Malformed(_))
    ));
    // A huge declared length with no data does not allocate, just fails.
    assert!(matches!(
        open_ct(&seal_plain(&z(b"EVISEG\x01\x01\xff\xff\xff\xff"))),
        Err(SegmentError::Malformed(_))
    ));
}

#[test]
fn zip_bomb_is_bounded() {
    let (k, id, s) = sealed();
    // 300 MiB of zeros compresses to a few KiB; stream it so the test does
    // not hold it either.
    let enc =
        age::Encryptor::with_recipients(iter::once(id.recipient() as &dyn age::Recipient)).unwrap();
    let w = enc.wrap_output(Vec::new()).unwrap();
    let mut z = zstd::stream::write::Encoder::new(w, 3).unwrap();
    z.write_all(b"EVISEG\x01\x01\x00\x00\x00\x01s\x00\x00\x00\x01")
        .unwrap();
    z.write_all(b"\x00\x00\x00\x01a\x002026-06-08\x12\xc0\x00\x00")
        .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..300 {
        z.write_all(&zeros).unwrap();
    }
    let ct = z.finish().unwrap().finish().unwrap();
    assert!(ct.len() < 1 << 20, "bomb is small: {}", ct.len());
    let err = open(&k, &id, &s.stream, s.kind, &s.entry_ids, &ct).unwrap_err();
    assert!(matches!(err, SegmentError::TooLarge { .. }), "{err}");
}

#[test]
fn bad_session_id_inside_a_valid_segment() {
    let (k, id) = fixture();
    let entries = [RawEntry {
        id: b"a1",
        parent: None,
        day: b"2026-06-08",
        line: b"{}",
        blob: None,
    }];
    for bad in [&b"../../x"[..], b".hidden", b"a/b", b"\xff"] {
        let body = BodyRef::Entries {
            session: bad,
            entries: entries.iter().map(|e| RawEntry { ..*e }).collect(),
        };
        let s = seal_raw_for_test(&k, &id, FORMAT_VERSION, &body).unwrap();
        let err = reopen(&k, &id, &s).unwrap_err();
        assert!(matches!(err, SegmentError::BadSessionId(_)), "{err}");
    }
}

#[test]
fn bad_day_inside_a_valid_segment() {
    let (k, id) = fixture();
    for bad in [&b"2026-13-99"[..], b"2025-02-29", b"../../x/.."] {
        let body = BodyRef::Entries {
            session: b"sess-1",
            entries: vec![RawEntry {
                id: b"a1",
                parent: None,
                day: bad,
                line: b"{}",
                blob: None,
            }],
        };
        let s = seal_raw_for_test(&k, &id, FORMAT_VERSION, &body).unwrap();
        let err = reopen(&k, &id, &s).unwrap_err();
        assert!(matches!(err, SegmentError::BadDay(_)), "{err}");
    }
}

#[test]
fn bad_device_inside_a_valid_segment() {
    let (k, id) = fixture();
    let lines = [JournalLine {
        seq: 1,
        line: b"{}".to_vec(),
    }];
    let body = BodyRef::Journal {
        device: b"../../x",
        lines: &lines,
    };
    for version in [1, 2] {
        let s = seal_raw_for_test(&k, &id, version, &body).unwrap();
        let err = reopen(&k, &id, &s).unwrap_err();
        assert!(matches!(err, SegmentError::BadDevice(_)), "{err}");
    }
}

#[test]
fn kind_names_round_trip() {
    for k in [SegmentKind::Entries, SegmentKind::Journal] {
        assert_eq!(k.as_str().parse::<SegmentKind>().unwrap(), k);
    }
    assert!("blob".parse::<SegmentKind>().is_err());
}

#[test]
fn large_segment_round_trips() {
    let (k, id) = fixture();
    let entries: Vec<Entry> = (0..5000)
        .map(|i| Entry {
            id: format!("e{i}"),
            parent: (i > 0).then(|| format!("e{}", i - 1)),
            day: day("2026-06-08"),
            line: format!(
                r#"{{"role":"assistant","content":"line {i} {}"}}"#,
                "x".repeat(i % 700)
            )
            .into_bytes(),
            line_blob: None,
        })
        .collect();
    let s = seal(&k, &id, &sid("big"), &entries).unwrap();
    match reopen(&k, &id, &s).unwrap() {
        OpenedSegment::Entries { entries: got, .. } => assert_eq!(got, entries),
        other => panic!("{other:?}"),
    }
}

/// Throughput check: `cargo test -p evi --release sync::segment::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    let (k, id) = fixture();
    let entries: Vec<Entry> = (0..100_000)
        .map(|i| Entry {
            id: format!("{i:032x}"),
            parent: (i > 0).then(|| format!("{:032x}", i - 1)),
            day: day("2026-06-08"),
            line: format!(
                r#"{{"role":"assistant","content":"{} {i}","ts":"2026-06-08T10:00:00Z"}}"#,
                "lorem ipsum dolor sit amet ".repeat(36)
            )
            .into_bytes(),
            line_blob: None,
        })
        .collect();
    let bytes: usize = entries.iter().map(|e| e.line.len()).sum();
    let t = std::time::Instant::now();
    let s = seal(&k, &id, &sid("big"), &entries).unwrap();
    let seal_t = t.elapsed();
    let t = std::time::Instant::now();
    let opened = reopen(&k, &id, &s).unwrap();
    let open_t = t.elapsed();
    assert!(matches!(opened, OpenedSegment::Entries { .. }));
    eprintln!(
        "{} MB of lines -> {} KB ciphertext; seal {seal_t:?}, open {open_t:?}",
        bytes / 1_000_000,
        s.ciphertext.len() / 1000
    );
}
