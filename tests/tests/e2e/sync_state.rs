//! What a device remembers between syncs: the lock that keeps two syncs of one
//! home apart, resuming after a file was rewritten, and what `status` reports.

use crate::common::{Device, TestServer};

fn records_to_pull(dev: &Device) -> u64 {
    let r = dev.sync(&["sync", "status", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v["remote_pending_records"].as_u64().unwrap()
}

#[test]
fn a_second_sync_waits_then_names_the_holder() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let holder = a.hold_sync_lock(4242);
    let run = a
        .sync_cmd()
        .args(["sync", "push"])
        .env("EVI_SYNC_LOCK_WAIT", "0.3")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&run.stderr),
        "waiting for evi sync (pid 4242) …\n\
         error: another evi sync is running in this home (pid 4242); wait for it to finish\n\
         hint: set EVI_SYNC_LOCK_WAIT=SECONDS to wait longer\n"
    );
    holder.unlock().unwrap();
    assert_eq!(a.sync(&["sync", "push"]).code, 0);
}

#[test]
fn a_rewritten_file_is_read_again_and_merged_by_id() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join(&a, &server, "pat", "desktop");
    let one = "{\"role\":\"user\",\"content\":\"one\"}\n";
    let two = "{\"role\":\"user\",\"content\":\"two\"}\n";
    let path = a.write("2026-06-08", "S1", format!("{one}{two}").as_bytes());
    let r = a.sync(&["sync", "push"]);
    assert!(
        r.stdout.starts_with("pushed 2 entries in 1 sessions"),
        "{}",
        r.stdout
    );

    // Same length, different bytes: the pushed prefix changed.
    std::fs::write(&path, format!("{one}{}", two.replace("two", "TWO"))).unwrap();
    let r = a.sync(&["sync", "push", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    // Read again whole, but only the line the server lacks is sent: the
    // first is asked about and left out, so no id is stored twice.
    assert_eq!(v["entries"], 1, "only the new entry: {}", r.stdout);
    assert_eq!(v["segments_stored"], 1, "a new entry, so a new record");

    // Shrunk: nothing new to store, nothing lost.
    std::fs::write(&path, one).unwrap();
    let r = a.sync(&["sync", "push", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (v["entries"].as_u64(), v["segments_stored"].as_u64()),
        (Some(0), Some(0)),
        "the one line left is on the server: {}",
        r.stdout
    );

    // B gets the union: the root and both versions of the second line.
    let r = b.sync(&["sync", "pull"]);
    assert_eq!(
        r.stdout,
        "pulled 3 entries in 1 sessions, 0 blobs; 1 sessions diverged (both branches kept)\n"
    );
    let show = b.evi(&["sessions", "show", "S1"]);
    assert!(
        show.stdout
            .starts_with("session S1 (2 messages, 2 branches"),
        "{}",
        show.stdout
    );
}

#[test]
fn status_reports_what_is_pending_each_way() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join(&a, &server, "pat", "desktop");
    a.write(
        "2026-06-08",
        "S1",
        b"{\"role\":\"user\",\"content\":\"x\"}\n",
    );
    a.write(
        "2026-06-08",
        "S2",
        b"{\"role\":\"user\",\"content\":\"y\"}\n",
    );
    let r = a.sync(&["sync", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["local_changed_files"], 2);
    assert_eq!(v["device"], "laptop");
    assert_eq!(v["last_push"], serde_json::Value::Null);
    assert_eq!(a.sync(&["sync", "push"]).code, 0);
    let r = a.sync(&["sync", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["local_changed_files"], 0);
    assert!(v["last_push"].is_string());
    assert_eq!(records_to_pull(&b), 2, "two records wait for B");
    // A passes over its own records without downloading them again.
    let own = a.sync(&["sync", "pull", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&own.stdout).unwrap();
    assert_eq!(
        (v["records"].as_u64(), v["entries"].as_u64()),
        (Some(0), Some(0)),
        "{}",
        own.stdout
    );
    assert_eq!(records_to_pull(&a), 0);
    let r = b.sync(&["sync", "pull", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (v["records"].as_u64(), v["entries"].as_u64()),
        (Some(2), Some(2)),
        "{}",
        r.stdout
    );
    assert_eq!(records_to_pull(&b), 0);
    let text = b.sync(&["sync", "status"]).stdout;
    assert!(text.contains("device:    desktop\n"), "{text}");
    assert!(text.contains("to pull:   0 records\n"), "{text}");
}

#[test]
fn login_with_another_key_is_refused_and_leaves_no_device() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    // A device with a key of its own (made by `init` against another account).
    let stranger = Device::new();
    stranger.init(&server, "sam", "box");
    std::fs::remove_file(stranger.home().join("sync/state.json")).unwrap();
    let r = stranger.sync(&[
        "sync",
        "login",
        "--server",
        &server.url,
        "--user",
        "pat",
        "--device",
        "intruder",
    ]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.starts_with(&format!(
            "error: the key in {} (fingerprint ",
            stranger.identity_path().display()
        )),
        "{}",
        r.stderr
    );
    let devices = a.sync(&["sync", "devices", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&devices.stdout).unwrap();
    let names: Vec<&str> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["laptop"], "the refused device's token was revoked");

    // A device whose key was swapped under it refuses to push.
    std::fs::copy(
        stranger.home().join("sync/identity.txt"),
        a.home().join("sync/identity.txt"),
    )
    .unwrap();
    a.write(
        "2026-06-08",
        "S1",
        b"{\"role\":\"user\",\"content\":\"x\"}\n",
    );
    let r = a.sync(&["sync", "push"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .starts_with("error: this device's key does not match"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_revoked_device_can_no_longer_sync() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join(&a, &server, "pat", "desktop");
    let list = a.sync(&["sync", "devices"]);
    assert_eq!(list.code, 0);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", list.stdout);
    assert!(lines[0].starts_with("  NAME "), "{}", list.stdout);
    assert!(
        lines.iter().any(|l| l.starts_with("* laptop ")),
        "{}",
        list.stdout
    );
    assert!(
        lines.iter().any(|l| l.starts_with("  desktop ")),
        "{}",
        list.stdout
    );

    let r = a.sync(&["sync", "revoke", "desktop"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("revoked desktop ("), "{}", r.stdout);
    let r = b.sync(&["sync", "push"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.starts_with("error: server refused (401)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.ends_with(
            "hint: this device's token is no longer valid (revoked?): run `evi sync login` again\n"
        ),
        "{}",
        r.stderr
    );
    let r = a.sync(&["sync", "revoke", "nosuch"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        "error: no device is named \"nosuch\" or has an id starting with it\n\
         hint: `evi sync devices` lists them\n"
    );
}

#[test]
fn pull_all_brings_back_what_this_device_pushed_and_then_lost() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let lines = [
        "{\"role\":\"user\",\"content\":\"one\"}\n",
        "{\"role\":\"assistant\",\"content\":\"two\"}\n",
        "{\"role\":\"user\",\"content\":\"three\"}\n",
    ];
    let full = lines.concat();
    let path = a.write("2026-06-08", "S1", full.as_bytes());
    a.write("2026-06-08", "S2", lines[0].as_bytes());
    a.sync_ok(&["push"]);

    // An old backup comes back: S1 lost its last two lines, S2 is gone.
    std::fs::write(&path, lines[0]).unwrap();
    std::fs::remove_file(a.home().join("transcripts/2026-06-08/S2.jsonl")).unwrap();
    // A plain pull passes over this device's own records.
    a.sync_ok(&["pull"]);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), lines[0]);

    let out = a.sync_ok(&["pull", "--all", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["entries"], 3, "{out}");
    // Byte for byte: the lost lines continue the tip, so they read back
    // under their own ids.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), full);
    assert_eq!(
        std::fs::read_to_string(a.home().join("transcripts/2026-06-08/S2.jsonl")).unwrap(),
        lines[0]
    );
    // Nothing twice, and nothing new to push.
    let v: serde_json::Value =
        serde_json::from_str(&a.sync_ok(&["pull", "--all", "--json"])).unwrap();
    assert_eq!(v["entries"], 0);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), full);
    let v: serde_json::Value = serde_json::from_str(&a.sync_ok(&["push", "--json"])).unwrap();
    assert_eq!(v["segments_stored"], 0, "{v}");
}
