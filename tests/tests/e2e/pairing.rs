//! `evi sync pair` and `evi sync join`: a device joins an account with a
//! short code through the real server, then pushes and pulls; a wrong code,
//! an expired code and two pairings at once; and neither the server's
//! storage nor its log ever holds the identity or the code. Talks to the
//! server only through its API and the evi binary, so the Postgres target
//! borrows it as it is.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use crate::common::*;

/// `evi sync pair --yes --json` running on `dev`: the child and the code it
/// printed on its first line.
fn start_pair(dev: &Device) -> (Child, BufReader<std::process::ChildStdout>, String) {
    let mut child = dev
        .sync_cmd()
        .args(["sync", "pair", "--yes", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start evi sync pair");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("read the code line");
    let v: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("first line of pair --json is not JSON ({e}): {line:?}"));
    let code = v["code"].as_str().expect("code").to_owned();
    (child, out, code)
}

/// Waits for the pair child; its outcome line, stderr and exit code.
fn finish_pair(
    mut child: Child,
    mut out: BufReader<std::process::ChildStdout>,
) -> (serde_json::Value, String, i32) {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let v = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("outcome line is not JSON ({e}): {line:?}; stderr {err}"));
    (v, err, status.code().unwrap_or(-1))
}

fn join(dev: &Device, server: &TestServer, code: &str, name: &str) -> Run {
    dev.cmd()
        .args([
            "sync",
            "join",
            code,
            "--server",
            &server.url,
            "--device",
            name,
            "--json",
        ])
        .output()
        .expect("run evi sync join")
        .into()
}

fn line(text: &str) -> Vec<u8> {
    format!("{{\"role\":\"user\",\"content\":\"{text}\",\"ts\":\"2026-01-01T00:00:00Z\"}}\n")
        .into_bytes()
}

/// What a home holds for sync (nothing, after a failed join).
fn sync_files(dev: &Device) -> Vec<String> {
    let dir = dev.home().join("sync");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lock")
        .collect();
    names.sort();
    names
}

fn device_names(dev: &Device) -> Vec<String> {
    let out = dev.sync_ok(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut names: Vec<String> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_device_joins_with_the_code_then_pushes_and_pulls() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    a.write("2026-01-01", "s-from-a", &line("hello from a"));
    a.sync_ok(&["push"]);

    let (child, out, code) = start_pair(&a);
    assert!(
        code.split('-').count() == 3 && code.split('-').next().unwrap().parse::<u32>().is_ok(),
        "code looks like N-word-word: {code}"
    );
    let b = Device::new();
    let r = join(&b, &server, &code, "desk");
    assert_eq!(r.code, 0, "join: {}", r.stderr);
    let joined: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(joined["joined"], true);
    assert_eq!(joined["user"], "pat");
    assert_eq!(joined["device"], "desk");
    let (outcome, err, status) = finish_pair(child, out);
    assert_eq!(status, 0, "pair: {err}");
    assert_eq!(outcome["paired"], true);
    assert_eq!(outcome["device"], "desk");

    // The same key, in a private file; no password was given to b (its
    // command ran without EVI_SYNC_PASSWORD).
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
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(b.identity_path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "identity mode {mode:o}");
    assert_eq!(device_names(&a), ["desk", "laptop"]);

    // b pulls what a pushed, and pushes its own, which a pulls.
    b.sync_ok(&["pull"]);
    assert_eq!(sessions(&b), sessions(&a));
    b.write("2026-01-02", "s-from-b", &line("hello from b"));
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    assert!(sessions(&a).contains("s-from-b"), "{:?}", sessions(&a));
    assert_converged(&a, &b, "after pairing");
}

#[test]
fn a_wrong_code_fails_on_both_sides_and_stores_nothing() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let (child, out, code) = start_pair(&a);
    // The right number, other words.
    let mut parts: Vec<String> = code.split('-').map(str::to_owned).collect();
    parts[2] = if parts[2] == "apple" {
        "amber".into()
    } else {
        "apple".into()
    };
    let wrong = parts.join("-");
    let b = Device::new();
    let r = join(&b, &server, &wrong, "intruder");
    assert_eq!(
        r.code, 1,
        "join with a wrong code: {} / {}",
        r.stdout, r.stderr
    );
    assert!(r.stderr.contains("does not match"), "{}", r.stderr);
    assert!(r.stderr.contains("nothing was written"), "{}", r.stderr);
    assert!(sync_files(&b).is_empty(), "b keeps {:?}", sync_files(&b));
    let (outcome, err, status) = finish_pair(child, out);
    assert_eq!(status, 1, "{err}");
    assert_eq!(outcome["paired"], false);
    assert_eq!(outcome["outcome"], "mismatch");
    assert!(err.contains("different code"), "{err}");
    // No device was added, and the code is used up: the right one fails now.
    assert_eq!(device_names(&a), ["laptop"]);
    let c = Device::new();
    let r = join(&c, &server, &code, "late");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(sync_files(&c).is_empty());
}

#[test]
fn an_expired_code_fails_on_both_sides() {
    let server = TestServer::start_with(&["--pair-ttl", "2"]);
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let (child, out, code) = start_pair(&a);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let b = Device::new();
    let r = join(&b, &server, &code, "desk");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("expired"), "{}", r.stderr);
    assert!(sync_files(&b).is_empty());
    let (outcome, err, status) = finish_pair(child, out);
    assert_eq!(status, 1, "{err}");
    assert_eq!(outcome["outcome"], "expired");
    assert!(err.contains("expired"), "{err}");
    assert_eq!(device_names(&a), ["laptop"]);
}

#[test]
fn two_pairings_at_once_for_one_account_both_finish() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let (c1, o1, code1) = start_pair(&a);
    let (c2, o2, code2) = start_pair(&a);
    assert_ne!(code1, code2);
    let b = Device::new();
    let c = Device::new();
    let (rb, rc) = std::thread::scope(|s| {
        let hb = s.spawn(|| join(&b, &server, &code2, "desk"));
        let hc = s.spawn(|| join(&c, &server, &code1, "phone"));
        (hb.join().unwrap(), hc.join().unwrap())
    });
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert_eq!(rc.code, 0, "{}", rc.stderr);
    let (v1, e1, s1) = finish_pair(c1, o1);
    let (v2, e2, s2) = finish_pair(c2, o2);
    assert_eq!((s1, s2), (0, 0), "{e1} / {e2}");
    assert_eq!(v1["device"], "phone");
    assert_eq!(v2["device"], "desk");
    assert_eq!(device_names(&a), ["desk", "laptop", "phone"]);
    c.write("2026-01-03", "s-from-c", &line("from the phone"));
    c.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert!(sessions(&b).contains("s-from-c"));
}

/// Every file under `dir`, read whole.
fn all_bytes(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((p, b));
            }
        }
    }
    out
}

fn holds(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[test]
fn the_servers_storage_and_log_never_hold_the_identity_or_the_code() {
    let logs = tempfile::tempdir().unwrap();
    let server = TestServer::start_logged(&[], &[("EVI_SERVER_LOG", "debug")], logs.path());
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let (child, out, code) = start_pair(&a);
    let b = Device::new();
    let r = join(&b, &server, &code, "desk");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (_, err, status) = finish_pair(child, out);
    assert_eq!(status, 0, "{err}");
    // And a failed one, whose hello stays in the slot until it is burnt.
    let (child, out, code2) = start_pair(&a);
    let mut parts: Vec<&str> = code2.split('-').collect();
    parts[1] = if parts[1] == "apple" {
        "amber"
    } else {
        "apple"
    };
    let r = join(&Device::new(), &server, &parts.join("-"), "x");
    assert_eq!(r.code, 1);
    finish_pair(child, out);

    let secret = std::fs::read_to_string(a.identity_path())
        .unwrap()
        .lines()
        .find(|l| l.starts_with("AGE-SECRET-KEY-1"))
        .unwrap()
        .to_owned();
    let words1 = code.split_once('-').unwrap().1.to_owned();
    let words2 = code2.split_once('-').unwrap().1.to_owned();
    let token = b.token();
    let mut places = all_bytes(server.data.path());
    places.extend(all_bytes(logs.path()));
    assert!(places.iter().any(|(p, _)| p.ends_with("stderr.log")));
    for (path, bytes) in &places {
        for (what, needle) in [
            ("identity", secret.as_str()),
            ("code", code.as_str()),
            ("code's words", words1.as_str()),
            ("second code's words", words2.as_str()),
            ("new device's token", token.as_str()),
        ] {
            assert!(
                !holds(bytes, needle.as_bytes()),
                "{} holds the {what}",
                path.display()
            );
        }
    }
}
