//! `evi-gen-home DIR [--sessions 2000] [--total-mb 300] [--big-mb 200]
//! [--seed 42] [--big-days-ago 2] [--lognormal-lines] [--tool-pct P]
//! [--huge-lines N] [--claude-code | --codex | --gemini | --opencode]
//! [--empty]`: writes a synthetic eVi home for the benchmarks in
//! `bench/sessions.sh`, `bench/sync.sh` and `bench/agents.sh`.
//!
//! The home looks like a heavy user's week: `transcripts/<day>/<ulid>.jsonl`
//! over the last 7 days (UTC, relative to today), one big session spanning
//! two days (it ends `--big-days-ago` days before today), and the rest of the
//! budget spread over the other sessions with log-normal sizes (about 50 KB on
//! average). Lines are what eVi writes: user, assistant (some with OpenAI-style
//! `tool_calls`) and tool turns (outputs of a few KB), with an RFC 3339 `ts`
//! that increases through each session; about one session in twenty (and the
//! big one) also holds branch lines with explicit `id`/`parentId`, as `evi
//! sync pull` appends them. Each file's mtime is the time of its last line.
//!
//! Line shape options (all off by default, so a home from the defaults stays
//! the same byte for byte): `--lognormal-lines` draws the size of every
//! prose and tool-output line from a log-normal distribution (a long tail up
//! to 200 KB) instead of a uniform range; `--tool-pct P` keeps tool turns at
//! about P% of the home's bytes (a turn gets tool rounds only while the
//! share is below P); `--huge-lines N` puts N tool outputs of 2-6 MB (a
//! `cat` of a log) into N sessions, taken from the budget of the others
//! (at most half of it: in a small home they are smaller).
//!
//! `--claude-code`, `--codex`, `--gemini` and `--opencode` write the same
//! plan of sessions (sizes, times, tool outputs, branches where the agent
//! has them) as that agent writes them instead, into `DIR/claude`,
//! `DIR/codex`, `DIR/gemini` or `DIR/opencode` (see [`claude`], [`codex`],
//! [`gemini`], [`opencode`]), with a config that turns that folder on and
//! no eVi transcripts. The three later ones share the turn plan ([`drive`]);
//! each writes a turn in its own shape ([`Turns`]). `--empty` writes only
//! the config and the agent's empty folder (OpenCode's: its database with
//! no rows), for a device to pull into.
//!
//! Sizes, contents and ids depend only on the seed; times are placed relative
//! to the moment it runs (no line is in the future). It ends with
//! `big_session=<id>` on stdout, and the same in `DIR/gen-home.txt`.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use chrono::{DateTime, Days, NaiveTime, SecondsFormat, TimeDelta, Utc};
use evi::transcript::entry_id::derive_id;

#[path = "gen_home/claude.rs"]
mod claude;
#[path = "gen_home/codex.rs"]
mod codex;
#[path = "gen_home/gemini.rs"]
mod gemini;
#[path = "gen_home/opencode.rs"]
mod opencode;

/// xorshift64*: small, fast, and fixed forever (unlike a crate's default RNG).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..hi` (`hi > lo`).
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo) as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.range(0, items.len())]
    }
}

const WORDS: &[&str] = &[
    "the",
    "test",
    "fails",
    "because",
    "the",
    "reader",
    "returns",
    "an",
    "empty",
    "list",
    "when",
    "session",
    "file",
    "is",
    "missing",
    "we",
    "should",
    "check",
    "config",
    "before",
    "parsing",
    "let",
    "me",
    "look",
    "at",
    "function",
    "that",
    "builds",
    "tree",
    "and",
    "fix",
    "error",
    "handling",
    "in",
    "loop",
    "over",
    "lines",
    "this",
    "change",
    "keeps",
    "output",
    "same",
    "but",
    "avoids",
    "extra",
    "allocation",
    "per",
    "entry",
    "now",
    "run",
    "cargo",
    "again",
    "to",
    "see",
    "whether",
    "it",
    "passes",
    "on",
    "both",
    "platforms",
    "I",
    "think",
    "cause",
    "is",
    "a",
    "race",
    "between",
    "writer",
    "flush",
    "timestamp",
    "parent",
    "id",
    "branch",
    "merge",
    "push",
    "pull",
    "server",
    "client",
    "encrypted",
    "segment",
    "blob",
    "checkpoint",
    "journal",
    "migration",
    "index",
    "query",
    "latency",
    "memory",
    "buffer",
    "stream",
    "offset",
    "bytes",
];

const TOOLS: &[&str] = &[
    "bash",
    "read_file",
    "write_file",
    "grep",
    "edit",
    "list_dir",
];

const PATHS: &[&str] = &[
    "src/main.rs",
    "src/lib.rs",
    "cli/src/transcript/tree.rs",
    "server/src/routes/push.rs",
    "tests/e2e/sync.rs",
    "README.md",
    "Cargo.toml",
    "web/app.ts",
];

/// Prose of about `n` bytes, in sentences.
fn prose(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n + 16);
    let mut start = true;
    while s.len() < n {
        let w = rng.pick(WORDS);
        if start {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
            start = false;
        } else {
            s.push_str(w);
        }
        match rng.range(0, 14) {
            0 => {
                s.push_str(". ");
                start = true;
            }
            1 => s.push_str(", "),
            2 if s.len() > 200 => {
                s.push_str(".\n\n");
                start = true;
            }
            3 => {
                s.push_str(" `");
                s.push_str(rng.pick(PATHS));
                s.push_str("` ");
            }
            _ => s.push(' '),
        }
    }
    s.push('.');
    s
}

fn prose_between(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let n = rng.range(lo, hi);
    prose(rng, n)
}

/// The line-shape options, and what has been written so far (for
/// `--tool-pct`).
#[derive(Default)]
struct Shape {
    lognormal: bool,
    tool_pct: Option<u64>,
    tool_bytes: u64,
    all_bytes: u64,
}

impl Shape {
    /// A prose length: uniform in `lo..hi`, or with `--lognormal-lines`
    /// log-normal around the same middle, clamped to `lo / 4..hi * 20`.
    fn prose_len(&self, rng: &mut Rng, lo: usize, hi: usize) -> usize {
        if self.lognormal {
            lognormal(rng, (lo + hi) as f64 / 3.0, 1.0, lo / 4, hi * 20)
        } else {
            rng.range(lo, hi)
        }
    }

    fn tool_len(&self, rng: &mut Rng) -> usize {
        if self.lognormal {
            lognormal(rng, 1_500.0, 1.3, 60, 200_000)
        } else if rng.chance(0.05) {
            rng.range(10_000, 30_000)
        } else {
            rng.range(300, 6_000)
        }
    }

    /// How many tool rounds the next user turn gets.
    fn tool_rounds(&self, rng: &mut Rng) -> usize {
        match self.tool_pct {
            Some(pct) if self.tool_bytes * 100 >= pct * self.all_bytes => 0,
            Some(_) => rng.range(1, 5),
            None => rng.range(0, 5),
        }
    }
}

/// `median * e^(sigma * N(0,1))`, clamped to `lo..=hi`.
fn lognormal(rng: &mut Rng, median: f64, sigma: f64, lo: usize, hi: usize) -> usize {
    ((median * (sigma * rng.normal()).exp()) as usize).clamp(lo, hi)
}

/// Tool output of about `n` bytes: compiler, grep or file lines.
fn tool_output(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n + 128);
    let mut line = 1;
    while s.len() < n {
        let path = rng.pick(PATHS);
        match rng.range(0, 4) {
            0 => s.push_str(&format!(
                "warning: unused variable `{}`\n  --> {path}:{}:{}\n",
                rng.pick(WORDS),
                rng.range(1, 900),
                rng.range(1, 80)
            )),
            1 => s.push_str(&format!(
                "{path}:{}:    let {} = {}(&{});\n",
                rng.range(1, 900),
                rng.pick(WORDS),
                rng.pick(WORDS),
                rng.pick(WORDS)
            )),
            2 => s.push_str(&format!(
                "{line:>4}\t    // {}\n",
                prose_between(rng, 20, 90)
            )),
            _ => s.push_str(&format!(
                "test {}::{}_{} ... ok\n",
                rng.pick(WORDS),
                rng.pick(WORDS),
                rng.pick(WORDS)
            )),
        }
        line += 1;
    }
    s
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn hex_id(rng: &mut Rng) -> String {
    format!("{:016x}{:016x}", rng.next(), rng.next())
}

/// A time as the agents write it: RFC 3339, UTC, to the millisecond.
fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// 32 hex digits in UUID form, `8-4-4-4-12`.
fn dashed(h: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// 32 random hex digits as a version 4 UUID.
fn v4(mut h: String) -> String {
    h.replace_range(12..13, "4");
    h.replace_range(16..17, "8");
    dashed(&h)
}

/// A random UUID (version 4 form).
fn uuid(rng: &mut Rng) -> String {
    v4(format!("{:016x}{:016x}", rng.next(), rng.next()))
}

/// A session id in UUID form, from the 128 bits of a ULID (its time first,
/// as in Codex's UUID v7 ids).
fn uuid_of(ulid: &str) -> String {
    let v = ulid::Ulid::from_string(ulid).expect("a ULID").0;
    dashed(&format!("{v:032x}"))
}

/// SHA-256 of `s`, in hex.
fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The projects the agents' sessions belong to.
const PROJECTS: usize = 24;

/// The project folder of a new session, one of [`PROJECTS`].
fn project(rng: &mut Rng) -> String {
    format!("/home/pat/code/project-{:02}", rng.range(0, PROJECTS))
}

/// One JSONL file of an agent's session; closing it sets its mtime to the
/// time of its last line, as the agent's last write would have.
struct JsonlFile {
    file: BufWriter<File>,
    path: PathBuf,
    bytes: u64,
    lines: u64,
    last_ts: DateTime<Utc>,
}

impl JsonlFile {
    /// Creates `path` (and its folder); fails if it is there, so that two
    /// sessions named alike cannot silently make one.
    fn create(path: PathBuf) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let f = File::options().write(true).create_new(true).open(&path)?;
        Ok(Self {
            file: BufWriter::with_capacity(256 * 1024, f),
            path,
            bytes: 0,
            lines: 0,
            last_ts: DateTime::UNIX_EPOCH,
        })
    }

    fn line(&mut self, ts: DateTime<Utc>, line: &str) -> std::io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.bytes += line.len() as u64 + 1;
        self.lines += 1;
        self.last_ts = self.last_ts.max(ts);
        Ok(())
    }

    /// Flushes and closes; what was written (one file).
    fn close(mut self) -> std::io::Result<Written> {
        self.file.flush()?;
        drop(self.file);
        let f = File::options().write(true).open(&self.path)?;
        f.set_modified(SystemTime::from(self.last_ts))?;
        Ok((self.bytes, self.lines, 1))
    }
}

/// A tool call of a [`Round`]: eVi's name of the tool ([`TOOLS`]), its
/// argument (a shell command for `bash`, a word for `grep`, else a path),
/// its output, and when the output came.
struct Call {
    id: String,
    tool: &'static str,
    arg: String,
    output: String,
    ts: DateTime<Utc>,
}

/// One round of tool use: the model's reasoning (sometimes), what it says
/// (maybe nothing), its calls, and their outputs.
struct Round {
    ts: DateTime<Utc>,
    think: Option<String>,
    say: String,
    calls: Vec<Call>,
}

/// One session to write: its id and plan, with the home's RNG and line
/// shape.
struct Job<'a> {
    rng: &'a mut Rng,
    id: String,
    plan: &'a Plan,
    shape: &'a mut Shape,
}

/// What writing a session made: (bytes, lines, files).
type Written = (u64, u64, u32);

/// An agent's way of writing the turns [`drive`] plans: each writes them
/// in its own shape.
trait Turns {
    /// The bytes written so far (the plan's measure).
    fn bytes(&self) -> u64;
    fn prompt(&mut self, rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()>;
    fn round(&mut self, rng: &mut Rng, round: &Round) -> std::io::Result<()>;
    fn answer(&mut self, rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()>;
    /// A branch before the next prompt, for an agent whose sessions have
    /// them; false when it made none (yet).
    fn branch(&mut self, _rng: &mut Rng) -> std::io::Result<bool> {
        Ok(false)
    }
}

/// Writes a session of about `plan.target` bytes through `w`, turn by turn
/// as [`write_session`] does for eVi: a prompt, tool rounds (the sizes of
/// outputs from `shape`, `plan.huge` in the first), an answer; at the
/// plan's branch points, a branch where the agent has them.
fn drive(rng: &mut Rng, w: &mut impl Turns, plan: &Plan, shape: &mut Shape) -> std::io::Result<()> {
    let mut ts_next = plan.clock();
    let branch_at = plan.branch_points(rng);
    let mut branch_done = vec![false; branch_at.len()];
    let mut huge = plan.huge;
    while w.bytes() < plan.target {
        let turn_start = w.bytes();
        let mut turn_tool = 0;
        for (k, &at) in branch_at.iter().enumerate() {
            if !branch_done[k] && w.bytes() >= at {
                branch_done[k] = w.branch(rng)?;
            }
        }
        let t = ts_next(rng, w.bytes());
        let n = shape.prose_len(rng, 40, 700);
        let text = prose(rng, n);
        w.prompt(rng, t, &text)?;
        let rounds = shape.tool_rounds(rng).max(usize::from(huge.is_some()));
        for _ in 0..rounds {
            if w.bytes() >= plan.target {
                break;
            }
            let ts = ts_next(rng, w.bytes());
            let think = if rng.chance(0.4) {
                let n = shape.prose_len(rng, 20, 300);
                Some(prose(rng, n))
            } else {
                None
            };
            let n = shape.prose_len(rng, 0, 300);
            let say = if n > 40 { prose(rng, n) } else { String::new() };
            let mut at = w.bytes();
            let mut calls = Vec::new();
            let n_calls = if rng.chance(0.15) { 2 } else { 1 };
            for _ in 0..n_calls {
                let tool = rng.pick(TOOLS);
                let arg = match tool {
                    "bash" => format!("cargo test -p {} 2>&1 | tail -50", rng.pick(WORDS)),
                    "grep" => rng.pick(WORDS).to_owned(),
                    _ => rng.pick(PATHS).to_owned(),
                };
                let size = match huge.take() {
                    Some(size) => size,
                    None => shape.tool_len(rng),
                };
                let output = tool_output(rng, size);
                at += output.len() as u64;
                let id = format!("call_{:016x}{:08x}", rng.next(), rng.next() as u32);
                calls.push(Call {
                    id,
                    tool,
                    arg,
                    output,
                    ts: ts_next(rng, at),
                });
            }
            let before = w.bytes();
            w.round(
                rng,
                &Round {
                    ts,
                    think,
                    say,
                    calls,
                },
            )?;
            turn_tool += w.bytes() - before;
        }
        let n = shape.prose_len(rng, 80, 1800);
        let answer = prose(rng, n);
        let t = ts_next(rng, w.bytes());
        w.answer(rng, t, &answer)?;
        shape.tool_bytes += turn_tool;
        shape.all_bytes += w.bytes() - turn_start;
    }
    Ok(())
}

/// Writes one session: lines go to the file of their own day (UTC).
struct SessionWriter<'a> {
    transcripts: &'a Path,
    id: String,
    day: String,
    file: Option<(BufWriter<File>, PathBuf)>,
    last_ts: DateTime<Utc>,
    bytes: u64,
    lines: u64,
    /// Implicit chain tip, kept only when the session gets branch lines.
    chain: Option<Option<String>>,
    /// Recent (id, ts) of the chain, for branch lines to fork from.
    recent: Vec<(String, DateTime<Utc>)>,
    files: u32,
}

impl<'a> SessionWriter<'a> {
    fn new(transcripts: &'a Path, id: String, track_ids: bool) -> Self {
        Self {
            transcripts,
            id,
            day: String::new(),
            file: None,
            last_ts: DateTime::UNIX_EPOCH,
            bytes: 0,
            lines: 0,
            chain: track_ids.then_some(None),
            recent: Vec::new(),
            files: 0,
        }
    }

    fn write(&mut self, ts: DateTime<Utc>, line: &str, explicit: bool) -> std::io::Result<()> {
        let day = ts.format("%Y-%m-%d").to_string();
        if day != self.day {
            self.close()?;
            let dir = self.transcripts.join(&day);
            fs::create_dir_all(&dir)?;
            let path = dir.join(format!("{}.jsonl", self.id));
            let f = File::options().create(true).append(true).open(&path)?;
            self.file = Some((BufWriter::with_capacity(256 * 1024, f), path));
            self.day = day;
            self.files += 1;
        }
        let (w, _) = self.file.as_mut().expect("opened above");
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        self.bytes += line.len() as u64 + 1;
        self.lines += 1;
        self.last_ts = self.last_ts.max(ts);
        if !explicit && let Some(tip) = &mut self.chain {
            let id = derive_id(tip.as_deref(), line.as_bytes());
            self.recent.push((id.clone(), ts));
            if self.recent.len() > 16 {
                self.recent.remove(0);
            }
            *tip = Some(id);
        }
        Ok(())
    }

    fn close(&mut self) -> std::io::Result<()> {
        if let Some((mut w, path)) = self.file.take() {
            w.flush()?;
            let f = w.into_inner().map_err(|e| e.into_error())?;
            drop(f);
            let f = File::options().write(true).open(&path)?;
            f.set_modified(SystemTime::from(self.last_ts))?;
        }
        Ok(())
    }
}

struct Plan {
    target: u64,
    start: DateTime<Utc>,
    duration: TimeDelta,
    branches: bool,
    /// The size of one huge tool output in this session (`--huge-lines`).
    huge: Option<usize>,
}

impl Plan {
    /// The time of the line written at byte `bytes`: its position mapped
    /// onto `start..start + duration`, jittered, strictly increasing to the
    /// millisecond.
    fn clock(&self) -> impl FnMut(&mut Rng, u64) -> DateTime<Utc> + '_ {
        let span_ms = self.duration.num_milliseconds().max(1) as f64;
        let mut prev = self.start;
        move |rng: &mut Rng, bytes: u64| {
            let frac = (bytes as f64 / self.target as f64).min(1.0);
            let jitter = rng.range(0, 400) as i64;
            let t = self.start + TimeDelta::milliseconds((span_ms * frac) as i64 + jitter);
            prev = t.max(prev + TimeDelta::milliseconds(1));
            prev
        }
    }

    /// The byte positions where a session with branches gets one.
    fn branch_points(&self, rng: &mut Rng) -> Vec<u64> {
        if self.branches {
            (0..rng.range(1, 4))
                .map(|_| self.target / 10 + rng.next() % (self.target * 8 / 10).max(1))
                .collect()
        } else {
            Vec::new()
        }
    }
}

/// Writes a session of about `plan.target` bytes. The time of a line is its
/// byte position mapped onto `start..start + duration`, so the lines of a
/// session of any size spread evenly over its span.
fn write_session(
    rng: &mut Rng,
    w: &mut SessionWriter<'_>,
    plan: &Plan,
    shape: &mut Shape,
) -> std::io::Result<()> {
    let mut ts_next = plan.clock();
    let fmt = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
    // Where branch lines go (as if pulled from another device): a few points.
    let branch_at = plan.branch_points(rng);
    let mut branch_done = vec![false; branch_at.len()];
    let mut call_n = 0u64;
    let mut first = true;
    let mut huge = plan.huge;
    while w.bytes < plan.target {
        let turn_start = w.bytes;
        let mut turn_tool = 0;
        // A user turn.
        let n = shape.prose_len(rng, 40, 700);
        let mut text = prose(rng, n);
        if first && rng.chance(0.3) {
            text = format!("[ongoing goal: {}] {text}", prose_between(rng, 20, 80));
        }
        first = false;
        let t = ts_next(rng, w.bytes);
        w.write(
            t,
            &format!(
                r#"{{"role":"user","content":{},"ts":"{}"}}"#,
                json_str(&text),
                fmt(t)
            ),
            false,
        )?;
        // Tool rounds: an assistant turn with calls, then one tool turn each.
        let rounds = shape.tool_rounds(rng).max(usize::from(huge.is_some()));
        for _ in 0..rounds {
            if w.bytes >= plan.target {
                break;
            }
            let calls: Vec<(String, &str)> = (0..if rng.chance(0.15) { 2 } else { 1 })
                .map(|_| {
                    call_n += 1;
                    (format!("call_{call_n:06}"), rng.pick(TOOLS))
                })
                .collect();
            let tc: Vec<String> = calls
                .iter()
                .map(|(id, name)| {
                    let args = match *name {
                        "bash" => format!(
                            r#"{{"cmd":{}}}"#,
                            json_str(&format!("cargo test -p {} 2>&1 | tail -50", rng.pick(WORDS)))
                        ),
                        _ => format!(r#"{{"path":{}}}"#, json_str(rng.pick(PATHS))),
                    };
                    format!(
                        r#"{{"id":"{id}","type":"function","function":{{"name":"{name}","arguments":{}}}}}"#,
                        json_str(&args)
                    )
                })
                .collect();
            let t = ts_next(rng, w.bytes);
            let n = shape.prose_len(rng, 0, 300);
            let say = prose(rng, n);
            w.write(
                t,
                &format!(
                    r#"{{"role":"assistant","content":{},"tool_calls":[{}],"ts":"{}"}}"#,
                    json_str(&say),
                    tc.join(","),
                    fmt(t)
                ),
                false,
            )?;
            for (id, name) in &calls {
                let size = match huge.take() {
                    Some(size) => size,
                    None => shape.tool_len(rng),
                };
                let out = tool_output(rng, size);
                let before = w.bytes;
                let t = ts_next(rng, w.bytes);
                w.write(
                    t,
                    &format!(
                        r#"{{"role":"tool","tool_name":"{name}","tool_call_id":"{id}","content":{},"ts":"{}"}}"#,
                        json_str(&out),
                        fmt(t)
                    ),
                    false,
                )?;
                turn_tool += w.bytes - before;
            }
        }
        // The answer.
        let t = ts_next(rng, w.bytes);
        let n = shape.prose_len(rng, 80, 1800);
        let answer = prose(rng, n);
        w.write(
            t,
            &format!(
                r#"{{"role":"assistant","content":{},"ts":"{}"}}"#,
                json_str(&answer),
                fmt(t)
            ),
            false,
        )?;
        // Branch lines from another device, forking a few entries back.
        for (k, &at) in branch_at.iter().enumerate() {
            if branch_done[k] || w.bytes < at || w.recent.len() < 4 {
                continue;
            }
            branch_done[k] = true;
            let (mut parent, mut pts) = w.recent[w.recent.len() - rng.range(2, 5)].clone();
            for _ in 0..rng.range(1, 4) {
                let id = hex_id(rng);
                let role = if rng.chance(0.5) { "user" } else { "assistant" };
                pts += TimeDelta::milliseconds(rng.range(500, 5_000) as i64);
                let text = prose_between(rng, 40, 600);
                w.write(
                    pts,
                    &format!(
                        r#"{{"id":"{id}","parentId":"{parent}","role":"{role}","content":{},"ts":"{}"}}"#,
                        json_str(&text),
                        fmt(pts)
                    ),
                    true,
                )?;
                parent = id;
            }
        }
        shape.tool_bytes += turn_tool;
        shape.all_bytes += w.bytes - turn_start;
    }
    w.close()
}

struct Args {
    dir: PathBuf,
    sessions: usize,
    total_mb: u64,
    big_mb: u64,
    seed: u64,
    big_days_ago: u64,
    lognormal_lines: bool,
    tool_pct: Option<u64>,
    huge_lines: u64,
    agent: Agent,
}

/// Whose sessions the home holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Agent {
    Evi,
    ClaudeCode,
    Codex,
    Gemini,
    OpenCode,
}

impl Agent {
    /// Its name in `[agents]`, and its folder in the home.
    fn names(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Evi => None,
            Self::ClaudeCode => Some(("claude-code", "claude")),
            Self::Codex => Some(("codex", "codex")),
            Self::Gemini => Some(("gemini", "gemini")),
            Self::OpenCode => Some(("opencode", "opencode")),
        }
    }

    /// A session's id as the agent makes it, from a ULID of its start.
    fn session_id(self, ulid: String) -> String {
        match self {
            Self::Evi => ulid,
            Self::ClaudeCode | Self::Codex => uuid_of(&ulid),
            // Random (version 4), as Gemini's are: its file names hold the
            // id's first 8 digits, which in a ULID's order are its time.
            Self::Gemini => {
                let u = ulid::Ulid::from_string(&ulid).expect("a ULID");
                v4(format!("{:020x}{:012x}", u.random(), u.timestamp_ms()))
            }
            Self::OpenCode => opencode::session_id(&ulid),
        }
    }
}

const USAGE: &str = "usage: evi-gen-home DIR [--sessions 2000] [--total-mb 300] [--big-mb 200] [--seed 42] [--big-days-ago 2] [--lognormal-lines] [--tool-pct P] [--huge-lines N] [--claude-code | --codex | --gemini | --opencode] [--empty]";

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        dir: PathBuf::new(),
        sessions: 2000,
        total_mb: 300,
        big_mb: 200,
        seed: 42,
        big_days_ago: 2,
        lognormal_lines: false,
        tool_pct: None,
        huge_lines: 0,
        agent: Agent::Evi,
    };
    let mut empty = false;
    let mut dir = None;
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--sessions" => args.sessions = num("--sessions")? as usize,
            "--total-mb" => args.total_mb = num("--total-mb")?,
            "--big-mb" => args.big_mb = num("--big-mb")?,
            "--seed" => args.seed = num("--seed")?,
            "--big-days-ago" => args.big_days_ago = num("--big-days-ago")?.min(5),
            "--lognormal-lines" => args.lognormal_lines = true,
            "--tool-pct" => args.tool_pct = Some(num("--tool-pct")?.min(95)),
            "--huge-lines" => args.huge_lines = num("--huge-lines")?,
            "--claude-code" => args.agent = Agent::ClaudeCode,
            "--codex" => args.agent = Agent::Codex,
            "--gemini" => args.agent = Agent::Gemini,
            "--opencode" => args.agent = Agent::OpenCode,
            "--empty" => empty = true,
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if dir.is_none() => dir = Some(PathBuf::from(s)),
            s => return Err(format!("unexpected argument {s}")),
        }
    }
    args.dir = dir.ok_or("DIR is required")?;
    if empty {
        args.sessions = 0;
        return Ok(args);
    }
    if args.sessions < 2 || args.big_mb >= args.total_mb {
        return Err("need --sessions >= 2 and --big-mb < --total-mb".into());
    }
    if args.huge_lines >= args.sessions as u64 {
        return Err("need --huge-lines < --sessions".into());
    }
    Ok(args)
}

fn ulid(rng: &mut Rng, t: DateTime<Utc>) -> String {
    let random = (u128::from(rng.next()) << 64 | u128::from(rng.next())) & ((1u128 << 80) - 1);
    ulid::Ulid::from_parts(t.timestamp_millis() as u64, random).to_string()
}

/// Where sessions go: eVi's transcripts, or an agent's folder.
enum Out {
    Evi(PathBuf),
    ClaudeCode(PathBuf),
    Codex(PathBuf),
    Gemini(gemini::Home),
    OpenCode(opencode::Db),
}

impl Out {
    fn new(agent: Agent, dir: &Path) -> std::io::Result<Self> {
        let folder = agent.names().map(|(_, f)| dir.join(f));
        if let Some(f) = &folder {
            fs::create_dir_all(f)?;
        }
        let folder = folder.unwrap_or_default();
        Ok(match agent {
            Agent::Evi => Self::Evi(dir.join("transcripts")),
            Agent::ClaudeCode => Self::ClaudeCode(folder),
            Agent::Codex => Self::Codex(folder),
            Agent::Gemini => Self::Gemini(gemini::Home::new(folder)),
            Agent::OpenCode => Self::OpenCode(opencode::Db::create(&folder)?),
        })
    }

    /// Writes one session.
    fn session(&mut self, job: Job<'_>) -> std::io::Result<Written> {
        match self {
            Self::Evi(transcripts) => {
                let mut w = SessionWriter::new(transcripts, job.id, job.plan.branches);
                write_session(job.rng, &mut w, job.plan, job.shape)?;
                Ok((w.bytes, w.lines, w.files))
            }
            Self::ClaudeCode(root) => {
                let mut w = claude::Writer::new(root, job.id, &mut *job.rng)?;
                claude::write_session(job.rng, &mut w, job.plan, job.shape)?;
                claude::finish(w)
            }
            Self::Codex(root) => codex::write(root, job),
            Self::Gemini(home) => home.write(job),
            Self::OpenCode(db) => db.write(job),
        }
    }

    fn finish(self) -> std::io::Result<()> {
        match self {
            Self::Gemini(home) => home.finish(),
            Self::OpenCode(db) => db.finish(),
            _ => Ok(()),
        }
    }
}

fn run(args: &Args) -> std::io::Result<String> {
    const MB: u64 = 1_000_000;
    let mut rng = Rng::new(args.seed);
    fs::create_dir_all(args.dir.join("transcripts"))?;
    let mut config = "[tools]\ntranscripts = true\n".to_owned();
    if let Some((name, folder)) = args.agent.names() {
        // Absolute: evi reads the config from wherever it runs.
        let dir = std::path::absolute(args.dir.join(folder))?;
        config.push_str(&format!(
            "[agents]\n{name} = true\n{name}-dir = {}\n",
            json_str(&dir.to_string_lossy())
        ));
    }
    fs::write(args.dir.join("config.toml"), config)?;
    let mut out = Out::new(args.agent, &args.dir)?;
    if args.sessions == 0 {
        out.finish()?;
        return Ok("sessions=0\n".to_owned());
    }

    let now = Utc::now();
    let midnight = |days_ago: u64| {
        now.date_naive()
            .checked_sub_days(Days::new(days_ago))
            .expect("a recent day")
            .and_time(NaiveTime::MIN)
            .and_utc()
    };
    let window_start = midnight(6);

    // The big session: from noon of one day to noon of the next (or now).
    let big_start = midnight(args.big_days_ago + 1) + TimeDelta::hours(12);
    let big_end = (big_start + TimeDelta::hours(24)).min(now - TimeDelta::minutes(1));
    let big_id = args.agent.session_id(ulid(&mut rng, big_start));
    let mut shape = Shape {
        lognormal: args.lognormal_lines,
        tool_pct: args.tool_pct,
        ..Shape::default()
    };
    let (mut total, mut lines, mut files) = out.session(Job {
        rng: &mut rng,
        id: big_id.clone(),
        plan: &Plan {
            target: args.big_mb * MB,
            start: big_start,
            duration: big_end - big_start,
            branches: true,
            huge: None,
        },
        shape: &mut shape,
    })?;

    // The others: log-normal sizes scaled to the rest of the budget.
    let n = args.sessions - 1;
    let mut rest = (args.total_mb - args.big_mb) * MB;
    let weights: Vec<f64> = (0..n).map(|_| (rng.normal() * 0.9).exp()).collect();
    let sum: f64 = weights.iter().sum();
    // Huge lines: sessions spread over the list, sizes from the others' budget.
    // They take at most half of it, so a small home stays small.
    let mut huge: Vec<Option<usize>> = vec![None; n];
    let huge_cap = (rest / 2 / args.huge_lines.max(1)) as usize;
    for k in 0..args.huge_lines as usize {
        let size = rng.range(2_000_000, 6_000_000).min(huge_cap);
        huge[(k * n) / args.huge_lines as usize + rng.range(0, n / args.huge_lines as usize)] =
            Some(size);
        rest = rest.saturating_sub(size as u64);
    }
    for (wgt, huge) in weights.into_iter().zip(huge) {
        let target = ((rest as f64 * wgt / sum) as u64).max(2_000) + huge.map_or(0, |h| h as u64);
        // Longer sessions last longer: 5 minutes to a few hours.
        let minutes = (5.0 + target as f64 / 50_000.0 * 40.0 * (0.5 + rng.unit())).min(300.0);
        let duration = TimeDelta::seconds((minutes * 60.0) as i64);
        let latest = now - duration - TimeDelta::minutes(1);
        let room = (latest - window_start).num_seconds().max(1) as u64;
        let start = window_start + TimeDelta::seconds((rng.next() % room) as i64);
        let id = args.agent.session_id(ulid(&mut rng, start));
        let branches = rng.chance(0.05);
        let (b, l, f) = out.session(Job {
            rng: &mut rng,
            id,
            plan: &Plan {
                target,
                start,
                duration,
                branches,
                huge,
            },
            shape: &mut shape,
        })?;
        total += b;
        lines += l;
        files += f;
    }
    // The shape options are named only when used, so a default home's
    // summary reads as before.
    let mut shape_note = String::new();
    if args.lognormal_lines {
        shape_note.push_str(" lognormal_lines=1");
    }
    if args.tool_pct.is_some() || args.lognormal_lines || args.huge_lines > 0 {
        shape_note.push_str(&format!(
            " tool_pct={:.1}",
            shape.tool_bytes as f64 * 100.0 / shape.all_bytes.max(1) as f64
        ));
    }
    if args.huge_lines > 0 {
        shape_note.push_str(&format!(" huge_lines={}", args.huge_lines));
    }
    if let Some((name, _)) = args.agent.names() {
        shape_note.push_str(&format!(" agent={name}"));
    }
    out.finish()?;
    let summary = format!(
        "sessions={} files={files} lines={lines} bytes={total} seed={} generated={}{shape_note}\nbig_session={big_id}\n",
        args.sessions,
        args.seed,
        now.to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    fs::write(args.dir.join("gen-home.txt"), &summary)?;
    Ok(summary)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("evi-gen-home: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(summary) => {
            print!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("evi-gen-home: {}: {e}", args.dir.display());
            ExitCode::FAILURE
        }
    }
}
