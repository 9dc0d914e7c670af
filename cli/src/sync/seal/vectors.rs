//! Frozen vectors: every deterministic byte of the sync formats for a fixed
//! test identity, checked against `testdata/vectors.json`. age encryption is
//! randomized, so ciphertexts are not frozen; the plaintext (before zstd) and
//! its MAC are. Regenerate deliberately with `EVI_UPDATE_VECTORS=1` (a format
//! change then also needs a new format version). Format 1 segments stay
//! frozen (`segments`) beside format 2 (`segments_v2`): servers hold format
//! 1 records, and `open` must keep reading them byte for byte.

use serde_json::{Value, json};

use crate::sync::TEST_IDENTITY;
use crate::sync::engine::journal;
use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::SyncKeys;
use crate::sync::seal::segment::{self, BodyRef, JournalLine, RawEntry};
use crate::sync::state::Account;

type Ids = (evi_shared::KeyedId, Vec<evi_shared::KeyedId>);

const PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/sync/testdata/vectors.json"
);

fn compute() -> Value {
    let id = Identity::from_secret_str(TEST_IDENTITY).unwrap();
    let k = SyncKeys::derive(&id);
    let (id_key, mac_key) = k.raw_keys_hex();
    let session = "0193a-sess_1.x".parse().unwrap();
    let blob_sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    let entries = [
        RawEntry {
            id: b"1f2e3d4c5b6a79881f2e3d4c5b6a7988",
            parent: None,
            day: b"2026-06-08",
            line: br#"{"role":"user","content":"hello","ts":"2026-06-08T10:00:00Z"}"#,
            blob: None,
        },
        RawEntry {
            id: b"explicit-id",
            parent: Some(b"1f2e3d4c5b6a79881f2e3d4c5b6a7988"),
            day: b"2026-06-09",
            line: b"not json \xff\xfe\r",
            blob: None,
        },
    ];
    // Format 2: the same two entries, then one whose line is a blob (the
    // SHA-256 of "test", so its name is `blob_sha`).
    let mut blob_sha_bytes = [0u8; 32];
    hex::decode_to_slice(blob_sha, &mut blob_sha_bytes).unwrap();
    let entries_v2 = [
        RawEntry { ..entries[0] },
        RawEntry { ..entries[1] },
        RawEntry {
            id: b"big-line",
            parent: Some(b"explicit-id"),
            day: b"2026-06-09",
            line: b"",
            blob: Some((4, blob_sha_bytes)),
        },
    ];
    let entries_body = BodyRef::Entries {
        session: b"0193a-sess_1.x",
        entries: entries.iter().map(|e| RawEntry { ..*e }).collect(),
    };
    let journal_lines = [
        JournalLine {
            seq: 0,
            line: br#"{"seq":0,"ts":"2026-06-08T10:00:00Z","path":"src/a.rs","op":"write"}"#
                .to_vec(),
        },
        JournalLine {
            seq: 42,
            line: b"{}".to_vec(),
        },
    ];
    let journal_body = BodyRef::Journal {
        device: b"laptop",
        lines: &journal_lines,
    };
    // Format 2: named by device id; seqs repeat after a rewind, contents
    // tell the lines apart.
    let account = Account {
        server: "https://sync.example".into(),
        user: "alice".into(),
        device: "laptop".into(),
        device_id: "01JXK3M9Q4R8V2W6Y05ZB7X0QA".into(),
        ..Account::default()
    };
    let journal_name = &journal::journal_name(&account);
    let journal_lines_v2 = [
        JournalLine {
            seq: 1,
            line: br#"{"seq":1,"ts":"2026-06-08T10:00:00Z","path":"/p/a.py","op":"modify"}"#
                .to_vec(),
        },
        JournalLine {
            seq: 1,
            line: br#"{"seq":1,"ts":"2026-06-08T11:00:00Z","path":"/p/b.py","op":"create"}"#
                .to_vec(),
        },
    ];
    let journal_body_v2 = BodyRef::Journal {
        device: journal_name.as_bytes(),
        lines: &journal_lines_v2,
    };

    let seg_v = |version: u8, body: &BodyRef<'_>, stream: Ids| {
        let (plain, mac) =
            segment::write_plaintext(&k, version, body, &stream.0, &stream.1, Vec::new()).unwrap();
        json!({
            "stream": stream.0,
            "entry_ids": stream.1,
            "plaintext_hex": hex::encode(&plain),
            "mac_hex": hex::encode(mac),
        })
    };
    let seg = |body: &BodyRef<'_>, stream: Ids| seg_v(1, body, stream);
    let entry_json = |e: &RawEntry<'_>| {
        let mut v = json!({
            "id": std::str::from_utf8(e.id).unwrap(),
            "parent": e.parent.map(|p| std::str::from_utf8(p).unwrap()),
            "day": std::str::from_utf8(e.day).unwrap(),
            "line_hex": hex::encode(e.line),
        });
        if let Some((len, sha)) = e.blob {
            v["line_blob"] = json!({ "len": len, "sha256": hex::encode(sha) });
        }
        v
    };

    let entry_ids = entries
        .iter()
        .map(|e| k.entry_key(&session, std::str::from_utf8(e.id).unwrap()))
        .collect::<Vec<_>>();
    let journal_ids = journal_lines
        .iter()
        .map(|l| k.journal_entry_key("laptop", l.seq))
        .collect::<Vec<_>>();
    let entry_ids_v2 = entries_v2
        .iter()
        .map(|e| k.entry_key(&session, std::str::from_utf8(e.id).unwrap()))
        .collect::<Vec<_>>();
    let journal_ids_v2 = journal_lines_v2
        .iter()
        .map(|l| k.journal_line_key(journal_name, &l.line))
        .collect::<Vec<_>>();
    let entries_body_v2 = |n: usize| BodyRef::Entries {
        session: b"0193a-sess_1.x",
        entries: entries_v2[..n].iter().map(|e| RawEntry { ..*e }).collect(),
    };

    json!({
        "about": "evi sync frozen vectors: HKDF keys, keyed ids, KCV, segment plaintext and MAC in format 1 (segments: servers hold such records, open still accepts them) and format 2 (segments_v2: what seal writes). See cli/src/sync/{keys,segment}.rs for the byte layouts.",
        "identity": TEST_IDENTITY,
        "recipient": id.recipient().to_string(),
        "fingerprint": id.fingerprint(),
        "hkdf": {
            "keyed_id_key": id_key,
            "segment_mac_key": mac_key,
            "key_check_value": k.key_check_hex(),
        },
        "keyed_ids": {
            "session": { "session_id": "0193a-sess_1.x", "key": k.session_key(&session) },
            "entries": entries.iter().zip(&entry_ids).map(|(e, key)| json!({
                "session_id": "0193a-sess_1.x",
                "entry_id": std::str::from_utf8(e.id).unwrap(),
                "key": key,
            })).collect::<Vec<_>>(),
            "blob": { "sha256": blob_sha, "key": k.blob_key(blob_sha) },
            "journal_stream": { "device": "laptop", "key": k.journal_stream_key("laptop") },
            "journal_entries": journal_lines.iter().zip(&journal_ids).map(|(l, key)| json!({
                "device": "laptop",
                "seq": l.seq,
                "key": key,
            })).collect::<Vec<_>>(),
            "journal_name": {
                "device": account.device,
                "device_id": account.device_id,
                "name": journal_name,
            },
            "journal_stream_v2": { "name": journal_name, "key": k.journal_stream_key(journal_name) },
            "journal_lines": journal_lines_v2.iter().zip(&journal_ids_v2).map(|(l, key)| json!({
                "name": journal_name,
                "line_hex": hex::encode(&l.line),
                "key": key,
            })).collect::<Vec<_>>(),
        },
        "segments": {
            "entries": {
                "session_id": "0193a-sess_1.x",
                "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
                "sealed": seg(&entries_body, (k.session_key(&session), entry_ids.clone())),
            },
            "journal": {
                "device": "laptop",
                "lines": journal_lines.iter().map(|l| json!({
                    "seq": l.seq,
                    "line_hex": hex::encode(&l.line),
                })).collect::<Vec<_>>(),
                "sealed": seg(&journal_body, (k.journal_stream_key("laptop"), journal_ids.clone())),
            },
        },
        "segments_v2": {
            "entries": {
                "session_id": "0193a-sess_1.x",
                "entries": entries_v2[..2].iter().map(entry_json).collect::<Vec<_>>(),
                "sealed": seg_v(2, &entries_body_v2(2), (k.session_key(&session), entry_ids_v2[..2].to_vec())),
            },
            "entries_line_blob": {
                "session_id": "0193a-sess_1.x",
                "entries": entries_v2.iter().map(entry_json).collect::<Vec<_>>(),
                "sealed": seg_v(2, &entries_body_v2(3), (k.session_key(&session), entry_ids_v2.clone())),
            },
            "journal": {
                "name": journal_name,
                "lines": journal_lines_v2.iter().map(|l| json!({
                    "seq": l.seq,
                    "line_hex": hex::encode(&l.line),
                })).collect::<Vec<_>>(),
                "sealed": seg_v(2, &journal_body_v2, (k.journal_stream_key(journal_name), journal_ids_v2.clone())),
            },
        },
    })
}

#[test]
fn frozen_vectors_match() {
    let now = compute();
    if std::env::var_os("EVI_UPDATE_VECTORS").is_some() {
        let text = serde_json::to_string_pretty(&now).unwrap() + "\n";
        std::fs::write(PATH, text).unwrap();
    }
    let frozen: Value = serde_json::from_str(
        &std::fs::read_to_string(PATH).expect("testdata/vectors.json (EVI_UPDATE_VECTORS=1)"),
    )
    .unwrap();
    assert_eq!(frozen, now, "sync formats changed: see {PATH}");
}

#[test]
fn frozen_segments_open_when_sealed() {
    // Every frozen plaintext, format 1 and 2, compressed and encrypted as
    // seal does, opens to its listed content.
    use std::io::Write;
    let frozen: Value = serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap();
    let id = Identity::from_secret_str(frozen["identity"].as_str().unwrap()).unwrap();
    let k = SyncKeys::derive(&id);
    let unhex = |v: &Value| hex::decode(v.as_str().unwrap()).unwrap();
    let cases = [
        ("segments", "entries"),
        ("segments", "journal"),
        ("segments_v2", "entries"),
        ("segments_v2", "entries_line_blob"),
        ("segments_v2", "journal"),
    ];
    for (group, name) in cases {
        let case = &frozen[group][name];
        let sealed = &case["sealed"];
        let plain = unhex(&sealed["plaintext_hex"]);
        let enc =
            age::Encryptor::with_recipients(std::iter::once(id.recipient() as &dyn age::Recipient))
                .unwrap();
        let mut w = enc.wrap_output(Vec::new()).unwrap();
        w.write_all(&zstd::encode_all(&plain[..], 3).unwrap())
            .unwrap();
        let ct = w.finish().unwrap();
        let stream = sealed["stream"].as_str().unwrap().parse().unwrap();
        let ids: Vec<_> = sealed["entry_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().parse().unwrap())
            .collect();
        let kind = if name == "journal" {
            segment::SegmentKind::Journal
        } else {
            segment::SegmentKind::Entries
        };
        let opened = segment::open(&k, &id, &stream, kind, &ids, &ct)
            .unwrap_or_else(|e| panic!("{group}.{name}: {e}"));
        match opened {
            segment::OpenedSegment::Entries { session, entries } => {
                assert_eq!(session.as_str(), case["session_id"]);
                let want = case["entries"].as_array().unwrap();
                assert_eq!(entries.len(), want.len(), "{group}.{name}");
                for (e, w) in entries.iter().zip(want) {
                    assert_eq!(e.id, w["id"].as_str().unwrap());
                    assert_eq!(e.parent.as_deref(), w["parent"].as_str());
                    assert_eq!(e.day.as_str(), w["day"].as_str().unwrap());
                    assert_eq!(e.line, unhex(&w["line_hex"]));
                    let blob = e
                        .line_blob
                        .as_ref()
                        .map(|b| json!({ "len": b.len, "sha256": b.sha256_hex }));
                    assert_eq!(blob.as_ref(), w.get("line_blob"), "{group}.{name}");
                }
            }
            segment::OpenedSegment::AgentEntries { stream, .. } => {
                panic!("{group}.{name}: opened as agent stream {stream}")
            }
            segment::OpenedSegment::Journal { device, lines } => {
                let want_name = case.get("name").unwrap_or(&case["device"]);
                assert_eq!(device, want_name.as_str().unwrap());
                let want = case["lines"].as_array().unwrap();
                assert_eq!(lines.len(), want.len());
                for (l, w) in lines.iter().zip(want) {
                    assert_eq!(l.seq, w["seq"].as_u64().unwrap());
                    assert_eq!(l.line, unhex(&w["line_hex"]));
                }
            }
        }
    }
}

#[test]
fn age_binary_opens_a_sealed_segment_when_installed() {
    // Interop with the reference `age` command, when it is on PATH.
    let Ok(out) = std::process::Command::new("age").arg("--version").output() else {
        eprintln!("age not installed; skipping");
        return;
    };
    if !out.status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let id = Identity::generate();
    let idf = dir.path().join("identity.txt");
    id.save_new(&idf).unwrap();
    let k = SyncKeys::derive(&id);
    let entries = vec![segment::Entry {
        id: "a".into(),
        parent: None,
        day: "2026-06-08".parse().unwrap(),
        line: b"canary-line".to_vec(),
        line_blob: None,
    }];
    let s = segment::seal(&k, &id, &"s".parse().unwrap(), &entries).unwrap();
    let ctf = dir.path().join("seg.age");
    std::fs::write(&ctf, &s.ciphertext).unwrap();
    let out = std::process::Command::new("age")
        .arg("-d")
        .arg("-i")
        .arg(&idf)
        .arg(&ctf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plain = zstd::decode_all(&out.stdout[..]).unwrap();
    assert!(plain.starts_with(b"EVISEG"));
    assert!(plain.windows(11).any(|w| w == b"canary-line"));
}
