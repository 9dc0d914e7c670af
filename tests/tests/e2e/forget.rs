//! `evi sessions forget` across three devices and the real server: the
//! forgetting device, one watching (drops the session within seconds), one
//! offline that comes back with a stale copy and a line written after the
//! forget. Afterwards nothing of the session's ciphertext or keyed entry
//! ids is left in what the server stores (data folder files, and on
//! Postgres a dump of its rows and the bucket's objects), the stale copy
//! is refused rather than stored again, and an undo brings the session
//! back on the forgetting and the watching device.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::common::{Device, TestServer, held_set, session_files, sessions, today};
use crate::watch::{until, watch_with};

const GONE: &str = "forgetme-0001";
const KEPT: &str = "keepme-0002";

fn line(ts: &str, text: &str) -> String {
    format!("{{\"role\":\"user\",\"ts\":\"{ts}\",\"content\":\"{text}\"}}\n")
}

/// The records of `session`'s stream on the server, as the API shows them.
pub(crate) fn stream_records(server: &TestServer, dev: &Device, session: &str) -> Vec<Value> {
    let key = dev.keys().stream_key(session).to_string();
    server
        .records(&dev.token())
        .into_iter()
        .filter(|r| r["stream"] == key.as_str())
        .collect()
}

/// Bytes of every body pack the server holds.
fn pack_bytes(server: &TestServer) -> u64 {
    server
        .stored()
        .iter()
        .filter(|(k, _)| k.contains("bodies/"))
        .map(|(_, v)| v.as_ref().map_or(0, |b| b.len() as u64))
        .sum()
}

/// Which of `needles` occur in any file the server stores (`what` for them).
fn found_in_storage(server: &TestServer, needles: &[(String, Vec<u8>)]) -> Vec<String> {
    let stored = server.stored();
    let mut found = Vec::new();
    for (what, needle) in needles {
        for (file, bytes) in &stored {
            if let Some(b) = bytes
                && b.windows(needle.len()).any(|w| w == needle.as_slice())
            {
                found.push(format!("{what} in {file}"));
            }
        }
    }
    found
}

fn trash_holds(dev: &Device, session: &str) -> bool {
    dev.tree("sync/trash")
        .keys()
        .any(|k| k.ends_with(&format!("/{session}.jsonl")))
}

#[test]
fn a_forget_reaches_every_device_and_the_server_keeps_nothing_of_it() {
    let server = TestServer::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    c.join_copying_key(&a, &server.url, "pat", "travel");
    let day = today();
    let early = "2020-01-01T00:00:00Z";
    let mut gone = String::new();
    for i in 0..20 {
        gone.push_str(&line(early, &format!("the secret plan, part {i}")));
    }
    a.write(&day, GONE, gone.as_bytes());
    a.write(&day, KEPT, line(early, "an ordinary session").as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    c.sync_ok(&["pull"]);
    assert!(sessions(&c).contains(GONE));

    // What the server holds of the session before: its bodies and the
    // keyed ids of its entries.
    let before = stream_records(&server, &a, GONE);
    assert!(!before.is_empty());
    let bodies: Vec<Vec<u8>> = before
        .iter()
        .map(|r| B64.decode(r["ciphertext"].as_str().unwrap()).unwrap())
        .collect();
    let forgotten_bytes: u64 = bodies.iter().map(|b| b.len() as u64).sum();
    let mut needles: Vec<(String, Vec<u8>)> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                format!("body {i}"),
                b[b.len() / 2..b.len() / 2 + 48].to_vec(),
            )
        })
        .collect();
    let keys = a.keys();
    let session: evi_shared::SessionId = GONE.parse().unwrap();
    for e in held_set(&a, GONE) {
        let id = keys.entry_key(&session, &e.id).to_string();
        needles.push((format!("entry id {id} (hex)"), id.as_bytes().to_vec()));
        needles.push((format!("entry id {id} (raw)"), hex::decode(&id).unwrap()));
    }
    assert!(found_in_storage(&server, &needles).len() >= bodies.len());
    let packs_before = pack_bytes(&server);
    let newest_before = server
        .records(&a.token())
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .max()
        .unwrap();

    // B watches; A forgets.
    let watcher = watch_with(&b, &["--scan-secs", "600", "--backoff-max-secs", "1"]);
    let run = a.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["sent"], true, "{}", run.stdout);
    assert_eq!(out["sessions"][0]["session"], GONE);
    assert!(session_files(&a, GONE).is_empty());
    assert!(trash_holds(&a, GONE));
    assert!(sessions(&a).contains(KEPT));

    // B drops it within seconds, into its trash.
    until(
        "the watching device drops the forgotten session",
        20,
        || session_files(&b, GONE).is_empty(),
    );
    assert!(trash_holds(&b, GONE));
    assert!(sessions(&b).contains(KEPT));
    drop(watcher);

    // The server keeps the stream's tombstone alone, and (once the
    // background compaction ran) no byte of its bodies or entry ids.
    let after = stream_records(&server, &a, GONE);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["kind"], "forget");
    let tombstone = B64
        .decode(after[0]["ciphertext"].as_str().unwrap())
        .unwrap();
    until(
        "the server's storage holds nothing of the session",
        20,
        || found_in_storage(&server, &needles).is_empty(),
    );
    // The account's counters follow: what status counts is what is held.
    let status = server.get_json(&a.token(), "status");
    let held = server.records(&a.token());
    assert_eq!(status["records"], held.len() as u64, "{status}");
    let ids: u64 = held
        .iter()
        .map(|r| r["entry_ids"].as_array().unwrap().len() as u64)
        .sum();
    assert_eq!(status["entries"], ids, "{status}");
    // `evi sync verify` checks the tombstone like any record.
    let run = a.sync(&["sync", "verify", "--json"]);
    assert_eq!(run.code, 0, "verify: {}{}", run.stdout, run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["tombstones"], 1, "{}", run.stdout);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0, "{}", run.stdout);
    let packs_after = pack_bytes(&server);
    // By size: the packs lost exactly the forgotten bodies, and gained
    // the bodies of what came since (the tombstone; whatever a device
    // pushed meanwhile).
    let added: u64 = server
        .records(&a.token())
        .iter()
        .filter(|r| r["seq"].as_u64().unwrap() > newest_before)
        .map(|r| B64.decode(r["ciphertext"].as_str().unwrap()).unwrap().len() as u64)
        .sum();
    eprintln!(
        "server packs: {packs_before} bytes before the forget, {packs_after} after \
         ({forgotten_bytes} forgotten, {added} added since)"
    );
    assert!(added >= tombstone.len() as u64);
    assert_eq!(
        packs_after,
        packs_before - forgotten_bytes + added,
        "packs before {packs_before}, forgotten {forgotten_bytes}, added {added}"
    );

    // C was away: it wrote a line before the forget (never pushed) and one
    // after it, then comes back and pushes first.
    let past = chrono::Utc::now() - chrono::Duration::hours(1);
    let future = chrono::Utc::now() + chrono::Duration::seconds(5);
    let stale = line(&past.to_rfc3339(), "written offline before the forget");
    let fresh = line(&future.to_rfc3339(), "written offline after the forget");
    c.append(&format!("transcripts/{day}/{GONE}.jsonl"), stale.as_bytes());
    c.append(&format!("transcripts/{day}/{GONE}.jsonl"), fresh.as_bytes());
    let run = c.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "push of a stale copy: {}", run.stderr);
    let pushed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(pushed["forgotten"][0], GONE, "{}", run.stdout);
    assert_eq!(pushed["forget"]["revived"][0]["lines"], 1, "{}", run.stdout);
    assert!(
        session_files(&c, GONE).is_empty(),
        "C applied the tombstone"
    );
    assert!(trash_holds(&c, GONE));
    let revived = format!("{GONE}-after-forget");
    let kept = std::fs::read_to_string(c.home().join(format!("transcripts/{day}/{revived}.jsonl")))
        .unwrap();
    assert_eq!(
        kept, fresh,
        "only the line written after the forget lives on"
    );
    // Not stored again: the stream still holds the tombstone alone.
    assert_eq!(stream_records(&server, &a, GONE).len(), 1);
    assert!(found_in_storage(&server, &needles).is_empty());
    c.sync_ok(&["pull"]);
    assert!(session_files(&c, GONE).is_empty());
    // Pushing again sends nothing of it, and is not refused again.
    let run = c.sync(&["sync", "push", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let pushed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        pushed["forgotten"].as_array().unwrap().is_empty(),
        "{}",
        run.stdout
    );

    // The new life reaches the others as a session of its own.
    b.sync_ok(&["pull"]);
    assert!(sessions(&b).contains(&revived));
    assert!(session_files(&b, GONE).is_empty());

    // Undo on A: back on A, and on B (watching again).
    let watcher = watch_with(&b, &["--scan-secs", "600", "--backoff-max-secs", "1"]);
    let run = a.evi(&["sessions", "forget", "--undo", GONE, "--json"]);
    assert_eq!(run.code, 0, "undo: {}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(&session_files(&a, GONE)[0].1).unwrap(),
        gone
    );
    until("the watching device brings the session back", 20, || {
        !session_files(&b, GONE).is_empty()
    });
    drop(watcher);
    assert_eq!(held_set(&a, GONE), held_set(&b, GONE));
    assert!(!trash_holds(&b, GONE));
    // The server holds the session again.
    assert!(
        stream_records(&server, &a, GONE)
            .iter()
            .any(|r| r["kind"] == "entries")
    );
}

#[test]
fn a_dry_run_changes_nothing_and_names_what_would_go() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    a.write(&today(), GONE, line("2020-01-01T00:00:00Z", "x").as_bytes());
    let run = a.evi(&["sessions", "forget", GONE, "--dry-run", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["dry_run"], true);
    assert_eq!(out["sessions"][0]["files"], 1);
    assert!(!session_files(&a, GONE).is_empty());
    // --older-than picks sessions by when they were last written.
    let run = a.evi(&["sessions", "forget", "--older-than", "1d", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "no session to forget");
    let run = a.evi(&["sessions", "forget"]);
    assert_eq!(run.code, 2, "no session named is a usage error");
    let run = a.evi(&["sessions", "forget", "--undo", GONE]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("not in the trash"), "{}", run.stderr);
}

#[test]
fn a_server_killed_mid_compaction_loses_nothing_and_finishes_on_restart() {
    let mut server = TestServer::start_env(&[], &[("EVI_SERVER_FAULT", "crash-mid-compaction")]);
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let day = today();
    let early = "2020-01-01T00:00:00Z";
    a.write(&day, GONE, line(early, "forget this").as_bytes());
    let mut kept = String::new();
    for i in 0..5 {
        kept.push_str(&line(early, &format!("keep this, {i}")));
    }
    a.write(&day, KEPT, kept.as_bytes());
    a.sync_ok(&["push"]);
    let bodies: Vec<Vec<u8>> = stream_records(&server, &a, GONE)
        .iter()
        .map(|r| B64.decode(r["ciphertext"].as_str().unwrap()).unwrap())
        .collect();
    let needles: Vec<(String, Vec<u8>)> = bodies
        .iter()
        .map(|b| {
            (
                "forgotten body".to_owned(),
                b[b.len() / 2..b.len() / 2 + 48].to_vec(),
            )
        })
        .collect();

    // The tombstone commits; the compaction it starts kills the server
    // once its new pack is written, before the records point at it.
    let run = a.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    until("the server dies mid-compaction", 20, || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });

    // Restarted (without the fault), it finishes what the forget listed.
    server.restart();
    until("the restarted server compacts", 20, || {
        found_in_storage(&server, &needles).is_empty()
    });
    a.sync_ok(&["push"]);
    assert_eq!(stream_records(&server, &a, GONE).len(), 1);

    // Nothing of the other session is lost: a new device gets it whole,
    // and verify finds every record sound.
    let b = Device::new();
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    b.sync_ok(&["pull"]);
    assert_eq!(held_set(&a, KEPT), held_set(&b, KEPT));
    assert!(session_files(&b, GONE).is_empty());
    let run = a.sync(&["sync", "verify", "--json"]);
    assert_eq!(run.code, 0, "verify: {}{}", run.stdout, run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 0, "{}", run.stdout);
    assert_eq!(v["tombstones"], 1);
}

#[test]
fn a_forget_made_offline_goes_up_with_the_next_push() {
    let mut server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    a.write(
        &today(),
        GONE,
        line("2020-01-01T00:00:00Z", "forget this").as_bytes(),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);

    server.kill();
    let run = a.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
    assert_eq!(run.code, 0, "forget offline: {}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["sent"], false, "{}", run.stdout);
    assert!(
        run.stderr.contains("next `evi sync push`"),
        "{}",
        run.stderr
    );
    assert!(session_files(&a, GONE).is_empty());

    server.restart();
    let pushed: Value = serde_json::from_str(&a.sync_ok(&["push", "--json"])).unwrap();
    assert_eq!(pushed["forget"]["sent"], 1, "{pushed}");
    b.sync_ok(&["pull"]);
    assert!(session_files(&b, GONE).is_empty());
    assert!(trash_holds(&b, GONE));
    // Sent once: a second push sends nothing more.
    let pushed: Value = serde_json::from_str(&a.sync_ok(&["push", "--json"])).unwrap();
    assert_eq!(pushed["forget"]["sent"], 0, "{pushed}");
}

/// `evi sync ARGS` on `dev` with its clock (as the trash reads it) `days`
/// days ahead.
fn sync_days_later(dev: &Device, days: i64, args: &[&str]) -> Value {
    let run: crate::common::Run = dev
        .sync_cmd()
        .env("EVI_TEST_NOW_OFFSET_SECS", (days * 86_400).to_string())
        .arg("sync")
        .args(args)
        .arg("--json")
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 0, "evi sync {args:?}: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

/// When `dev`'s trash folder of `session` was made, by its `trash.json`.
fn trashed_ms(dev: &Device, session: &str) -> i64 {
    let (_, meta) = dev
        .tree(&format!("sync/trash/{session}"))
        .into_iter()
        .find(|(k, _)| k.ends_with("trash.json"))
        .expect("a trash folder");
    let meta: Value = serde_json::from_slice(&meta.unwrap()).unwrap();
    meta["trashed_ms"].as_i64().unwrap()
}

#[test]
fn a_device_offline_pulls_a_day_later_and_its_trash_empties_after_seven_days() {
    let server = TestServer::start();
    let (a, c) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    c.join_copying_key(&a, &server.url, "pat", "travel");
    let (day, early) = (today(), "2020-01-01T00:00:00Z");
    a.write(&day, GONE, line(early, "the secret plan").as_bytes());
    a.write(&day, KEPT, line(early, "an ordinary session").as_bytes());
    a.sync_ok(&["push"]);
    c.sync_ok(&["pull"]);
    let list = c.evi(&["sessions", "list", "--json"]);
    assert!(list.stdout.contains(GONE), "{}", list.stdout);

    // A forgets while C is away; C pulls a day later.
    let run = a.evi(&["sessions", "forget", "--yes", GONE]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let now = chrono::Utc::now().timestamp_millis();
    let pulled = sync_days_later(&c, 1, &["pull"]);
    assert_eq!(pulled["forget"]["trashed"][0], GONE, "{pulled}");
    assert!(session_files(&c, GONE).is_empty());
    assert!(trash_holds(&c, GONE));
    let list = c.evi(&["sessions", "list", "--json"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(!list.stdout.contains(GONE), "{}", list.stdout);
    assert!(list.stdout.contains(KEPT), "{}", list.stdout);
    // The 7 days count from C's clock when it moved the files in.
    let trashed = trashed_ms(&c, GONE);
    assert!(trashed >= now + 86_400_000 - 60_000, "{trashed} vs {now}");

    // Six days after that the trash still holds it (an undo could bring it
    // back); the eighth day's push removes it.
    let pulled = sync_days_later(&c, 7, &["pull"]);
    assert_eq!(pulled["forget"]["purged"], 0, "{pulled}");
    assert!(trash_holds(&c, GONE));
    let pushed = sync_days_later(&c, 8, &["push"]);
    assert_eq!(pushed["forget"]["purged"], 1, "{pushed}");
    assert!(!trash_holds(&c, GONE));
    assert!(session_files(&c, GONE).is_empty());

    // C's stale copy was never sent again: the stream holds the tombstone
    // alone, and C's pushes were not told the session is forgotten.
    assert!(
        pushed["forgotten"].as_array().unwrap().is_empty(),
        "{pushed}"
    );
    let held = stream_records(&server, &a, GONE);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["kind"], "forget");
    let pushed = sync_days_later(&c, 9, &["push"]);
    assert!(
        pushed["forgotten"].as_array().unwrap().is_empty(),
        "{pushed}"
    );
    assert_eq!(stream_records(&server, &a, GONE).len(), 1);
}
