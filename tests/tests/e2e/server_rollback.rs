//! A server restored from an older backup (or lying) holds less than a
//! device saw it hold: `evi sync status` and `evi sync pull` say so, and
//! `evi sync pull --all` then `evi sync push` put back what it lost
//! (SECURITY.md, "Roll-back"; `cli/src/sync/state/high_water.rs`).

use crate::common::{Device, TestServer, assert_converged, today};

const WENT_BACK: &str = "warning: the server's history went backwards";

fn line(text: &str) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{text}\"}}\n")
}

#[test]
fn a_server_restored_from_an_older_backup_is_noticed_and_mended() {
    let mut srv = TestServer::start();
    let a = Device::new();
    a.init(&srv, "pat", "laptop");
    let day = today();
    a.write(&day, "early", line("before the backup").as_bytes());
    a.sync_ok(&["push"]);

    // The operator backs up the server (stopped), then more is pushed and
    // pulled.
    let backup = srv.back_up();
    a.append(
        &format!("transcripts/{day}/early.jsonl"),
        line("after the backup").as_bytes(),
    );
    a.write(&day, "late", line("only after the backup").as_bytes());
    a.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    let st = a.sync(&["sync", "status", "--json"]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert!(!st.stderr.contains(WENT_BACK), "{}", st.stderr);
    let json: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(json["server_went_back"], serde_json::Value::Null);

    // The server is restored from the backup.
    srv.restore(&backup);

    let st = a.sync(&["sync", "status"]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    assert!(st.stderr.contains(WENT_BACK), "status: {}", st.stderr);
    assert!(st.stderr.contains("evi sync pull --all"), "{}", st.stderr);
    let st = a.sync(&["sync", "status", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    let back = json["server_went_back"].as_str().expect("a message");
    assert!(back.contains("newest seq 1, this device saw"), "{back}");
    let pull = a.sync(&["sync", "pull"]);
    assert_eq!(pull.code, 0, "{}", pull.stderr);
    assert!(pull.stderr.contains(WENT_BACK), "pull: {}", pull.stderr);

    // Mended from the device: the server's history as it now is, then
    // everything this device has sent again.
    let all = a.sync(&["sync", "pull", "--all"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    a.sync_ok(&["push"]);
    let st = a.sync(&["sync", "status"]);
    assert!(
        !st.stderr.contains(WENT_BACK),
        "after mending: {}",
        st.stderr
    );
    let b = Device::new();
    b.join_copying_key(&a, &srv.url, "pat", "desktop");
    b.sync_ok(&["pull"]);
    assert_converged(&a, &b, "after the server lost a push");
}
