//! `evi sync key rotate` with the real server and three homes: the rotating
//! device keeps syncing under the new key, a device it revoked can neither
//! pull nor push, another is told to pair again and converges once it has;
//! `age -d` with the new identity opens everything the server holds and no
//! byte of the old ciphertext is left on it; and a rotation killed at each
//! of its steps, then at random times, completes when run again with
//! nothing lost or doubled.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use crate::common::{
    Device, Rng, TestServer, age_open, assert_converged, assert_each_once, sessions,
    stored_entry_ids, today, tool_present,
};
use crate::pairing::{Pairing, join};
use crate::watch::{until, watch_with};
use crate::watch_drift::holds;

fn rotate(dev: &Device, extra: &[&str], env: &[(&str, &str)]) -> crate::common::Run {
    let mut c = dev.sync_cmd();
    c.args(["sync", "key", "rotate", "--yes", "--json"])
        .args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null()).output().expect("run evi").into()
}

fn rotate_ok(dev: &Device, extra: &[&str]) -> Value {
    let r = rotate(dev, extra, &[]);
    assert_eq!(r.code, 0, "key rotate: {}", r.stderr);
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

/// Pairs `dev` again from `from` (which has the account's key) as `name`.
fn repair(from: &Device, dev: &Device, srv: &TestServer, name: &str) {
    let pairing = Pairing::start(from, &[]);
    let joined = join(dev, &pairing.code, srv, name);
    assert_eq!(joined.code, 0, "join again: {}", joined.stderr);
    let (status, outcome, stderr) = pairing.end();
    assert_eq!(status, 0, "pair: {stderr}");
    assert_eq!(outcome["outcome"], "paired", "{outcome}");
}

fn ciphertexts(srv: &TestServer, token: &str) -> Vec<Vec<u8>> {
    srv.records(token)
        .iter()
        .map(|r| {
            base64::engine::general_purpose::STANDARD
                .decode(r["ciphertext"].as_str().unwrap())
                .unwrap()
        })
        .collect()
}

/// Whether `age -d -i identity` opens `ciphertext`.
fn age_opens(identity: &Path, ciphertext: &[u8]) -> bool {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("c.age");
    std::fs::write(&file, ciphertext).unwrap();
    Command::new("age")
        .arg("-d")
        .arg("-i")
        .arg(identity)
        .arg(&file)
        .output()
        .unwrap()
        .status
        .success()
}

/// A slice of a ciphertext's payload (past the age header): bytes no
/// other file holds by chance.
fn fingerprint(ciphertext: &[u8]) -> Vec<u8> {
    let start = ciphertext.len().saturating_sub(48) / 2 + 24;
    ciphertext[start.min(ciphertext.len() - 32)..][..32].to_vec()
}

/// Whether any file the server stores holds `needle` (raw, or as the hex
/// a Postgres dump writes bytea in).
fn server_holds(srv: &TestServer, needle: &[u8]) -> bool {
    let hex: String = needle.iter().map(|b| format!("{b:02x}")).collect();
    srv.stored().values().flatten().any(|bytes| {
        bytes.windows(needle.len()).any(|w| w == needle)
            || (bytes.len() > hex.len() && String::from_utf8_lossy(bytes).contains(hex.as_str()))
    })
}

fn devices(dev: &Device, srv: &TestServer) -> Vec<Value> {
    srv.get_json(&dev.token(), "devices")["devices"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_rotation_revokes_one_device_tells_another_to_pair_again_and_leaves_only_new_ciphertext() {
    let srv = TestServer::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    b.join(&a, &srv, "pat", "phone");
    c.join(&a, &srv, "pat", "tablet");
    let day = today();
    a.write(
        &day,
        "from-laptop",
        b"{\"role\":\"user\",\"content\":\"one\"}\n{\"role\":\"assistant\",\"content\":\"two\"}\n",
    );
    a.add_checkpoints(&day, 3, 4000, 7);
    a.sync_ok(&["push"]);
    b.write(
        &day,
        "from-phone",
        b"{\"role\":\"user\",\"content\":\"on the phone\"}\n",
    );
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    c.sync_ok(&["pull"]);
    let before = sessions(&a);
    let old_key = tempfile::NamedTempFile::new().unwrap();
    std::fs::copy(a.identity_path(), old_key.path()).unwrap();
    let old_ciphertexts = ciphertexts(&srv, &a.token());
    assert!(old_ciphertexts.len() >= 3, "{}", old_ciphertexts.len());

    // Written on the phone under the old key and not pushed yet.
    b.append(
        &format!("transcripts/{day}/from-phone.jsonl"),
        b"{\"role\":\"assistant\",\"content\":\"written offline\"}\n",
    );

    let out = rotate_ok(&a, &["--revoke", "tablet"]);
    assert_eq!(out["outcome"], "rotated", "{out}");
    assert_eq!(out["generation"], 2, "{out}");
    assert_eq!(out["revoked"].as_array().unwrap().len(), 1, "{out}");
    assert!(out["records"].as_u64().unwrap() >= 3, "{out}");
    assert_eq!(out["blobs"], 3, "{out}");
    assert_ne!(
        std::fs::read(a.identity_path()).unwrap(),
        std::fs::read(old_key.path()).unwrap(),
        "the rotating device holds the new key"
    );
    let aside = a.home().join("sync/identity.old.txt");
    assert!(aside.is_file(), "the old key is kept aside until a sync");

    // The phone is told what happened and what to do, on push and pull.
    for cmd in ["push", "pull"] {
        let r = b.sync(&["sync", cmd]);
        assert_eq!(r.code, 1, "{cmd} on the phone: {}", r.stderr);
        assert!(
            r.stderr.contains("key was rotated") && r.stderr.contains("from device laptop"),
            "{cmd}: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains("evi sync pair") && r.stderr.contains("evi sync join"),
            "{cmd}: {}",
            r.stderr
        );
    }
    // The tablet was revoked: it can neither pull nor push.
    c.write(
        &day,
        "from-tablet",
        b"{\"role\":\"user\",\"content\":\"x\"}\n",
    );
    for cmd in ["pull", "push"] {
        let r = c.sync(&["sync", cmd]);
        assert_eq!(r.code, 1, "{cmd} on the tablet: {}", r.stderr);
        assert!(r.stderr.contains("revoked"), "{cmd}: {}", r.stderr);
    }
    // The devices list says who has the current key.
    let list = devices(&a, &srv);
    let by_name = |n: &str| list.iter().find(|d| d["name"] == n).cloned();
    assert!(by_name("tablet").is_none(), "{list:?}");
    let laptop = by_name("laptop").unwrap();
    assert_eq!(
        (&laptop["current_key"], &laptop["key_generation"]),
        (&true.into(), &2.into())
    );
    let phone = by_name("phone").unwrap();
    assert_eq!(
        (&phone["current_key"], &phone["key_generation"]),
        (&false.into(), &1.into())
    );
    let shown = a.sync_ok(&["devices"]);
    assert!(shown.contains("must pair again"), "{shown}");

    // The laptop goes on under the new key; its old key goes at that sync.
    a.sync_ok(&["pull"]);
    a.sync_ok(&["push"]);
    assert!(!aside.exists(), "the old key is deleted after a sync");
    assert_eq!(sessions(&a), before);

    // The phone pairs again, pushes what it wrote offline, and converges;
    // nothing is stored twice.
    repair(&a, &b, &srv, "phone");
    // It keeps its name: its device from before the rotation went in the
    // step that added the new one.
    let list = devices(&a, &srv);
    let mut names: Vec<(&str, bool)> = list
        .iter()
        .map(|d| (d["name"].as_str().unwrap(), d["current_key"] == true))
        .collect();
    names.sort_unstable();
    assert_eq!(names, [("laptop", true), ("phone", true)], "{list:?}");
    assert_eq!(b.state()["account"]["device"], "phone", "{}", b.state());
    assert_eq!(
        std::fs::read_to_string(b.identity_path())
            .unwrap()
            .lines()
            .last(),
        std::fs::read_to_string(a.identity_path())
            .unwrap()
            .lines()
            .last()
    );
    b.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    a.sync_ok(&["pull"]);
    assert_converged(&a, &b, "after the phone paired again");
    assert!(
        std::fs::read_to_string(a.home().join(format!("transcripts/{day}/from-phone.jsonl")))
            .unwrap()
            .contains("written offline")
    );
    assert_each_once(&stored_entry_ids(&srv, &a.token()), "after the rotation");

    // What the server holds opens with the new key only, and none of the
    // old ciphertext is left anywhere in its storage.
    if tool_present("age", "--version", "apt-get install age") {
        let now = ciphertexts(&srv, &a.token());
        for ct in &now {
            age_open(&a.identity_path(), ct);
            assert!(!age_opens(old_key.path(), ct), "the old key opens a record");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for ct in &old_ciphertexts {
        let needle = fingerprint(ct);
        while server_holds(&srv, &needle) {
            assert!(
                Instant::now() < deadline,
                "old ciphertext is still stored on the server"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// What the account holds, as the devices see it: sessions with their
/// entries, and the keyed entry ids stored (each once).
fn assert_whole(a: &Device, b: &Device, srv: &TestServer, want: &BTreeSet<String>, what: &str) {
    b.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    a.sync_ok(&["pull"]);
    assert_eq!(&sessions(a), want, "{what}");
    assert_converged(a, b, what);
    assert_each_once(&stored_entry_ids(srv, &a.token()), what);
}

#[test]
fn a_rotation_killed_at_each_step_and_at_random_times_completes_when_run_again() {
    // Pages of two records, so a kill lands between pages.
    let srv = TestServer::start_env(&[], &[("EVI_SERVER_MAX_PAGE_RECORDS", "2")]);
    let (a, b) = (Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    b.join(&a, &srv, "pat", "phone");
    let day = today();
    for i in 0..6 {
        let line = format!("{{\"role\":\"user\",\"content\":\"session {i}\"}}\n");
        a.write(&day, &format!("s{i}"), line.as_bytes());
        a.sync_ok(&["push"]);
    }
    a.add_checkpoints(&day, 4, 3000, 11);
    a.sync_ok(&["push"]);
    b.write(
        &day,
        "phone",
        b"{\"role\":\"user\",\"content\":\"phone\"}\n",
    );
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    let want = sessions(&a);
    let mut kills = 0;

    // One rotation, killed at each of its steps in turn.
    for point in ["page:1", "page:2", "verify", "commit", "swap"] {
        let r = rotate(&a, &[], &[("EVI_ROTATE_KILL_AT", point)]);
        assert_ne!(
            r.code, 0,
            "{point}: the kill point was not reached: {}",
            r.stderr
        );
        kills += 1;
    }
    let out = rotate_ok(&a, &[]);
    assert_eq!(out["generation"], 2, "{out}");
    assert_eq!(out["resumed"], true, "{out}");
    repair(&a, &b, &srv, "phone");
    assert_whole(&a, &b, &srv, &want, "after the killed rotation completed");

    // Another, killed with SIGKILL at random times, then run to the end.
    let mut rng = Rng::new(25);
    for _ in 0..5 {
        let mut child = a
            .sync_cmd()
            .args(["sync", "key", "rotate", "--yes", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.range(5, 250)));
        let _ = child.kill();
        let _ = child.wait();
        kills += 1;
    }
    rotate_ok(&a, &[]);
    assert!(kills >= 10);
    let generation = devices(&a, &srv)
        .iter()
        .find(|d| d["current"] == true)
        .unwrap()["key_generation"]
        .as_u64()
        .unwrap();
    assert!(generation >= 3, "{generation}");
    repair(&a, &b, &srv, "phone");
    assert_whole(&a, &b, &srv, &want, "after the randomly killed rotation");
    if tool_present("age", "--version", "apt-get install age") {
        for ct in ciphertexts(&srv, &a.token()) {
            age_open(&a.identity_path(), &ct);
        }
    }
}

/// A server whose metrics answer at the address returned.
fn server_with_metrics() -> (TestServer, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    (TestServer::start_with(&["--metrics-listen", &addr]), addr)
}

/// `evi_server_{name}` summed over its labels.
fn metric(addr: &str, name: &str) -> f64 {
    let text = crate::common::get(format!("http://{addr}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    let full = format!("evi_server_{name}");
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(full.as_str()))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_watcher_told_of_a_rotation_says_so_once_asks_nothing_and_syncs_on_once_paired_again() {
    let (srv, metrics) = server_with_metrics();
    let (a, b) = (Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    b.join(&a, &srv, "pat", "desktop");
    let day = today();
    a.write(
        &day,
        "before",
        b"{\"role\":\"user\",\"content\":\"before the rotation\"}\n",
    );
    a.sync_ok(&["push"]);
    // Scans every 2 s: a watcher that retried would do so at each.
    let mut w = watch_with(&b, &["--scan-secs", "2", "--backoff-max-secs", "1"]);
    until("the desktop's watcher pulls", 20, || {
        holds(&b, "before", "before the rotation")
    });
    // Its long poll parked when the rotation commits.
    until("the watcher parks on the server", 20, || {
        metric(&metrics, "waiters") == 1.0
    });
    rotate_ok(&a, &[]);

    until("the watcher says the key was rotated", 20, || {
        w.count("key_rotated") == 1
    });
    let said = w
        .events()
        .into_iter()
        .find(|e| e["event"] == "key_rotated")
        .unwrap();
    assert!(
        said["error"]
            .as_str()
            .is_some_and(|e| e.contains("key was rotated") && e.contains("from device laptop")),
        "{said}"
    );
    assert_eq!(said["server"], srv.url.as_str(), "{said}");
    // Neither `login` (its token is not revoked) nor a loop of failures,
    // and no request to the server over several scans.
    std::thread::sleep(Duration::from_secs(1));
    let asked = metric(&metrics, "http_requests_total");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        metric(&metrics, "http_requests_total"),
        asked,
        "the watcher kept asking the server: {:?}",
        w.events()
    );
    assert!(w.child_running(), "the watcher exited: {}", w.stderr());
    for e in ["key_rotated", "waiting_for_login", "failed", "server_away"] {
        let want = usize::from(e == "key_rotated");
        assert_eq!(w.count(e), want, "{e}: {:?}", w.events());
    }
    let text = w.stderr();
    assert!(!text.contains("evi sync login"), "{text}");
    let st = b.sync(&["sync", "status"]);
    assert!(
        st.stdout.contains("the account's key was rotated") && st.stdout.contains("evi sync join"),
        "{}{}",
        st.stdout,
        st.stderr
    );

    // Paired again while it runs: it goes on by itself, with the new key.
    repair(&a, &b, &srv, "desktop");
    until("the watcher says it syncs again", 30, || {
        w.count("rejoined") == 1
    });
    a.write(
        &day,
        "after",
        b"{\"role\":\"user\",\"content\":\"after the rotation\"}\n",
    );
    a.sync_ok(&["push"]);
    until(
        "the desktop's watcher pulls the laptop's new entry",
        30,
        || holds(&b, "after", "after the rotation"),
    );
    assert_eq!(w.count("key_rotated"), 1, "{:?}", w.events());
    assert!(w.child_running(), "{}", w.stderr());
}

/// A laptop and a desktop of one account, a few sessions pushed from the
/// laptop in records of their own, and the laptop's rotation killed after
/// its first page (pages of two records): what it staged stays on the
/// server. The sessions, as both devices hold them.
fn rotation_cut_off_on_the_laptop() -> (TestServer, Device, Device, BTreeSet<String>) {
    let srv = TestServer::start_env(&[], &[("EVI_SERVER_MAX_PAGE_RECORDS", "2")]);
    let (laptop, desktop) = (Device::new(), Device::new());
    laptop.init(&srv, "pat", "laptop");
    desktop.join(&laptop, &srv, "pat", "desktop");
    let day = today();
    for i in 0..4 {
        let line = format!("{{\"role\":\"user\",\"content\":\"session {i}\"}}\n");
        laptop.write(&day, &format!("s{i}"), line.as_bytes());
        laptop.sync_ok(&["push"]);
    }
    desktop.sync_ok(&["pull"]);
    let want = sessions(&desktop);
    assert_eq!(want.len(), 4);
    let r = rotate(&laptop, &[], &[("EVI_ROTATE_KILL_AT", "page:1")]);
    assert_ne!(r.code, 0, "the kill point was not reached: {}", r.stderr);
    (srv, laptop, desktop, want)
}

#[test]
fn a_rotation_cut_off_on_a_lost_laptop_leaves_the_desktop_free_to_revoke_it_and_rotate() {
    let (srv, laptop, desktop, want) = rotation_cut_off_on_the_laptop();
    // The laptop is lost: the desktop revokes it, then rotates.
    desktop.sync_ok(&["revoke", "laptop"]);
    let out = rotate_ok(&desktop, &[]);
    assert_eq!(out["outcome"], "rotated", "{out}");
    assert_eq!(out["generation"], 2, "{out}");
    assert_eq!(out["resumed"], false, "{out}");
    // The desktop goes on under the new key with everything; the laptop
    // can do nothing.
    desktop.sync_ok(&["pull"]);
    desktop.sync_ok(&["push"]);
    assert_eq!(sessions(&desktop), want);
    assert_each_once(&stored_entry_ids(&srv, &desktop.token()), "after");
    let r = laptop.sync(&["sync", "key", "rotate", "--yes"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("revoked"), "{}", r.stderr);
    // A new device paired from the desktop gets it all.
    let phone = Device::new();
    repair(&desktop, &phone, &srv, "phone");
    phone.sync_ok(&["pull"]);
    assert_eq!(sessions(&phone), want);
}

#[test]
fn a_device_with_the_current_key_abandons_a_rotation_another_left_unfinished() {
    let (srv, laptop, desktop, want) = rotation_cut_off_on_the_laptop();
    // The laptop is not revoked: the desktop, which holds the current key
    // too, abandons the laptop's rotation and runs its own.
    let r = rotate(&desktop, &[], &[]);
    assert_eq!(r.code, 0, "key rotate on the desktop: {}", r.stderr);
    let out: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(out["outcome"], "rotated", "{out}");
    assert_eq!(out["abandoned"], true, "{out}");
    assert_eq!(out["abandoned_by"], "laptop", "{out}");
    desktop.sync_ok(&["pull"]);
    assert_eq!(sessions(&desktop), want);
    if tool_present("age", "--version", "apt-get install age") {
        for ct in ciphertexts(&srv, &desktop.token()) {
            age_open(&desktop.identity_path(), &ct);
        }
    }
    // The laptop's rerun is told the key was rotated elsewhere, and how to
    // go on; nothing blames its key.
    let r = laptop.sync(&["sync", "key", "rotate", "--yes"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("rotated") && r.stderr.contains("desktop"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("this device has another key"),
        "{}",
        r.stderr
    );
    repair(&desktop, &laptop, &srv, "laptop");
    assert_whole(
        &desktop,
        &laptop,
        &srv,
        &want,
        "after the laptop paired again",
    );
    // Once paired again, the laptop's own leftovers do not stand in the
    // way of a rotation from there.
    let out = rotate_ok(&laptop, &[]);
    assert_eq!(out["generation"], 3, "{out}");
}

#[test]
fn a_forget_undone_before_a_rotation_stays_undone_on_every_device() {
    let srv = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    b.join(&a, &srv, "pat", "desktop");
    let day = today();
    a.write(
        &day,
        "kept-after-all",
        b"{\"role\":\"user\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"undone\"}\n",
    );
    a.write(
        &day,
        "ordinary",
        b"{\"role\":\"user\",\"content\":\"ordinary\"}\n",
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let want = sessions(&a);
    assert_eq!(want.len(), 2);

    // Forgotten, then brought back, on the laptop; the desktop follows
    // both.
    let run = a.evi(&["sessions", "forget", "--yes", "kept-after-all"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    b.sync_ok(&["pull"]);
    assert!(!sessions(&b).contains("kept-after-all"));
    let run = a.evi(&["sessions", "forget", "--undo", "kept-after-all"]);
    assert_eq!(run.code, 0, "undo: {}", run.stderr);
    b.sync_ok(&["pull"]);
    assert_eq!(sessions(&b), want);

    // The rotation carries the forget and its undo: no device forgets the
    // session again, the rotating one included.
    rotate_ok(&a, &[]);
    let pulled: Value = serde_json::from_str(&a.sync_ok(&["pull", "--json"])).unwrap();
    assert!(
        pulled["forget"]["trashed"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{pulled}"
    );
    assert_eq!(sessions(&a), want, "on the rotating device");
    repair(&a, &b, &srv, "desktop");
    b.sync_ok(&["pull"]);
    assert_eq!(sessions(&b), want, "on the device paired again");
    assert_whole(&a, &b, &srv, &want, "after the rotation");
    // A device new to the account gets the session too.
    let c = Device::new();
    repair(&a, &c, &srv, "phone");
    c.sync_ok(&["pull"]);
    assert_eq!(sessions(&c), want, "on a new device");
}
