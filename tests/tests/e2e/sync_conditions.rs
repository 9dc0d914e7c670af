//! Sync under the conditions a user lives in (issue 8): eVi writing a line
//! while pull appends to the same file, lines left unfinished, a line larger
//! than the server takes in one batch, and two devices whose local dates are
//! a day apart. Each test is DESIGN.md's convergence property ("Pull never
//! rewrites a file" and what follows) under one of those conditions.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::common::{
    Device, Rng, Run, TestServer, assert_all_lines_json, assert_converged, assert_only_appended,
    derive_id, held, today,
};

const D1: &str = "2026-06-08";
const D2: &str = "2026-06-09";

fn line(role: &str, content: &str) -> String {
    format!("{{\"role\":\"{role}\",\"content\":\"{content}\"}}\n")
}

/// The line's bytes without its newline, as an entry's content.
fn content(line: &str) -> Vec<u8> {
    line.trim_end_matches('\n').as_bytes().to_vec()
}

/// A (first device) and B (its key copied) on one account.
fn pair(server: &TestServer) -> (Device, Device) {
    let (a, b) = (Device::new(), Device::new());
    a.init(server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    (a, b)
}

/// `evi sync <args>` on `dev` with its clock in the zone `tz`.
fn sync_in(dev: &Device, tz: &str, args: &[&str]) -> String {
    let run: Run = dev
        .sync_cmd()
        .env("TZ", tz)
        .arg("sync")
        .args(args)
        .output()
        .expect("run evi")
        .into();
    assert_eq!(run.code, 0, "evi sync {args:?} (TZ={tz}): {}", run.stderr);
    run.stdout
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Appends in one `write`, as eVi appends a line.
fn append_once(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// A and B with `session` (its lines `text`, on D1) pushed by A and pulled
/// by B; B's file of it.
fn on_both(session: &str, text: &str) -> (TestServer, Device, Device, PathBuf) {
    let server = TestServer::start();
    let (a, b) = pair(&server);
    a.write(D1, session, text.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let path = transcript(&b, D1, session);
    (server, a, b, path)
}

fn transcript(dev: &Device, day: &str, session: &str) -> PathBuf {
    dev.home()
        .join("transcripts")
        .join(day)
        .join(format!("{session}.jsonl"))
}

/// The contents a device holds for a session.
fn contents(dev: &Device, session: &str) -> BTreeSet<Vec<u8>> {
    held(dev, session).into_iter().map(|e| e.content).collect()
}

fn assert_holds_all(dev: &Device, session: &str, lines: &[String], what: &str) {
    let have = contents(dev, session);
    let missing: Vec<&String> = lines
        .iter()
        .filter(|l| !have.contains(&content(l)))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: {} of {} lines of {session} are missing, e.g. {:?}",
        missing.len(),
        lines.len(),
        missing.first()
    );
}

// ---------------------------------------------------------------------------
// Defect 2: pull glued its line onto a line eVi was writing.

const GLUE_SESSIONS: [&str; 2] = ["G0", "G1"];

#[test]
fn pull_never_appends_onto_a_line_being_written() {
    // One record per page: a pull spans several requests, as a long pull
    // does, and eVi starts or finishes a line in the middle of it.
    let server = TestServer::start_with(&["--max-page-records", "1"]);
    let (a, b) = pair(&server);
    let day = today();
    let mut a_lines: Vec<(usize, String)> = Vec::new();
    for (k, s) in GLUE_SESSIONS.iter().enumerate() {
        let l = line("user", &format!("start of {s}"));
        a.append(&format!("transcripts/{day}/{s}.jsonl"), l.as_bytes());
        a_lines.push((k, l));
    }
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);

    // eVi on B answers each time pull appended to a session: a line in two
    // writes with a pause in the middle, so the next record of that session
    // arrives while the line is half written.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = GLUE_SESSIONS
        .iter()
        .enumerate()
        .map(|(k, s)| mid_line_writer(transcript(&b, &day, s), s, Arc::clone(&stop), k as u64 + 1))
        .collect();
    // A keeps continuing the same sessions; B pulls in a loop meanwhile,
    // each pull taking every session twice.
    for round in 0..25 {
        for push in 0..2 {
            for (k, s) in GLUE_SESSIONS.iter().enumerate() {
                for i in 0..2 {
                    let l = line("assistant", &format!("A {round}.{push}.{i} in {s}"));
                    a.append(&format!("transcripts/{day}/{s}.jsonl"), l.as_bytes());
                    a_lines.push((k, l));
                }
            }
            a.sync_ok(&["push"]);
        }
        b.sync_ok(&["pull"]);
    }
    stop.store(true, Ordering::Relaxed);
    let b_lines: Vec<Vec<String>> = writers
        .into_iter()
        .map(|w| w.join().expect("writer thread"))
        .collect();
    assert_all_lines_json(&b, "B right after pulling while eVi wrote");

    for _ in 0..2 {
        a.sync_ok(&["push"]);
        b.sync_ok(&["push"]);
        a.sync_ok(&["pull"]);
        b.sync_ok(&["pull"]);
    }
    assert_all_lines_json(&a, "A after the final round");
    assert_all_lines_json(&b, "B after the final round");
    assert_converged(&a, &b, "A and B");
    for (k, s) in GLUE_SESSIONS.iter().enumerate() {
        let from_a: Vec<String> = a_lines
            .iter()
            .filter(|(j, _)| *j == k)
            .map(|(_, l)| l.clone())
            .collect();
        assert!(!b_lines[k].is_empty(), "eVi on B wrote into {s}");
        assert_holds_all(&a, s, &b_lines[k], "A holds what eVi wrote on B");
        assert_holds_all(&b, s, &from_a, "B holds what A wrote");
    }
}

/// eVi writing into `path`: whenever the file grew by other hands (pull),
/// it writes a line in two writes, 10 to 30 ms apart. Returns the lines.
fn mid_line_writer(
    path: PathBuf,
    session: &str,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> std::thread::JoinHandle<Vec<String>> {
    let session = session.to_owned();
    std::thread::spawn(move || {
        let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let mut rng = Rng::new(seed);
        let mut written = Vec::new();
        let mut seen = len(&path);
        loop {
            while len(&path) == seen {
                if stop.load(Ordering::Relaxed) {
                    return written;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            let l = line(
                "user",
                &format!("B typing line {} of {session}", written.len()),
            );
            let cut = rng.range(1, l.len() as u64 - 1) as usize;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(&l.as_bytes()[..cut]).unwrap();
            std::thread::sleep(Duration::from_millis(rng.range(10, 30)));
            f.write_all(&l.as_bytes()[cut..]).unwrap();
            written.push(l);
            seen = len(&path);
        }
    })
}

// ---------------------------------------------------------------------------
// Defect 3: a partial line on an earlier day re-parented a pulled entry.

#[test]
fn a_partial_line_on_an_earlier_day_does_not_reparent_a_pulled_entry() {
    let server = TestServer::start();
    let (a, b) = pair(&server);
    let first = line("user", "monday");
    a.write(D1, "S", first.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let before = b.tree("transcripts");

    // eVi on B is in the middle of a line of Monday's file...
    let typing = line("user", "B still typing on monday");
    let (start, rest) = typing.split_at(12);
    b.append(&format!("transcripts/{D1}/S.jsonl"), start.as_bytes());
    // ... while A continues the session on Tuesday.
    let tuesday = line("assistant", "A on tuesday");
    a.write(D2, "S", tuesday.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    b.append(&format!("transcripts/{D1}/S.jsonl"), rest.as_bytes());

    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    b.sync_ok(&["pull"]);
    a.sync_ok(&["push"]);
    assert_only_appended(&before, &b.tree("transcripts"), "B's transcripts");

    let first_id = derive_id(None, &content(&first));
    let tuesday_id = derive_id(Some(&first_id), &content(&tuesday));
    let on_b = held(&b, "S");
    let e = on_b
        .iter()
        .find(|e| e.content == content(&tuesday))
        .expect("B holds A's Tuesday line");
    assert_eq!(
        (e.id.as_str(), e.parent.as_deref(), e.day.as_str()),
        (tuesday_id.as_str(), Some(first_id.as_str()), D2),
        "A's Tuesday entry keeps its id and parent on B: {on_b:#?}"
    );
    assert_converged(&a, &b, "A and B");
    assert_eq!(held(&a, "S").len(), 3, "Monday, B's line, A's Tuesday line");
}

// ---------------------------------------------------------------------------
// Defect 4: a line eVi wrote during a pull was taken as pushed.

#[test]
fn a_line_written_during_a_pull_is_pushed_by_the_next_push() {
    let server = TestServer::start();
    let (a, b) = pair(&server);
    let day = today();
    for round in 0..3 {
        let s = format!("R{round}");
        let mut many = String::new();
        for i in 0..10_000 {
            many += &line("assistant", &format!("A line {i} of {s}"));
        }
        a.write(&day, &s, many.as_bytes());
        a.sync_ok(&["push"]);

        // eVi on B appends a line to that file while B pulls into it (once
        // pull's first bytes are there), then goes quiet.
        let writer = {
            let path = transcript(&b, &day, &s);
            let s = s.clone();
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                while std::fs::metadata(&path).map_or(true, |m| m.len() == 0)
                    && started.elapsed() < Duration::from_secs(60)
                {
                    std::thread::sleep(Duration::from_micros(20));
                }
                let mut written = Vec::new();
                for k in 0..2 {
                    let l = line("user", &format!("B wrote {k} during the pull of {s}"));
                    append_once(&path, l.as_bytes());
                    written.push(l);
                    std::thread::sleep(Duration::from_micros(200));
                }
                written
            })
        };
        let pull: Run = b.sync_cmd().args(["sync", "pull"]).output().unwrap().into();
        let written = writer.join().expect("writer thread");
        assert_eq!(pull.code, 0, "pull: {}", pull.stderr);

        let status = json(&b.sync_ok(&["status", "--json"]));
        assert!(
            status["local_changed_files"].as_u64() >= Some(1),
            "round {round}: B holds {} lines it never pushed, yet status says {}",
            written.len(),
            status["local_changed_files"]
        );
        b.sync_ok(&["push"]);
        a.sync_ok(&["pull"]);
        assert_holds_all(
            &a,
            &s,
            &written,
            &format!("round {round}: A after B's push"),
        );
    }
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    assert_all_lines_json(&b, "B");
    assert_converged(&a, &b, "A and B");
}

// ---------------------------------------------------------------------------
// Defect 5: one oversized line failed every push.

/// A JSON line of `len` bytes: a pasted image, base64 that does not compress.
fn image_line(len: usize) -> Vec<u8> {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let head = br#"{"role":"user","content":"data:image/png;base64,"#;
    let tail = b"\"}";
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(head);
    let mut rng = Rng::new(0x1a6e);
    while out.len() < len - tail.len() {
        let mut r = rng.next();
        for _ in 0..10 {
            out.push(B64[(r & 63) as usize]);
            r >>= 6;
        }
    }
    out.truncate(len - tail.len());
    out.extend_from_slice(tail);
    out
}

#[test]
fn a_line_over_the_batch_limit_arrives_with_everything_else() {
    let server = TestServer::start();
    let a = Device::new();
    let big = image_line(12 << 20);
    let mut image = line("user", "here is the screenshot").into_bytes();
    image.extend_from_slice(&big);
    image.push(b'\n');
    image.extend_from_slice(line("assistant", "I see a button").as_bytes());
    // The big line's session comes first: everything after it must go too.
    a.write(D1, "A-image", &image);
    a.write(D1, "B-notes", line("user", "small one").as_bytes());
    a.write(D2, "C-later", line("user", "another day").as_bytes());
    let blob = b"prior contents of main.rs\n".to_vec();
    let sha: String = Sha256::digest(&blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    a.put(&format!("checkpoints/blobs/{sha}"), &blob);
    let journal = format!(
        "{{\"seq\":1,\"ts\":\"2026-06-08T09:00:02Z\",\"path\":\"/src/main.rs\",\"op\":\"write\",\"blob\":\"{sha}\",\"size\":{}}}\n",
        blob.len()
    );
    a.put("checkpoints/journal.jsonl", journal.as_bytes());

    a.init(&server, "pat", "laptop");
    let push = a.sync(&["sync", "push"]);
    assert_eq!(push.code, 0, "push with a 12 MB line: {}", push.stderr);
    let again = json(&a.sync_ok(&["push", "--json"]));
    assert_eq!(again["entries"], 0, "nothing is sent twice: {again}");

    let b = Device::new();
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    b.sync_ok(&["pull"]);
    let (want, got) = (a.tree("transcripts"), b.tree("transcripts"));
    let sizes = |t: &crate::common::Tree| -> Vec<(String, usize)> {
        t.iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map_or(0, Vec::len)))
            .collect()
    };
    assert_eq!(sizes(&got), sizes(&want), "B's transcripts (path, size)");
    assert!(got == want, "B's transcripts are A's byte for byte");
    let cp = b.tree("checkpoints");
    assert_eq!(cp[&format!("blobs/{sha}")].as_deref(), Some(&blob[..]));
    let journals: Vec<&String> = cp
        .keys()
        .filter(|k| k.starts_with("devices/") && k.ends_with("/journal.jsonl"))
        .collect();
    assert_eq!(journals.len(), 1, "one pulled journal: {:?}", cp.keys());
    assert_eq!(cp[journals[0]].as_deref(), Some(journal.as_bytes()));
}

// ---------------------------------------------------------------------------
// Defect 7: a stale partial line stalled every pull.

fn status_json(dev: &Device) -> serde_json::Value {
    json(&dev.sync_ok(&["status", "--json"]))
}

/// `status --json`'s waiting list, less sessions with nothing waiting.
fn waiting(dev: &Device) -> Vec<serde_json::Value> {
    let st = status_json(dev);
    let list = st["waiting"]
        .as_array()
        .unwrap_or_else(|| panic!("status --json has no \"waiting\" list: {st}"));
    list.iter()
        .filter(|w| w["entries"].as_u64() != Some(0))
        .cloned()
        .collect()
}

#[test]
fn a_stale_partial_line_waits_and_every_other_session_arrives() {
    let server = TestServer::start();
    let (a, b) = pair(&server);
    let first = line("user", "before eVi died");
    a.write(D1, "S-stale", first.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let before = b.tree("transcripts");

    // eVi on B died in the middle of a line.
    let unfinished = line("user", "B was typing when it crashed");
    let (start, rest) = unfinished.split_at(20);
    b.append(&format!("transcripts/{D1}/S-stale.jsonl"), start.as_bytes());
    // A continues that session, then writes others (later records).
    let more = [line("assistant", "A answers"), line("user", "A again")];
    a.append(
        &format!("transcripts/{D1}/S-stale.jsonl"),
        more.concat().as_bytes(),
    );
    a.sync_ok(&["push"]);
    a.write(D1, "S-other", line("user", "another session").as_bytes());
    let now = today();
    a.write(&now, "S-today", line("user", "and one of today").as_bytes());
    a.sync_ok(&["push"]);

    let pulled = json(&b.sync_ok(&["pull", "--json"]));
    for (day, s) in [(D1, "S-other"), (now.as_str(), "S-today")] {
        let rel = format!("{day}/{s}.jsonl");
        assert!(
            b.tree("transcripts").get(&rel) == a.tree("transcripts").get(&rel),
            "{s} did not arrive on B (S-stale waits, others must not): B holds {:?}",
            b.tree("transcripts").keys()
        );
    }
    assert_eq!(pulled["waiting"], 2, "two entries wait: {pulled}");
    let st = status_json(&b);
    assert_eq!(st["remote_pending_records"], 0, "the cursor moved on: {st}");
    let w = waiting(&b);
    assert_eq!(w.len(), 1, "one session waits: {w:?}");
    assert_eq!(
        (
            &w[0]["session"],
            &w[0]["day"],
            &w[0]["entries"],
            &w[0]["reason"]
        ),
        (
            &serde_json::json!("S-stale"),
            &serde_json::json!(D1),
            &serde_json::json!(2),
            &serde_json::json!("partial_line")
        ),
        "{w:?}"
    );
    let text = b.sync_ok(&["status"]);
    assert!(
        text.lines()
            .any(|l| l.contains("S-stale") && l.contains("waiting")),
        "status names the waiting session:\n{text}"
    );
    assert_eq!(
        std::fs::read(transcript(&b, D1, "S-stale")).unwrap(),
        [first.as_bytes(), start.as_bytes()].concat(),
        "nothing was appended to the line being written"
    );

    // eVi comes back and finishes its line: the next pull applies the rest.
    b.append(&format!("transcripts/{D1}/S-stale.jsonl"), rest.as_bytes());
    b.sync_ok(&["pull"]);
    assert!(waiting(&b).is_empty(), "nothing waits any more");
    let first_id = derive_id(None, &content(&first));
    let answer_id = derive_id(Some(&first_id), &content(&more[0]));
    let again_id = derive_id(Some(&answer_id), &content(&more[1]));
    let on_b: BTreeSet<(String, Option<String>)> = held(&b, "S-stale")
        .into_iter()
        .map(|e| (e.id, e.parent))
        .collect();
    for (id, parent) in [(&answer_id, &first_id), (&again_id, &answer_id)] {
        assert!(
            on_b.contains(&(id.clone(), Some(parent.clone()))),
            "B holds {id} under {parent}: {on_b:?}"
        );
    }
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    assert_converged(&a, &b, "A and B");
    assert_only_appended(&before, &b.tree("transcripts"), "B's transcripts");
}

/// `evi sync pull` on `dev`, killed inside its first append that crosses a
/// page boundary once the bytes up to that boundary are written (the test
/// hook `EVI_PULL_CUT_AT`), as a kill inside the kernel's copy leaves it;
/// the file it cut, which must now end mid-line on that boundary.
fn pull_cut_short(dev: &Device, path: &Path) -> Vec<u8> {
    let run: Run = dev
        .sync_cmd()
        .env("EVI_PULL_CUT_AT", "1")
        .args(["sync", "pull"])
        .output()
        .expect("run evi")
        .into();
    assert_ne!(run.code, 0, "the pull was to be cut short: {}", run.stdout);
    let cut = std::fs::read(path).unwrap();
    assert!(
        cut.len().is_multiple_of(4096) && cut.last() != Some(&b'\n'),
        "the pull left its line cut at a page boundary: {} bytes",
        cut.len()
    );
    cut
}

/// A pull killed inside its `write` (seen in CI: a SIGKILL in the `writev`)
/// leaves the line it was writing cut short, and its cursor before the
/// record. The next pull brings the entry again and finishes that line with
/// the bytes that are missing, where a line eVi is writing would make it
/// wait: its mark (`sync/appending`) proves the bytes are its own. Both
/// placements: a line written as it is, and one given its ids (a branch).
#[test]
fn a_line_a_killed_pull_cut_short_is_finished_by_the_next_pull() {
    let server = TestServer::start();
    let (a, b) = pair(&server);
    let first = line("user", "question");
    let answer = line("assistant", &"a long answer ".repeat(700));
    let on_a = a.write(D1, "S-torn", format!("{first}{answer}").as_bytes());
    a.sync_ok(&["push"]);
    let path = transcript(&b, D1, "S-torn");
    pull_cut_short(&b, &path);
    b.sync_ok(&["pull"]);
    let got = std::fs::read(&path).unwrap();
    assert!(
        got == format!("{first}{answer}").as_bytes(),
        "the cut line is finished, and nothing else is written: B holds {} bytes, ending {:?}",
        got.len(),
        String::from_utf8_lossy(&got[got.len().saturating_sub(40)..])
    );
    assert!(waiting(&b).is_empty(), "nothing waits: {:?}", waiting(&b));

    // A branch: both devices answer the same tip, so A writes B's answer
    // with its ids in front; cut there, it is finished the same way.
    append_once(
        &path,
        line("user", &"B went this way ".repeat(700)).as_bytes(),
    );
    append_once(&on_a, line("user", "A went that way").as_bytes());
    b.sync_ok(&["push"]);
    a.sync_ok(&["push"]);
    let cut = pull_cut_short(&a, &on_a);
    a.sync_ok(&["pull"]);
    let whole = std::fs::read(&on_a).unwrap();
    assert!(whole.starts_with(&cut), "A's file was only appended to");
    let last = String::from_utf8_lossy(&whole)
        .lines()
        .last()
        .unwrap()
        .to_owned();
    assert!(
        last.starts_with("{\"id\":") && last.contains("B went this way"),
        "B's answer is on A, whole, with its ids: {last}"
    );
    assert!(
        waiting(&a).is_empty(),
        "nothing waits on A: {:?}",
        waiting(&a)
    );
    assert_all_lines_json(&a, "A");
    b.sync_ok(&["pull"]);
    assert_converged(&a, &b, "A and B");
}

/// A line a killed pull cut short, then written on by eVi, is eVi's line
/// now: its bytes no longer end where the kill left them, and pull leaves
/// every one of them in place; the entry waits.
#[test]
fn a_cut_line_evi_wrote_on_is_left_to_it() {
    let server = TestServer::start();
    let (a, b) = pair(&server);
    let text = format!(
        "{}{}",
        line("user", "q"),
        line("assistant", &"answer ".repeat(900))
    );
    a.write(D1, "S-torn2", text.as_bytes());
    a.sync_ok(&["push"]);
    let path = transcript(&b, D1, "S-torn2");
    pull_cut_short(&b, &path);
    append_once(&path, br#"{"role":"user","con"#);
    let before = std::fs::read(&path).unwrap();
    b.sync_ok(&["pull"]);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "not a byte is changed"
    );
    assert_eq!(waiting(&b).len(), 1, "the answer waits: {:?}", waiting(&b));
}

/// A partial line eVi is writing is never finished by pull, even when its
/// bytes so far are the first bytes of the pulled entry (lines of one role
/// share them): the entry waits.
#[test]
fn a_partial_line_evi_is_writing_is_left_to_it_even_when_it_starts_like_the_pulled_entry() {
    let (_server, a, b, path) = on_both("S-busy", &line("user", "question"));
    // eVi on B is writing a line of its own.
    append_once(&path, br#"{"role":"assistant","content":"A "#);
    let before = std::fs::read(&path).unwrap();
    let answer = line("assistant", "A answered");
    a.append(&format!("transcripts/{D1}/S-busy.jsonl"), answer.as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "eVi's line is left alone"
    );
    assert_eq!(waiting(&b).len(), 1, "A's entry waits: {:?}", waiting(&b));
}

#[test]
fn entries_for_an_abandoned_partial_line_go_to_the_next_day_with_ids() {
    let first = line("user", "long ago");
    let (_server, a, b, path) = on_both("S-dead", &first);
    // eVi on B died mid-line two days ago and never came back.
    append_once(&path, br#"{"role":"user","content":"never fini"#);
    let touched = std::process::Command::new("touch")
        .args(["-d", "2 days ago"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(touched.success());
    let before = b.tree("transcripts");

    let answer = line("assistant", "A continued it");
    a.append(&format!("transcripts/{D1}/S-dead.jsonl"), answer.as_bytes());
    a.sync_ok(&["push"]);
    a.write(D1, "S-other", line("user", "other").as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);

    let after = b.tree("transcripts");
    assert_only_appended(&before, &after, "B's transcripts");
    let dead = format!("{D1}/S-dead.jsonl");
    assert!(
        after[&dead] == before[&dead],
        "the abandoned file is left as it is"
    );
    let other = format!("{D1}/S-other.jsonl");
    assert!(
        after.get(&other) == a.tree("transcripts").get(&other),
        "S-other did not arrive on B: B holds {:?}",
        after.keys()
    );
    let first_id = derive_id(None, &content(&first));
    let answer_id = derive_id(Some(&first_id), &content(&answer));
    let next = std::fs::read_to_string(transcript(&b, D2, "S-dead"))
        .expect("A's entry went to the next day's file");
    let lead = format!("{{\"id\":\"{answer_id}\",\"parentId\":\"{first_id}\",");
    assert!(
        next.lines().count() == 1 && next.starts_with(&lead),
        "the next day's file holds A's entry with its ids in front:\n{next}"
    );
    let on_b = held(&b, "S-dead");
    assert_eq!(on_b.len(), 2, "{on_b:#?}");
    assert_eq!(
        (&on_b[1].id, &on_b[1].parent, &on_b[1].content),
        (&answer_id, &Some(first_id), &content(&answer))
    );
    assert!(waiting(&b).is_empty(), "nothing waits: {:?}", waiting(&b));
}

// ---------------------------------------------------------------------------
// Defect 8: devices whose local dates are a day apart diverged.

#[test]
fn devices_a_day_apart_continue_one_session_in_turn_and_converge() {
    // A is already on the next date, B still on the previous one.
    let zones = [("Etc/GMT-14", 14), ("Etc/GMT+12", -12)];
    let server = TestServer::start();
    let (a, b) = pair(&server);
    let devs = [&a, &b];
    let local_day = |hours: i64| {
        (chrono::Utc::now() + chrono::Duration::hours(hours))
            .format("%Y-%m-%d")
            .to_string()
    };
    let mut written = Vec::new();
    for turn in 0..4 {
        let (dev, (tz, hours)) = (devs[turn % 2], zones[turn % 2]);
        if turn > 0 {
            sync_in(dev, tz, &["pull"]);
        }
        let day = local_day(hours);
        for i in 0..2 {
            let l = line("user", &format!("turn {turn} line {i} on {day}"));
            dev.append(&format!("transcripts/{day}/S-tz.jsonl"), l.as_bytes());
            written.push(l);
        }
        sync_in(dev, tz, &["push"]);
    }
    for _ in 0..2 {
        for (dev, (tz, _)) in devs.iter().zip(zones) {
            sync_in(dev, tz, &["push"]);
        }
        for (dev, (tz, _)) in devs.iter().zip(zones) {
            sync_in(dev, tz, &["pull"]);
        }
    }
    assert_converged(&a, &b, "A (UTC+14) and B (UTC-12)");
    assert_holds_all(&a, "S-tz", &written, "A");
    assert_eq!(held(&a, "S-tz").len(), written.len(), "every line once");
}
