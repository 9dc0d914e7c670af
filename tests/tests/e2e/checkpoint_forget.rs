//! `evi checkpoints forget` and `[checkpoints] keep_days` across two
//! devices and the real server: the forgetting device loses the lines and
//! the blobs no other line names, the other device drops them from its
//! pulled copy on its next pull, and the server deletes the records and
//! then the blobs no record refers to (checked in what it stores: no file
//! or object named by the blob's keyed name, no byte of its ciphertext),
//! while a blob another line still names stays everywhere. A forgotten
//! session's line blob (a line over the segment limit) goes from the server
//! too. So do the manifest and every part of a blob sent in parts (one over
//! the server's blob limit), whether a checkpoint forget or a session forget
//! took its last reference.

use serde_json::{Value, json};

use crate::common::{Device, TestServer, journal_line, random_bytes, sha256_hex, today};
use crate::watch::until;

/// Whether the server holds blob `name` (keyed) for `dev`'s account.
fn blob_stored(server: &TestServer, dev: &Device, name: &str) -> bool {
    let resp: Value = crate::common::http()
        .post(format!("{}/api/v1/blobs/missing", server.url))
        .bearer_auth(dev.token())
        .json(&json!({ "names": [name] }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    resp["missing"].as_array().unwrap().is_empty()
}

/// The blob's ciphertext as the server serves it.
fn blob_ciphertext(server: &TestServer, dev: &Device, name: &str) -> Vec<u8> {
    let resp = crate::common::http()
        .get(format!("{}/api/v1/blobs/{name}", server.url))
        .bearer_auth(dev.token())
        .send()
        .unwrap();
    assert!(
        resp.status().is_success(),
        "GET blob {name}: {}",
        resp.status()
    );
    resp.bytes().unwrap().to_vec()
}

/// Where the server's storage still holds blob `name` or part of its
/// `ciphertext`: a file or object under that name, or a slice of its
/// bytes in any file (the dump of the rows included).
fn traces(server: &TestServer, name: &str, ciphertext: &[u8]) -> Vec<String> {
    let mid = ciphertext.len() / 2;
    let needles = [&ciphertext[64..112], &ciphertext[mid..mid + 48]];
    let mut found = Vec::new();
    for (file, bytes) in server.stored() {
        if file.ends_with(name) {
            found.push(format!(
                "{file} (by name, {} bytes)",
                bytes.as_ref().map_or(0, Vec::len)
            ));
        }
        if let Some(b) = bytes
            && needles.iter().any(|n| b.windows(n.len()).any(|w| w == *n))
        {
            found.push(format!("{file} (by content)"));
        }
    }
    found
}

/// The one pulled journal on `dev`: its folder's path.
fn pulled_journal(dev: &Device) -> std::path::PathBuf {
    let dir = dev.home().join("checkpoints/devices");
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("journal.jsonl"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

fn seqs(journal: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(journal)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// A blob of `n` random bytes in `dev`'s `checkpoints/blobs/`; its name.
fn put_blob(dev: &Device, n: usize, seed: u64) -> String {
    let b = random_bytes(n, seed);
    let sha = sha256_hex(&b);
    dev.put(&format!("checkpoints/blobs/{sha}"), &b);
    sha
}

#[test]
fn a_checkpoint_forget_reaches_the_other_device_and_the_server_deletes_its_blob() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let day = today();
    let (x, y, z) = (
        put_blob(&a, 6000, 1),
        put_blob(&a, 5000, 2),
        put_blob(&a, 4000, 3),
    );
    let journal = [
        journal_line(&day, 1, "/src/secret.env", &x, 6000),
        journal_line(&day, 2, "/src/a.rs", &y, 5000),
        journal_line(&day, 3, "/src/a.rs", &y, 5000),
        journal_line(&day, 4, "/src/b.rs", &z, 4000),
    ]
    .concat();
    a.append("checkpoints/journal.jsonl", journal.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let copy = pulled_journal(&b);
    assert_eq!(seqs(&copy), [1, 2, 3, 4]);
    for s in [&x, &y, &z] {
        assert!(b.home().join("checkpoints/blobs").join(s).is_file());
    }
    let keys = a.keys();
    let (kx, ky, kz) = (
        keys.blob_key(&x).to_string(),
        keys.blob_key(&y).to_string(),
        keys.blob_key(&z).to_string(),
    );
    let cx = blob_ciphertext(&server, &a, &kx);
    assert!(
        !traces(&server, &kx, &cx).is_empty(),
        "the blob is stored at first"
    );

    // A dry run changes nothing.
    let run = a.evi(&["checkpoints", "forget", "1", "2", "--dry-run", "--json"]);
    assert_eq!(run.code, 0, "dry run: {}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["lines"].as_array().unwrap().len(), 2, "{}", run.stdout);
    assert_eq!(out["blobs"], json!([x]), "{}", run.stdout);
    assert_eq!(
        seqs(&a.home().join("checkpoints/journal.jsonl")),
        [1, 2, 3, 4]
    );
    // A seq that names nothing is refused, and nothing is forgotten.
    let run = a.evi(&["checkpoints", "forget", "--yes", "2", "9"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("seq 9"), "{}", run.stderr);

    let run = a.evi(&["checkpoints", "forget", "--yes", "1", "2", "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["sent"], true, "{}", run.stdout);
    assert_eq!(out["blobs"], json!([x]), "{}", run.stdout);
    assert_eq!(seqs(&a.home().join("checkpoints/journal.jsonl")), [3, 4]);
    assert!(!a.home().join("checkpoints/blobs").join(&x).exists());
    assert!(
        a.home().join("checkpoints/blobs").join(&y).is_file(),
        "line 3 names it"
    );

    // B drops the lines and the blob no line there names any more.
    let run = b.sync(&["sync", "pull", "--json"]);
    assert_eq!(run.code, 0, "pull: {}", run.stderr);
    let r: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(r["checkpoint_forget"]["pulled_lines"], 2, "{}", run.stdout);
    assert_eq!(seqs(&copy), [3, 4]);
    assert!(!b.home().join("checkpoints/blobs").join(&x).exists());
    for s in [&y, &z] {
        assert!(b.home().join("checkpoints/blobs").join(s).is_file());
    }

    // The server: x goes (row, then bytes, in the background); y and z,
    // still named by lines it holds, stay.
    until("the server deletes the forgotten blob", 20, || {
        traces(&server, &kx, &cx).is_empty()
    });
    assert!(!blob_stored(&server, &a, &kx));
    assert!(blob_stored(&server, &a, &ky) && blob_stored(&server, &a, &kz));
    // The lines kept went up again: a device that joins now gets 3 and 4,
    // and their blobs, and nothing of 1 and 2.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "travel");
    c.sync_ok(&["pull"]);
    assert_eq!(seqs(&pulled_journal(&c)), [3, 4]);
    assert!(!c.home().join("checkpoints/blobs").join(&x).exists());
    assert!(c.home().join("checkpoints/blobs").join(&y).is_file());
    // The tombstone verifies like any record.
    let run = a.sync(&["sync", "verify", "--json"]);
    assert_eq!(run.code, 0, "verify: {}{}", run.stdout, run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["tombstones"], 1, "{}", run.stdout);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0, "{}", run.stdout);
}

#[test]
fn keep_days_forgets_old_checkpoints_at_push_everywhere() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let (old, new) = (put_blob(&a, 3000, 7), put_blob(&a, 3000, 8));
    let journal = [
        journal_line("2020-01-01", 1, "/src/old.rs", &old, 3000),
        journal_line(&today(), 2, "/src/new.rs", &new, 3000),
    ]
    .concat();
    a.append("checkpoints/journal.jsonl", journal.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert_eq!(seqs(&pulled_journal(&b)), [1, 2]);
    let kold = a.keys().blob_key(&old).to_string();
    let cold = blob_ciphertext(&server, &a, &kold);

    a.write_config("[checkpoints]\nkeep_days = 90\n");
    let run = a.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "push: {}", run.stderr);
    let r: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(r["checkpoint_forget"]["expired_lines"], 1, "{}", run.stdout);
    assert_eq!(r["checkpoint_forget"]["sent"], 1, "{}", run.stdout);
    let run = a.sync(&["sync", "push"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        !run.stderr.contains("keep_days"),
        "nothing more to expire: {}",
        run.stderr
    );
    assert_eq!(seqs(&a.home().join("checkpoints/journal.jsonl")), [2]);
    assert!(!a.home().join("checkpoints/blobs").join(&old).exists());

    b.sync_ok(&["pull"]);
    assert_eq!(seqs(&pulled_journal(&b)), [2]);
    assert!(!b.home().join("checkpoints/blobs").join(&old).exists());
    assert!(b.home().join("checkpoints/blobs").join(&new).is_file());
    until("the server deletes the expired blob", 20, || {
        traces(&server, &kold, &cold).is_empty()
    });
    let knew = a.keys().blob_key(&new);
    assert!(blob_stored(&server, &a, knew.as_str()));
}

#[test]
fn a_forgotten_session_leaves_no_line_blob_on_the_server() {
    // A small batch limit: a line over a third of it travels as a blob.
    let server = TestServer::start_with(&["--max-batch-bytes", "262144"]);
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let words: String = (0..30_000).map(|i| format!("w{} ", i % 977)).collect();
    let big =
        format!("{{\"role\":\"tool\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"{words}\"}}");
    assert!(big.len() > 100_000);
    let small = "{\"role\":\"user\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"hi\"}\n";
    a.write(
        &today(),
        "bigline-0001",
        format!("{small}{big}\n").as_bytes(),
    );
    let run = a.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "push: {}", run.stderr);
    let r: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(r["line_blobs"], 1, "{}", run.stdout);
    let name = a.keys().blob_key(&sha256_hex(big.as_bytes())).to_string();
    assert!(blob_stored(&server, &a, &name));
    let ciphertext = blob_ciphertext(&server, &a, &name);

    let run = a.evi(&["sessions", "forget", "--yes", "bigline-0001", "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    until(
        "the server deletes the forgotten session's line blob",
        20,
        || traces(&server, &name, &ciphertext).is_empty(),
    );
    assert!(!blob_stored(&server, &a, &name));
}

#[test]
fn a_server_killed_mid_collection_finishes_on_restart_and_loses_nothing() {
    let mut server = TestServer::start_env(&[], &[("EVI_SERVER_FAULT", "crash-mid-collect")]);
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let (x, y) = (put_blob(&a, 5000, 11), put_blob(&a, 5000, 12));
    let day = today();
    let journal = [
        journal_line(&day, 1, "/src/x.rs", &x, 5000),
        journal_line(&day, 2, "/src/y.rs", &y, 5000),
    ]
    .concat();
    a.append("checkpoints/journal.jsonl", journal.as_bytes());
    a.sync_ok(&["push"]);
    let kx = a.keys().blob_key(&x).to_string();
    let cx = blob_ciphertext(&server, &a, &kx);

    // The forget commits; the collection it starts kills the server once
    // the blob's row is gone and before its bytes are.
    let run = a.evi(&["checkpoints", "forget", "--yes", "1"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    until("the server dies mid-collection", 20, || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
    assert!(
        !traces(&server, &kx, &cx).is_empty(),
        "the bytes outlive the crash"
    );

    // Restarted without the fault, it finishes: the bytes go too.
    server.restart();
    until("the restarted server deletes the blob", 20, || {
        traces(&server, &kx, &cx).is_empty()
    });
    a.sync_ok(&["push"]);
    let b = Device::new();
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    b.sync_ok(&["pull"]);
    assert_eq!(seqs(&pulled_journal(&b)), [2]);
    assert!(b.home().join("checkpoints/blobs").join(&y).is_file());
    let run = a.sync(&["sync", "verify", "--json"]);
    assert_eq!(run.code, 0, "verify: {}{}", run.stdout, run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 0, "{}", run.stdout);
}

/// A blob limit small enough that the test's blobs travel in parts.
const PART_LIMIT: u64 = 16 * 1024;

/// The keyed names a blob of `size` bytes is stored under when sent in
/// parts under [`PART_LIMIT`]: its manifest, then its parts.
fn pieces(keys: &evi::sync::SyncKeys, sha: &str, size: u64) -> Vec<String> {
    let part = evi::sync::remote::blob_transfer::part_size_for(PART_LIMIT).unwrap();
    let count = size.div_ceil(part);
    assert!(count >= 2, "{size} bytes go in parts of {part}");
    std::iter::once(keys.blob_manifest_key(sha).to_string())
        .chain((0..count).map(|i| keys.blob_part_key(sha, i, count).to_string()))
        .collect()
}

/// Bytes in the server's data folder and bucket, in all and in the files
/// named by `names`.
fn server_bytes(server: &TestServer, names: &[String]) -> (u64, u64) {
    let (mut all, mut named) = (0, 0);
    for (file, bytes) in server.stored() {
        if file == "database.sql" {
            continue;
        }
        let n = bytes.as_ref().map_or(0, Vec::len) as u64;
        all += n;
        if names.iter().any(|name| file.ends_with(name.as_str())) {
            named += n;
        }
    }
    (all, named)
}

#[test]
fn a_blob_sent_in_parts_goes_from_the_server_with_its_last_reference() {
    // Checkpoint blobs of 40 kB and a line of 190 kB (a line blob: over a
    // third of the batch limit) all go up in parts of 16 kB at most.
    let server = TestServer::start_with(&[
        "--max-blob-bytes",
        &PART_LIMIT.to_string(),
        "--max-batch-bytes",
        "262144",
    ]);
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let (x, z) = (put_blob(&a, 40_000, 21), put_blob(&a, 40_000, 22));
    let day = today();
    let journal = [
        journal_line(&day, 1, "/src/secret.bin", &x, 40_000),
        journal_line(&day, 2, "/src/kept.bin", &z, 40_000),
    ]
    .concat();
    a.append("checkpoints/journal.jsonl", journal.as_bytes());
    let words: String = (0..30_000).map(|i| format!("w{} ", i % 977)).collect();
    let big =
        format!("{{\"role\":\"tool\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"{words}\"}}");
    let small = "{\"role\":\"user\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"hi\"}\n";
    a.write(&day, "bigline-0002", format!("{small}{big}\n").as_bytes());
    let run = a.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "push: {}", run.stderr);
    let r: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(r["line_blobs"], 1, "{}", run.stdout);
    assert_eq!(r["blobs_failed"], 0, "{}", run.stdout);

    let keys = a.keys();
    let line = sha256_hex(big.as_bytes());
    let (px, pz, pl) = (
        pieces(&keys, &x, 40_000),
        pieces(&keys, &z, 40_000),
        pieces(&keys, &line, big.len() as u64),
    );
    for s in [&x, &z, &line] {
        assert!(
            !blob_stored(&server, &a, keys.blob_key(s).as_str()),
            "no whole copy of {s}"
        );
    }
    for p in px.iter().chain(&pz).chain(&pl) {
        assert!(blob_stored(&server, &a, p), "piece {p} is stored");
    }
    let gone: Vec<String> = px.iter().chain(&pl).cloned().collect();
    let cts: Vec<(String, Vec<u8>)> = (gone.iter())
        .map(|p| (p.clone(), blob_ciphertext(&server, &a, p)))
        .collect();
    let (all_before, pieces_before) = server_bytes(&server, &gone);
    let left = |server: &TestServer, names: &[String]| -> Vec<String> {
        cts.iter()
            .filter(|(p, _)| names.contains(p))
            .flat_map(|(p, ct)| traces(server, p, ct))
            .collect()
    };
    assert_eq!(
        left(&server, &gone).len(),
        2 * gone.len(),
        "by name and content"
    );

    // A checkpoint forget of the one line naming x: its manifest and every
    // part go, z's (named by line 2) stay.
    let run = a.evi(&["checkpoints", "forget", "--yes", "1"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    until("the server deletes every piece of x", 20, || {
        left(&server, &px).is_empty()
    });
    // A session forget: the pieces of its line blob go.
    let run = a.evi(&["sessions", "forget", "--yes", "bigline-0002"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    until(
        "the server deletes every piece of the line blob",
        20,
        || left(&server, &pl).is_empty(),
    );
    for p in &gone {
        assert!(!blob_stored(&server, &a, p), "piece {p} is gone");
    }
    for p in &pz {
        assert!(blob_stored(&server, &a, p), "piece {p} of z stays");
    }
    let (all_after, pieces_after) = server_bytes(&server, &gone);
    eprintln!(
        "parted blobs forgotten: {} pieces, {pieces_before} -> {pieces_after} bytes; \
         data folder and bucket {all_before} -> {all_after} bytes",
        gone.len()
    );
    assert_eq!(pieces_after, 0);

    // A device that joins now gets z whole, and nothing of x.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "travel");
    c.sync_ok(&["pull"]);
    assert_eq!(seqs(&pulled_journal(&c)), [2]);
    let blobs = c.home().join("checkpoints/blobs");
    assert_eq!(
        std::fs::read(blobs.join(&z)).unwrap(),
        random_bytes(40_000, 22)
    );
    assert!(!blobs.join(&x).exists());
    let run = a.sync(&["sync", "verify", "--json"]);
    assert_eq!(run.code, 0, "verify: {}{}", run.stdout, run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 0, "{}", run.stdout);
}

#[test]
fn a_blob_forgotten_and_checkpointed_again_reaches_a_device_that_had_it() {
    // The pull fetches a page's blobs while the page before is written: one
    // that is here then, and goes with a forget applied before the line
    // naming it again, is fetched when that line is applied.
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let day = today();
    let x = put_blob(&a, 6000, 7);
    let line = |seq| journal_line(&day, seq, "/src/app.env", &x, 6000);
    a.append("checkpoints/journal.jsonl", line(1).as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let on_b = b.home().join("checkpoints/blobs").join(&x);
    assert!(on_b.is_file());

    let run = a.evi(&["checkpoints", "forget", "--yes", "1"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let kx = a.keys().blob_key(&x).to_string();
    until("the server deletes the forgotten blob", 20, || {
        !blob_stored(&server, &a, &kx)
    });
    // The same bytes checkpointed again.
    assert_eq!(put_blob(&a, 6000, 7), x);
    a.append("checkpoints/journal.jsonl", line(2).as_bytes());
    a.sync_ok(&["push"]);
    assert!(blob_stored(&server, &a, &kx), "sent again");

    // B gets the forget (which deletes its copy) and line 2 in one pull.
    let run = b.sync(&["sync", "pull", "--json"]);
    assert_eq!(run.code, 0, "pull: {}", run.stderr);
    assert_eq!(seqs(&pulled_journal(&b)), [2]);
    assert_eq!(
        std::fs::read(&on_b).ok(),
        Some(random_bytes(6000, 7)),
        "the blob line 2 names is here: {}",
        run.stdout
    );
    let r: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(r["blobs"], 1, "{}", run.stdout);
}
