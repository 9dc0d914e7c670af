//! One line of another agent's session as [`super::SessionTree::load_agent`]
//! reads it: its ids, what it is to the tree, and the project it names.
//! Read in one pass when the line's outline vouches for it
//! ([`Message::outline`]); else the long way, each rule on its own, which
//! is what the outline is a shortcut for.

use super::entry_id::ExplicitIds;
use super::line::{Role, parse_ts};
use crate::message::outline::Outline;
use crate::message::{Message, Reading};
use crate::source::Agent;
use crate::source::paths::PathMap;

/// What the tree takes from one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLine {
    /// Taken from the line as every device agrees on it.
    pub ids: ExplicitIds,
    pub outline: Outline,
    /// The session's project as this device has it, when this line names
    /// one (always `None` unless `want_project`).
    pub project: Option<String>,
}

impl AgentLine {
    /// Reads `raw` (as this device holds it) of `agent`'s session; `canon`
    /// is its canonical form ([`Agent::canonical`] through `map`).
    pub fn read(agent: Agent, raw: &[u8], canon: &[u8], map: &PathMap, want_project: bool) -> Self {
        let Some(line) = Message::outline(agent, raw) else {
            return Self::read_whole(agent, raw, canon, map, want_project);
        };
        // A canonical form that is `raw` itself (no `cwd` mapped) has the
        // ids just read; else they are read from it, as sync reads them.
        let ids = if std::ptr::eq(canon, raw) {
            line.ids
        } else {
            agent.explicit_ids(canon)
        };
        let project = match want_project {
            false => None,
            true => agent.kind().project_here(line.project, map),
        };
        Self {
            ids,
            outline: line.outline,
            project,
        }
    }

    /// The long way: ids, project and reading each parsed on their own,
    /// the message built from the whole line.
    fn read_whole(
        agent: Agent,
        raw: &[u8],
        canon: &[u8],
        map: &PathMap,
        want_project: bool,
    ) -> Self {
        let project = match want_project {
            false => None,
            true => agent
                .kind()
                .project_here(agent.kind().line_project(raw), map),
        };
        let outline = match Message::read_whole(agent, raw) {
            Reading::Title(_) => Outline::Title,
            Reading::Hidden => Outline::Hidden,
            Reading::Message(m, shown_parent) => Outline::Message {
                role: Role::of(&m.role),
                ts: m.ts.as_deref().and_then(parse_ts),
                fault: m.fault,
                shown_parent,
            },
        };
        Self {
            ids: agent.explicit_ids(canon),
            outline,
            project,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// Lines of every shape the readers know, and of shapes they read the
    /// long way: the one-pass reading must agree with the long way on each.
    const CLAUDE: &[&str] = &[
        r#"{"parentUuid":null,"cwd":"/p","sessionId":"s","type":"user","message":{"role":"user","content":"hi"},"uuid":"u1","timestamp":"2026-01-01T10:00:00.000Z"}"#,
        r#"{"parentUuid":"u1","type":"user","message":{"role":"user","content":""},"uuid":"u2"}"#,
        r#"{"parentUuid":"u1","type":"user","message":{"role":"user","content":"say \"x\"\n"},"uuid":"u2e"}"#,
        r#"{"type":"\u0075ser","message":{"content":"escaped type"},"uuid":"u2f","cwd":"/p\u00e9"}"#,
        r#"{"parentUuid":"u2","type":"assistant","message":{"content":[{"type":"text","text":""}]},"uuid":"u3"}"#,
        r#"{"parentUuid":"u2","type":"assistant","message":{"content":[{"type":"text","text":""},{"type":"text","text":""}]},"uuid":"u4"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"","signature":"c2ln"}]},"uuid":"u5"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":3},{"type":"redacted_thinking","data":"x"}]},"uuid":"u6"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","input":{}}]},"uuid":"u7"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"server_tool_use","name":"web","input":{}}]},"uuid":"u8"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":""}]},"uuid":"u9"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"","is_error":true}]},"uuid":"u10"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":null}]},"uuid":"u11"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result"}]},"uuid":"u12"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":""}]}]},"uuid":"u13"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"image"},{"type":"text"}]}]},"uuid":"u14"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"x"},{"text":"a"}]}]},"uuid":"u14b"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":{"content":""}}]},"uuid":"u15"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":{"other":1}}]},"uuid":"u16"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":7}]},"uuid":"u17"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":["bare"]}]},"uuid":"u17b"}"#,
        r#"{"type":"user","message":{"content":[{"type":"image","source":{}}]},"uuid":"u18"}"#,
        r#"{"type":"user","isMeta":true,"message":{"content":"caveat"},"uuid":"u19"}"#,
        r#"{"type":"user","isMeta":true,"message":{"content":[{"type":"tool_result","content":"ok"}]},"uuid":"u20"}"#,
        r#"{"type":"user","isCompactSummary":true,"message":{"content":""},"uuid":"u21"}"#,
        r#"{"type":"user","isCompactSummary":"yes","message":{"content":"x"},"uuid":"u21b"}"#,
        r#"{"type":"system","subtype":"compact_boundary","parentUuid":null,"logicalParentUuid":"u3","uuid":"c1","compactMetadata":{}}"#,
        r#"{"type":"system","subtype":"compact_boundary","parentUuid":"u3","logicalParentUuid":"u1","uuid":"c2"}"#,
        r#"{"type":"system","subtype":"compact_boundary","logicalParentUuid":7,"uuid":"c3"}"#,
        r#"{"type":"system","content":"","uuid":"s1"}"#,
        r#"{"type":"system","content":"note","uuid":"s2","timestamp":"not a time"}"#,
        r#"{"type":"system","content":{"a":1},"uuid":"s3"}"#,
        r#"{"type":"system","uuid":"s4","timestamp":12}"#,
        r#"{"type":"summary","summary":"Fix the parser","leafUuid":"u3"}"#,
        r#"{"type":"summary","summary":null,"leafUuid":"u3"}"#,
        r#"{"type":"file-history-snapshot","messageId":"m","snapshot":{}}"#,
        r#"{"type":5,"uuid":"x1"}"#,
        r#"{"uuid":"x2"}"#,
        r#"{"type":"user","uuid":null,"parentUuid":"u1","message":{"content":"no uuid"}}"#,
        r#"{"type":"user","uuid":5,"id":"pulled","parentId":"u1","message":{"content":"ids of pull"}}"#,
        r#"{"type":"user","uuid":"x3","parentUuid":5,"message":{"content":"odd parent"}}"#,
        r#"{"type":"user","uuid":"x4","uuid":"x5","message":{"content":"duplicate"}}"#,
        r#"{"type":"user","uuid":"x6","message":{"content":"a","content":""}}"#,
        r#"{"type":"user","uuid":"x7","message":"a string"}"#,
        r#"{"type":"user","uuid":"x8","message":null}"#,
        r#"{"type":"user","uuid":"x9","message":{"content":{"text":"x"}}}"#,
        r#"{"type":"user","uuid":"x10","message":{"content":["bare block"]}}"#,
        r#"{"type":"user","uuid":"x11","message":{"content":true}}"#,
        r#"{"type":"user","uuid":"m1","cwd":"/srv/b/proj","message":{"content":"mapped"}}"#,
        r#"{"type":"file-history-snapshot","id":"m2","cwd":"/srv/b","snapshot":{}}"#,
        r#"{"type":"user","uuid":"x12","cwd":"relative","message":{"content":"c"}}"#,
        r#"{"type":"user","uuid":"x13","cwd":5,"message":{"content":"c"}}"#,
        r#"{"type":"user","uuid":"x14","cwd":null,"message":{"content":"c"}}"#,
        r#"{"type":"user","uuid":"x15","role":"user","ts":"2026-01-01T00:00:00Z","message":{"content":"c"}}"#,
        r#"{"type":"user","uuid":"x16","role":"a","role":"b","message":{"content":"c"}}"#,
        r#"{"type":"user","uuid":"y1","message":{"content":[["text","hi"]]}}"#,
        r#"{"type":"user","uuid":"y2","message":["x",{"content":"y"}]}"#,
        r#"{"type":"user","uuid":"y3","message":{"content":[{"type":"tool_result","content":[["text","x"]]}]}}"#,
        r#"{"id":"d00d","parentId":"p","eviRawLine":"bm90IGpzb24="}"#,
        r#"  {"type":"user","uuid":"x17","message":{"content":"space before"}}"#,
        "not json",
        "[1,2]",
        "{\"type\":\"user\",\"message\":{\"content\":\"cut",
    ];

    const CODEX: &[&str] = &[
        r#"{"timestamp":"2026-01-20T10:00:00.120Z","type":"session_meta","payload":{"id":"0199","timestamp":"2026-01-20T10:00:00.100Z","cwd":"/home/a/proj","cli_version":"0.45.0","model_provider":"openai"}}"#,
        r#"{"type":"session_meta","payload":{"id":"0199","timestamp":"t"}}"#,
        r#"{"type":"session_meta","payload":{"id":"0199","timestamp":"t","cwd":null}}"#,
        r#"{"type":"session_meta","payload":{"id":"0199","timestamp":"t","cwd":"/x","cli_version":45}}"#,
        r#"{"type":"session_meta","payload":{"id":"0199","cwd":"/x"}}"#,
        r#"{"type":"session_meta","payload":null}"#,
        r#"{"timestamp":"2026-01-20T10:00:00.130Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>x</environment_context>"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<env>"},{"type":"input_text","text":"do it"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"  # AGENTS.md"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"invalid","content":[{"type":"output_text","text":"x"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","content":[{"type":"output_text","text":"no role"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":7,"content":"a string"}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_image","image_url":"x"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":""}]}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":["bare"]}}"#,
        r#"{"type":"response_item","payload":{"type":"reasoning","summary":[],"content":null,"encrypted_content":"ZQ=="}}"#,
        r#"{"type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":""}]}}"#,
        r#"{"type":"response_item","payload":{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"reasoning","summary":"not a list"}}"#,
        r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}","call_id":"c"}}"#,
        r#"{"type":"response_item","payload":{"type":"local_shell_call","action":{}}}"#,
        r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c","output":""}}"#,
        r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c","output":{"content":"ok"}}}"#,
        r#"{"type":"response_item","payload":{"type":"custom_tool_call_output","output":[{"type":"text","text":"x"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"other_item"}}"#,
        r#"{"type":"response_item","payload":"a string"}"#,
        r#"{"type":"response_item"}"#,
        r#"{"type":"response_item","payload":["message","user"]}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[["input_text","x"]]}}"#,
        r#"{"timestamp":"2026-01-20T10:00:09.000Z","type":"compacted","payload":{"message":"short"}}"#,
        r#"{"type":"event_msg","payload":{"type":"user_message","message":"hi"}}"#,
        r#"{"type":"turn_context","payload":{"cwd":"/x"}}"#,
        r#"{"type":"function_call_output","call_id":"c","output":"bare item"}"#,
        r#"{"type":"something","payload":{}}"#,
        r#"{"record_type":"state"}"#,
        r#"{"type":"response_item","type":"compacted","payload":{}}"#,
        r#"{"id":"d00d","parentId":"p","eviRawLine":"bm90IGpzb24="}"#,
        r#"{"id":"pulled","parentId":null,"type":"response_item","payload":{"type":"function_call","name":"x"}}"#,
        "not json",
    ];

    fn map() -> PathMap {
        let mut m = std::collections::BTreeMap::new();
        m.insert("/home/a".to_owned(), "/srv/b".to_owned());
        PathMap::new(&m)
    }

    /// Asserts that every line reads alike both ways, as the tree reads it
    /// and as a message; returns how many the one pass answered for.
    fn agree(agent: Agent, lines: impl IntoIterator<Item = Vec<u8>>, map: &PathMap) -> usize {
        let mut fast = 0;
        for raw in lines {
            let canon = agent.canonical(&raw, map);
            fast += usize::from(Message::outline(agent, &raw).is_some());
            assert_eq!(
                format!("{:?}", Message::read(agent, &raw)),
                format!("{:?}", Message::read_whole(agent, &raw)),
                "{}",
                String::from_utf8_lossy(&raw)
            );
            for want in [true, false] {
                assert_eq!(
                    AgentLine::read(agent, &raw, &canon, map, want),
                    AgentLine::read_whole(agent, &raw, &canon, map, want),
                    "{}",
                    String::from_utf8_lossy(&raw)
                );
            }
        }
        fast
    }

    fn bytes(lines: &[&str]) -> Vec<Vec<u8>> {
        lines.iter().map(|l| l.as_bytes().to_vec()).collect()
    }

    #[test]
    fn one_pass_agrees_with_the_long_way() {
        let n = agree(Agent::ClaudeCode, bytes(CLAUDE), &PathMap::default());
        assert!(n > CLAUDE.len() * 3 / 4, "{n} of {}", CLAUDE.len());
        // Mapped `cwd`: ids from the canonical line.
        assert!(matches!(
            Agent::ClaudeCode.canonical(br#"{"cwd":"/srv/b/proj"}"#, &map()),
            Cow::Owned(_)
        ));
        agree(Agent::ClaudeCode, bytes(CLAUDE), &map());
        let n = agree(Agent::Codex, bytes(CODEX), &map());
        assert!(n > CODEX.len() * 3 / 4, "{n} of {}", CODEX.len());
    }

    #[test]
    fn one_pass_agrees_on_the_agents_own_fixtures() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/tests/e2e/fixtures/agents");
        for (file, agent) in [
            ("claude-code.jsonl", Agent::ClaudeCode),
            ("claude-code-tools.jsonl", Agent::ClaudeCode),
            ("claude-code-subagent.jsonl", Agent::ClaudeCode),
            ("codex-rollout.jsonl", Agent::Codex),
            ("codex-tools.jsonl", Agent::Codex),
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            let text = text.replace("@PROJECT@", "/home/a/proj");
            let lines: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
            let count = lines.len();
            let n = agree(agent, lines, &map());
            assert_eq!(n, count, "{file}: every line in one pass");
        }
    }

    /// Every line of the session files under `$EVI_OUTLINE_CORPUS` (a
    /// Claude Code or Codex folder, e.g. one `evi-gen-home --claude-code`
    /// wrote): run with `--ignored` to check a real corpus.
    #[test]
    #[ignore = "needs EVI_OUTLINE_CORPUS"]
    fn one_pass_agrees_on_a_corpus() {
        let root = std::path::PathBuf::from(std::env::var_os("EVI_OUTLINE_CORPUS").unwrap());
        let (mut files, mut fast, mut all) = (0, 0, 0);
        for source in [Agent::ClaudeCode, Agent::Codex] {
            let src = crate::source::Source {
                agent: source,
                root: root.clone(),
            };
            for f in src.sessions() {
                files += 1;
                let text = std::fs::read(&f.path).unwrap();
                let lines: Vec<Vec<u8>> = text
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect();
                all += lines.len();
                fast += agree(source, lines, &PathMap::default());
            }
        }
        eprintln!("{files} files, {all} lines, {fast} read in one pass");
        assert!(files > 0);
    }
}
