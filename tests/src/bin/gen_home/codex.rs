//! `--codex`: the same sessions written as Codex CLI writes its rollouts,
//! `codex/sessions/YYYY/MM/DD/rollout-<local start, to the second>-<id>.jsonl`
//! (the layout `cli/src/agents/codex/files.rs` reads; the lines shaped as
//! `tests/tests/e2e/fixtures/agents/codex-tools.jsonl`, which are Codex's
//! own): every line is `{"timestamp","type","payload"}`; the first a
//! `session_meta` (id, start, `cwd`, origin, version, git), then the
//! `<environment_context>` message; each turn a `turn_context`, the prompt
//! as a `response_item` message and again as an `event_msg`
//! `user_message`, the model's `reasoning` (a summary and its encrypted
//! content) and words (`response_item` and `event_msg` `agent_message`
//! both), each tool call a `function_call` (`shell`, its command line as a
//! JSON string) answered by a `function_call_output` (a JSON string of
//! `output` and `metadata`), and a `token_count` event per model response.
//! Rollouts have no tree: a session never branches (Codex forks to a new
//! rollout), so the plan's branch points are passed over.

use std::path::Path;

use chrono::{DateTime, Local, Utc};

use super::{Job, JsonlFile, Rng, Round, Turns, Written, drive, json_str, project, rfc3339};

/// Writes `job`'s session under `root`.
pub fn write(root: &Path, job: Job<'_>) -> std::io::Result<Written> {
    let local = job.plan.start.with_timezone(&Local);
    let path = root
        .join("sessions")
        .join(local.format("%Y/%m/%d").to_string())
        .join(format!(
            "rollout-{}-{}.jsonl",
            local.format("%Y-%m-%dT%H-%M-%S"),
            job.id
        ));
    let mut w = Rollout {
        out: JsonlFile::create(path)?,
        cwd: project(job.rng),
        tokens: 0,
    };
    w.meta(job.rng, job.plan.start, &job.id)?;
    drive(job.rng, &mut w, job.plan, job.shape)?;
    w.out.close()
}

struct Rollout {
    out: JsonlFile,
    cwd: String,
    /// The session's tokens so far, for `token_count` events.
    tokens: u64,
}

impl Rollout {
    fn item(&mut self, ts: DateTime<Utc>, kind: &str, payload: &str) -> std::io::Result<()> {
        self.out.line(
            ts,
            &format!(
                r#"{{"timestamp":"{}","type":"{kind}","payload":{payload}}}"#,
                rfc3339(ts)
            ),
        )
    }

    fn message(&mut self, ts: DateTime<Utc>, role: &str, text: &str) -> std::io::Result<()> {
        let block = if role == "user" {
            "input_text"
        } else {
            "output_text"
        };
        self.item(
            ts,
            "response_item",
            &format!(
                r#"{{"type":"message","role":"{role}","content":[{{"type":"{block}","text":{}}}]}}"#,
                json_str(text)
            ),
        )
    }

    fn meta(&mut self, rng: &mut Rng, ts: DateTime<Utc>, id: &str) -> std::io::Result<()> {
        let cwd = json_str(&self.cwd);
        let name = self.cwd[self.cwd.rfind('/').map_or(0, |i| i + 1)..].to_owned();
        let commit = format!(
            "{:016x}{:016x}{:08x}",
            rng.next(),
            rng.next(),
            rng.next() as u32
        );
        self.item(
            ts,
            "session_meta",
            &format!(
                r#"{{"id":"{id}","timestamp":"{}","cwd":{cwd},"originator":"codex_cli_rs","cli_version":"0.98.0","source":"cli","model_provider":"openai","git":{{"commit_hash":"{commit}","branch":"main","repository_url":"git@github.com:pat/{name}.git"}}}}"#,
                rfc3339(ts)
            ),
        )?;
        let context = format!(
            "<environment_context>\n  <cwd>{}</cwd>\n  <approval_policy>on-request</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted</network_access>\n  <shell>bash</shell>\n</environment_context>",
            self.cwd
        );
        self.message(ts, "user", &context)
    }

    /// The `token_count` event after a model response of `out` tokens.
    fn tokens(&mut self, ts: DateTime<Utc>, out: u64) -> std::io::Result<()> {
        self.tokens += 9_000 + out;
        let total = self.tokens;
        self.item(
            ts,
            "event_msg",
            &format!(
                r#"{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{total},"cached_input_tokens":{},"output_tokens":{out},"reasoning_output_tokens":0,"total_tokens":{total}}},"last_token_usage":{{"input_tokens":9000,"cached_input_tokens":8000,"output_tokens":{out},"reasoning_output_tokens":0,"total_tokens":{}}},"model_context_window":272000}},"rate_limits":null}}"#,
                total * 4 / 5,
                9_000 + out
            ),
        )
    }
}

impl Turns for Rollout {
    fn bytes(&self) -> u64 {
        self.out.bytes
    }

    fn prompt(&mut self, _rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()> {
        let cwd = json_str(&self.cwd);
        self.item(
            ts,
            "turn_context",
            &format!(
                r#"{{"cwd":{cwd},"approval_policy":"on-request","sandbox_policy":{{"type":"workspace-write","writable_roots":[],"network_access":false,"exclude_tmpdir_env_var":false,"exclude_slash_tmp":false}},"model":"gpt-5-codex","effort":"medium","summary":"auto"}}"#
            ),
        )?;
        self.message(ts, "user", text)?;
        self.item(
            ts,
            "event_msg",
            &format!(
                r#"{{"type":"user_message","message":{},"images":[],"kind":"plain"}}"#,
                json_str(text)
            ),
        )
    }

    fn round(&mut self, rng: &mut Rng, r: &Round) -> std::io::Result<()> {
        if let Some(think) = &r.think {
            let sealed = format!("gAAAAB{:016x}{:016x}", rng.next(), rng.next()).repeat(12);
            self.item(
                r.ts,
                "response_item",
                &format!(
                    r#"{{"type":"reasoning","summary":[{{"type":"summary_text","text":{}}}],"content":null,"encrypted_content":"{sealed}"}}"#,
                    json_str(think)
                ),
            )?;
            self.item(
                r.ts,
                "event_msg",
                &format!(r#"{{"type":"agent_reasoning","text":{}}}"#, json_str(think)),
            )?;
        }
        if !r.say.is_empty() {
            self.message(r.ts, "assistant", &r.say)?;
            self.item(
                r.ts,
                "event_msg",
                &format!(
                    r#"{{"type":"agent_message","message":{}}}"#,
                    json_str(&r.say)
                ),
            )?;
        }
        for c in &r.calls {
            let line = match c.tool {
                "bash" => c.arg.clone(),
                "grep" => format!("rg -n {} src", c.arg),
                "list_dir" => format!("ls -la {}", c.arg),
                "read_file" => format!("sed -n '1,200p' {}", c.arg),
                _ => format!("apply_patch {}", c.arg),
            };
            let args = format!(
                r#"{{"command":["bash","-lc",{}],"workdir":{},"timeout_ms":120000}}"#,
                json_str(&line),
                json_str(&self.cwd)
            );
            self.item(
                r.ts,
                "response_item",
                &format!(
                    r#"{{"type":"function_call","name":"shell","arguments":{},"call_id":"{}"}}"#,
                    json_str(&args),
                    c.id
                ),
            )?;
        }
        self.tokens(r.ts, 60)?;
        for c in &r.calls {
            let output = format!(
                r#"{{"output":{},"metadata":{{"exit_code":0,"duration_seconds":0.4}}}}"#,
                json_str(&c.output)
            );
            self.item(
                c.ts,
                "response_item",
                &format!(
                    r#"{{"type":"function_call_output","call_id":"{}","output":{}}}"#,
                    c.id,
                    json_str(&output)
                ),
            )?;
        }
        Ok(())
    }

    fn answer(&mut self, _rng: &mut Rng, ts: DateTime<Utc>, text: &str) -> std::io::Result<()> {
        self.message(ts, "assistant", text)?;
        self.item(
            ts,
            "event_msg",
            &format!(r#"{{"type":"agent_message","message":{}}}"#, json_str(text)),
        )?;
        self.tokens(ts, 400)
    }
}
