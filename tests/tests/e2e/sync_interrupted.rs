//! A push killed after the server stored a batch but before its answer
//! arrived: the state calls those lines unsent. The next push, which also
//! has new lines of the same sessions and journal to send, must not store
//! the delivered ones a second time.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::sync_proxy::Proxy;

const DAY: &str = "2026-06-09";
const SESSIONS: usize = 12;

fn line(session: usize, n: usize) -> String {
    format!(
        "{{\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":\"session {session} line {n}\"}}}}\n"
    )
}

fn journal_line(seq: usize) -> String {
    format!(
        "{{\"seq\":{seq},\"ts\":\"2026-06-09T10:00:{seq:02}Z\",\"path\":\"/p/{seq}\",\"op\":\"create\"}}\n"
    )
}

/// Ids stored in all records, and the entries the server counts.
fn stored_and_counted(server: &TestServer, dev: &Device) -> (usize, u64) {
    let token = dev.token();
    let ids = server
        .records(&token)
        .iter()
        .map(|r| r["entry_ids"].as_array().unwrap().len())
        .sum();
    let entries = server.get_json(&token, "status")["entries"]
        .as_u64()
        .unwrap();
    (ids, entries)
}

/// Pushes with the proxy keeping the answer, and kills the push once the
/// server holds `expect` entries: the client never recorded a thing.
fn push_and_lose_the_answer(server: &TestServer, proxy: &Proxy, dev: &Device, expect: u64) {
    proxy.hold_push_answers();
    let mut push = dev.sync_cmd().args(["sync", "push"]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while stored_and_counted(server, dev).1 < expect {
        assert!(
            Instant::now() < deadline,
            "the server never stored the push"
        );
        assert!(
            push.try_wait().unwrap().is_none(),
            "the push ended unanswered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    push.kill().unwrap();
    push.wait().unwrap();
    proxy.clear();
}

#[test]
fn a_push_killed_before_its_answer_arrived_stores_nothing_twice() {
    let server = TestServer::start();
    let proxy = Proxy::start(&server.url);
    let first = Device::new();
    first.init(&server, "alice", "desk");
    let a = Device::new();
    a.join_copying_key(&first, &proxy.url, "alice", "laptop");
    for s in 0..SESSIONS {
        let text: String = (0..5).map(|n| line(s, n)).collect();
        a.write(DAY, &format!("S{s}"), text.as_bytes());
    }
    let mut total = (SESSIONS * 5) as u64;
    push_and_lose_the_answer(&server, &proxy, &a, total);

    // New lines in every session, behind the delivered ones.
    for s in 0..SESSIONS {
        a.append(
            &format!("transcripts/{DAY}/S{s}.jsonl"),
            line(s, 5).as_bytes(),
        );
    }
    let out = a.sync_ok(&["push"]);
    assert!(
        out.starts_with(&format!("pushed {SESSIONS} entries")),
        "only the new lines go: {out}"
    );
    total += SESSIONS as u64;
    assert_eq!(
        stored_and_counted(&server, &a),
        (total as usize, total),
        "every entry in exactly one record"
    );

    // The same for the checkpoint journal (its lines are entries too).
    a.put(
        "checkpoints/journal.jsonl",
        (journal_line(1) + &journal_line(2)).as_bytes(),
    );
    total += 2;
    push_and_lose_the_answer(&server, &proxy, &a, total);
    a.append("checkpoints/journal.jsonl", journal_line(3).as_bytes());
    let out = a.sync_ok(&["push"]);
    assert!(
        out.contains(", 1 journal lines,"),
        "only the new line goes: {out}"
    );
    total += 1;
    assert_eq!(
        stored_and_counted(&server, &a),
        (total as usize, total),
        "every journal line in exactly one record"
    );
    assert!(a.sync_ok(&["push"]).starts_with("pushed 0 entries"));

    // What another device pulls is the same files, each line once.
    first.sync_ok(&["pull"]);
    assert!(
        first.tree("transcripts") == a.tree("transcripts"),
        "pulled transcripts differ"
    );
}
