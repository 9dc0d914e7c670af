//! Crashes in the middle of a large push, of the client (SIGKILL `evi sync
//! push`) or of the server (SIGKILL `evi-server`, restarted on the same data
//! folder and port): the rerun sends what the server lacks, and the server
//! ends up with every entry exactly once.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Device, Rng, TestServer};

/// Writes `sessions` sessions of about 10 KB each over two days; returns
/// the number of entries written.
fn corpus(dev: &Device, rng: &mut Rng, sessions: usize) -> u64 {
    named_corpus(dev, rng, "s", sessions)
}

/// [`corpus`] with session names starting with `prefix`.
fn named_corpus(dev: &Device, rng: &mut Rng, prefix: &str, sessions: usize) -> u64 {
    let mut entries = 0;
    for s in 0..sessions {
        for day in ["2026-06-08", "2026-06-09"] {
            let mut bytes = Vec::new();
            for i in 0..10 {
                let pad: String = (0..rng.range(200, 800))
                    .map(|_| char::from(b'a' + (rng.next() % 26) as u8))
                    .collect();
                bytes.extend_from_slice(
                    format!(
                        "{{\"role\":\"user\",\"content\":\"{s} {day} {i} {pad}\",\"ts\":\"{day}T10:00:00Z\"}}\n"
                    )
                    .as_bytes(),
                );
                entries += 1;
            }
            dev.write(day, &format!("{prefix}{s:03}"), &bytes);
        }
    }
    entries
}

/// Appends one line to every `step`-th session; returns how many.
fn more(dev: &Device, round: usize, step: usize) -> u64 {
    let mut n = 0;
    for s in (round % step..300).step_by(step) {
        dev.append(
            &format!("transcripts/2026-06-09/s{s:03}.jsonl"),
            format!("{{\"role\":\"assistant\",\"content\":\"round {round}\"}}\n").as_bytes(),
        );
        n += 1;
    }
    n
}

fn spawn_push(dev: &Device) -> Child {
    dev.sync_cmd()
        .args(["sync", "push"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The server holds `local` entries, each in exactly one record, and a
/// fresh device pulls transcripts byte-identical to `dev`'s.
fn assert_complete(server: &TestServer, dev: &Device, local: u64) {
    let token = dev.token();
    let status = server.get_json(&token, "status");
    assert_eq!(status["entries"].as_u64(), Some(local), "{status}");
    let stored: usize = server
        .records(&token)
        .iter()
        .map(|r| r["entry_ids"].as_array().unwrap().len())
        .sum();
    assert_eq!(stored as u64, local, "entries stored more than once");
    let fresh = Device::new();
    fresh.join_copying_key(dev, &server.url, "alice", "fresh");
    let out = fresh.sync_ok(&["pull"]);
    assert!(out.starts_with(&format!("pulled {local} entries")), "{out}");
    assert!(
        fresh.tree("transcripts") == dev.tree("transcripts"),
        "pulled transcripts differ"
    );
}

/// How long an uninterrupted first push of this corpus takes here, measured
/// on a second account with the same files: kill times are drawn from it, so
/// they land inside the push whatever the build profile or machine speed.
fn full_push_time(server: &TestServer, seed: u64) -> Duration {
    let probe = Device::new();
    corpus(&probe, &mut Rng::new(seed), 300);
    probe.init(server, "probe", "probe");
    let started = Instant::now();
    let out = spawn_push(&probe).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

#[test]
fn push_killed_at_random_points_then_rerun() {
    let server = TestServer::start();
    const SEED: u64 = 0x5eed_0001;
    let full = full_push_time(&server, SEED).as_micros() as u64;
    let a = Device::new();
    let mut rng = Rng::new(SEED);
    let local = corpus(&a, &mut rng, 300);
    a.init(&server, "alice", "laptop");
    let mut local = local;
    let mut mid_push = 0;
    let mut finished = Vec::new();
    // Kill times are drawn below `hi`, at first three quarters of a whole
    // push; a push that ended before its kill halves it (the machine is
    // faster now than when measured, or less was left to send).
    let mut hi = full * 3 / 4;
    for round in 0..10 {
        if round > 0 {
            // Every push has something of its own to send: new sessions, so
            // that every segment is wholly new or wholly sent before.
            local += named_corpus(&a, &mut rng, &format!("r{round}-"), 30);
        }
        let mut child = spawn_push(&a);
        std::thread::sleep(Duration::from_micros(rng.range(hi / 50, hi)));
        match child.try_wait().unwrap() {
            None => mid_push += 1,
            Some(status) => {
                hi = (hi / 2).max(1000);
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                finished.push(format!("{status}: {err}"));
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(
        mid_push >= 5,
        "only {mid_push} of 10 kills hit a running push (a whole push takes {full} µs); \
         the others had ended: {finished:#?}"
    );
    let out = a.sync_ok(&["push"]);
    assert!(out.starts_with("pushed "), "{out}");
    assert!(
        a.sync_ok(&["push"]).starts_with("pushed 0 entries"),
        "a second push has nothing to send"
    );
    assert_complete(&server, &a, local);
}

#[test]
fn server_killed_mid_push_then_restarted() {
    let mut server = TestServer::start();
    const SEED: u64 = 0x5eed_0002;
    let full = full_push_time(&server, SEED).as_micros() as u64;
    let a = Device::new();
    let mut rng = Rng::new(SEED);
    let mut local = corpus(&a, &mut rng, 300);
    a.init(&server, "alice", "laptop");
    let mut mid_push = 0;
    // As in the test above: a push that ended before the restart halves the
    // bound restart times are drawn below.
    let mut hi = full / 2;
    for round in 0..5 {
        if round > 0 {
            local += more(&a, round, 3);
        }
        let mut child = spawn_push(&a);
        std::thread::sleep(Duration::from_micros(rng.range(hi / 5, hi)));
        if child.try_wait().unwrap().is_none() {
            mid_push += 1;
        } else {
            hi = (hi / 2).max(1000);
        }
        server.restart();
        // The client retries through the restart and finishes.
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "push across a server restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        mid_push >= 1,
        "no restart hit a running push (a whole push takes {full} µs)"
    );
    assert!(a.sync_ok(&["push"]).starts_with("pushed 0 entries"));
    assert_complete(&server, &a, local);
}
