//! Sync through a bad network (the proxy of [`crate::sync_proxy`] between
//! the real client and the real server): resets before and after the
//! server saw a request and bodies cut either way, at a rate drawn from a
//! seed the test prints (`EVI_FAULT_SEED=N` runs the same draws again),
//! are ridden out by the client's retries with no entry lost or stored
//! twice; a server that never answers gets a clear error after the
//! backoff, not a hang; a slow link (latency, throttled bodies) still
//! syncs. Each test prints what the proxy did and what the client retried.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::sync_proxy::{Fault, Proxy, RESETS_AND_CUTS};

const DAY: &str = "2026-06-11";

/// The seed of this run's faults: `EVI_FAULT_SEED`, else the clock's.
fn fault_seed(test: &str) -> u64 {
    let seed = std::env::var("EVI_FAULT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("{test}: fault seed {seed} (EVI_FAULT_SEED={seed} draws the same faults again)");
    seed
}

/// Runs `cmd`, killing it if it has not ended after `limit` (a hang fails
/// the test instead of stalling the suite).
fn run_within(cmd: &mut Command, limit: Duration) -> Run {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<Output>();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output().unwrap());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.into(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("evi did not end within {limit:?}: it hangs");
        }
    }
}

fn json(run: &Run, what: &str) -> serde_json::Value {
    assert_eq!(run.code, 0, "{what}: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{what}: {e}: {}", run.stdout))
}

/// Device `a` with a generated home and a checkpoint journal, and device
/// `b`, both joined through `proxy` (before any fault: a login whose
/// answer is lost would make a second device).
fn two_devices(server: &TestServer, proxy: &Proxy) -> (Device, Device) {
    let (first, a, b) = (Device::new(), Device::new(), Device::new());
    first.init(server, "pat", "first");
    a.generate(&[
        "--sessions",
        "40",
        "--total-mb",
        "6",
        "--big-mb",
        "2",
        "--huge-lines",
        "1",
        "--seed",
        "11",
    ]);
    a.add_checkpoints(DAY, 24, 300_000, 12);
    a.join_copying_key(&first, &proxy.url, "pat", "a");
    b.join_copying_key(&first, &proxy.url, "pat", "b");
    (a, b)
}

#[test]
fn push_and_pull_through_resets_and_cuts_lose_and_double_nothing() {
    // Small limits: more batches, lines sent as blobs, blobs in parts, so
    // more requests for the faults to hit.
    let server =
        TestServer::start_with(&["--max-batch-bytes", "1048576", "--max-blob-bytes", "131072"]);
    let proxy = Proxy::start(&server.url);
    let (a, b) = two_devices(&server, &proxy);
    let seed = fault_seed("resets and cuts");
    proxy.inject(seed, 10, RESETS_AND_CUTS);

    let limit = Duration::from_secs(120);
    let pushed = json(
        &run_within(a.sync_cmd().args(["sync", "push", "--json"]), limit),
        "push",
    );
    let after_push = proxy.counts();

    println!(
        "push: {after_push}; the client retried {}",
        pushed["retries"]
    );

    // Every entry and journal line once on the server, and every entry of
    // the home among them.
    let ids = stored_entry_ids(&server, &a.token());
    let stored = assert_each_once(&ids, "after the push");
    let local = a.keyed_entries();
    let journal_lines = std::fs::read_to_string(a.home().join("checkpoints/journal.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        ids.len(),
        local.len() + journal_lines,
        "the server holds each entry and journal line of the home, nothing else"
    );
    assert!(
        local.is_subset(&stored),
        "{} entries of the home are not on the server",
        local.difference(&stored).count()
    );

    let pulled = json(
        &run_within(b.sync_cmd().args(["sync", "pull", "--json"]), limit),
        "pull",
    );
    let total = proxy.counts();

    println!(
        "pull: {} requests, {} faults; the client retried {}",
        total.requests - after_push.requests,
        total.faults() - after_push.faults(),
        pulled["retries"]
    );
    println!("resets and cuts, seed {seed}: {total}");
    assert!(total.faults() > 0, "the run injected no fault: {total}");

    // The second device holds the same files, byte for byte.
    assert!(
        a.tree("transcripts") == b.tree("transcripts"),
        "the pulled transcripts differ from the pushed ones"
    );
    assert_eq!(a.tree("checkpoints/blobs"), b.tree("checkpoints/blobs"));
    let theirs = b.tree("checkpoints/devices");
    let journal = std::fs::read(a.home().join("checkpoints/journal.jsonl")).unwrap();
    assert!(
        theirs.values().any(|v| v.as_deref() == Some(&journal[..])),
        "the pulled journal is not the pushed one"
    );
    // And nothing moves any more.
    proxy.clear();
    let again = json(&b.sync(&["sync", "pull", "--json"]), "second pull");
    assert_eq!(again["entries"], 0, "{again}");
}

/// The fault tool itself: a cut answer reaches the client with its status
/// and full length, then ends early (not as a reset, not as a shorter body).
#[test]
fn the_proxy_cuts_answers_after_their_head() {
    let server = TestServer::start();
    let proxy = Proxy::start(&server.url);
    proxy.inject(1, 100, &[Fault::CutAnswer]);
    let resp = crate::common::get(format!("{}/api/v1/openapi.json", proxy.url)).unwrap();
    assert_eq!(resp.status(), 200);
    let full: usize = resp.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(full > 1000, "{full}");
    assert!(resp.bytes().is_err(), "the body ends early, as an error");
    assert_eq!(proxy.counts().cut_answers, 1);
}

#[test]
fn a_server_that_never_answers_gets_a_clear_error_after_the_backoff() {
    let server = TestServer::start();
    let proxy = Proxy::start(&server.url);
    let (first, a, b) = (Device::new(), Device::new(), Device::new());
    first.init(&server, "sam", "first");
    a.join_copying_key(&first, &proxy.url, "sam", "a");
    b.join_copying_key(&first, &proxy.url, "sam", "b");
    a.write(DAY, "s1", b"{\"role\":\"user\",\"content\":\"hello\"}\n");
    // Every request from now on is reset or cut.
    proxy.inject(fault_seed("never answers"), 100, RESETS_AND_CUTS);

    let started = Instant::now();
    let limit = Duration::from_secs(60);
    let (push, pull) = std::thread::scope(|s| {
        let push = s.spawn(|| run_within(a.sync_cmd().args(["sync", "push"]), limit));
        let pull = s.spawn(|| run_within(b.sync_cmd().args(["sync", "pull"]), limit));
        (push.join().unwrap(), pull.join().unwrap())
    });
    println!(
        "never answers: {} in {:.1} s",
        proxy.counts(),
        started.elapsed().as_secs_f64()
    );
    for (what, run) in [("push", &push), ("pull", &pull)] {
        assert_eq!(run.code, 1, "{what}: {run:?}");
        let url = &proxy.url;
        assert!(
            run.stderr.contains("; retrying…\n"),
            "{what} says it retries: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("gave up after 5 attempts over "),
            "{what} says when it gave up: {}",
            run.stderr
        );
        let error = run
            .stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{what} ends with an error: {}", run.stderr));
        assert!(error.contains(url.as_str()), "{what}: {error}");
        assert!(
            run.stderr.contains("\nhint: "),
            "{what} says what to do: {}",
            run.stderr
        );
    }
    assert_eq!(
        server.get_json(&first.token(), "status")["entries"],
        0,
        "nothing reached the server"
    );
}

#[test]
fn a_slow_link_still_syncs() {
    let server = TestServer::start();
    let proxy = Proxy::start(&server.url);
    let (first, a, b) = (Device::new(), Device::new(), Device::new());
    first.init(&server, "lee", "first");
    a.join_copying_key(&first, &proxy.url, "lee", "a");
    b.join_copying_key(&first, &proxy.url, "lee", "b");
    let lines: String = (0..400)
        .map(|n| {
            format!(
                "{{\"role\":\"user\",\"content\":\"line {n} {}\"}}\n",
                "x".repeat(200)
            )
        })
        .collect();
    a.write(DAY, "slow", lines.as_bytes());
    a.add_checkpoints(DAY, 2, 150_000, 5);
    // Half a second before each request, and 256 KiB/s each way.
    proxy.slow(Duration::from_millis(500), 256 << 10);
    let limit = Duration::from_secs(120);
    let started = Instant::now();
    json(
        &run_within(a.sync_cmd().args(["sync", "push", "--json"]), limit),
        "push",
    );
    json(
        &run_within(b.sync_cmd().args(["sync", "pull", "--json"]), limit),
        "pull",
    );
    println!(
        "slow link: {} in {:.1} s",
        proxy.counts(),
        started.elapsed().as_secs_f64()
    );
    assert!(a.tree("transcripts") == b.tree("transcripts"));
    assert_eq!(a.tree("checkpoints/blobs"), b.tree("checkpoints/blobs"));
}
