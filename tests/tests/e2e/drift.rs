//! Issue 20: ways devices drifted apart, stopped or misled quietly, each
//! checked as a user would see it.

use serde_json::{Value, json};

use crate::common::*;

const DAY: &str = "2026-06-20";

fn line(session: &str, n: usize) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{session} line {n}\",\"ts\":\"{DAY}T10:00:00Z\"}}\n")
}

fn lines(session: &str, range: std::ops::Range<usize>) -> String {
    range.map(|n| line(session, n)).collect()
}

/// `evi sync verify --json` on `dev`: exit code, report, stdout of the
/// plain form too.
fn verify(dev: &Device) -> (i32, Value, String) {
    let run = dev.sync(&["sync", "verify", "--json"]);
    let v = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", run.stdout, run.stderr));
    let plain = dev.sync(&["sync", "verify"]);
    assert_eq!(plain.code, run.code, "{plain:?}");
    (run.code, v, plain.stdout)
}

/// Defect 9: a titled session synced both ways verifies clean on both
/// devices; lines not pushed yet and records not pulled yet are pending,
/// said so, and no problem.
#[test]
fn drift_verify_titled_session_clean_and_unsynced_is_pending() {
    const S: &str = "01JDRIFTTITLE0000000000000";
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.write(DAY, S, lines(S, 0..4).as_bytes());
    let r = a.evi(&["sessions", "title", S, "--set", "Drift check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    a.init(&server, "tia", "a");
    a.sync_ok(&["push"]);
    b.join_copying_key(&a, &server.url, "tia", "b");
    b.sync_ok(&["pull"]);
    for (what, dev) in [("a", &a), ("b", &b)] {
        let (code, v, plain) = verify(dev);
        assert_eq!((code, &v["problems"]), (0, &json!([])), "{what}: {v}");
        assert_eq!(
            v["local_entries"], 5,
            "{what}: four lines and the title: {v}"
        );
        assert_eq!(v["pending"], json!([]), "{what}: {v}");
        assert!(plain.ends_with("no problems found\n"), "{what}: {plain}");
    }

    // a writes on, and a new session, without pushing.
    const T: &str = "01JDRIFTNEW000000000000000";
    a.append(
        &format!("transcripts/{DAY}/{S}.jsonl"),
        lines(S, 4..6).as_bytes(),
    );
    a.write(DAY, T, lines(T, 0..3).as_bytes());
    let (code, v, plain) = verify(&a);
    assert_eq!((code, &v["problems"]), (0, &json!([])), "{v}");
    assert_eq!(v["not_pushed"], 5, "{v}");
    let pending = v["pending"].as_array().unwrap();
    assert!(
        pending.contains(&json!({"kind": "not_pushed", "session": S, "entries": 2})),
        "{v}"
    );
    assert!(
        pending.contains(&json!({"kind": "not_pushed", "session": T, "entries": 3})),
        "{v}"
    );
    assert!(
        plain.contains(&format!(
            "pending: session {T}: 3 entries here not pushed yet (`evi sync push` sends them)"
        )),
        "{plain}"
    );
    assert!(plain.ends_with("no problems found\n"), "{plain}");

    // Pushed: on b, two records not pulled yet, pending too.
    a.sync_ok(&["push"]);
    let (code, v, plain) = verify(&b);
    assert_eq!((code, &v["problems"]), (0, &json!([])), "{v}");
    assert_eq!(
        v["pending"],
        json!([{"kind": "not_pulled", "records": 2}]),
        "{v}"
    );
    assert!(
        plain.contains("pending: 2 records of other devices not pulled yet"),
        "{plain}"
    );

    b.sync_ok(&["pull"]);
    for (what, dev) in [("a", &a), ("b", &b)] {
        let (code, v, _) = verify(dev);
        assert_eq!(
            (code, &v["problems"], &v["pending"]),
            (0, &json!([]), &json!([])),
            "{what}: {v}"
        );
    }
    assert_converged(&a, &b, "after the titled session synced");
}

/// Defect 4: a push with one session too large for the account's quota
/// stores everything else; the session that does not fit is named, the
/// push exits 1 (something the user asked to sync is not synced), and the
/// other device gets the rest.
#[test]
fn drift_over_quota_push_stores_what_fits_and_names_the_rest() {
    use base64::Engine as _;
    const SMALL: &str = "01JDRIFTSMALL0000000000000";
    const BIG: &str = "01JDRIFTBIG000000000000000";
    let server = TestServer::start_with(&["--quota-bytes", "100000"]);
    let (a, b) = (Device::new(), Device::new());
    a.write(DAY, SMALL, lines(SMALL, 0..3).as_bytes());
    // Incompressible: 10 lines of 20 kB, twice the quota however sealed.
    let big: String = (0..10)
        .map(|n| {
            let noise = base64::engine::general_purpose::STANDARD.encode(random_bytes(15_000, n));
            format!("{{\"role\":\"tool\",\"content\":\"{noise}\",\"ts\":\"{DAY}T10:00:00Z\"}}\n")
        })
        .collect();
    a.write(DAY, BIG, big.as_bytes());
    a.init(&server, "quo", "a");

    let run = a.sync(&["sync", "push"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "error: not pushed: session {BIG}: the account's storage quota on the server has no room for it"
        )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains(SMALL), "{}", run.stderr);
    assert!(
        run.stdout.starts_with("pushed 3 entries in "),
        "only the small session counts as pushed: {}",
        run.stdout
    );

    b.join_copying_key(&a, &server.url, "quo", "b");
    b.sync_ok(&["pull"]);
    assert_eq!(
        sessions(&b),
        [SMALL.to_owned()].into(),
        "b holds the session that fits"
    );
    assert_eq!(held_set(&b, SMALL), held_set(&a, SMALL));

    // Nothing of the big one was recorded as sent: the next push tries it
    // again, and names it again.
    let run = a.sync(&["sync", "push"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(&format!("session {BIG}")),
        "{}",
        run.stderr
    );
}

/// Defect 6: eVi on `b` writes each line in two writes 0.5 ms apart, with
/// hardly a pause, while `a` pushes lines of the same session and `b`
/// pulls them again and again. No pulled line may land inside one of
/// eVi's: afterwards every line is whole JSON, every line eVi wrote reads
/// back as written, and once eVi stops, a last pull brings every entry.
#[test]
fn drift_pull_never_glues_into_a_writer_that_never_pauses() {
    use std::io::Write as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    const S: &str = "01JDRIFTWRITER000000000000";
    let day = today();
    let rel = format!("transcripts/{day}/{S}.jsonl");
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.write(&day, S, lines(S, 0..1).as_bytes());
    a.init(&server, "wri", "a");
    a.sync_ok(&["push"]);
    b.join_copying_key(&a, &server.url, "wri", "b");
    b.sync_ok(&["pull"]);

    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, written) = (stop.clone(), written.clone());
        let path = b.home().join(&rel);
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Bursts of a few hundred lines, a short breath between
                // them: the file is quiet only now and then.
                for _ in 0..300 {
                    let head = format!("{{\"role\":\"assistant\",\"content\":\"evi line {n} ");
                    f.write_all(head.as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_micros(500));
                    f.write_all(b"tail\",\"ts\":\"2026-06-20T11:00:00Z\"}\n")
                        .unwrap();
                    n += 1;
                    written.store(n, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(100));
                }
                std::thread::sleep(Duration::from_millis(80));
            }
        })
    };

    let started = Instant::now();
    let mut pulls = 0;
    while pulls < 200 && started.elapsed() < Duration::from_secs(60) {
        a.append(&rel, line(S, 1 + pulls).as_bytes());
        a.sync_ok(&["push"]);
        let run = b.sync(&["sync", "pull"]);
        assert_eq!(run.code, 0, "pull {pulls}: {run:?}");
        pulls += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let evi_lines = written.load(Ordering::Relaxed);
    println!("{pulls} pulls beside {evi_lines} lines eVi wrote in two halves");
    assert_all_lines_json(&b, "after the pulls beside a busy writer");

    // eVi has stopped: what waited goes in now.
    b.sync_ok(&["pull"]);
    assert_all_lines_json(&b, "after the last pull");
    let text = std::fs::read_to_string(b.home().join(&rel)).unwrap();
    for n in 0..evi_lines {
        let want = format!(
            "{{\"role\":\"assistant\",\"content\":\"evi line {n} tail\",\"ts\":\"2026-06-20T11:00:00Z\"}}\n"
        );
        assert!(text.contains(&want), "eVi's line {n} is not whole");
    }
    let held_b = held_set(&b, S);
    for h in held_set(&a, S) {
        assert!(held_b.contains(&h), "pulled entry missing on b: {h:?}");
    }
}

/// Flips one bit in the middle of record `seq`'s body, in its pack (a file
/// on the server's disk, or the bucket's object), as a failing disk would.
fn damage_body(server: &TestServer, seq: u64) {
    let at = server.stores();
    let row = crate::server_data::rows(&at)
        .into_iter()
        .find(|r| r.seq as u64 == seq)
        .expect("the record's row");
    let (pack, offset, len) = row.body.expect("a body in a pack");
    let path = crate::server_data::pack_path(&at, row.user, &pack);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(offset + len / 2) as usize] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
}

/// Defect 3: one damaged body on the server's disk costs a new device
/// that record only: it gets every other record, the pull fails naming the
/// damaged one (session and seq), so does `verify`, and every later pull
/// asks for it again; once a device that has the session runs `verify
/// --repair`, the next pull brings it and both devices verify clean.
const GOOD: &str = "01JDRIFTGOOD00000000000000";
const DAMAGED: &str = "01JDRIFTDAMAGED00000000000";

/// `a` pushes GOOD and DAMAGED, DAMAGED in two records, and the second's
/// body is damaged on the server's disk: its seq.
fn push_and_damage(server: &TestServer, a: &Device) -> u64 {
    a.write(DAY, GOOD, lines(GOOD, 0..2).as_bytes());
    a.write(DAY, DAMAGED, lines(DAMAGED, 0..2).as_bytes());
    a.sync_ok(&["push"]);
    a.append(
        &format!("transcripts/{DAY}/{DAMAGED}.jsonl"),
        lines(DAMAGED, 2..4).as_bytes(),
    );
    a.sync_ok(&["push"]);
    let stream = a.keys().session_key(&DAMAGED.parse().unwrap());
    let damaged = (server.records(&a.token()).iter())
        .filter(|r| r["stream"] == stream.as_str())
        .filter_map(|r| r["seq"].as_u64())
        .max()
        .unwrap();
    damage_body(server, damaged);
    damaged
}

#[test]
fn drift_damaged_record_is_skipped_and_healed() {
    const S: &str = GOOD;
    const T: &str = DAMAGED;
    let (server, a, b) = two_devices();
    let damaged = push_and_damage(&server, &a);
    let named = format!("session {T}, record {damaged}");

    for round in ["first", "second"] {
        let run = b.sync(&["sync", "pull"]);
        assert_eq!(run.code, 1, "{round} pull: {run:?}");
        assert!(run.stderr.contains(&named), "{round} pull: {}", run.stderr);
        assert!(
            run.stderr.contains("evi sync verify --repair"),
            "{round} pull says what to do: {}",
            run.stderr
        );
        assert_eq!(held_set(&b, S), held_set(&a, S), "{round}: S whole");
        assert_eq!(held(&b, T).len(), 2, "{round}: T up to the damage");
        assert!(b.state()["cursor"].as_u64().unwrap() >= damaged, "{round}");
    }
    let status = b.sync_ok(&["status"]);
    assert!(status.contains(&format!("damaged:   {named}")), "{status}");
    let (code, v, plain) = verify(&b);
    assert_eq!(code, 1, "{v}");
    let bad = (v["problems"].as_array().unwrap().iter())
        .find(|p| p["kind"] == "bad_record")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!((&bad["seq"], &bad["session"]), (&json!(damaged), &json!(T)));
    assert!(
        plain.contains(&format!("session {T}: record {damaged} does not verify")),
        "{plain}"
    );

    let run = a.sync(&["sync", "verify", "--repair"]);
    assert_eq!(run.code, 0, "repair: {run:?}");
    let run = b.sync(&["sync", "pull"]);
    assert_eq!(run.code, 0, "pull after the repair: {run:?}");
    assert_eq!(held_set(&b, T), held_set(&a, T), "T whole after the repair");
    assert_eq!(b.state().get("damaged"), None, "{}", b.state());
    for (what, dev) in [("a", &a), ("b", &b)] {
        let (code, v, _) = verify(dev);
        assert_eq!((code, &v["problems"]), (0, &json!([])), "{what}: {v}");
    }
}

/// Defect 3 in `evi sync watch`: the watcher says which record is damaged,
/// applies the rest, goes on running, and brings the record once a device
/// that has it ran `verify --repair`, saying that all verify now.
#[test]
fn drift_watcher_reports_a_damaged_record_and_gets_it_once_healed() {
    let (server, a, b) = two_devices();
    let damaged = push_and_damage(&server, &a);
    let mut w = crate::watch::watch_with(&b, &["--scan-secs", "600", "--backoff-max-secs", "1"]);
    let said = |empty: bool| {
        w.events()
            .iter()
            .filter(|e| e["event"] == "damaged")
            .any(|e| e["records"].as_array().unwrap().is_empty() == empty)
    };
    crate::watch::until("the watcher names the damaged record", 60, || said(false));
    let event = (w.events().into_iter())
        .find(|e| e["event"] == "damaged")
        .unwrap();
    assert!(
        event["records"][0]
            .as_str()
            .unwrap()
            .starts_with(&format!("session {DAMAGED}, record {damaged}: ")),
        "{event}"
    );
    crate::watch::until("the rest applied", 60, || {
        held(&b, GOOD).len() == 2 && held(&b, DAMAGED).len() == 2
    });
    let run = a.sync(&["sync", "verify", "--repair"]);
    assert_eq!(run.code, 0, "repair: {run:?}");
    crate::watch::until("the healed record applied", 60, || {
        held(&b, DAMAGED).len() == 4
    });
    crate::watch::until("the watcher says all verify", 60, || said(true));
    assert!(w.child_running(), "{}", w.stderr());
}
