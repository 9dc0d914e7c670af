//! The bulk paths killed at random points (issue 10): `evi sync push` SIGKILLed
//! 20 times inside its pipeline (sealing workers, two batches in flight,
//! blobs), and `evi sync pull` 20 times inside its prefetching loop (the next
//! page downloading while one is opened and applied), new lines written
//! between rounds. After each pull kill the cursor covers only what is in the
//! files; after a last uninterrupted run everything is on the server, and on
//! a device, once and byte for byte.
//!
//! The homes are a few MB, under server limits lowered so that they are many
//! batches and many pages, as a home of hundreds of MB is under the defaults.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use evi::sync::SyncKeys;
use evi::sync::engine::journal::journal_name;
use evi::sync::seal::identity::Identity;
use evi::sync::state::SyncState;
use evi_shared::SessionId;

use crate::common::{Device, Rng, TestServer, Tree, held, sessions};
use crate::server_data::{self, Row};
use crate::sync_crash::{KillClock, corpus, full_push_time, more, spawn_sync};
use crate::sync_journal::checkpoint;

/// Push batches of at most 64 KiB (segments of at most 21 KiB), so the
/// home below goes up in many batches (the test checks at least 10).
const MAX_BATCH_BYTES: &str = "65536";
/// Pull pages of at most 64 KiB and 32 records: the history below is many
/// pages (the test checks at least 20), what each round adds (151 records)
/// at least 5.
const MAX_PAGE_BYTES: &str = "65536";
const MAX_PAGE_RECORDS: &str = "32";
const JOURNAL: &str = "checkpoints/journal.jsonl";

/// Appends checkpoints `seqs` to the journal, each with its own blob of
/// 1 to 96 KiB.
fn checkpoints(dev: &Device, rng: &mut Rng, seqs: Range<u32>) {
    for seq in seqs {
        let contents: String = (0..rng.range(1024, 96 * 1024))
            .map(|_| char::from(b'a' + (rng.next() % 26) as u8))
            .collect();
        let (line, _) = checkpoint(dev, seq, &format!("/src/f{seq}.rs"), &contents);
        dev.append(JOURNAL, line.as_bytes());
    }
}

/// 300 sessions over two days (3 MB) and 40 checkpoints with blobs (2 MB).
fn home(dev: &Device, rng: &mut Rng) {
    corpus(dev, rng, 300);
    checkpoints(dev, rng, 1..41);
}

/// Ids as the server sees them, under one account's keys.
struct Keyed {
    keys: SyncKeys,
    /// The name the source device's journal is pushed, and pulled, under.
    journal: String,
}

impl Keyed {
    /// The keys of `dev`'s account, and `dev`'s journal name.
    fn of(dev: &Device) -> Self {
        let state = SyncState::load(&dev.home().join("sync/state.json")).unwrap();
        Self {
            keys: SyncKeys::derive(&Identity::load(&dev.identity_path()).unwrap()),
            journal: journal_name(&state.account.expect("a logged-in device")),
        }
    }

    /// Every transcript entry `dev` holds.
    fn entries(&self, dev: &Device) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for s in sessions(dev) {
            let sid: SessionId = s.parse().unwrap();
            for e in held(dev, &s) {
                out.insert(self.keys.entry_key(&sid, &e.id).as_str().to_owned());
            }
        }
        out
    }

    /// Every complete line of a journal file (none if it is missing).
    fn journal_lines(&self, path: &Path) -> BTreeSet<String> {
        let bytes = std::fs::read(path).unwrap_or_default();
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(end) => &bytes[..end],
            None => &[][..],
        };
        complete
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                self.keys
                    .journal_line_key(&self.journal, l)
                    .as_str()
                    .to_owned()
            })
            .collect()
    }

    /// Where another device pulls the source's journal to.
    fn pulled_journal(&self, dev: &Device) -> std::path::PathBuf {
        dev.home()
            .join("checkpoints/devices")
            .join(&self.journal)
            .join("journal.jsonl")
    }
}

/// The account's record rows.
fn rows_of(server: &TestServer, user: &str) -> Vec<Row> {
    let id = server_data::user_id(&server.stores(), user);
    server_data::rows(&server.stores())
        .into_iter()
        .filter(|r| r.user == id)
        .collect()
}

/// Sessions in which an entry id is held twice, with the first such id.
fn doubled_entries(dev: &Device) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in sessions(dev) {
        let mut seen = BTreeSet::new();
        if let Some(e) = held(dev, &s)
            .into_iter()
            .find(|e| !seen.insert(e.id.clone()))
        {
            out.push((s, e.id));
        }
    }
    out
}

/// Transcript files whose last line is cut short.
fn partial_files(dev: &Device) -> Vec<String> {
    dev.tree("transcripts")
        .into_iter()
        .filter_map(|(rel, bytes)| {
            let bytes = bytes?;
            (!bytes.is_empty() && !bytes.ends_with(b"\n")).then_some(rel)
        })
        .collect()
}

/// Temp files a sync left in the home (`.evi-tmp-*`, as `fsutil` names
/// them): a killed command leaves them behind, the next one must clear them.
fn leftover_temps(dev: &Device) -> Vec<String> {
    dev.tree("")
        .into_keys()
        .filter(|rel| {
            rel.rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with(".evi-tmp-"))
        })
        .collect()
}

/// Paths whose bytes differ between two trees, and why (at most 10).
fn tree_diff(want: &Tree, got: &Tree) -> Vec<String> {
    let paths: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    paths
        .into_iter()
        .filter_map(|p| match (want.get(p), got.get(p)) {
            (Some(w), Some(g)) if w == g => None,
            (Some(_), None) => Some(format!("{p}: missing")),
            (None, Some(g)) => Some(format!(
                "{p}: not in the source ({} bytes)",
                g.as_ref().map_or(0, Vec::len)
            )),
            (Some(w), Some(g)) => Some(format!(
                "{p}: {} bytes, the source's {}",
                g.as_ref().map_or(0, Vec::len),
                w.as_ref().map_or(0, Vec::len)
            )),
            (None, None) => None,
        })
        .take(10)
        .collect()
}

/// A fresh device of `a`'s account pulls transcripts, blobs and `a`'s
/// journal byte for byte as `a` holds them: nothing lost, nothing applied
/// twice, nothing cut short.
fn assert_fresh_device_gets_it_all(server: &TestServer, a: &Device, keyed: &Keyed) {
    let fresh = Device::new();
    fresh.join_copying_key(a, &server.url, "alice", "fresh");
    fresh.sync_ok(&["pull"]);
    assert_same_home(a, &fresh, keyed, "a fresh device");
}

/// `b` holds what `a` holds: the same transcripts, blobs, and `a`'s journal.
fn assert_same_home(a: &Device, b: &Device, keyed: &Keyed, what: &str) {
    let doubled = doubled_entries(b);
    assert!(
        doubled.is_empty(),
        "{what}: entries applied twice: {doubled:?}"
    );
    let partial = partial_files(b);
    assert!(
        partial.is_empty(),
        "{what}: files end mid-line: {partial:?}"
    );
    for sub in ["transcripts", "checkpoints/blobs"] {
        let diff = tree_diff(&a.tree(sub), &b.tree(sub));
        assert!(
            diff.is_empty(),
            "{what}: {sub} differs from the source's: {diff:#?}"
        );
    }
    assert_eq!(
        std::fs::read(keyed.pulled_journal(b)).ok(),
        std::fs::read(a.home().join(JOURNAL)).ok(),
        "{what}: the pulled journal differs from the source's"
    );
}

/// A home pushed by a push SIGKILLed 20 times at random points (new lines
/// in every session and new checkpoints between rounds), then once more
/// without a kill, which must leave nothing to send.
struct KilledPushes {
    server: TestServer,
    a: Device,
    keyed: Keyed,
}

fn killed_pushes(seed: u64) -> KilledPushes {
    let server = TestServer::start_with(&["--max-batch-bytes", MAX_BATCH_BYTES]);
    let full = full_push_time(&server, |d| home(d, &mut Rng::new(seed)));
    // The server keeps one pack per push request: the probe's whole push
    // was that many batches.
    let probe = server_data::user_id(&server.stores(), "probe");
    let batches = server_data::packs(&server.stores())
        .iter()
        .filter(|(user, _)| *user == probe)
        .count();
    assert!(batches >= 10, "a whole push is only {batches} batches");
    let a = Device::new();
    let mut rng = Rng::new(seed);
    home(&a, &mut rng);
    a.init(&server, "alice", "laptop");
    let mut clock = KillClock::new(full * 3 / 4);
    let mut seq = 41;
    // Kills after which the server had more records than before the push
    // and the push was still running: it was cut inside its uploads.
    let mut mid_upload = 0;
    for round in 0..20 {
        if round > 0 {
            // New lines in sessions sent before: a push after a kill reads
            // them together with what the killed push sent and did not
            // record, into the same segments.
            more(&a, round, 1);
            checkpoints(&a, &mut rng, seq..seq + 2);
            seq += 2;
        }
        let before = rows_of(&server, "alice").len();
        let hit = clock.kill(&mut rng, spawn_sync(&a, "push"));
        let after = rows_of(&server, "alice").len();
        if hit && after > before {
            mid_upload += 1;
        }
        eprintln!("kill {round}: hit {hit}, records {before} -> {after}");
    }
    clock.assert_hits(10, full);
    assert!(
        mid_upload >= 3,
        "only {mid_upload} of {} kills landed between a push's first stored record and its end \
         (a whole push takes {full:?})",
        clock.kills
    );
    let out = a.sync_ok(&["push"]);
    assert!(out.starts_with("pushed "), "{out}");
    assert!(
        a.sync_ok(&["push"]).starts_with("pushed 0 entries"),
        "a second push has nothing to send"
    );
    let keyed = Keyed::of(&a);
    KilledPushes { server, a, keyed }
}

/// What no push killed anywhere may do, even before re-sent segments are
/// trimmed to what the server lacks: lose an entry, bring one to a device
/// twice, have the server store a record of entries it had all, or leave
/// temp files behind. (Exactly once on the server: the next test.)
#[test]
fn pipelined_push_killed_20_times_then_rerun_loses_nothing_and_applies_nothing_twice() {
    let KilledPushes { server, a, keyed } = killed_pushes(0x5eed_0101);
    let mut want = keyed.entries(&a);
    want.extend(keyed.journal_lines(&a.home().join(JOURNAL)));
    let rows = rows_of(&server, "alice");
    let stored: BTreeSet<String> = server_data::entry_counts(&rows).into_keys().collect();
    assert_eq!(
        (
            want.difference(&stored).count(),
            stored.difference(&want).count()
        ),
        (0, 0),
        "entries missing from the server, and entries it has that the device does not"
    );
    let (all_known, _) = server_data::repeating_rows(&rows);
    assert!(
        all_known.is_empty(),
        "records stored although the server had every entry of theirs: {all_known:?}"
    );
    assert_fresh_device_gets_it_all(&server, &a, &keyed);
    let temps = leftover_temps(&a);
    assert!(temps.is_empty(), "killed pushes left temp files: {temps:?}");
}

/// Every entry in exactly one record, however the pushes were killed.
#[test]
fn pipelined_push_killed_20_times_then_rerun_stores_every_entry_once() {
    let KilledPushes { server, .. } = killed_pushes(0x5eed_0103);
    let rows = rows_of(&server, "alice");
    let counts = server_data::entry_counts(&rows);
    let doubled: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let (all_known, mixed) = server_data::repeating_rows(&rows);
    assert!(
        doubled.is_empty(),
        "{} of {} entries are stored in more than one of {} records (first: {:?}); \
         {} records repeat entries with new ones, {} repeat only known ones",
        doubled.len(),
        counts.len(),
        rows.len(),
        doubled.first(),
        mixed.len(),
        all_known.len()
    );
}

/// At this kill of `b`'s pull, every record at or below `b`'s cursor is in
/// `b`'s files: each entry of an entries record in a transcript, each line
/// of a journal record in the pulled journal. And nothing is there twice.
/// Returns how many entries in the files the cursor does not cover yet
/// (applied by a pull killed before it moved the cursor past them).
fn assert_cursor_covers_only_held(
    server: &TestServer,
    b: &Device,
    keyed: &Keyed,
    what: &str,
) -> usize {
    let cursor = b.state()["cursor"].as_u64().unwrap();
    let entries = keyed.entries(b);
    let lines = keyed.journal_lines(&keyed.pulled_journal(b));
    let mut covered = BTreeSet::new();
    for r in rows_of(server, "alice") {
        if r.seq as u64 > cursor {
            continue;
        }
        let held = if r.kind == "journal" {
            &lines
        } else {
            &entries
        };
        let missing = r.entry_ids.iter().filter(|id| !held.contains(*id)).count();
        assert_eq!(
            missing,
            0,
            "{what}: the cursor is at {cursor}, past record {} ({}), {missing} of whose {} \
             entries are not in the files",
            r.seq,
            r.kind,
            r.entry_ids.len()
        );
        covered.extend(r.entry_ids);
    }
    let doubled = doubled_entries(b);
    assert!(
        doubled.is_empty(),
        "{what}: entries applied twice: {doubled:?}"
    );
    entries
        .union(&lines)
        .filter(|id| !covered.contains(*id))
        .count()
}

#[test]
fn prefetching_pull_killed_20_times_then_rerun() {
    const SEED: u64 = 0x5eed_0102;
    let server = TestServer::start_with(&[
        "--max-page-bytes",
        MAX_PAGE_BYTES,
        "--max-page-records",
        MAX_PAGE_RECORDS,
    ]);
    let a = Device::new();
    let mut rng = Rng::new(SEED);
    home(&a, &mut rng);
    a.init(&server, "alice", "laptop");
    a.sync_ok(&["push"]);
    // Sessions in several records, so one session's entries span pages.
    for round in 1..=3 {
        more(&a, round, 2);
        a.sync_ok(&["push"]);
    }
    let keyed = Keyed::of(&a);
    let records = rows_of(&server, "alice").len();
    assert!(
        records >= 20 * 32,
        "the history is {records} records, fewer than 20 pages of 32"
    );

    // Kill times come from a whole pull of this history on another device.
    let probe = Device::new();
    probe.join_copying_key(&a, &server.url, "alice", "probe");
    let started = Instant::now();
    let out = spawn_sync(&probe, "pull").wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let full = started.elapsed();

    let b = Device::new();
    b.join_copying_key(&a, &server.url, "alice", "desk");
    let mut clock = KillClock::new(full * 3 / 4);
    let mut seq = 41;
    let mut torn = Vec::new();
    // Kills that hit a pull after it had applied a page: it had moved the
    // cursor, or written entries the cursor does not cover yet.
    let mut inside = 0;
    for round in 0..20 {
        if round > 0 {
            // New records keep coming, so every pull has pages to fetch.
            more(&a, 10 + round, 2);
            checkpoints(&a, &mut rng, seq..seq + 1);
            seq += 1;
            a.sync_ok(&["push"]);
        }
        let cursor = b.state()["cursor"].as_u64().unwrap();
        let pull = spawn_sync(&b, "pull");
        // Every other kill waits for the pull's first page to be applied
        // (the cursor saved past it), then lands at a random point after:
        // however slowly this pull starts, some kills cut it mid-stream.
        let hit = if round % 2 == 1 {
            clock.kill_after(&mut rng, pull, || {
                b.state()["cursor"].as_u64() != Some(cursor)
            })
        } else {
            clock.kill(&mut rng, pull)
        };
        let what = format!("kill {round}");
        let ahead = assert_cursor_covers_only_held(&server, &b, &keyed, &what);
        let moved = b.state()["cursor"].as_u64().unwrap() > cursor;
        if hit && (moved || ahead > 0) {
            inside += 1;
        }
        let partial = partial_files(&b);
        eprintln!(
            "{what}: hit {hit}, cursor {cursor} -> {}, {ahead} entries applied past it, \
             {} files end mid-line",
            b.state()["cursor"],
            partial.len()
        );
        torn.extend(partial.into_iter().map(|p| format!("{what}: {p}")));
    }
    clock.assert_hits(10, full);
    assert!(
        inside >= 3,
        "only {inside} of {} kills hit a pull after it had applied a page (a whole pull \
         takes {full:?})",
        clock.kills
    );
    let out = b.sync_ok(&["pull"]);
    assert!(out.starts_with("pulled "), "{out}");
    assert!(
        torn.is_empty() || partial_files(&b).is_empty(),
        "lines a killed pull cut short stay cut: {torn:?}"
    );
    let temps = leftover_temps(&b);
    assert!(temps.is_empty(), "killed pulls left temp files: {temps:?}");
    assert_same_home(&a, &b, &keyed, "the killed device");
    // And it has nothing more to pull.
    let before = b.tree("transcripts");
    let out = b.sync_ok(&["pull"]);
    assert!(out.starts_with("pulled 0 entries"), "{out}");
    assert!(
        b.tree("transcripts") == before,
        "a pull with nothing new changed the transcripts"
    );
}

/// Real SIGKILLs inside pull's writes, many of which leave a line cut short:
/// each is finished by the next pull, and the device ends as the source
/// is. Run by hand: a kill lands inside the kernel's copy mostly while the
/// writer is throttled for dirty pages, which takes a small dirty limit
/// (as root; `echo 20 > /proc/sys/vm/dirty_ratio` puts it back):
///
///     echo 2097152 > /proc/sys/vm/dirty_bytes
///     ROUNDS=20 cargo test --release -p evi-tests --test e2e -- \
///         sync_kill::pulls_killed_inside_their_writes --include-ignored --nocapture
///
/// Without the limit few kills cut a line (0 of 15 here); with it, 9 and 6
/// of 20 in two runs. With the marks proof turned off, the first cut fails.
#[test]
#[ignore = "a stress run by hand, with a small dirty-page limit (see its doc)"]
fn pulls_killed_inside_their_writes_leave_cut_lines_the_next_pull_finishes() {
    let server = TestServer::start();
    let a = Device::new();
    let mut rng = Rng::new(7);
    // Lines of 20-200 KB: the writes span many pages.
    for s in 0..40 {
        let mut text = String::new();
        for i in 0..12 {
            let n = rng.range(20_000, 200_000);
            let body: String = (0..n)
                .map(|_| char::from(b'a' + (rng.next() % 26) as u8))
                .collect();
            text.push_str(&format!(
                "{{\"role\":\"user\",\"n\":{i},\"content\":\"{body}\"}}\n"
            ));
        }
        a.write("2026-06-08", &format!("S-{s:03}"), text.as_bytes());
    }
    a.init(&server, "alice", "laptop");
    a.sync_ok(&["push"]);
    let keyed = Keyed::of(&a);
    let probe = Device::new();
    probe.join_copying_key(&a, &server.url, "alice", "probe");
    let started = Instant::now();
    assert!(spawn_sync(&probe, "pull").wait().unwrap().success());
    let full = started.elapsed();
    let rounds: u64 = (std::env::var("ROUNDS").ok())
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let mut cut = 0;
    for round in 0..rounds {
        let b = Device::new();
        b.join_copying_key(&a, &server.url, "alice", &format!("d{round}"));
        let mut pull = spawn_sync(&b, "pull");
        std::thread::sleep(full.mul_f64(rng.range(5, 100) as f64 / 100.0));
        let _ = pull.kill();
        let _ = pull.wait();
        let torn = partial_files(&b);
        eprintln!("round {round}: files that end mid-line: {torn:?}");
        if !torn.is_empty() {
            cut += 1;
            b.sync_ok(&["pull"]);
            assert_same_home(&a, &b, &keyed, &format!("round {round}"));
        }
    }
    eprintln!(
        "{cut} of {rounds} kills left a line cut short, each finished by the next pull \
         (a whole pull takes {full:?})"
    );
}
