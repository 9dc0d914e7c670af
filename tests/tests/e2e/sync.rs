//! `evi sync push` / `pull` between three eVi homes through a real
//! `evi-server`: what a user who works on several machines relies on.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::common::{Device, TestServer, Tree, assert_only_appended};

const D1: &str = "2026-06-08";
const D2: &str = "2026-06-09";

fn line(role: &str, content: &str, ts: &str) -> String {
    format!("{{\"role\":\"{role}\",\"content\":\"{content}\",\"ts\":\"{ts}\"}}\n")
}

/// Transcripts and checkpoints: everything pull may touch.
fn data(dev: &Device) -> (Tree, Tree) {
    (dev.tree("transcripts"), dev.tree("checkpoints"))
}

/// The folder `dev`'s checkpoint journal lands in on other devices:
/// `<device name>-<short device id>`, the short id being the last 8 letters
/// and digits of the server's device id, lowercased (DESIGN.md; `evi`'s
/// `sync::journal::journal_name`).
fn journal_name(dev: &Device) -> String {
    let account = &dev.state()["account"];
    let id: Vec<char> = account["device_id"]
        .as_str()
        .unwrap()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let short: String = id[id.len().saturating_sub(8)..].iter().collect();
    format!("{}-{short}", account["device"].as_str().unwrap())
}

/// A session's entries as `(id, parentId, day)`, from `sessions export -f json`.
fn entry_set(dev: &Device, session: &str) -> BTreeSet<(String, Option<String>, String)> {
    let run = dev.evi(&["sessions", "export", session, "-f", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["parentId"].as_str().map(str::to_owned),
                e["day"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn push_pull_three_devices_converge_append_only() {
    let server = TestServer::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());

    // A: a session over two days, one with a line still being written, and
    // a checkpoint journal naming a blob.
    let s1_d1 = line("user", "start on monday", "2026-06-08T09:00:00Z")
        + &line("assistant", "ok", "2026-06-08T09:00:01Z");
    let s1_d2 = line("user", "continue on tuesday", "2026-06-09T09:00:00Z")
        + &line("assistant", "continuing", "2026-06-09T09:00:01Z");
    let s2_done = line("user", "second session", "2026-06-09T10:00:00Z")
        + &line("assistant", "answer", "2026-06-09T10:00:01Z");
    let pending = r#"{"role":"user","content":"half writ"#;
    a.write(D1, "S1", s1_d1.as_bytes());
    a.write(D2, "S1", s1_d2.as_bytes());
    a.write(D2, "S2", format!("{s2_done}{pending}").as_bytes());
    let blob = b"fn main() {\n    println!(\"prior contents\");\n}\n".to_vec();
    let sha = hex(&Sha256::digest(&blob));
    a.put(&format!("checkpoints/blobs/{sha}"), &blob);
    let journal = format!(
        "{{\"seq\":1,\"ts\":\"2026-06-08T09:00:02Z\",\"path\":\"/src/main.rs\",\"op\":\"write\",\"blob\":\"{sha}\",\"size\":{}}}\n\
         {{\"seq\":2,\"ts\":\"2026-06-08T09:00:03Z\",\"path\":\"/src/new.rs\",\"op\":\"create\"}}\n",
        blob.len()
    );
    a.put("checkpoints/journal.jsonl", journal.as_bytes());

    a.init(&server, "alice", "laptop");
    assert_eq!(
        a.sync_ok(&["push"]),
        "pushed 6 entries in 2 sessions, 2 journal lines, 1 blobs (3 new records, 0 already on the server)\n"
    );
    b.join(&a, &server, "alice", "desktop");
    c.join_copying_key(&a, &server.url, "alice", "server");
    for dev in [&b, &c] {
        assert_eq!(
            dev.sync_ok(&["pull"]),
            "pulled 6 entries in 2 sessions, 1 blobs; 0 sessions diverged (both branches kept)\n"
        );
        // Byte for byte, less the line A has not finished.
        let mut expect = a.tree("transcripts");
        expect.insert(format!("{D2}/S2.jsonl"), Some(s2_done.clone().into_bytes()));
        assert!(dev.tree("transcripts") == expect, "transcripts differ");
        let cp = dev.tree("checkpoints");
        assert_eq!(
            cp[&format!("devices/{}/journal.jsonl", journal_name(&a))].as_deref(),
            Some(journal.as_bytes())
        );
        assert_eq!(cp[&format!("blobs/{sha}")].as_deref(), Some(&blob[..]));
    }

    // The pending line is complete now: it goes, and only it.
    a.append(&format!("transcripts/{D2}/S2.jsonl"), b"ten\"}\n");
    assert_eq!(
        a.sync_ok(&["push"]),
        "pushed 1 entries in 1 sessions, 0 journal lines, 0 blobs (1 new records, 0 already on the server)\n"
    );
    assert_eq!(
        a.sync_ok(&["push"]),
        "pushed 0 entries in 0 sessions, 0 journal lines, 0 blobs (0 new records, 0 already on the server)\n"
    );
    for dev in [&b, &c] {
        assert_eq!(
            dev.sync_ok(&["pull"]),
            "pulled 1 entries in 1 sessions, 0 blobs; 0 sessions diverged (both branches kept)\n"
        );
        assert!(dev.tree("transcripts") == a.tree("transcripts"));
    }

    // A and B continue S1 at the same time: two branches of one tree.
    let before: Vec<(Tree, Tree)> = [&a, &b, &c].map(data).into();
    a.append(
        &format!("transcripts/{D2}/S1.jsonl"),
        line("user", "from the laptop", "2026-06-09T11:00:00Z").as_bytes(),
    );
    b.append(
        &format!("transcripts/{D2}/S1.jsonl"),
        line("user", "from the desktop", "2026-06-09T11:00:05Z").as_bytes(),
    );
    b.append(
        &format!("transcripts/{D2}/S1.jsonl"),
        line("assistant", "desktop reply", "2026-06-09T11:00:06Z").as_bytes(),
    );
    let one = "pushed 1 entries in 1 sessions, 0 journal lines, 0 blobs (1 new records, 0 already on the server)\n";
    assert_eq!(a.sync_ok(&["push"]), one);
    assert_eq!(
        b.sync_ok(&["push"]),
        "pushed 2 entries in 1 sessions, 0 journal lines, 0 blobs (1 new records, 0 already on the server)\n"
    );
    assert_eq!(
        a.sync_ok(&["pull"]),
        "pulled 2 entries in 1 sessions, 0 blobs; 1 sessions diverged (both branches kept)\n"
    );
    assert_eq!(
        b.sync_ok(&["pull"]),
        "pulled 1 entries in 1 sessions, 0 blobs; 1 sessions diverged (both branches kept)\n"
    );
    assert_eq!(
        c.sync_ok(&["pull"]),
        "pulled 3 entries in 1 sessions, 0 blobs; 1 sessions diverged (both branches kept)\n"
    );
    // Nothing left to move either way.
    for dev in [&a, &b, &c] {
        let push = dev.sync_ok(&["push"]);
        assert!(push.starts_with("pushed 0 entries"), "{push}");
        let pull = dev.sync_ok(&["pull"]);
        assert!(pull.starts_with("pulled 0 entries"), "{pull}");
    }

    for (dev, (t, cp)) in [&a, &b, &c].into_iter().zip(&before) {
        let (t2, cp2) = data(dev);
        assert_only_appended(t, &t2, "transcripts");
        assert_only_appended(cp, &cp2, "checkpoints");
    }
    for s in ["S1", "S2"] {
        let set = entry_set(&a, s);
        assert_eq!(entry_set(&b, s), set, "{s} on B");
        assert_eq!(entry_set(&c, s), set, "{s} on C");
    }
    // S1: 4 shared entries, then a fork at the same parent: 1 + 2 entries.
    let s1 = entry_set(&a, "S1");
    assert_eq!(s1.len(), 7);
    let mut children: std::collections::BTreeMap<Option<String>, usize> = Default::default();
    for (_, p, _) in &s1 {
        *children.entry(p.clone()).or_default() += 1;
    }
    assert_eq!(
        children.values().filter(|&&n| n == 2).count(),
        1,
        "exactly one entry has two children (the fork): {s1:?}"
    );
    for dev in [&a, &b, &c] {
        let show = dev.evi(&["sessions", "show", "S1"]);
        assert!(show.stdout.contains("2 branches"), "{}", show.stdout);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The server takes at most `MAX_ENTRY_IDS_PER_SEGMENT` entry ids per
/// segment: a session and a journal of many short lines go up in segments
/// cut there, every line arrives, and no record holds more ids.
#[test]
fn many_short_lines_go_up_in_segments_the_server_takes() {
    let max = evi_shared::limits::MAX_ENTRY_IDS_PER_SEGMENT;
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    let lines = max * 2 + 500;
    let session: String = (0..lines)
        .map(|n| line("user", &n.to_string(), "2026-06-08T09:00:00Z"))
        .collect();
    a.write(D1, "MANY", session.as_bytes());
    let journal: String = (1..=max + 100)
        .map(|n| {
            format!(
                "{{\"seq\":{n},\"ts\":\"2026-06-08T09:00:02Z\",\"path\":\"/f{n}\",\"op\":\"create\"}}\n"
            )
        })
        .collect();
    a.put("checkpoints/journal.jsonl", journal.as_bytes());

    a.init(&server, "many", "laptop");
    let out = a.sync_ok(&["push"]);
    assert!(
        out.starts_with(&format!(
            "pushed {lines} entries in 1 sessions, {} journal lines",
            max + 100
        )),
        "{out}"
    );
    let records = server.records(&a.token());
    assert!(records.len() >= 5, "{} records", records.len());
    for r in &records {
        let ids = r["entry_ids"].as_array().unwrap().len();
        assert!(ids <= max, "a record of {ids} entry ids");
    }

    b.join(&a, &server, "many", "desktop");
    b.sync_ok(&["pull"]);
    assert_eq!(entry_set(&b, "MANY"), entry_set(&a, "MANY"));
    assert_eq!(entry_set(&b, "MANY").len(), lines);
    assert_eq!(
        b.tree("checkpoints")[&format!("devices/{}/journal.jsonl", journal_name(&a))].as_deref(),
        Some(journal.as_bytes())
    );
}

#[test]
fn a_push_moves_the_cursor_over_its_own_records_when_nothing_came_between() {
    let (_server, a, b) = crate::common::two_devices();
    a.write(
        D1,
        "S1",
        line("user", "one", "2026-06-08T10:00:00Z").as_bytes(),
    );
    a.sync_ok(&["push"]);
    // Its own record follows the cursor directly: no pull fetches it back.
    assert_eq!(a.state()["cursor"], 1);
    b.write(
        D1,
        "S2",
        line("user", "two", "2026-06-08T10:01:00Z").as_bytes(),
    );
    b.sync_ok(&["push"]);
    a.append(
        &format!("transcripts/{D1}/S1.jsonl"),
        line("user", "three", "2026-06-08T10:02:00Z").as_bytes(),
    );
    a.sync_ok(&["push"]);
    // The desktop's record came between: the cursor waits for the pull.
    assert_eq!(a.state()["cursor"], 1);
    let out = a.sync_ok(&["pull"]);
    assert!(out.starts_with("pulled 1 entries in 1 sessions"), "{out}");
    assert_eq!(a.state()["cursor"], 3);
}
