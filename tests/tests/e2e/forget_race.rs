//! A pull under way while a forget's compaction rewrites the pack it reads
//! is answered whole, at once: the server removes the old pack only after
//! that pull read it (`EVI_SERVER_FAULT=slow-pull-bodies` holds every pull
//! between reading where its bodies are and reading them, long enough for
//! a forget and its compaction to run in between).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::common::{Device, TestServer, held_set, session_files, today};
use crate::watch::until;

const GONE: &str = "race-forget-0001";
const KEPT: &str = "race-keep-0002";

fn line(text: &str) -> String {
    format!("{{\"role\":\"user\",\"ts\":\"2020-01-01T00:00:00Z\",\"content\":\"{text}\"}}\n")
}

#[test]
fn a_pull_during_compaction_is_answered_whole_without_a_retry() {
    let server = TestServer::start_env(&[], &[("EVI_SERVER_FAULT", "slow-pull-bodies")]);
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let day = today();
    a.write(&day, GONE, line("forget this").as_bytes());
    let mut kept = String::new();
    for i in 0..10 {
        kept.push_str(&line(&format!("keep this, {i}")));
    }
    a.write(&day, KEPT, kept.as_bytes());
    // One push: both sessions' bodies in one pack, which the forget has
    // compacted (KEPT's bodies copied to a new pack, the old one removed).
    a.sync_ok(&["push"]);
    let key = a.keys().stream_key(GONE).to_string();
    let needles: Vec<Vec<u8>> = server
        .records(&a.token())
        .iter()
        .filter(|r| r["stream"] == key.as_str())
        .map(|r| {
            let b = B64.decode(r["ciphertext"].as_str().unwrap()).unwrap();
            b[b.len() / 2..b.len() / 2 + 48].to_vec()
        })
        .collect();
    assert!(!needles.is_empty());
    let in_storage = || {
        server.stored().values().flatten().any(|bytes| {
            needles
                .iter()
                .any(|n| bytes.windows(n.len()).any(|w| w == n.as_slice()))
        })
    };

    std::thread::scope(|s| {
        // B's pull reads where the bodies are, then is held 3 s.
        let pull = s.spawn(|| b.sync(&["sync", "pull", "--json"]));
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let run = a.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
        assert_eq!(run.code, 0, "forget: {}", run.stderr);
        let run = pull.join().unwrap();
        assert_eq!(run.code, 0, "pull during compaction: {}", run.stderr);
        let report: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(
            report["retries"], 0,
            "answered at once, not after a failed read: {}{}",
            run.stdout, run.stderr
        );
    });
    assert_eq!(held_set(&a, KEPT), held_set(&b, KEPT), "B has KEPT whole");
    // The compaction ran to its end once B's pull was done.
    until("the forgotten bodies leave the storage", 20, || {
        !in_storage()
    });
    b.sync_ok(&["pull"]);
    assert!(session_files(&b, GONE).is_empty());
    assert_eq!(held_set(&a, KEPT), held_set(&b, KEPT));
    let run = b.sync(&["sync", "verify", "--json"]);
    assert_eq!(run.code, 0, "verify: {}{}", run.stdout, run.stderr);
}
