//! Frozen vectors: every deterministic byte of the sync formats for a fixed
//! test identity, checked against `testdata/vectors.json`. age encryption is
//! randomized, so ciphertexts are not frozen; the plaintext (before zstd) and
//! its MAC are. Regenerate deliberately with `EVI_UPDATE_VECTORS=1` (a format
//! change then also needs a new format version).

use serde_json::{Value, json};

use super::TEST_IDENTITY;
use super::identity::Identity;
use super::keys::SyncKeys;
use super::segment::{self, BodyRef, JournalLine, RawEntry};

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
        },
        RawEntry {
            id: b"explicit-id",
            parent: Some(b"1f2e3d4c5b6a79881f2e3d4c5b6a7988"),
            day: b"2026-06-09",
            line: b"not json \xff\xfe\r",
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

    let seg = |body: &BodyRef<'_>, stream: Ids| {
        let (plain, mac) =
            segment::write_plaintext(&k, body, &stream.0, &stream.1, Vec::new()).unwrap();
        json!({
            "stream": stream.0,
            "entry_ids": stream.1,
            "plaintext_hex": hex::encode(&plain),
            "mac_hex": hex::encode(mac),
        })
    };

    let entry_ids = entries
        .iter()
        .map(|e| k.entry_key(&session, std::str::from_utf8(e.id).unwrap()))
        .collect::<Vec<_>>();
    let journal_ids = journal_lines
        .iter()
        .map(|l| k.journal_entry_key("laptop", l.seq))
        .collect::<Vec<_>>();

    json!({
        "about": "evi sync frozen vectors: HKDF keys, keyed ids, KCV, segment plaintext v1 and MAC. See cli/src/sync/{keys,segment}.rs for the byte layouts.",
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
        },
        "segments": {
            "entries": {
                "session_id": "0193a-sess_1.x",
                "entries": entries.iter().map(|e| json!({
                    "id": std::str::from_utf8(e.id).unwrap(),
                    "parent": e.parent.map(|p| std::str::from_utf8(p).unwrap()),
                    "day": std::str::from_utf8(e.day).unwrap(),
                    "line_hex": hex::encode(e.line),
                })).collect::<Vec<_>>(),
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
fn frozen_segment_opens_when_sealed() {
    // The frozen plaintext, compressed and encrypted as seal does, opens.
    use std::io::Write;
    let frozen: Value = serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap();
    let id = Identity::from_secret_str(frozen["identity"].as_str().unwrap()).unwrap();
    let k = SyncKeys::derive(&id);
    let sealed = &frozen["segments"]["entries"]["sealed"];
    let plain = hex::decode(sealed["plaintext_hex"].as_str().unwrap()).unwrap();
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
    let opened = segment::open(&k, &id, &stream, segment::SegmentKind::Entries, &ids, &ct).unwrap();
    match opened {
        segment::OpenedSegment::Entries { session, entries } => {
            assert_eq!(session.as_str(), "0193a-sess_1.x");
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[1].line, b"not json \xff\xfe\r");
        }
        other => panic!("{other:?}"),
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
