//! `evi sync verify [--repair]`: a clean account checks clean, with counts
//! and a rate, and changes nothing; a server that alters a record or a
//! blob fails the check, naming it; entries the server lost, or that a
//! device never pushed, or that a device lost, are reported, and
//! `--repair` sends or applies them by id, after which the check is clean
//! and each entry is on the server once.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::common::*;
use crate::sync_proxy::Proxy;

const DAY: &str = "2026-06-13";

fn line(session: &str, n: usize) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{session} line {n}\",\"ts\":\"{DAY}T10:00:00Z\"}}\n")
}

/// `evi sync verify --json [extra]` on `dev`: exit code and report.
fn verify(dev: &Device, extra: &[&str]) -> (i32, Value, String) {
    let run = dev.sync(&[&["sync", "verify", "--json"], extra].concat());
    let v = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", run.stdout, run.stderr));
    (run.code, v, run.stderr)
}

/// Two devices of one account, both synced: `a` pushed three sessions and
/// a journal with blobs, `b` pulled them.
fn synced(server: &TestServer, b_url: &str) -> (Device, Device) {
    let (a, b) = (Device::new(), Device::new());
    for s in ["S1", "S2", "S3"] {
        let text: String = (0..20).map(|n| line(s, n)).collect();
        a.write(DAY, s, text.as_bytes());
    }
    a.add_checkpoints(DAY, 3, 50_000, 41);
    a.init(server, "val", "a");
    a.sync_ok(&["push"]);
    b.join_copying_key(&a, b_url, "val", "b");
    b.sync_ok(&["pull"]);
    (a, b)
}

#[test]
fn a_clean_account_verifies_with_counts_and_changes_nothing() {
    let server = TestServer::start();
    let (a, b) = synced(&server, &server.url);
    let watched = |d: &Device| (d.tree("transcripts"), d.tree("checkpoints"), d.state());
    let before = (watched(&a), watched(&b));
    let records = server.records(&a.token()).len() as u64;
    for (what, dev) in [("a", &a), ("b", &b)] {
        let (code, v, stderr) = verify(dev, &[]);
        assert_eq!(code, 0, "{what}: {v} {stderr}");
        assert_eq!(v["records"], records, "{what}: {v}");
        assert_eq!(v["blobs"], 3, "{what}: {v}");
        assert_eq!(v["local_entries"], 60, "{what}: {v}");
        assert_eq!(v["problems"], json!([]), "{what}: {v}");
        assert!(v["mb_per_s"].as_f64().unwrap() > 0.0, "{what}: {v}");
        assert!(v["repair"].is_null());
    }
    assert!(
        before == (watched(&a), watched(&b)),
        "verify wrote something"
    );
    let run = a.sync(&["sync", "verify"]);
    assert_eq!(run.code, 0, "{run:?}");
    let first = run.stdout.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("checked {records} records (")) && first.ends_with(" MB/s"),
        "{first}"
    );
    assert!(
        run.stdout.ends_with("\nno problems found\n"),
        "{}",
        run.stdout
    );
    println!("verify, clean: {first}");
}

#[test]
fn a_tampered_record_or_blob_fails_the_check_naming_it() {
    let server = TestServer::start();
    let proxy = Proxy::start(&server.url);
    let (_a, b) = synced(&server, &proxy.url);
    // One record's ciphertext altered on its way.
    proxy.on_records(|page| {
        let r = &mut page["records"][0];
        let mut ct = B64.decode(r["ciphertext"].as_str().unwrap()).unwrap();
        let at = ct.len() / 2;
        ct[at] ^= 0x10;
        r["ciphertext"] = json!(B64.encode(ct));
    });
    let run = b.sync(&["sync", "verify"]);
    assert_eq!(run.code, 1, "{run:?}");
    let problems: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("problem: "))
        .collect();
    assert_eq!(problems.len(), 1, "{}", run.stdout);
    // Named by its session too: b holds that session.
    assert!(
        problems[0].starts_with("problem: session ")
            && problems[0].contains(": record 1 does not verify: segment does not decrypt"),
        "{}",
        problems[0]
    );
    // --repair can mend it from here: b has its session (issue 20, defect 3).
    assert!(
        run.stderr
            .starts_with("error: 1 problem found\nhint: `evi sync verify --repair`")
            && run
                .stderr
                .contains("\nhint: a record or blob the server holds is damaged"),
        "{}",
        run.stderr
    );

    // Every blob altered: each is named.
    proxy.clear();
    proxy.on_blob(|_, mut ct| {
        let at = ct.len() / 2;
        ct[at] ^= 0x10;
        ct
    });
    let (code, v, _) = verify(&b, &[]);
    assert_eq!(code, 1);
    let bad: Vec<&Value> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "bad_blob")
        .collect();
    assert_eq!(bad.len(), 3, "{v}");
    assert_eq!(v["problems"].as_array().unwrap().len(), 3, "{v}");
    // Nothing `--repair` can do about the server's copies.
    let (code, v, _) = verify(&b, &["--repair"]);
    assert_eq!(code, 1);
    assert!(v["repair"].is_null(), "{v}");
}

#[test]
fn what_the_server_or_a_device_lacks_is_reported_and_repaired_by_id() {
    let mut server = TestServer::start();
    let (a, b) = synced(&server, &server.url);
    // The server loses S2's record and the journal's (rows and known ids,
    // as a restore of an older database would); a writes S4 and never
    // pushes it.
    let s2 = a.keys().session_key(&"S2".parse().unwrap()).to_string();
    let lost: Vec<i64> = server
        .records(&a.token())
        .iter()
        .filter(|r| r["stream"] == s2.as_str() || r["kind"] == "journal")
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(lost.len(), 2);
    server.kill();
    for seq in lost {
        crate::server_data::execute(
            &server.stores(),
            &format!(
                "DELETE FROM records WHERE seq = {seq}; DELETE FROM entries WHERE seq = {seq};"
            ),
        );
    }
    server.restart();
    let s4: String = (0..5).map(|n| line("S4", n)).collect();
    a.write(DAY, "S4", s4.as_bytes());
    // b loses the last 5 lines of S3.
    let s3 = b.home().join(format!("transcripts/{DAY}/S3.jsonl"));
    let text = std::fs::read_to_string(&s3).unwrap();
    let kept: String = text.lines().take(15).map(|l| format!("{l}\n")).collect();
    std::fs::write(&s3, kept).unwrap();
    let cursor = b.state()["cursor"].clone();

    let (code, v, stderr) = verify(&a, &[]);
    assert_eq!(code, 1, "{v}");
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems.contains(&json!({"kind": "not_on_server", "session": "S2", "entries": 20})),
        "{v}"
    );
    assert!(
        problems.contains(&json!({"kind": "journal_not_on_server", "lines": 3})),
        "{v}"
    );
    assert_eq!(problems.len(), 2, "{v}");
    // S4 was never pushed: not lost, only not sent yet.
    assert_eq!(
        v["pending"],
        json!([{"kind": "not_pushed", "session": "S4", "entries": 5}]),
        "{v}"
    );
    assert!(
        stderr.contains("hint: `evi sync verify --repair` sends"),
        "{stderr}"
    );
    let (code, v, _) = verify(&b, &[]);
    assert_eq!(code, 1);
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems.contains(&json!({"kind": "not_on_server", "session": "S2", "entries": 20})),
        "{v}"
    );
    assert!(
        problems.contains(&json!({"kind": "not_here", "session": "S3", "entries": 5})),
        "{v}"
    );
    assert_eq!(b.state()["cursor"], cursor, "verify moves no cursor");

    // a sends S2 and S4 again; b applies what it lost.
    let (code, v, stderr) = verify(&a, &["--repair"]);
    assert_eq!(code, 0, "{v} {stderr}");
    assert_eq!(v["repair"]["pushed"]["entries"], 25, "{v}");
    assert_eq!(v["repair"]["pushed"]["journal_lines"], 3, "{v}");
    assert_eq!(v["repair"]["after"]["problems"], json!([]), "{v}");
    // The 5 lines b lost, and as the repair pulls everything, S4's 5 too.
    let run = b.sync(&["sync", "verify", "--repair"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("\nrepair: applied 10 entries, 0 journal lines, 0 blobs\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.ends_with("\nno problems found\n"),
        "{}",
        run.stdout
    );
    assert!(b.state()["cursor"].as_u64() >= cursor.as_u64());

    // Clean everywhere, each entry once on the server, the files whole.
    b.sync_ok(&["pull"]);
    for dev in [&a, &b] {
        let (code, v, _) = verify(dev, &[]);
        assert_eq!((code, &v["problems"]), (0, &json!([])), "{v}");
    }
    let ids = stored_entry_ids(&server, &a.token());
    assert_each_once(&ids, "after the repair");
    assert_converged(&a, &b, "after the repair");
    assert_eq!(
        std::fs::read_to_string(&s3).unwrap(),
        text,
        "S3 is whole again"
    );
}
