//! Checkpoint blobs of any size, and none forgotten: a blob larger than the
//! server's blob limit goes up in parts and arrives whole; a blob the server
//! does not have when a device pulls is remembered there and fetched by a
//! later pull once it is uploaded.

use std::io::Read;

use crate::common::{Device, TestServer, Tree, journal_line, random_bytes, sha256_hex as sha};
use evi::sync::remote::blob_transfer::part_size_for;
use evi::sync::{Identity, SyncKeys};

const DAY: &str = "2026-06-10";
const LIMIT: u64 = 1 << 20;

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The pulled journals of other devices, by file.
fn pulled_journals(dev: &Device) -> Tree {
    dev.tree("checkpoints/devices")
        .into_iter()
        .filter(|(k, v)| k.ends_with("journal.jsonl") && v.is_some())
        .collect()
}

/// A blob's ciphertext as the server holds it under `name`, or its status.
fn get_blob(server: &TestServer, token: &str, name: &str) -> Result<Vec<u8>, u16> {
    let resp = crate::common::http()
        .get(format!("{}/api/v1/blobs/{name}", server.url))
        .bearer_auth(token)
        .send()
        .unwrap();
    if !resp.status().is_success() {
        return Err(resp.status().as_u16());
    }
    Ok(resp.bytes().unwrap().to_vec())
}

/// What a user with the identity gets from a stored blob, manifest or part:
/// `age -d | zstd -d`.
fn age_decrypt(identity: &Identity, ct: &[u8]) -> Vec<u8> {
    let dec = age::Decryptor::new(ct).expect("a standard age file");
    let mut out = Vec::new();
    dec.decrypt(std::iter::once(
        identity.age_identity() as &dyn age::Identity
    ))
    .expect("opens with the identity")
    .read_to_end(&mut out)
    .unwrap();
    zstd::decode_all(&out[..]).expect("a zstd frame")
}

#[test]
fn a_blob_over_the_server_limit_travels_in_parts_and_arrives_whole() {
    let server = TestServer::start_with(&["--max-blob-bytes", &LIMIT.to_string()]);
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "blobs", "a");
    b.join_copying_key(&a, &server.url, "blobs", "b");

    let big = random_bytes(3 << 20, 7);
    let small = b"fn small() {}\n".to_vec();
    let (big_sha, small_sha) = (sha(&big), sha(&small));
    a.put(&format!("checkpoints/blobs/{big_sha}"), &big);
    a.put(&format!("checkpoints/blobs/{small_sha}"), &small);
    a.put(
        "checkpoints/journal.jsonl",
        (journal_line(DAY, 1, "/src/big.bin", &big_sha, big.len())
            + &journal_line(DAY, 2, "/src/small.rs", &small_sha, small.len()))
            .as_bytes(),
    );

    let report = json(&a.sync_ok(&["push", "--json"]));
    assert_eq!(report["blobs_uploaded"], 2, "{report}");
    assert_eq!(report["blobs_failed"], 0, "{report}");
    assert_eq!(report["journal_lines"], 2, "{report}");

    // On the server: no whole copy of the big blob, a manifest, and parts
    // that each fit the limit and open with `age -d | zstd -d` to their slice.
    let identity = Identity::load(&a.identity_path()).unwrap();
    let keys = SyncKeys::derive(&identity);
    let token = a.token();
    assert_eq!(
        get_blob(&server, &token, keys.blob_key(&big_sha).as_str()),
        Err(404)
    );
    let manifest = get_blob(&server, &token, keys.blob_manifest_key(&big_sha).as_str()).unwrap();
    let manifest = json(std::str::from_utf8(&age_decrypt(&identity, &manifest)).unwrap());
    let part_size = part_size_for(LIMIT).unwrap();
    let count = (big.len() as u64).div_ceil(part_size);
    assert_eq!(manifest["parts"], count, "{manifest}");
    assert_eq!(manifest["size"], big.len() as u64, "{manifest}");
    let mut joined = Vec::new();
    for i in 0..count {
        let name = keys.blob_part_key(&big_sha, i, count);
        let ct = get_blob(&server, &token, name.as_str()).unwrap();
        assert!(ct.len() as u64 <= LIMIT, "part {i} is {} bytes", ct.len());
        joined.extend(age_decrypt(&identity, &ct));
    }
    assert!(joined == big, "the parts in order are the blob");
    // The small one went up whole.
    let ct = get_blob(&server, &token, keys.blob_key(&small_sha).as_str()).unwrap();
    assert_eq!(age_decrypt(&identity, &ct), small);

    let pulled = json(&b.sync_ok(&["pull", "--json"]));
    assert_eq!(pulled["blobs"], 2, "{pulled}");
    let cp = b.tree("checkpoints/blobs");
    assert!(
        cp[&big_sha].as_deref() == Some(&big[..]),
        "big blob arrived byte for byte"
    );
    assert_eq!(cp[&small_sha].as_deref(), Some(&small[..]));
    assert_eq!(cp.len(), 2, "no temp file left behind: {:?}", cp.keys());
    let journals = pulled_journals(&b);
    assert_eq!(journals.len(), 1, "{:?}", journals.keys());
    let status = json(&b.sync_ok(&["status", "--json"]));
    assert_eq!(status["missing_blobs"], 0, "{status}");

    // Nothing new: a second push sends no blob again.
    let again = json(&a.sync_ok(&["push", "--json"]));
    assert_eq!(again["blobs_uploaded"], 0, "{again}");
}

#[test]
fn a_blob_missing_on_the_server_is_remembered_and_fetched_once_it_is_there() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "late", "a");
    b.join_copying_key(&a, &server.url, "late", "b");

    // A's journal names a blob whose file A does not have (yet): push says
    // so, and still sends the journal.
    let late = random_bytes(200_000, 11);
    let late_sha = sha(&late);
    a.put(
        "checkpoints/journal.jsonl",
        journal_line(DAY, 1, "/src/late.rs", &late_sha, late.len()).as_bytes(),
    );
    let run = a.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = json(&run.stdout);
    assert_eq!(report["blobs_failed"], 1, "{report}");
    assert_eq!(report["journal_lines"], 1, "{report}");
    assert!(
        run.stderr
            .contains(&format!("warning: blob {late_sha} was not uploaded")),
        "{}",
        run.stderr
    );

    // B applies the line, warns, and remembers the blob.
    let run = b.sync(&["sync", "pull"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr.matches(&late_sha).count(),
        1,
        "one warning: {}",
        run.stderr
    );
    let journals = pulled_journals(&b);
    let journal = journals.values().next().unwrap().as_deref().unwrap();
    assert!(String::from_utf8_lossy(journal).contains(&late_sha));
    assert!(!b.home().join("checkpoints/blobs").join(&late_sha).exists());
    let status = json(&b.sync_ok(&["status", "--json"]));
    assert_eq!(status["missing_blobs"], 1, "{status}");
    assert!(
        b.sync_ok(&["status"]).contains("blobs missing: 1\n"),
        "status names it"
    );

    // Every pull asks again, and warns once.
    let run = b.sync(&["sync", "pull"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr.matches(&late_sha).count(), 1, "{}", run.stderr);

    // The file appears on A; its journal changes again, so A pushes.
    a.put(&format!("checkpoints/blobs/{late_sha}"), &late);
    let other = b"other prior contents\n";
    let other_sha = sha(other);
    a.put(&format!("checkpoints/blobs/{other_sha}"), other);
    a.append(
        "checkpoints/journal.jsonl",
        journal_line(DAY, 2, "/src/other.rs", &other_sha, other.len()).as_bytes(),
    );
    let run = a.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = json(&run.stdout);
    assert_eq!(report["blobs_uploaded"], 2, "{report}");
    assert_eq!(report["blobs_failed"], 0, "{report}");
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert_eq!(json(&a.sync_ok(&["status", "--json"]))["missing_blobs"], 0);

    // B's next pull fetches the blob it was missing, and forgets it.
    let run = b.sync(&["sync", "pull", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert_eq!(json(&run.stdout)["blobs"], 2, "{}", run.stdout);
    let cp = b.tree("checkpoints/blobs");
    assert!(
        cp[&late_sha].as_deref() == Some(&late[..]),
        "late blob arrived"
    );
    assert_eq!(cp[&other_sha].as_deref(), Some(&other[..]));
    assert_eq!(json(&b.sync_ok(&["status", "--json"]))["missing_blobs"], 0);
    assert!(b.sync_ok(&["status"]).contains("blobs missing: 0\n"));
}
