//! `--opencode`: the same sessions written as OpenCode (1.18) keeps them,
//! rows of one SQLite database, `opencode/opencode.db`, in WAL mode (what
//! `cli/src/agents/opencode/db.rs` reads). The tables are OpenCode's own:
//! [`SCHEMA`] is `project`, `session`, `message` and `part` with their
//! indexes as OpenCode 1.18.33 creates them (`sqlite_master` of the
//! database `opencode session list` made); its other tables, which sync
//! does not read, and its migration records are left out, so OpenCode
//! itself would not open this database.
//!
//! A session row (`directory` its project, a `slug`, a `title`, the
//! version) in a `project` row per project folder; each prompt a `user`
//! message (its agent and model) with a `text` part; each model step an
//! `assistant` message (`parentID` the prompt's, `path.cwd`/`path.root`,
//! cost, tokens, `finish`, `time.completed`) whose parts are a
//! `step-start`, the `reasoning` and `text` it produced, a `tool` part per
//! call (`callID`, `tool`, `state` with `input`, `output`, `title`,
//! `metadata`, times) and a `step-finish`. Ids are OpenCode's: a prefix,
//! 12 hex digits of time and counter (a session's inverted, so the newest
//! sorts first), 14 base62 characters. A row's `data` is the message or
//! part without the ids the columns hold. OpenCode sessions do not branch:
//! the plan's branch points are passed over.

use std::collections::BTreeSet;
use std::path::Path;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::{
    Job, Rng, Round, Turns, WORDS, Written, drive, json_str, project, prose_between, sha256_hex,
};

/// OpenCode 1.18.33's tables that sync reads, as it creates them (one
/// copy, beside the code that reads them).
const SCHEMA: &str = include_str!("../../../../cli/src/agents/opencode/testdata/schema.sql");

/// What a row adds to its mirror line beyond its `data` (the table, the
/// role, the ids and times as JSON): the plan's measure of a row.
const LINE_OVERHEAD: u64 = 180;

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// An OpenCode id: `prefix`, 12 hex digits of `ms * 0x1000 + counter`
/// (inverted with `descending`), 14 base62 characters from `random`.
fn id(prefix: &str, ms: u64, counter: u64, descending: bool, mut random: u128) -> String {
    let mut t = ms * 0x1000 + counter;
    if descending {
        t = !t;
    }
    let mut s = format!("{prefix}_{:012x}", t & 0xffff_ffff_ffff);
    for _ in 0..14 {
        s.push(char::from(BASE62[(random % 62) as usize]));
        random /= 62;
    }
    s
}

/// A session id as OpenCode makes one, from a ULID of its start.
pub fn session_id(ulid: &str) -> String {
    let u = ulid::Ulid::from_string(ulid).expect("a ULID");
    id("ses", u.timestamp_ms(), 1, true, u.random())
}

/// OpenCode's database, being filled.
pub struct Db {
    conn: Connection,
    /// The projects that have their row.
    projects: BTreeSet<String>,
}

impl Db {
    /// Creates `root/opencode.db` with [`SCHEMA`], in WAL mode.
    pub fn create(root: &Path) -> std::io::Result<Self> {
        let conn = Connection::open(root.join("opencode.db")).map_err(std::io::Error::other)?;
        conn.pragma_update(None, "journal_mode", "wal")
            .and_then(|()| conn.execute_batch(SCHEMA))
            .map_err(std::io::Error::other)?;
        Ok(Self {
            conn,
            projects: BTreeSet::new(),
        })
    }

    /// Writes `job`'s session, in a transaction; what it wrote: the
    /// bytes of its rows' lines as the plan counts them, its rows, no file.
    pub fn write(&mut self, job: Job<'_>) -> std::io::Result<Written> {
        self.session(job).map_err(std::io::Error::other)
    }

    fn session(
        &mut self,
        job: Job<'_>,
    ) -> Result<Written, Box<dyn std::error::Error + Send + Sync>> {
        let Job {
            rng,
            id: session,
            plan,
            shape,
        } = job;
        let cwd = project(rng);
        // OpenCode's is its root commit's hash: 40 hex digits.
        let project_id = sha256_hex(&cwd)[..40].to_owned();
        let tx = self.conn.transaction()?;
        let start = plan.start.timestamp_millis();
        if self.projects.insert(cwd.clone()) {
            tx.execute(
                "INSERT INTO project (id, worktree, vcs, time_created, time_updated, sandboxes) \
                 VALUES (?1, ?2, 'git', ?3, ?3, '[]')",
                params![project_id, cwd, start],
            )?;
        }
        let slug = format!("{}-{}", rng.pick(WORDS), rng.pick(WORDS));
        let title = prose_between(rng, 20, 60);
        tx.execute(
            "INSERT INTO session (id, project_id, slug, directory, title, version, \
             summary_additions, summary_deletions, summary_files, time_created, time_updated) \
             VALUES (?1, ?2, ?3, ?4, ?5, '1.18.33', 0, 0, 0, ?6, ?6)",
            params![session, project_id, slug, cwd, title, start],
        )?;
        let mut w = Rows {
            tx: &tx,
            session: session.clone(),
            cwd,
            bytes: LINE_OVERHEAD + 300,
            rows: 1,
            last_ms: 0,
            counter: 0,
            prompt: String::new(),
            updated: start,
        };
        drive(rng, &mut w, plan, shape)?;
        let done = (w.bytes, w.rows, 0);
        let updated = w.updated;
        tx.execute(
            "UPDATE session SET time_updated = ?2 WHERE id = ?1",
            params![session, updated],
        )?;
        tx.commit()?;
        Ok(done)
    }

    /// Moves what the WAL holds into the database file.
    pub fn finish(self) -> std::io::Result<()> {
        self.conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(std::io::Error::other)
    }
}

/// A session's rows, written in its transaction.
struct Rows<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    session: String,
    cwd: String,
    bytes: u64,
    rows: u64,
    /// For ids: the last time an id was made at, and its counter.
    last_ms: u64,
    counter: u64,
    /// The id of the current prompt's message.
    prompt: String,
    /// The session's last change, in ms.
    updated: i64,
}

impl Rows<'_> {
    fn next_id(&mut self, rng: &mut Rng, prefix: &str, ts: DateTime<Utc>) -> String {
        let ms = ts.timestamp_millis() as u64;
        if ms == self.last_ms {
            self.counter += 1;
        } else {
            self.last_ms = ms;
            self.counter = 1;
        }
        let random = u128::from(rng.next()) << 64 | u128::from(rng.next());
        id(prefix, ms, self.counter, false, random)
    }

    fn message(
        &mut self,
        rng: &mut Rng,
        ts: DateTime<Utc>,
        done: DateTime<Utc>,
        data: &str,
    ) -> rusqlite::Result<String> {
        let id = self.next_id(rng, "msg", ts);
        self.tx
            .prepare_cached(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                id,
                self.session,
                ts.timestamp_millis(),
                done.timestamp_millis(),
                data
            ])?;
        self.counted(data, done);
        Ok(id)
    }

    fn part(
        &mut self,
        rng: &mut Rng,
        message: &str,
        ts: DateTime<Utc>,
        data: &str,
    ) -> rusqlite::Result<()> {
        let id = self.next_id(rng, "prt", ts);
        self.tx
            .prepare_cached(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) \
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
            )?
            .execute(params![
                id,
                message,
                self.session,
                ts.timestamp_millis(),
                data
            ])?;
        self.counted(data, ts);
        Ok(())
    }

    fn counted(&mut self, data: &str, ts: DateTime<Utc>) {
        self.bytes += data.len() as u64 + LINE_OVERHEAD;
        self.rows += 1;
        self.updated = self.updated.max(ts.timestamp_millis());
    }

    /// An assistant message of one model step, from `ts` to `done`.
    fn assistant(
        &mut self,
        rng: &mut Rng,
        ts: DateTime<Utc>,
        done: DateTime<Utc>,
        out_tokens: u64,
        finish: &str,
    ) -> rusqlite::Result<(String, String)> {
        let cwd = json_str(&self.cwd);
        let data = format!(
            r#"{{"role":"assistant","time":{{"created":{},"completed":{}}},"parentID":"{}","modelID":"claude-sonnet-4-5","providerID":"anthropic","mode":"build","agent":"build","path":{{"cwd":{cwd},"root":{cwd}}},"cost":0.0123,"tokens":{{"input":9000,"output":{out_tokens},"reasoning":0,"cache":{{"read":8000,"write":0}}}},"finish":"{finish}"}}"#,
            ts.timestamp_millis(),
            done.timestamp_millis(),
            self.prompt
        );
        let id = self.message(rng, ts, done, &data)?;
        let snapshot = format!(
            "{:016x}{:016x}{:08x}",
            rng.next(),
            rng.next(),
            rng.next() as u32
        );
        self.part(
            rng,
            &id,
            ts,
            &format!(r#"{{"type":"step-start","snapshot":"{snapshot}"}}"#),
        )?;
        Ok((id, snapshot))
    }

    fn step_finish(
        &mut self,
        rng: &mut Rng,
        message: &str,
        ts: DateTime<Utc>,
        snapshot: &str,
        reason: &str,
        out_tokens: u64,
    ) -> rusqlite::Result<()> {
        self.part(
            rng,
            message,
            ts,
            &format!(
                r#"{{"type":"step-finish","reason":"{reason}","snapshot":"{snapshot}","cost":0.0123,"tokens":{{"input":9000,"output":{out_tokens},"reasoning":0,"cache":{{"read":8000,"write":0}}}}}}"#
            ),
        )
    }

    /// A `text` (or `reasoning`) part.
    fn text(
        &mut self,
        rng: &mut Rng,
        message: &str,
        kind: &str,
        ts: DateTime<Utc>,
        text: &str,
    ) -> rusqlite::Result<()> {
        let ms = ts.timestamp_millis();
        self.part(
            rng,
            message,
            ts,
            &format!(
                r#"{{"type":"{kind}","text":{},"time":{{"start":{ms},"end":{ms}}}}}"#,
                json_str(text)
            ),
        )
    }
}

impl Turns for Rows<'_> {
    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn prompt(&mut self, rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()> {
        (|| -> rusqlite::Result<()> {
            let data = format!(
                r#"{{"role":"user","time":{{"created":{}}},"summary":{{"diffs":[]}},"agent":"build","model":{{"providerID":"anthropic","modelID":"claude-sonnet-4-5"}}}}"#,
                ts.timestamp_millis()
            );
            let id = self.message(rng, ts, ts, &data)?;
            self.part(
                rng,
                &id,
                ts,
                &format!(r#"{{"type":"text","text":{}}}"#, json_str(text)),
            )?;
            self.prompt = id;
            Ok(())
        })()
        .map_err(std::io::Error::other)
    }

    fn round(&mut self, rng: &mut Rng, r: &Round) -> std::io::Result<()> {
        (|| -> rusqlite::Result<()> {
            let done = r.calls.iter().map(|c| c.ts).max().unwrap_or(r.ts);
            let (id, snapshot) = self.assistant(rng, r.ts, done, 60, "tool-calls")?;
            if let Some(think) = &r.think {
                self.text(rng, &id, "reasoning", r.ts, think)?;
            }
            if !r.say.is_empty() {
                self.text(rng, &id, "text", r.ts, &r.say)?;
            }
            for c in &r.calls {
                let (tool, input) = match c.tool {
                    "bash" => (
                        "bash",
                        format!(
                            r#"{{"command":{},"description":"Run the tests"}}"#,
                            json_str(&c.arg)
                        ),
                    ),
                    "grep" => ("grep", format!(r#"{{"pattern":{}}}"#, json_str(&c.arg))),
                    "list_dir" => ("list", format!(r#"{{"path":{}}}"#, json_str(&c.arg))),
                    "read_file" => ("read", format!(r#"{{"filePath":{}}}"#, json_str(&c.arg))),
                    _ => (
                        "edit",
                        format!(
                            r#"{{"filePath":{},"oldString":"let a = 1;","newString":"let a = 2;"}}"#,
                            json_str(&c.arg)
                        ),
                    ),
                };
                let data = format!(
                    r#"{{"type":"tool","callID":"{}","tool":"{tool}","state":{{"status":"completed","input":{input},"output":{},"title":{},"metadata":{{"exit":0,"truncated":false}},"time":{{"start":{},"end":{}}}}}}}"#,
                    c.id,
                    json_str(&c.output),
                    json_str(&c.arg),
                    r.ts.timestamp_millis(),
                    c.ts.timestamp_millis()
                );
                self.part(rng, &id, r.ts, &data)?;
            }
            self.step_finish(rng, &id, done, &snapshot, "tool-calls", 60)
        })()
        .map_err(std::io::Error::other)
    }

    fn answer(&mut self, rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()> {
        (|| -> rusqlite::Result<()> {
            let (id, snapshot) = self.assistant(rng, ts, ts, 400, "stop")?;
            self.text(rng, &id, "text", ts, text)?;
            self.step_finish(rng, &id, ts, &snapshot, "stop", 400)
        })()
        .map_err(std::io::Error::other)
    }
}
