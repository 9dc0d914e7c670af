//! What the server can see: after a push, no plaintext anywhere in its data
//! folder (not the lines, not the session ids, not the content hashes), and
//! what it stores is standard age that `age -d -i identity.txt` opens.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use evi::sync::{Identity, SyncKeys};
use sha2::{Digest, Sha256};

use crate::common::{Device, TestServer, age_open, tool_present};

const DAY: &str = "2026-06-09";

#[test]
fn server_stores_no_plaintext_and_age_opens_it() {
    let server = TestServer::start();
    let a = Device::new();
    let session = "canary-session-6f1d2a";
    let canaries = [
        "canary-line-3b9e0c7d51",
        "canary-reply-a84f21c6e0",
        "canary-blob-d0c5e1f9b3",
        "canary-path-7e2b4a19c8",
        session,
    ];
    a.write(
        DAY,
        session,
        format!(
            "{{\"role\":\"user\",\"content\":\"{}\"}}\n{{\"role\":\"assistant\",\"content\":\"{}\"}}\n",
            canaries[0], canaries[1]
        )
        .as_bytes(),
    );
    let blob = format!("secret file: {}\n", canaries[2]).into_bytes();
    let sha: String = Sha256::digest(&blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    a.put(&format!("checkpoints/blobs/{sha}"), &blob);
    a.put(
        "checkpoints/journal.jsonl",
        format!(
            "{{\"seq\":1,\"ts\":\"{DAY}T10:00:00Z\",\"path\":\"/{}\",\"op\":\"write\",\"blob\":\"{sha}\",\"size\":{}}}\n",
            canaries[3],
            blob.len()
        )
        .as_bytes(),
    );
    a.init(&server, "alice", "laptop");
    a.sync_ok(&["push"]);

    // Plain content hashes would let the server confirm a guess: the blob's
    // SHA-256 and the entry ids must not be there either.
    let export = a.evi(&["sessions", "export", session, "-f", "json"]);
    let v: serde_json::Value = serde_json::from_str(&export.stdout).unwrap();
    let mut needles: Vec<String> = canaries.iter().map(|c| c.to_string()).collect();
    needles.push(sha.clone());
    for e in v["entries"].as_array().unwrap() {
        needles.push(e["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(needles.len(), 8);
    let files = server.stored();
    assert!(files.values().flatten().count() >= 2, "{:?}", files.keys());
    for (path, bytes) in &files {
        let Some(bytes) = bytes else { continue };
        for n in &needles {
            assert!(
                !bytes.windows(n.len()).any(|w| w == n.as_bytes()),
                "{n:?} found in plaintext in the server's {path}"
            );
        }
    }

    if !tool_present("age", "--version", "apt-get install age") {
        return;
    }
    let token = a.token();
    let records = server.records(&token);
    assert_eq!(records.len(), 2, "one session segment, one journal segment");
    for r in &records {
        let ct = B64.decode(r["ciphertext"].as_str().unwrap()).unwrap();
        // A zstd stream of the segment plaintext.
        assert!(age_open(&a.identity_path(), &ct).starts_with(&[0x28, 0xb5, 0x2f, 0xfd]));
    }
    // A blob opens to its original bytes.
    let keys = SyncKeys::derive(&Identity::load(&a.identity_path()).unwrap());
    let name = keys.blob_key(&sha);
    let ct = crate::common::http()
        .get(format!("{}/api/v1/blobs/{name}", server.url))
        .bearer_auth(&token)
        .send()
        .unwrap()
        .bytes()
        .unwrap();
    let plain = age_open(&a.identity_path(), &ct);
    // A zstd frame of exactly the original bytes (`age -d | zstd -d`).
    assert_eq!(zstd::decode_all(&plain[..]).unwrap(), blob);
}
