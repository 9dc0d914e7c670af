//! Crashes in the middle of a large push, of the client (SIGKILL `evi sync
//! push`) or of the server (SIGKILL `evi-server`, or an abort between a
//! body's durable write and its row's commit; restarted on the same data
//! folder and port): the rerun sends what the server lacks, no row points at
//! a missing body, and the server ends up with every entry exactly once.
//! Also the corpus and kill helpers the other kill tests (`sync_kill`) share.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Device, Rng, TestServer};
use crate::server_data;

/// Writes `sessions` sessions of about 10 KB each over two days; returns
/// the number of entries written.
pub fn corpus(dev: &Device, rng: &mut Rng, sessions: usize) -> u64 {
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

/// Appends one line to every `step`-th session of [`corpus`]'s 300;
/// returns how many.
pub fn more(dev: &Device, round: usize, step: usize) -> u64 {
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

/// `evi sync <what>` running in the background, its stderr kept.
pub fn spawn_sync(dev: &Device, what: &str) -> Child {
    dev.sync_cmd()
        .args(["sync", what])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn spawn_push(dev: &Device) -> Child {
    spawn_sync(dev, "push")
}

/// SIGKILLs commands at random points of their run. Kill times are drawn
/// below a bound that starts as a fraction of a measured whole run; a run
/// that ended before its kill halves it (the machine is faster now than
/// when measured, or less was left to do), so kills keep landing inside
/// runs whatever the build profile or machine speed. Correctness never
/// depends on where a kill lands: tests only require that enough of them
/// hit a running process, and say what the others saw.
pub struct KillClock {
    hi: u64,
    /// Kills that hit a running process.
    pub hits: u32,
    /// Kills in all.
    pub kills: u32,
    /// What each run that ended before its kill said.
    pub ended: Vec<String>,
}

impl KillClock {
    /// Kill times first drawn below `hi`.
    pub fn new(hi: Duration) -> Self {
        Self {
            hi: (hi.as_micros() as u64).max(1000),
            hits: 0,
            kills: 0,
            ended: Vec::new(),
        }
    }

    /// Lets `child` run for a random time below the bound, then SIGKILLs
    /// it; whether it was still running.
    pub fn kill(&mut self, rng: &mut Rng, child: Child) -> bool {
        let wait = rng.range(self.hi / 50, self.hi);
        self.kill_in(wait, child)
    }

    /// Lets `child` run until `reached()` (polled every millisecond), then
    /// for a random time below a tenth of the bound, then SIGKILLs it;
    /// whether it was still running. For kills that must land past a point
    /// of the run (a page applied, say) however the load changes: a time
    /// drawn from a whole run's measure lands in the start-up of a run that
    /// starts slower than the measured one.
    pub fn kill_after(
        &mut self,
        rng: &mut Rng,
        mut child: Child,
        reached: impl Fn() -> bool,
    ) -> bool {
        while child.try_wait().unwrap().is_none() && !reached() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let wait = rng.range(0, self.hi / 10);
        self.kill_in(wait, child)
    }

    fn kill_in(&mut self, micros: u64, mut child: Child) -> bool {
        std::thread::sleep(Duration::from_micros(micros));
        self.kills += 1;
        let hit = match child.try_wait().unwrap() {
            None => true,
            Some(status) => {
                self.hi = (self.hi / 2).max(1000);
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                self.ended.push(format!("{status}: {err}"));
                false
            }
        };
        child.kill().unwrap();
        child.wait().unwrap();
        self.hits += u32::from(hit);
        hit
    }

    /// At least `min` kills hit a running process (a whole run takes
    /// `full`); otherwise says what the runs that had ended printed.
    pub fn assert_hits(&self, min: u32, full: Duration) {
        assert!(
            self.hits >= min,
            "only {} of {} kills hit a running process (a whole run takes {full:?}); \
             the others had ended: {:#?}",
            self.hits,
            self.kills,
            self.ended
        );
    }
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

/// How long an uninterrupted first push of the home `fill` writes takes
/// here, measured on a second account: kill times are drawn from it, so
/// they land inside the push whatever the build profile or machine speed.
pub fn full_push_time(server: &TestServer, fill: impl FnOnce(&Device)) -> Duration {
    let probe = Device::new();
    fill(&probe);
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
    let full = full_push_time(&server, |d| {
        corpus(d, &mut Rng::new(SEED), 300);
    });
    let a = Device::new();
    let mut rng = Rng::new(SEED);
    let local = corpus(&a, &mut rng, 300);
    a.init(&server, "alice", "laptop");
    let mut local = local;
    let mut clock = KillClock::new(full * 3 / 4);
    for round in 0..10 {
        if round > 0 {
            // Every push has something of its own to send: new sessions, so
            // that every segment is wholly new or wholly sent before.
            local += named_corpus(&a, &mut rng, &format!("r{round}-"), 30);
        }
        clock.kill(&mut rng, spawn_push(&a));
    }
    clock.assert_hits(5, full);
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
    let full = full_push_time(&server, |d| {
        corpus(d, &mut Rng::new(SEED), 300);
    })
    .as_micros() as u64;
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
        // Whatever the kill cut short left no row without its body. The pack
        // of a push it cut between pack and commit stays until it is older
        // than the sweep's minimum age: aged here (no push is in flight), it
        // goes at the next start.
        let what = format!("restart {round}");
        server_data::assert_every_row_has_its_body(&server.stores(), &what);
        server_data::backdate_orphans(&server.stores());
    }
    server.restart();
    let orphans = server_data::orphans(&server.stores());
    assert!(
        orphans.is_empty(),
        "packs no row points at after the last start: {orphans:?}"
    );
    assert!(
        mid_push >= 1,
        "no restart hit a running push (a whole push takes {full} µs)"
    );
    assert!(a.sync_ok(&["push"]).starts_with("pushed 0 entries"));
    assert_complete(&server, &a, local);
}

/// Waits for a process that is expected to stop by itself; panics, after
/// killing it, if it is still running after `limit` (a hang, not a slow
/// machine: the limit is far above what the step takes).
fn wait_stopped(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn server_aborted_between_body_and_row_then_restarted() {
    // The server aborts (as abruptly as SIGKILL) right after a push's bodies
    // are durable and before their rows commit: the one moment a crash
    // leaves a body no row points at.
    const FAULT: (&str, &str) = ("EVI_SERVER_FAULT", "crash-after-body");
    const SEED: u64 = 0x5eed_0003;
    // Small batches: a push is several of them, two in flight at once.
    let mut server = TestServer::start_with(&["--max-batch-bytes", "262144"]);
    let data = server.stores();
    let a = Device::new();
    let mut rng = Rng::new(SEED);
    let mut local = corpus(&a, &mut rng, 100);
    a.init(&server, "alice", "laptop");
    for round in 0..3 {
        if round > 0 {
            local += more(&a, round, 3);
        }
        let what = format!("round {round}");
        let before = server_data::assert_every_row_has_its_body(&data, &what).len();
        server.restart_env(&[FAULT]);
        // Enough retries to outlast the outage whatever the machine's speed.
        let push = a
            .sync_cmd()
            .env("EVI_SYNC_RETRIES", "30")
            .args(["sync", "push"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = wait_stopped(
            &mut server.child,
            Duration::from_secs(60),
            "the faulty server",
        );
        assert!(
            !status.success(),
            "{what}: the server did not abort: {status}"
        );

        // Bodies written, rows not: an orphan, and no row without its body.
        let rows = server_data::assert_every_row_has_its_body(&data, &what).len();
        assert_eq!(rows, before, "{what}: a row committed past the fault");
        assert!(
            !server_data::orphans(&data).is_empty(),
            "{what}: no body was written before the abort"
        );
        // As if they had lain there longer than the sweep's minimum age
        // (the server is down: no push is in flight).
        let orphans = server_data::backdate_orphans(&data);

        // Restarted on the same folder without the fault: the orphans are
        // swept at start and the retried push completes.
        server.restart();
        let out = push.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{what}: push across the abort: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let left: Vec<_> = server_data::packs(&data)
            .intersection(&orphans)
            .cloned()
            .collect();
        assert!(
            left.is_empty(),
            "{what}: orphans not swept at start: {left:?}"
        );
        let rows = server_data::assert_every_row_has_its_body(&data, &what);
        assert!(
            rows.len() > before,
            "{what}: the retried push stored nothing"
        );
        let unreferenced = server_data::orphans(&data);
        assert!(
            unreferenced.is_empty(),
            "{what}: packs no row points at after the push: {unreferenced:?}"
        );
    }
    assert!(a.sync_ok(&["push"]).starts_with("pushed 0 entries"));
    assert_complete(&server, &a, local);
}
