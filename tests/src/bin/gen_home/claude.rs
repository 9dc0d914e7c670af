//! `--claude-code`: the same sessions written in Claude Code's shape, as
//! `claude/projects/<project folder>/<session uuid>.jsonl` (the shape of
//! `tests/tests/e2e/fixtures/agents/claude-code.jsonl`, which is Claude
//! Code 2.0.76's own): every line of the conversation has a `uuid` and
//! `parentUuid` (a tree), `sessionId`, `cwd`, `timestamp`; a user prompt
//! is preceded by a `file-history-snapshot` line, an assistant turn is one
//! line per content block (`thinking`, `text`, `tool_use`) sharing one
//! message id, each `tool_use` is answered by a user line holding a
//! `tool_result` block (and the `toolUseResult` Claude Code keeps beside
//! it); about one session in ten ends with `summary` lines, and about one in
//! twenty (and the big one) has a branch: a prompt edited and sent again,
//! whose `parentUuid` is a few lines back.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::{
    JsonlFile, PATHS, Plan, Rng, Shape, TOOLS, WORDS, json_str, project, prose, prose_between,
    rfc3339 as fmt, tool_output, uuid,
};

/// Writes one session file.
pub struct Writer {
    out: JsonlFile,
    session: String,
    cwd: String,
    /// The uuid of the last line of the conversation.
    tip: Option<String>,
    /// Recent user prompts' parents, for a branch to fork from.
    prompts: Vec<Option<String>>,
}

impl Writer {
    pub fn new(root: &Path, session: String, rng: &mut Rng) -> std::io::Result<Self> {
        let cwd = project(rng);
        let folder: String = cwd
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = root
            .join("projects")
            .join(folder)
            .join(format!("{session}.jsonl"));
        Ok(Self {
            out: JsonlFile::create(path)?,
            session,
            cwd,
            tip: None,
            prompts: Vec::new(),
        })
    }

    fn raw(&mut self, ts: DateTime<Utc>, line: &str) -> std::io::Result<()> {
        self.out.line(ts, line)
    }

    /// A line of the conversation: the common fields, then `rest`, under
    /// `parent` (the tip when `None`).
    fn node(
        &mut self,
        rng: &mut Rng,
        ts: DateTime<Utc>,
        parent: Option<Option<String>>,
        rest: &str,
    ) -> std::io::Result<String> {
        let id = uuid(rng);
        let parent = parent.unwrap_or_else(|| self.tip.clone());
        let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
        let line = format!(
            r#"{{"parentUuid":{parent},"isSidechain":false,"userType":"external","cwd":{},"sessionId":"{}","version":"2.0.76","gitBranch":"main",{rest},"uuid":"{id}","timestamp":"{}"}}"#,
            json_str(&self.cwd),
            self.session,
            fmt(ts)
        );
        self.raw(ts, &line)?;
        self.tip = Some(id.clone());
        Ok(id)
    }

    /// An assistant line holding `block` (a content block), of message `msg`.
    fn say(
        &mut self,
        rng: &mut Rng,
        ts: DateTime<Utc>,
        msg: &str,
        block: &str,
        out_tokens: usize,
    ) -> std::io::Result<String> {
        self.node(rng, ts, None, &assistant(msg, block, out_tokens))
    }
}

/// An assistant line holding `block`, of message `msg`.
fn assistant(msg: &str, block: &str, out_tokens: usize) -> String {
    format!(
        r#""message":{{"id":"{msg}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{block}],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":4,"cache_creation_input_tokens":1200,"cache_read_input_tokens":18000,"output_tokens":{out_tokens}}}}},"requestId":"req_{}","type":"assistant""#,
        &msg[4..]
    )
}

/// Writes a session of about `plan.target` bytes, turn by turn as
/// [`super::write_session`] does for eVi.
pub fn write_session(
    rng: &mut Rng,
    w: &mut Writer,
    plan: &Plan,
    shape: &mut Shape,
) -> std::io::Result<()> {
    let mut ts_next = plan.clock();
    let branch_at = plan.branch_points(rng);
    let mut branch_done = vec![false; branch_at.len()];
    let mut msg_n = 0u64;
    let mut huge = plan.huge;
    while w.out.bytes < plan.target {
        let turn_start = w.out.bytes;
        let mut turn_tool = 0;
        // A branch: an earlier prompt edited and sent again.
        let mut parent = None;
        for (k, &at) in branch_at.iter().enumerate() {
            if !branch_done[k] && w.out.bytes >= at && w.prompts.len() >= 2 {
                branch_done[k] = true;
                parent =
                    Some(w.prompts[w.prompts.len() - rng.range(1, w.prompts.len().min(4))].clone());
            }
        }
        let t = ts_next(rng, w.out.bytes);
        let snapshot_id = uuid(rng);
        w.raw(
            t,
            &format!(
                r#"{{"type":"file-history-snapshot","messageId":"{snapshot_id}","snapshot":{{"messageId":"{snapshot_id}","trackedFileBackups":{{}},"timestamp":"{}"}},"isSnapshotUpdate":false}}"#,
                fmt(t)
            ),
        )?;
        w.prompts
            .push(parent.clone().unwrap_or_else(|| w.tip.clone()));
        let n = shape.prose_len(rng, 40, 700);
        let text = prose(rng, n);
        w.node(
            rng,
            t,
            parent,
            &format!(
                r#""type":"user","message":{{"role":"user","content":{}}},"thinkingMetadata":{{"level":"high","disabled":false,"triggers":[]}},"todos":[]"#,
                json_str(&text)
            ),
        )?;
        let rounds = shape.tool_rounds(rng).max(usize::from(huge.is_some()));
        for _ in 0..rounds {
            if w.out.bytes >= plan.target {
                break;
            }
            msg_n += 1;
            let msg = format!("msg_{:020x}", rng.next() ^ msg_n);
            let t = ts_next(rng, w.out.bytes);
            if rng.chance(0.4) {
                let n = shape.prose_len(rng, 20, 300);
                let think = prose(rng, n);
                w.say(rng, t, &msg, &format!(
                            r#"{{"type":"thinking","thinking":{},"signature":"RXF1aXZhbGVudCBzaWduYXR1cmU="}}"#,
                            json_str(&think)
                        ), 8)?;
            }
            let n = shape.prose_len(rng, 0, 300);
            if n > 40 {
                let say = prose(rng, n);
                let t = ts_next(rng, w.out.bytes);
                w.say(
                    rng,
                    t,
                    &msg,
                    &format!(r#"{{"type":"text","text":{}}}"#, json_str(&say)),
                    30,
                )?;
            }
            let calls = if rng.chance(0.15) { 2 } else { 1 };
            let mut ids = Vec::new();
            for _ in 0..calls {
                let id = format!("toolu_{:016x}{:08x}", rng.next(), rng.next() as u32);
                let name = match rng.pick(TOOLS) {
                    "bash" => "Bash",
                    "read_file" => "Read",
                    "write_file" => "Write",
                    "grep" => "Grep",
                    "edit" => "Edit",
                    _ => "Glob",
                };
                let input = match name {
                    "Bash" => format!(
                        r#"{{"command":{},"description":"Run the tests"}}"#,
                        json_str(&format!(
                            "cargo test -p {} 2>&1 | tail -50",
                            rng.pick(WORDS)
                        ))
                    ),
                    "Grep" => format!(
                        r#"{{"pattern":{},"path":"src"}}"#,
                        json_str(rng.pick(WORDS))
                    ),
                    _ => format!(
                        r#"{{"file_path":{}}}"#,
                        json_str(&format!("/home/pat/code/{}", rng.pick(PATHS)))
                    ),
                };
                let t = ts_next(rng, w.out.bytes);
                w.say(
                    rng,
                    t,
                    &msg,
                    &format!(
                        r#"{{"type":"tool_use","id":"{id}","name":"{name}","input":{input}}}"#
                    ),
                    60,
                )?;
                ids.push(id);
            }
            for id in ids {
                let size = match huge.take() {
                    Some(size) => size,
                    None => shape.tool_len(rng),
                };
                // Claude Code keeps the output twice (the block and
                // `toolUseResult`): half each keeps the turn's size.
                let out = json_str(&tool_output(rng, size / 2));
                let before = w.out.bytes;
                let t = ts_next(rng, w.out.bytes);
                w.node(
                    rng,
                    t,
                    None,
                    &format!(
                        r#""type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{id}","type":"tool_result","content":{out},"is_error":false}}]}},"toolUseResult":{{"stdout":{out},"stderr":"","interrupted":false,"isImage":false}}"#
                    ),
                )?;
                turn_tool += w.out.bytes - before;
            }
        }
        msg_n += 1;
        let msg = format!("msg_{:020x}", rng.next() ^ msg_n);
        let n = shape.prose_len(rng, 80, 1800);
        let answer = prose(rng, n);
        let t = ts_next(rng, w.out.bytes);
        w.say(
            rng,
            t,
            &msg,
            &format!(r#"{{"type":"text","text":{}}}"#, json_str(&answer)),
            400,
        )?;
        shape.tool_bytes += turn_tool;
        shape.all_bytes += w.out.bytes - turn_start;
    }
    if rng.chance(0.1) {
        let leaf = w.tip.clone().unwrap_or_default();
        for _ in 0..rng.range(1, 3) {
            let s = prose_between(rng, 20, 70);
            let t = w.out.last_ts;
            w.raw(
                t,
                &format!(
                    r#"{{"type":"summary","summary":{},"leafUuid":"{leaf}"}}"#,
                    json_str(&s)
                ),
            )?;
        }
    }
    Ok(())
}

/// Closes `w`, its mtime the time of its last line; its (bytes, lines,
/// files).
pub fn finish(w: Writer) -> std::io::Result<(u64, u64, u32)> {
    w.out.close()
}
