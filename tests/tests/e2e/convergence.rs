//! Randomized convergence (issue 4, DESIGN.md "Convergence"): three devices on
//! one account do random appends, pushes and pulls in random order; after a
//! final round (every device finishes the line it was writing, every device
//! pushes, then every device pulls, then all push and pull once more) every
//! device must hold exactly the entries of an in-test reference model: the
//! set of (id, parent, day, line) ever appended on any device. Across the
//! whole case no transcript file may change other than by appending.
//!
//! The conditions of issue 8 are among the operations: an append sometimes
//! stops in the middle of its last line (eVi pausing mid-line) and a later
//! operation of that device finishes it, with pushes and pulls in between;
//! the devices' clocks are in three time zones (UTC, UTC-12, UTC+14), so
//! their local dates differ; and now and then a line is larger than the
//! test server's batch limit.
//!
//! The model derives entry ids on its own (sha2, not the evi library), from
//! the appending device's files as they are at append time (a line left
//! unfinished becomes an entry when it is finished, under the parent it
//! reads with then). A device writes a session into its own local date's
//! file or a later one, never before the newest day the session already has
//! there (eVi writes today's file; a clock running ahead writes a later
//! one). Every case uses
//! its own session ids on the same three devices (one server, one account:
//! logins are slow on purpose), so cases are independent, and a failing one
//! reruns alone with the seed and case number its message prints:
//!
//! ```text
//! EVI_CONVERGENCE_SEED=0x… EVI_CONVERGENCE_CASE=17 cargo test -p evi-tests --test e2e convergence
//! ```
//!
//! `EVI_CONVERGENCE_CASES` sets how many cases run (default 200; 50 in the
//! Postgres target, where the merge under test is the same client code and
//! the server's part, storing and serving records, is what those add),
//! `EVI_CONVERGENCE_SEED` the seed (default fixed, so CI is reproducible).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use base64::Engine as _;

use crate::common::{Device, Run, TestServer, derive_id, named};

const DEVICES: usize = 3;
const SESSIONS: usize = 2;
/// Each device's time zone and its offset from UTC in hours: at any hour of
/// the day at least two devices are on different local dates.
const ZONES: [(&str, i64); DEVICES] = [("UTC", 0), ("Etc/GMT+12", -12), ("Etc/GMT-14", 14)];
/// The test server's batch limit, small so that an oversized line is cheap.
const MAX_BATCH_BYTES: usize = 256 << 10;
/// How long an oversized line is: past the batch limit even compressed.
const BIG_LINE_BYTES: usize = MAX_BATCH_BYTES * 3 / 2;
/// Day folders: yesterday to the day after tomorrow (UTC) when the test
/// started, so every device's local date is among them. A device only ever
/// writes a session on its newest day there or later.
static DAY_NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

fn days() -> &'static [String] {
    DAY_NAMES.get_or_init(|| {
        let today = chrono::Utc::now().date_naive();
        (-1..3)
            .map(|k| {
                (today + chrono::Duration::days(k))
                    .format("%Y-%m-%d")
                    .to_string()
            })
            .collect()
    })
}

/// The index in [`days`] of device `d`'s local date now.
fn local_today(d: usize) -> usize {
    let local = (chrono::Utc::now() + chrono::Duration::hours(ZONES[d].1))
        .format("%Y-%m-%d")
        .to_string();
    days()
        .iter()
        .position(|day| *day == local)
        .unwrap_or(days().len() - 1)
}
const PASSWORD: &str = "convergence-password";
const PASSPHRASE: &str = "convergence-passphrase";
const DEFAULT_SEED: u64 = 0x00c0_ffee_5eed_2026;
const DEFAULT_CASES: u64 = 200;

/// splitmix64: tiny, seeded, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The real `evi-server` on a free loopback port (with the target's
/// backend), open registration and auth rate limits out of the way.
struct Server(TestServer);

impl Server {
    fn start() -> Self {
        Self(TestServer::start_with(&[
            "--auth-rate-per-user",
            "100000",
            "--auth-rate-per-ip",
            "100000",
            "--max-batch-bytes",
            &MAX_BATCH_BYTES.to_string(),
        ]))
    }
}

impl std::ops::Deref for Server {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

fn evi_ok(dev: &Device, args: &[&str], env: &[(&str, &str)]) -> Result<Run, String> {
    let mut cmd = dev.cmd();
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let run: Run = cmd.output().expect("run evi").into();
    if run.code != 0 {
        return Err(format!(
            "`evi {}` exited {}:\n{}{}",
            args.join(" "),
            run.code,
            run.stdout,
            run.stderr
        ));
    }
    Ok(run)
}

/// Three devices on one account: d0 creates it, d1 and d2 import its key.
fn devices(server: &Server) -> Vec<Device> {
    let devs: Vec<Device> = (0..DEVICES).map(|_| Device::new()).collect();
    let pw = [("EVI_SYNC_PASSWORD", PASSWORD)];
    let pp = [("EVI_KEY_PASSPHRASE", PASSPHRASE)];
    let url = server.url.as_str();
    let account = |i: usize| {
        let device = format!("d{i}");
        ["--server", url, "--user", "conv", "--device"]
            .into_iter()
            .map(str::to_owned)
            .chain([device])
            .collect::<Vec<_>>()
    };
    let with = |cmd: &[&str], rest: &[String]| {
        let mut v: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
        v.extend_from_slice(rest);
        v
    };
    let run = |dev: &Device, args: Vec<String>, env: &[(&str, &str)]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        evi_ok(dev, &args, env).unwrap_or_else(|e| panic!("{e}"));
    };
    run(&devs[0], with(&["sync", "init"], &account(0)), &pw);
    let key = devs[0].dir.path().join("key.age");
    let key = key.to_str().expect("utf-8 temp path").to_owned();
    run(
        &devs[0],
        with(&["sync", "key", "export", "-o"], std::slice::from_ref(&key)),
        &pp,
    );
    for (i, dev) in devs.iter().enumerate().skip(1) {
        run(
            dev,
            with(&["sync", "key", "import"], std::slice::from_ref(&key)),
            &pp,
        );
        run(dev, with(&["sync", "login"], &account(i)), &pw);
    }
    devs
}

/// What a line says about its own place in the tree.
#[derive(Default)]
struct Explicit {
    id: Option<String>,
    /// `Some(None)`: `"parentId": null`.
    parent: Option<Option<String>>,
    /// Pull's wrapper of a non-object line: the original bytes.
    wrapped: Option<Vec<u8>>,
}

fn explicit(raw: &[u8]) -> Explicit {
    let (id, parent, wrapped) = named(raw);
    Explicit {
        id,
        parent,
        wrapped,
    }
}

/// One entry of the model (and of a device, once read).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: String,
    parent: Option<String>,
    day: usize,
    line: Vec<u8>,
}

/// A session on one device, read the reference way.
#[derive(Default)]
struct Read {
    /// Every entry with its raw line as the file holds it.
    entries: Vec<Entry>,
    /// The parent the next line without `parentId` takes.
    tip: Option<String>,
    /// The newest day folder holding the session.
    last_day: Option<usize>,
    /// A file ending in a partial line: its day, and the parent that line
    /// takes once finished (the tip where it stands in reading order).
    partial: Option<(usize, Option<String>)>,
}

fn path(dev: &Device, day: usize, session: &str) -> PathBuf {
    dev.home()
        .join("transcripts")
        .join(&days()[day])
        .join(format!("{session}.jsonl"))
}

fn read_session(dev: &Device, session: &str) -> Result<Read, String> {
    let mut r = Read::default();
    for day in 0..days().len() {
        let p = path(dev, day, session);
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        r.last_day = Some(day);
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(end) => &bytes[..=end],
            None => &[][..],
        };
        let partial = complete.len() < bytes.len();
        if partial && r.partial.is_some() {
            return Err(format!(
                "{} is a second file ending in a partial line",
                p.display()
            ));
        }
        for raw in complete.split(|&b| b == b'\n') {
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let ex = explicit(raw);
            let parent = match &ex.parent {
                Some(p) => p.clone(),
                None => r.tip.clone(),
            };
            let id = ex.id.unwrap_or_else(|| derive_id(parent.as_deref(), raw));
            if ex.parent.is_none() {
                r.tip = Some(id.clone());
            }
            r.entries.push(Entry {
                id,
                parent,
                day,
                line: raw.to_vec(),
            });
        }
        if partial {
            r.partial = Some((day, r.tip.clone()));
        }
    }
    Ok(r)
}

/// The line less the `id`/`parentId` pull may have put at its front.
fn strip_added(raw: &[u8], e: &Entry) -> Option<Vec<u8>> {
    let brace = raw.iter().position(|&b| b == b'{')?;
    let mut rest = &raw[brace + 1..];
    let id = format!("\"id\":{},", serde_json::to_string(&e.id).unwrap());
    if let Some(r) = rest.strip_prefix(id.as_bytes()) {
        rest = r;
    }
    let parent = format!("\"parentId\":{}", serde_json::to_string(&e.parent).unwrap());
    rest = rest.strip_prefix(parent.as_bytes())?;
    if let Some(r) = rest.strip_prefix(b",") {
        rest = r;
    }
    Some([&raw[..=brace], rest].concat())
}

/// A random transcript line: duplicates are likely, some are not JSON, some
/// not UTF-8, some carry their own ids like a tree-aware writer's.
fn random_line(rng: &mut Rng, uniq: &mut u32, case: u64, tip: Option<&str>) -> Vec<u8> {
    let mut own = |kind: &str| {
        *uniq += 1;
        format!("cv{case}-{kind}{uniq}")
    };
    match rng.below(15) {
        0 | 1 => br#"{"role":"user","content":"hi"}"#.to_vec(),
        2 => br#"{"role":"assistant","content":"hello","ts":"2026-06-08T10:00:00Z"}"#.to_vec(),
        3 => br#"{"role":"tool","tool_name":"read","content":"ok"}"#.to_vec(),
        4 => b"{}".to_vec(),
        5 => br#"  { "role" : "user" , "content" : "spaced" }"#.to_vec(),
        6 => b"not json at all".to_vec(),
        7 => b"[1,2,3]".to_vec(),
        8 => br#"{"role":"user","content":"cut"#.to_vec(),
        9 => b"\xff\xfe not utf-8 \xc3".to_vec(),
        10 => "{\"role\":\"user\",\"content\":\"caf\u{e9} \u{2713}\"}".into(),
        11 => format!(
            r#"{{"id":"{}","role":"user","content":"own id"}}"#,
            own("own")
        )
        .into_bytes(),
        12 => format!(
            r#"{{"id":"{}","parentId":{},"role":"assistant","content":"tree-aware"}}"#,
            own("tree"),
            serde_json::to_string(&tip).unwrap()
        )
        .into_bytes(),
        13 => b"{\"role\":\"system\",\"content\":\"crlf\"}\r".to_vec(),
        // An `id` that is not a string does not name the entry.
        _ => br#"{"id":null,"role":"user","content":"null id"}"#.to_vec(),
    }
}

type Snapshot = BTreeMap<PathBuf, Vec<u8>>;

fn snapshot(devs: &[Device], sessions: &[String]) -> Snapshot {
    let mut snap = Snapshot::new();
    for dev in devs {
        for s in sessions {
            for day in 0..days().len() {
                let p = path(dev, day, s);
                if let Ok(b) = std::fs::read(&p) {
                    snap.insert(p, b);
                }
            }
        }
    }
    snap
}

fn only_appended(before: &Snapshot, after: &Snapshot) -> Result<(), String> {
    for (p, old) in before {
        match after.get(p) {
            Some(new) if new.starts_with(old) => {}
            Some(new) => {
                return Err(format!(
                    "{} was rewritten, not appended to:\nbefore: {}\nafter:  {}",
                    p.display(),
                    String::from_utf8_lossy(old),
                    String::from_utf8_lossy(new)
                ));
            }
            None => return Err(format!("{} disappeared", p.display())),
        }
    }
    Ok(())
}

/// `evi sync push|pull` on one device, checking that no file of the case
/// changed except by appending.
fn sync(devs: &[Device], sessions: &[String], d: usize, what: &str) -> Result<(), String> {
    let before = snapshot(devs, sessions);
    evi_ok(&devs[d], &["sync", what], &[("TZ", ZONES[d].0)])?;
    only_appended(&before, &snapshot(devs, sessions))
}

type Model = BTreeMap<String, BTreeMap<String, Entry>>;

/// Every device holds exactly the model's entries, each once, each line
/// either as written or with pull's `id`/`parentId` (or wrapper) added.
fn check_device(devs: &[Device], d: usize, model: &Model) -> Result<(), String> {
    for (session, want) in model {
        let read = read_session(&devs[d], session)?;
        if let Some((day, _)) = read.partial {
            return Err(format!(
                "d{d} {session}: the file of {} ends in a partial line",
                days()[day]
            ));
        }
        let mut seen = BTreeSet::new();
        for got in &read.entries {
            let Some(m) = want.get(&got.id) else {
                return Err(format!(
                    "d{d} {session}: entry {} (parent {:?}, {}) is not in the model: {}",
                    got.id,
                    got.parent,
                    days()[got.day],
                    shown(&got.line)
                ));
            };
            if !seen.insert(got.id.clone()) {
                return Err(format!("d{d} {session}: entry {} is there twice", got.id));
            }
            let content_ok = got.line == m.line
                || explicit(&got.line).wrapped.as_ref() == Some(&m.line)
                || strip_added(&got.line, m).as_ref() == Some(&m.line);
            if got.parent != m.parent || got.day != m.day || !content_ok {
                return Err(format!(
                    "d{d} {session}: entry {} differs from the model\n  device: parent {:?} day {} line {}\n  model:  parent {:?} day {} line {}",
                    got.id,
                    got.parent,
                    days()[got.day],
                    shown(&got.line),
                    m.parent,
                    days()[m.day],
                    shown(&m.line)
                ));
            }
        }
        let missing: Vec<_> = want.keys().filter(|id| !seen.contains(*id)).collect();
        if !missing.is_empty() {
            return Err(format!("d{d} {session}: entries missing: {missing:?}"));
        }
    }
    Ok(())
}

/// The readers agree: `evi sessions export -f json` lists the model's tree.
fn check_export(devs: &[Device], d: usize, model: &Model) -> Result<(), String> {
    for (session, want) in model.iter().filter(|(_, w)| !w.is_empty()) {
        let run = evi_ok(
            &devs[d],
            &["sessions", "export", session, "-f", "json"],
            &[("TZ", ZONES[d].0)],
        )?;
        let doc: serde_json::Value = serde_json::from_str(&run.stdout)
            .map_err(|e| format!("d{d} export {session}: not JSON ({e}): {}", run.stdout))?;
        let entries = doc["entries"].as_array().cloned().unwrap_or_default();
        let mut got = BTreeSet::new();
        for e in &entries {
            let id = e["id"].as_str().unwrap_or_default().to_owned();
            let parent = e["parentId"].as_str().map(str::to_owned);
            let day = e["day"].as_str().unwrap_or_default().to_owned();
            let Some(m) = want.get(&id) else {
                return Err(format!(
                    "d{d} export {session}: unknown entry {}",
                    shown(e.to_string().as_bytes())
                ));
            };
            let content_ok = match (e["line"].as_object(), e["raw_base64"].as_str()) {
                (Some(line), _) => {
                    let mut line = line.clone();
                    let orig: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_slice(&m.line).unwrap_or_default();
                    for k in ["id", "parentId"] {
                        if !orig.contains_key(k) {
                            line.remove(k);
                        }
                    }
                    line == orig
                }
                (None, Some(b64)) => {
                    base64::engine::general_purpose::STANDARD.decode(b64).ok()
                        == Some(m.line.clone())
                }
                (None, None) => {
                    serde_json::from_slice::<serde_json::Value>(&m.line).ok()
                        == Some(e["line"].clone())
                }
            };
            if !content_ok {
                return Err(format!(
                    "d{d} export {session}: entry {id} content {} is not the model's {}",
                    shown(e.to_string().as_bytes()),
                    shown(&m.line)
                ));
            }
            got.insert((id, parent, day));
        }
        let want: BTreeSet<_> = want
            .values()
            .map(|m| (m.id.clone(), m.parent.clone(), days()[m.day].clone()))
            .collect();
        if got != want || entries.len() != want.len() {
            return Err(format!(
                "d{d} export {session}: tree differs\n  export: {got:?}\n  model:  {want:?}"
            ));
        }
    }
    Ok(())
}

/// A line a device stopped writing in the middle of (eVi pausing mid-line).
struct Unfinished {
    day: usize,
    line: Vec<u8>,
    /// How much of it is in the file.
    written: usize,
}

/// Finishes the line device `d` paused in: it becomes an entry now, under
/// the parent it reads with now.
fn finish(
    dev: &Device,
    d: usize,
    session: &str,
    u: &Unfinished,
    model: &mut Model,
    log: &mut String,
) -> Result<(), String> {
    let read = read_session(dev, session)?;
    let Some((day, parent)) = read.partial.filter(|(day, _)| *day == u.day) else {
        return Err(format!(
            "d{d} {session}: the line left unfinished in {} is no longer at the end of its file",
            days()[u.day]
        ));
    };
    let id = derive_id(parent.as_deref(), &u.line);
    let _ = writeln!(
        log,
        "d{d} finishes {session} {} {id} (parent {parent:?}): {}",
        days()[day],
        shown(&u.line)
    );
    let mut rest = u.line[u.written..].to_vec();
    rest.push(b'\n');
    append(&path(dev, day, session), &rest);
    let e = Entry {
        id,
        parent,
        day,
        line: u.line.clone(),
    };
    model
        .get_mut(session)
        .expect("case session")
        .insert(e.id.clone(), e);
    Ok(())
}

fn append(p: &std::path::Path, bytes: &[u8]) {
    std::fs::create_dir_all(p.parent().expect("day folder")).expect("day folder");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .expect("open transcript");
    f.write_all(bytes).expect("append transcript");
}

/// A line for the log: long ones cut short.
fn shown(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    if text.len() <= 200 {
        return text.into_owned();
    }
    let head: String = text.chars().take(160).collect();
    format!("{head}… ({} bytes)", line.len())
}

/// A line larger than the server's batch limit: a pasted image, as base64
/// that does not compress below the limit.
fn big_line(rng: &mut Rng, uniq: &mut u32, case: u64) -> Vec<u8> {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    *uniq += 1;
    let mut line =
        format!(r#"{{"role":"user","content":"cv{case}-image{uniq} data:image/png;base64,"#)
            .into_bytes();
    while line.len() < BIG_LINE_BYTES {
        let mut r = rng.next();
        for _ in 0..10 {
            line.push(B64[(r & 63) as usize]);
            r >>= 6;
        }
    }
    line.extend_from_slice(b"\"}");
    line
}

/// One case: random operations, the final round, the checks. `log` collects
/// what happened for the failure message.
fn run_case(devs: &[Device], seed: u64, case: u64, log: &mut String) -> Result<(), String> {
    let mut rng = Rng(seed ^ case.wrapping_mul(0xd1b5_4a32_d192_ed03));
    let sessions: Vec<String> = (0..SESSIONS).map(|k| format!("cv{case}-{k}")).collect();
    let mut model: Model = sessions
        .iter()
        .map(|s| (s.clone(), BTreeMap::new()))
        .collect();
    // Each device's clock (an index into `days()`) starts at its local date
    // and only moves forward (sometimes ahead of it).
    let mut clock: [usize; DEVICES] = std::array::from_fn(local_today);
    // (device, session) → the line that device is in the middle of.
    let mut unfinished: BTreeMap<(usize, usize), Unfinished> = BTreeMap::new();
    let mut uniq = 0;
    let ops = 5 + rng.below(8);
    for _ in 0..ops {
        let d = rng.below(DEVICES);
        // eVi finishes a line it paused in, sometimes before anything else.
        let paused: Vec<(usize, usize)> = unfinished.keys().filter(|k| k.0 == d).copied().collect();
        if !paused.is_empty() && rng.chance(30) {
            let key = paused[rng.below(paused.len())];
            let u = unfinished.remove(&key).expect("listed above");
            finish(&devs[d], d, &sessions[key.1], &u, &mut model, log)?;
        }
        match rng.below(100) {
            0..50 => {
                let k = rng.below(SESSIONS);
                let s = &sessions[k];
                // eVi finishes its line before it writes the next one.
                if let Some(u) = unfinished.remove(&(d, k)) {
                    finish(&devs[d], d, s, &u, &mut model, log)?;
                }
                clock[d] = clock[d].max(local_today(d));
                if rng.chance(20) {
                    clock[d] = (clock[d] + 1).min(days().len() - 1);
                }
                let read = read_session(&devs[d], s)?;
                if let Some((day, _)) = read.partial {
                    return Err(format!(
                        "d{d} {s}: the file of {} ends in a partial line nobody is writing",
                        days()[day]
                    ));
                }
                // eVi writes today's file, and today is never before a day
                // the session already has here.
                let day = read.last_day.map_or(clock[d], |l| l.max(clock[d]));
                let mut tip = read.tip;
                let mut bytes = Vec::new();
                for _ in 0..1 + rng.below(2) {
                    let entry = loop {
                        let line = if rng.chance(2) {
                            big_line(&mut rng, &mut uniq, case)
                        } else {
                            random_line(&mut rng, &mut uniq, case, tip.as_deref())
                        };
                        let ex = explicit(&line);
                        let parent = match ex.parent {
                            Some(p) => p,
                            None => tip.clone(),
                        };
                        let id = ex.id.unwrap_or_else(|| derive_id(parent.as_deref(), &line));
                        let e = Entry {
                            id,
                            parent,
                            day,
                            line,
                        };
                        // The same line on the same parent written on two
                        // devices on different days would be one id with two
                        // days: ids do not cover the day, and real lines
                        // carry timestamps. Pick another line.
                        match model[s].get(&e.id) {
                            Some(m) if *m != e => continue,
                            _ => break e,
                        }
                    };
                    // Only lines without `parentId` move the tip.
                    if explicit(&entry.line).parent.is_none() {
                        tip = Some(entry.id.clone());
                    }
                    let _ = writeln!(
                        log,
                        "d{d} append {s} {} {} (parent {:?}): {}",
                        days()[day],
                        entry.id,
                        entry.parent,
                        shown(&entry.line)
                    );
                    bytes.extend_from_slice(&entry.line);
                    bytes.push(b'\n');
                    model
                        .get_mut(s)
                        .expect("case session")
                        .insert(entry.id.clone(), entry);
                }
                // Now and then eVi pauses in the middle of its next line
                // (unique: it cannot be picked again once half written).
                if rng.chance(25) {
                    uniq += 1;
                    let line =
                        format!(r#"{{"role":"assistant","content":"cv{case}-typing{uniq}"}}"#)
                            .into_bytes();
                    let written = 1 + rng.below(line.len() - 1);
                    let _ = writeln!(
                        log,
                        "d{d} pauses in {s} {}: {} | {}",
                        days()[day],
                        String::from_utf8_lossy(&line[..written]),
                        String::from_utf8_lossy(&line[written..])
                    );
                    bytes.extend_from_slice(&line[..written]);
                    unfinished.insert((d, k), Unfinished { day, line, written });
                }
                append(&path(&devs[d], day, s), &bytes);
            }
            50..75 => {
                let _ = writeln!(log, "d{d} push");
                sync(devs, &sessions, d, "push")?;
            }
            _ => {
                let _ = writeln!(log, "d{d} pull");
                sync(devs, &sessions, d, "pull")?;
            }
        }
    }
    let _ = writeln!(log, "final round");
    for ((d, k), u) in std::mem::take(&mut unfinished) {
        finish(&devs[d], d, &sessions[k], &u, &mut model, log)?;
    }
    for _ in 0..2 {
        for d in 0..DEVICES {
            sync(devs, &sessions, d, "push")?;
        }
        for d in 0..DEVICES {
            sync(devs, &sessions, d, "pull")?;
        }
    }
    for d in 0..DEVICES {
        check_device(devs, d, &model)?;
    }
    check_export(devs, rng.below(DEVICES), &model)
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

#[test]
fn random_appends_pushes_and_pulls_converge_to_the_model() {
    let seed = env_u64("EVI_CONVERGENCE_SEED").unwrap_or(DEFAULT_SEED);
    let cases: Vec<u64> = match env_u64("EVI_CONVERGENCE_CASE") {
        Some(one) => vec![one],
        None => {
            let default = match crate::backend() {
                crate::pg_db::Backend::Sqlite => DEFAULT_CASES,
                crate::pg_db::Backend::Postgres => DEFAULT_CASES / 4,
            };
            (0..env_u64("EVI_CONVERGENCE_CASES").unwrap_or(default)).collect()
        }
    };
    let server = Server::start();
    let devs = devices(&server);
    let started = Instant::now();
    for &case in &cases {
        let mut log = String::new();
        if let Err(e) = run_case(&devs, seed, case, &mut log) {
            panic!(
                "convergence failed: seed {seed:#x} case {case} \
                 (rerun: EVI_CONVERGENCE_SEED={seed:#x} EVI_CONVERGENCE_CASE={case})\n\
                 {e}\noperations:\n{log}"
            );
        }
    }
    eprintln!(
        "convergence: {} cases, seed {seed:#x}, {:.1?}",
        cases.len(),
        started.elapsed()
    );
}
