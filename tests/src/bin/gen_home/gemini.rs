//! `--gemini`: the same sessions written as Gemini CLI (0.61, append-only
//! JSONL) writes them, `gemini/tmp/<slug>/chats/session-<UTC start, to the
//! minute>-<first 8 of the id>.jsonl` (the layout
//! `cli/src/agents/gemini/layout.rs` reads), with each project's slug in
//! `projects.json` and in its `tmp/<slug>/.project_root` marker (the path,
//! no newline), as Gemini keeps them.
//!
//! A file's first line is the session's metadata (`sessionId`,
//! `projectHash`: the SHA-256 of the project path, `startTime`,
//! `lastUpdated`, `kind`); then messages, objects with a string `id` (a
//! UUID): the prompt a `user` message of text parts, the model's a
//! `gemini` message (`content`, `thoughts`, `tokens`, `model`) written
//! once when it answers and again, whole, with its `toolCalls` and their
//! results once the tools ran (Gemini updates a message by appending it
//! again under the same id); a `$set` of `lastUpdated` after each. A
//! branch is Gemini's rewind, `{"$rewindTo":"<id of an earlier prompt>"}`,
//! before the prompt sent again. About half the sessions end with the
//! `$set` of their `summary`, the title Gemini gives a session.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::{
    Job, JsonlFile, Rng, Round, Turns, Written, drive, json_str, project, prose_between, rfc3339,
    sha256_hex, uuid,
};

/// The Gemini folder, and the projects its sessions are in (path → slug).
pub struct Home {
    root: PathBuf,
    projects: BTreeMap<String, String>,
}

impl Home {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            projects: BTreeMap::new(),
        }
    }

    /// Writes `job`'s session.
    pub fn write(&mut self, job: Job<'_>) -> std::io::Result<Written> {
        let Job {
            rng,
            id,
            plan,
            shape,
        } = job;
        let cwd = project(rng);
        // The base name is already a slug: lower case, `[a-z0-9-]`.
        let slug = cwd[cwd.rfind('/').map_or(0, |i| i + 1)..].to_owned();
        let dir = self.root.join("tmp").join(&slug);
        if !self.projects.contains_key(&cwd) {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(".project_root"), &cwd)?;
            self.projects.insert(cwd.clone(), slug);
        }
        let path = dir.join("chats").join(format!(
            "session-{}-{}.jsonl",
            plan.start.format("%Y-%m-%dT%H-%M"),
            &id[..8]
        ));
        let mut w = Chat {
            out: JsonlFile::create(path)?,
            prompts: Vec::new(),
        };
        let start = rfc3339(plan.start);
        let hash = sha256_hex(&cwd);
        w.out.line(
            plan.start,
            &format!(
                r#"{{"sessionId":"{id}","projectHash":"{hash}","startTime":"{start}","lastUpdated":"{start}","kind":"main"}}"#
            ),
        )?;
        drive(rng, &mut w, plan, shape)?;
        if rng.chance(0.5) {
            let title = prose_between(rng, 20, 70);
            let ts = w.out.last_ts;
            w.out.line(
                ts,
                &format!(r#"{{"$set":{{"summary":{}}}}}"#, json_str(&title)),
            )?;
        }
        w.out.close()
    }

    /// Writes `projects.json`, as Gemini records the slugs it made.
    pub fn finish(self) -> std::io::Result<()> {
        let json = serde_json::json!({ "projects": self.projects });
        std::fs::write(
            self.root.join("projects.json"),
            serde_json::to_string_pretty(&json).expect("JSON serialises"),
        )
    }
}

struct Chat {
    out: JsonlFile,
    /// The ids of the prompts of the current branch, for a rewind.
    prompts: Vec<String>,
}

impl Chat {
    fn updated(&mut self, ts: DateTime<Utc>) -> std::io::Result<()> {
        self.out.line(
            ts,
            &format!(r#"{{"$set":{{"lastUpdated":"{}"}}}}"#, rfc3339(ts)),
        )
    }

    /// A `gemini` message; `tools`, when given, the JSON array of its
    /// calls.
    fn gemini(
        &mut self,
        id: &str,
        ts: DateTime<Utc>,
        text: &str,
        thoughts: &str,
        out_tokens: u64,
        tools: Option<&str>,
    ) -> std::io::Result<()> {
        let calls = tools.map_or(String::new(), |t| format!(r#","toolCalls":{t}"#));
        self.out.line(
            ts,
            &format!(
                r#"{{"id":"{id}","timestamp":"{}","type":"gemini","content":{},"thoughts":[{thoughts}],"tokens":{{"input":9000,"output":{out_tokens},"cached":8000,"thoughts":120,"tool":0,"total":{}}},"model":"gemini-2.5-pro"{calls}}}"#,
                rfc3339(ts),
                json_str(text),
                9_120 + out_tokens
            ),
        )
    }
}

impl Turns for Chat {
    fn bytes(&self) -> u64 {
        self.out.bytes
    }

    fn branch(&mut self, rng: &mut Rng) -> std::io::Result<bool> {
        let n = self.prompts.len();
        if n < 2 {
            return Ok(false);
        }
        let at = n - rng.range(1, n.min(4));
        let to = self.prompts[at].clone();
        self.prompts.truncate(at);
        let ts = self.out.last_ts;
        self.out.line(ts, &format!(r#"{{"$rewindTo":"{to}"}}"#))?;
        Ok(true)
    }

    fn prompt(&mut self, rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()> {
        let id = uuid(rng);
        self.out.line(
            ts,
            &format!(
                r#"{{"id":"{id}","timestamp":"{}","type":"user","content":[{{"text":{}}}]}}"#,
                rfc3339(ts),
                json_str(text)
            ),
        )?;
        self.prompts.push(id);
        self.updated(ts)
    }

    fn round(&mut self, rng: &mut Rng, r: &Round) -> std::io::Result<()> {
        let id = uuid(rng);
        let thoughts = r.think.as_ref().map_or(String::new(), |t| {
            format!(
                r#"{{"subject":{},"description":{},"timestamp":"{}"}}"#,
                json_str(&prose_between(rng, 10, 40)),
                json_str(t),
                rfc3339(r.ts)
            )
        });
        self.gemini(&id, r.ts, &r.say, &thoughts, 60, None)?;
        let mut calls = Vec::new();
        let mut done = r.ts;
        for c in &r.calls {
            let (name, shown, args) = match c.tool {
                "bash" => (
                    "run_shell_command",
                    "Shell",
                    format!(
                        r#"{{"command":{},"description":"Run the tests"}}"#,
                        json_str(&c.arg)
                    ),
                ),
                "grep" => (
                    "search_file_content",
                    "SearchText",
                    format!(r#"{{"pattern":{}}}"#, json_str(&c.arg)),
                ),
                "list_dir" => (
                    "list_directory",
                    "ReadFolder",
                    format!(r#"{{"dir_path":{}}}"#, json_str(&c.arg)),
                ),
                "read_file" => (
                    "read_file",
                    "ReadFile",
                    format!(r#"{{"file_path":{}}}"#, json_str(&c.arg)),
                ),
                _ => (
                    "replace",
                    "Edit",
                    format!(
                        r#"{{"file_path":{},"old_string":"let a = 1;","new_string":"let a = 2;"}}"#,
                        json_str(&c.arg)
                    ),
                ),
            };
            let call = format!("{name}-{}-{}", c.ts.timestamp_millis(), &c.id[5..17]);
            calls.push(format!(
                r#"{{"id":"{call}","name":"{name}","args":{args},"result":[{{"functionResponse":{{"id":"{call}","name":"{name}","response":{{"output":{}}}}}}}],"status":"success","timestamp":"{}","displayName":"{shown}","description":"","renderOutputAsMarkdown":false}}"#,
                json_str(&c.output),
                rfc3339(c.ts)
            ));
            done = done.max(c.ts);
        }
        let calls = format!("[{}]", calls.join(","));
        self.gemini(&id, done, &r.say, &thoughts, 60, Some(&calls))?;
        self.updated(done)
    }

    fn answer(&mut self, rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()> {
        let id = uuid(rng);
        self.gemini(&id, ts, text, "", 400, None)?;
        self.updated(ts)
    }
}
