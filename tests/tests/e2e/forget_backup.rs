//! A server restored from a backup made before a forget holds the
//! forgotten session again, and no tombstone. The devices that hold the
//! tombstone send it again once they see the history went back (`evi sync
//! pull --all`, or a watcher's mend): the session comes back on none of
//! them, the server deletes it again, and a device that joins afterwards
//! never sees it.

use serde_json::Value;

use crate::common::{Device, TestServer, held_set, session_files, sessions, today};

const GONE: &str = "restored-forget-0001";
const KEPT: &str = "restored-keep-0002";

fn line(text: &str) -> String {
    format!("{{\"role\":\"user\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"{text}\"}}\n")
}

fn kinds(server: &TestServer, dev: &Device, session: &str) -> Vec<String> {
    crate::forget::stream_records(server, dev, session)
        .into_iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_server_restored_from_before_a_forget_is_told_again_and_the_session_stays_gone() {
    let mut server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let day = today();
    a.write(&day, GONE, line("forget this").as_bytes());
    a.write(&day, KEPT, line("keep this").as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let backup = server.back_up();

    let run = a.evi(&["sessions", "forget", "--yes", GONE]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    b.sync_ok(&["pull"]);
    assert!(session_files(&b, GONE).is_empty());

    // The operator restores the backup: the session is back on the
    // server, its tombstone is not.
    server.restore(&backup);
    assert!(kinds(&server, &a, GONE).iter().all(|k| k == "entries"));
    assert!(!kinds(&server, &a, GONE).is_empty());

    // B sees the history went back and mends: the session's records
    // come, and are passed over; the tombstone is sent again.
    let run = b.sync(&["sync", "pull", "--all", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let pulled: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(pulled["server_went_back"].is_string(), "{}", run.stdout);
    assert!(session_files(&b, GONE).is_empty(), "not back on B");
    let pushed: Value = serde_json::from_str(&b.sync_ok(&["push", "--json"])).unwrap();
    assert_eq!(pushed["forget"]["sent"], 1, "{pushed}");
    assert_eq!(kinds(&server, &a, GONE), ["forget"], "deleted again");

    // A mends too, and the session does not come back there either; its
    // own copy of the tombstone is stored once.
    a.sync_ok(&["pull", "--all"]);
    a.sync_ok(&["push"]);
    assert!(session_files(&a, GONE).is_empty());
    assert_eq!(kinds(&server, &a, GONE), ["forget"]);

    // A device that joins now gets the rest, and not the session.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "travel");
    c.sync_ok(&["pull"]);
    assert!(!sessions(&c).contains(GONE));
    assert_eq!(held_set(&a, KEPT), held_set(&c, KEPT));
}
