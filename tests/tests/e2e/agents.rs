//! Other agents' sessions (Claude Code, Codex) as sync sources: they land
//! where each agent looks for them on a device whose project lives at
//! another path, both devices continue them, and they converge.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{Device, TestServer, derive_id, two_devices};

pub(crate) const CLAUDE_ID: &str = "d284f444-9e56-4318-a472-bc18481b7793";
pub(crate) const CODEX_ID: &str = "019bd6d8-b99b-7eb1-847c-87c3da10673a";
pub(crate) const CODEX_REL: &str =
    "sessions/2026/01/19/rollout-2026-01-19T15-21-26-019bd6d8-b99b-7eb1-847c-87c3da10673a.jsonl";

pub(crate) fn fixture(name: &str, project: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/fixtures/agents")
        .join(name);
    std::fs::read_to_string(path)
        .unwrap()
        .replace("@PROJECT@", project)
}

/// Claude Code's folder name for a project path.
pub(crate) fn folder(project: &str) -> String {
    project
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

pub(crate) fn claude(d: &Device) -> PathBuf {
    d.dir.path().join("claude")
}

pub(crate) fn codex(d: &Device) -> PathBuf {
    d.dir.path().join("codex")
}

/// Gemini CLI's folder: `.gemini` in the device's `HOME`, where the real
/// client (run with that `HOME`) keeps it.
pub(crate) fn gemini(d: &Device) -> PathBuf {
    d.dir.path().join(".gemini")
}

/// `[agents]` on, pointing at this device's folders, and `extra`.
pub(crate) fn enable(d: &Device, extra: &str) {
    d.write_config(&format!(
        "[agents]\nclaude-code = true\ncodex = true\ngemini = true\nclaude-code-dir = \"{}\"\ncodex-dir = \"{}\"\ngemini-dir = \"{}\"\n{extra}",
        claude(d).display(),
        codex(d).display(),
        gemini(d).display()
    ));
}

pub(crate) fn project(d: &Device, p: &str) -> String {
    d.dir.path().join(p).display().to_string()
}

/// The `threads` table of Codex's first state migration
/// (`codex-rs/state/migrations/0001_threads.sql`), plus `extra` columns.
fn codex_index(d: &Device, extra: &str) -> PathBuf {
    std::fs::create_dir_all(codex(d)).unwrap();
    let db = codex(d).join("state_5.sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE threads (
            id TEXT PRIMARY KEY, rollout_path TEXT NOT NULL, created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL, source TEXT NOT NULL, model_provider TEXT NOT NULL,
            cwd TEXT NOT NULL, title TEXT NOT NULL, sandbox_policy TEXT NOT NULL,
            approval_mode TEXT NOT NULL, tokens_used INTEGER NOT NULL DEFAULT 0,
            archived INTEGER NOT NULL DEFAULT 0, archived_at INTEGER, git_sha TEXT,
            git_branch TEXT, git_origin_url TEXT{extra});
         CREATE INDEX idx_threads_updated_at ON threads(updated_at DESC, id DESC);"
    ))
    .unwrap();
    db
}

/// The threads Codex would list: (id, rollout_path, cwd, title), newest first.
fn codex_threads(db: &Path) -> Vec<(String, String, String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut st = conn
        .prepare(
            "SELECT id, rollout_path, cwd, title FROM threads WHERE archived = 0 \
             ORDER BY updated_at DESC, id DESC",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

pub(crate) fn cwd(p: &str) -> String {
    format!("\"cwd\":\"{p}\"")
}

pub(crate) fn claude_file(d: &Device, project: &str) -> PathBuf {
    claude(d)
        .join("projects")
        .join(folder(project))
        .join(format!("{CLAUDE_ID}.jsonl"))
}

pub(crate) fn append(path: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(f, "{line}").unwrap();
}

/// (id, parent, content less what pull added) of every line, Claude Code's
/// `uuid`s explicit, `id`/`parentId` as pull adds them, the rest derived.
pub(crate) fn entries(path: &Path) -> Vec<(String, Option<String>, Value)> {
    entries_of(&std::fs::read_to_string(path).unwrap())
}

fn entries_of(text: &str) -> Vec<(String, Option<String>, Value)> {
    let mut tip: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let o = v.as_object_mut().unwrap();
        let (id, parent) = if let Some(Value::String(u)) = o.get("uuid") {
            (
                u.clone(),
                o.get("parentUuid")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
        } else if let Some(Value::String(id)) = o.get("id").cloned() {
            let parent = o.get("parentId").and_then(Value::as_str).map(str::to_owned);
            o.remove("id");
            o.remove("parentId");
            (id, parent)
        } else {
            let parent = tip.clone();
            let id = derive_id(parent.as_deref(), line.as_bytes());
            tip = Some(id.clone());
            (id, parent)
        };
        out.push((id, parent, v));
    }
    out
}

pub(crate) fn entry_set(path: &Path) -> BTreeSet<(String, String)> {
    entry_set_as(path, ("", ""))
}

/// [`entry_set`] of the file with the `cwd`s `swap.0` read as `swap.1`.
pub(crate) fn entry_set_as(path: &Path, swap: (&str, &str)) -> BTreeSet<(String, String)> {
    let mut text = std::fs::read_to_string(path).unwrap();
    if !swap.0.is_empty() {
        text = text.replace(&cwd(swap.0), &cwd(swap.1));
    }
    entries_of(&text)
        .into_iter()
        .map(|(id, _, v)| (id, v.to_string()))
        .collect()
}

/// Two devices with both agents on, A's project at `home/a/proj` and B's
/// at `srv/b/proj`, which B's `[paths]` maps A's to.
pub(crate) fn mapped_devices() -> (crate::common::TestServer, Device, Device, String, String) {
    let (server, a, b) = two_devices();
    let proj_a = project(&a, "home/a/proj");
    let proj_b = project(&b, "srv/b/proj");
    enable(&a, "");
    enable(&b, &format!("[paths]\n\"{proj_a}\" = \"{proj_b}\"\n"));
    (server, a, b, proj_a, proj_b)
}

/// The Claude Code and Codex fixture sessions of `project`, written where
/// each agent keeps them on `d`: their paths.
pub(crate) fn write_fixture_sessions(d: &Device, project: &str) -> (PathBuf, PathBuf) {
    let cc = claude_file(d, project);
    std::fs::create_dir_all(cc.parent().unwrap()).unwrap();
    std::fs::write(&cc, fixture("claude-code.jsonl", project)).unwrap();
    let cx = codex(d).join(CODEX_REL);
    std::fs::create_dir_all(cx.parent().unwrap()).unwrap();
    std::fs::write(&cx, fixture("codex-rollout.jsonl", project)).unwrap();
    (cc, cx)
}

#[test]
fn claude_code_and_codex_sessions_land_where_each_agent_looks_and_converge() {
    let (server, a, b, proj_a, proj_b) = mapped_devices();
    let index_b = codex_index(&b, "");

    let (cc_a, cx_a) = write_fixture_sessions(&a, &proj_a);

    assert_eq!(
        a.sync_ok(&["push"]),
        "pushed 6 entries in 2 sessions, 0 journal lines, 0 blobs (2 new records, 0 already on the server)\n"
    );
    assert_eq!(
        b.sync_ok(&["pull"]),
        "pulled 6 entries in 2 sessions, 0 blobs; 0 sessions diverged (both branches kept)\n"
    );
    // B's Claude Code finds it in the folder of B's own checkout, and its
    // lines name B's checkout as their `cwd` (Claude Code resumes only a
    // session of the directory it runs in); nothing else changed.
    let cc_b = claude_file(&b, &proj_b);
    assert_eq!(
        std::fs::read_to_string(&cc_b).unwrap(),
        std::fs::read_to_string(&cc_a)
            .unwrap()
            .replace(&cwd(&proj_a), &cwd(&proj_b))
    );
    assert!(!claude_file(&b, &proj_a).exists(), "not under A's path");
    // Codex's rollout too, its `cwd`s B's (`codex resume --last` in B's
    // checkout finds it by them).
    let cx_b = codex(&b).join(CODEX_REL);
    assert_eq!(
        std::fs::read_to_string(&cx_b).unwrap(),
        std::fs::read_to_string(&cx_a)
            .unwrap()
            .replace(&cwd(&proj_a), &cwd(&proj_b))
    );
    // Transcripts pull made are the user's alone, as eVi's are.
    for f in [&cc_b, &cx_b] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    // Codex's index on B lists it, at B's rollout and B's project path.
    assert_eq!(
        codex_threads(&index_b),
        vec![(
            CODEX_ID.to_owned(),
            cx_b.display().to_string(),
            proj_b.clone(),
            "Find where the parser drops the last token".to_owned()
        )]
    );
    // Listed with their agent and project, and handed off with each
    // agent's own resume command, from B's checkout.
    let run = b.evi(&["sessions", "list", "--days", "3650", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listed: Value = serde_json::from_str(&run.stdout).unwrap();
    let mut seen: Vec<(String, String, String)> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let f = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
            (f("agent"), f("id"), f("project"))
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("claude-code".into(), CLAUDE_ID.into(), proj_b.clone()),
            ("codex".into(), CODEX_ID.into(), proj_b.clone()),
        ]
    );
    let run = b.evi(&["sessions", "list", "--agent", "codex", "--days", "3650"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("AGENT"), "{}", run.stdout);
    assert!(
        run.stdout.contains("codex") && !run.stdout.contains("claude-code"),
        "{}",
        run.stdout
    );
    for (id, cmd) in [(CLAUDE_ID, "claude --resume"), (CODEX_ID, "codex resume")] {
        let run = b.sync(&["sessions", "handoff", &id[..8], "--no-push", "--json"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let h: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(
            h["resume_command"],
            format!("cd {proj_b} && {cmd} {id}"),
            "{h}"
        );
        assert_eq!(h["project"], proj_b.as_str());
        // The web viewer's address of the session, as for eVi's.
        assert_eq!(
            h["url"],
            format!("http://127.0.0.1:7878/?session={id}"),
            "{h}"
        );
    }

    // What pull wrote is what push skips.
    assert_eq!(
        b.sync_ok(&["push"]),
        "pushed 0 entries in 0 sessions, 0 journal lines, 0 blobs (0 new records, 0 already on the server)\n"
    );

    // Both continue both sessions from the same point: two branches each.
    let last = "5a1c7e0b-3f7e-4d55-9a57-0c1e2f3a4b5c";
    append(
        &cc_a,
        &format!(
            r#"{{"parentUuid":"{last}","isSidechain":false,"cwd":"{proj_a}","sessionId":"{CLAUDE_ID}","type":"user","message":{{"role":"user","content":"fix it on the laptop"}},"uuid":"aaaaaaaa-0000-4000-8000-000000000001","timestamp":"2026-02-03T18:12:00.000Z"}}"#
        ),
    );
    append(
        &cc_a,
        r#"{"type":"summary","summary":"Parser fix","leafUuid":"aaaaaaaa-0000-4000-8000-000000000001"}"#,
    );
    append(
        &cc_b,
        &format!(
            r#"{{"parentUuid":"{last}","isSidechain":false,"cwd":"{proj_b}","sessionId":"{CLAUDE_ID}","type":"user","message":{{"role":"user","content":"fix it on the desktop"}},"uuid":"bbbbbbbb-0000-4000-8000-000000000002","timestamp":"2026-02-03T18:13:00.000Z"}}"#
        ),
    );
    append(
        &cx_a,
        r#"{"timestamp":"2026-01-19T15:22:00.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"on the laptop"}]}}"#,
    );
    append(
        &cx_b,
        r#"{"timestamp":"2026-01-19T15:23:00.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"on the desktop"}]}}"#,
    );

    for d in [&a, &b] {
        d.sync_ok(&["push"]);
    }
    for d in [&a, &b] {
        d.sync_ok(&["pull"]);
    }
    // A second round changes nothing: nothing doubles.
    for d in [&a, &b] {
        d.sync_ok(&["push"]);
        d.sync_ok(&["pull"]);
    }
    for (pa, pb, n, swap) in [
        (&cc_a, &cc_b, 6, (proj_b.as_str(), proj_a.as_str())),
        (&cx_a, &cx_b, 5, (proj_b.as_str(), proj_a.as_str())),
    ] {
        let (ea, eb) = (entries(pa), entries(pb));
        assert_eq!(ea.len(), n, "{}", std::fs::read_to_string(pa).unwrap());
        assert_eq!(eb.len(), n, "{}", std::fs::read_to_string(pb).unwrap());
        let ids: BTreeSet<_> = ea.iter().map(|e| e.0.clone()).collect();
        assert_eq!(ids.len(), n, "no entry twice");
        assert_eq!(entry_set(pa), entry_set_as(pb, swap), "converged");
    }
    // Every line of the session on B names B's checkout, the desktop's own
    // and the laptop's alike; on A, A's.
    let on_b = std::fs::read_to_string(&cc_b).unwrap();
    assert_eq!(on_b.matches(&cwd(&proj_b)).count(), 4, "{on_b}");
    assert!(!on_b.contains(&proj_a), "{on_b}");
    let on_a = std::fs::read_to_string(&cc_a).unwrap();
    assert!(!on_a.contains(&proj_b), "{on_a}");

    // The index still holds one row for it.
    assert_eq!(codex_threads(&index_b).len(), 1);

    // A third device with no map keeps the original project path; its Codex
    // index has a column this version does not know: it is left alone, and
    // the user is told.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "server");
    enable(&c, "");
    let index_c = codex_index(&c, ", workspace_id TEXT NOT NULL");
    let pulled = c.sync(&["sync", "pull"]);
    assert_eq!(pulled.code, 0, "{}", pulled.stderr);
    assert!(
        pulled.stderr.contains("index") && pulled.stderr.contains("workspace_id"),
        "{}",
        pulled.stderr
    );
    assert!(codex_threads(&index_c).is_empty());
    let cc_c = claude_file(&c, &proj_a);
    assert_eq!(entry_set(&cc_c), entry_set(&cc_a));
    assert_eq!(entry_set(&codex(&c).join(CODEX_REL)), entry_set(&cx_a));
}

#[test]
fn agents_not_turned_on_stay_out() {
    let (_server, a, b) = two_devices();
    let proj = project(&a, "home/a/proj");
    enable(&a, "");
    let cc_a = claude_file(&a, &proj);
    std::fs::create_dir_all(cc_a.parent().unwrap()).unwrap();
    std::fs::write(&cc_a, fixture("claude-code.jsonl", &proj)).unwrap();
    // The default folders of B (under its HOME) exist but are not opted in.
    std::fs::create_dir_all(b.dir.path().join(".claude/projects")).unwrap();
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert!(
        !b.dir
            .path()
            .join(".claude/projects")
            .join(folder(&proj))
            .exists(),
        "nothing written into an agent's folder that was not turned on"
    );
}

pub(crate) const TOOLS_ID: &str = "5f0c2b1e-7d4a-4c39-9a6e-2b8f1d3c4e5a";
pub(crate) const SUB_STEM: &str = "agent-a1b2c3d4";
pub(crate) const CODEX_TOOLS_ID: &str = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
pub(crate) const CODEX_TOOLS_REL: &str =
    "sessions/2026/01/20/rollout-2026-01-20T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl";
/// The encrypted reasoning in the fixtures (base64 placeholders): what no
/// reader may ever print.
pub(crate) const SECRETS: [&str; 3] = [
    "RU5DUllQVEVELVNJR05BVFVSRQ==",
    "UkVEQUNURUQtVEhJTktJTkc=",
    "RU5DUllQVEVELVJFQVNPTklORw==",
];

pub(crate) fn no_secret(what: &str, text: &str) {
    for s in SECRETS {
        assert!(
            !text.contains(s),
            "{what} shows encrypted reasoning {s}:\n{text}"
        );
    }
}

/// A Claude Code session file of `d` (under the folder of `project`).
pub(crate) fn claude_session(d: &Device, project: &str, id: &str) -> PathBuf {
    claude(d)
        .join("projects")
        .join(folder(project))
        .join(format!("{id}.jsonl"))
}

pub(crate) fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `sessions list --days` counts another agent's session by the local day
/// of its last message, as it counts eVi's by their day folders: ten hours
/// east of UTC, the fixture's last message (2026-02-03T18:11:45Z) is on
/// the 4th, which its UTC date is not.
#[test]
fn list_days_count_an_agents_session_by_its_local_day() {
    let dev = Device::new();
    enable(&dev, "");
    let proj = project(&dev, "work/app");
    put(
        &claude_file(&dev, &proj),
        &fixture("claude-code.jsonl", &proj),
    );
    let listed = |days: i64| -> Vec<String> {
        let run: crate::common::Run = dev
            .cmd()
            .env("TZ", "XYZ-10")
            .args(["sessions", "list", "--json", "--days", &days.to_string()])
            .output()
            .unwrap()
            .into();
        let v: Value = serde_json::from_str(&ok(run, "list")).unwrap();
        let rows = v["sessions"].as_array().unwrap();
        rows.iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let today = (chrono::Utc::now() + chrono::Duration::hours(10)).date_naive();
    let fourth = chrono::NaiveDate::from_ymd_opt(2026, 2, 4).unwrap();
    let since_the_4th = (today - fourth).num_days() + 1;
    assert_eq!(listed(since_the_4th), [CLAUDE_ID]);
    assert_eq!(listed(since_the_4th - 1), Vec::<String>::new());
}

fn ok(run: crate::common::Run, what: &str) -> String {
    assert_eq!(run.code, 0, "{what}: {}", run.stderr);
    run.stdout
}

/// A fake `name` on PATH that records its working directory and arguments
/// in `<bin>/<name>.ran`: the user's real program boundary.
fn fake_agent(bin: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(bin).unwrap();
    let ran = bin.join(format!("{name}.ran"));
    let script = bin.join(name);
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\npwd > '{}'\nfor a in \"$@\"; do echo \"$a\"; done >> '{}'\n",
            ran.display(),
            ran.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    ran
}

#[test]
fn pulled_agent_sessions_read_as_conversations_and_resume_in_their_agent() {
    let (_server, a, b) = two_devices();
    let proj_a = project(&a, "home/a/proj");
    let proj_b = project(&b, "srv/b/proj");
    std::fs::create_dir_all(&proj_b).unwrap();
    enable(&a, "");
    enable(&b, &format!("[paths]\n\"{proj_a}\" = \"{proj_b}\"\n"));
    let cc_a = claude_session(&a, &proj_a, TOOLS_ID);
    put(&cc_a, &fixture("claude-code-tools.jsonl", &proj_a));
    let sub_rel = format!("{TOOLS_ID}/subagents/{SUB_STEM}.jsonl");
    let sub_a = cc_a.parent().unwrap().join(&sub_rel);
    put(&sub_a, &fixture("claude-code-subagent.jsonl", &proj_a));
    put(
        &codex(&a).join(CODEX_TOOLS_REL),
        &fixture("codex-tools.jsonl", &proj_a),
    );
    a.sync_ok(&["push"]);
    assert_eq!(
        b.sync_ok(&["pull"]),
        "pulled 19 entries in 3 sessions, 0 blobs; 0 sessions diverged (both branches kept)\n"
    );

    // The subagent transcript lands beside its session, in B's project
    // folder, its `cwd`s B's.
    let cc_b = claude_session(&b, &proj_b, TOOLS_ID);
    let sub_b = cc_b.parent().unwrap().join(&sub_rel);
    assert_eq!(
        std::fs::read_to_string(&sub_b).unwrap(),
        std::fs::read_to_string(&sub_a)
            .unwrap()
            .replace(&cwd(&proj_a), &cwd(&proj_b))
    );

    // `show`: the conversation, tree-aware through the compaction (the
    // boundary starts a new root; it continues its logical parent), the
    // thinking in plain text, the tool call and its result; never the
    // encrypted reasoning, nor the bookkeeping lines.
    let shown = ok(b.evi(&["sessions", "show", &TOOLS_ID[..8]]), "show");
    no_secret("show", &shown);
    for want in [
        &format!("claude-code session {TOOLS_ID} (6 messages, 1 branch"),
        "title: Lexer off-by-one fix",
        &format!("project: {proj_b}"),
        "#1 user",
        "Read the lexer and fix the off-by-one",
        "#2 assistant",
        "  (thinking)\n  The loop bound in next_token looks off by one.",
        "Reading the lexer first.",
        r#"  → Read({"file_path":"src/lexer.rs"})"#,
        "#3 tool",
        "  for i in 0..len - 1 { emit(tokens[i]); }",
        "#4 system",
        "Conversation compacted (auto, 2048 tokens before)",
        "#5 system",
        "the loop in src/lexer.rs stops one token early.",
        "#6 assistant",
        "Fixed: the loop now runs to len.",
    ] {
        assert!(shown.contains(want), "show lacks {want:?}:\n{shown}");
    }
    assert!(!shown.contains("file-history-snapshot"), "{shown}");

    // `show --json`: the same messages, one type with the web viewer's.
    let page: Value = serde_json::from_str(&ok(
        b.evi(&["sessions", "show", TOOLS_ID, "--json"]),
        "json",
    ))
    .unwrap();
    let roles: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "system", "system", "assistant"]
    );
    assert_eq!(page["session"]["agent"], "claude-code");
    assert_eq!(page["session"]["project"], proj_b.as_str());
    assert_eq!(
        page["messages"][1]["reasoning"],
        "The loop bound in next_token looks off by one."
    );
    assert_eq!(page["messages"][1]["tool_calls"][0]["name"], "Read");
    assert_eq!(page["messages"][2]["tool_call_id"], "toolu_01");
    no_secret("show --json", &page.to_string());

    // `export` in every format.
    let md = ok(b.evi(&["sessions", "export", TOOLS_ID]), "export md");
    for want in [
        "# claude-code session",
        "> The loop bound in next_token looks off by one.",
        "Tool call `Read`",
        "Conversation compacted",
        "Fixed: the loop now runs to len.",
    ] {
        assert!(md.contains(want), "md lacks {want:?}:\n{md}");
    }
    no_secret("export md", &md);
    let html = ok(
        b.evi(&["sessions", "export", TOOLS_ID, "-f", "html"]),
        "export html",
    );
    assert!(html.contains("<details class=\"thinking\">"), "{html}");
    assert!(html.contains("Fixed: the loop now runs to len."), "{html}");
    assert!(html.contains("→ Read("), "{html}");
    no_secret("export html", &html);
    let json = ok(
        b.evi(&["sessions", "export", TOOLS_ID, "-f", "json"]),
        "export json",
    );
    no_secret("export json", &json);
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["agent"], "claude-code");
    let entries = doc["entries"].as_array().unwrap();
    let thinking = entries
        .iter()
        .find(|e| e["message"]["reasoning"].is_string())
        .expect("the thinking entry");
    // The line is there, but for what only the model may read.
    assert_eq!(
        thinking["line"]["message"]["content"][0]["thinking"],
        "The loop bound in next_token looks off by one."
    );
    assert!(thinking["line"]["message"]["content"][0]["signature"].is_null());

    // The subagent's transcript, by its stream name.
    let shown = ok(
        b.evi(&[
            "sessions",
            "show",
            &format!("claude-code/{TOOLS_ID}/{SUB_STEM}"),
        ]),
        "show subagent",
    );
    assert!(
        shown.contains("next_token is called from parse_expr only."),
        "{shown}"
    );

    // Codex: messages, the reasoning summary, the call and its output, in
    // order; the `event_msg` echo of the prompt is not a second message.
    let shown = ok(b.evi(&["sessions", "show", CODEX_TOOLS_ID]), "show codex");
    no_secret("show codex", &shown);
    for want in [
        &format!("codex session {CODEX_TOOLS_ID} (6 messages"),
        &format!("project: {proj_b}"),
        "#1 system",
        "#2 user",
        "List the files",
        "  (thinking)\n  Checking directory",
        r#"  → shell({"command":["ls"]})"#,
        "#5 tool",
        "file1.txt",
        "#6 assistant",
        "There are two files: file1.txt and file2.txt.",
    ] {
        assert!(shown.contains(want), "codex show lacks {want:?}:\n{shown}");
    }
    assert_eq!(shown.matches("List the files").count(), 1, "{shown}");
    // The shell tool's JSON-wrapped output shows as what `ls` printed.
    assert!(!shown.contains(r#"{"output""#), "{shown}");
    assert!(
        shown.contains("file1.txt\n") && shown.contains("file2.txt\n"),
        "{shown}"
    );
    for format in ["md", "html", "json"] {
        let out = ok(
            b.evi(&["sessions", "export", CODEX_TOOLS_ID, "-f", format]),
            "export codex",
        );
        no_secret(&format!("codex export {format}"), &out);
        assert!(out.contains("Checking directory"), "{format}: {out}");
        assert!(out.contains("There are two files"), "{format}: {out}");
    }

    // The web viewer answers for both, with their messages.
    let web = b.web("127.0.0.1:0");
    for (id, text) in [
        (TOOLS_ID, "Fixed: the loop now runs to len."),
        (
            CODEX_TOOLS_ID,
            "There are two files: file1.txt and file2.txt.",
        ),
    ] {
        let resp = crate::common::get(format!("{}/api/sessions/{id}", web.base)).unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.text().unwrap();
        no_secret("web", &body);
        let page: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(page["session"]["id"], id);
        let texts: Vec<&str> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["text"].as_str())
            .collect();
        assert!(texts.contains(&text), "{texts:?}");
        let resp = crate::common::get(format!("{}/?session={id}", web.base)).unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.text().unwrap().contains("app.js"));
    }
    drop(web);

    // `resume` runs the agent's own command from the project as it is
    // here; `--print` only prints it.
    let bin = b.dir.path().join("bin");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (id, name, args) in [
        (TOOLS_ID, "claude", vec!["--resume", TOOLS_ID]),
        (CODEX_TOOLS_ID, "codex", vec!["resume", CODEX_TOOLS_ID]),
    ] {
        let ran = fake_agent(&bin, name);
        let resume = |extra: &[&str]| -> crate::common::Run {
            b.sync_cmd()
                .env("PATH", &path)
                .args(["sessions", "resume", id])
                .args(extra)
                .output()
                .unwrap()
                .into()
        };
        let printed = ok(resume(&["--print"]), "resume --print");
        assert_eq!(
            printed,
            format!("cd {proj_b} && {name} {}\n", args.join(" "))
        );
        assert!(!ran.exists(), "--print runs nothing");
        ok(resume(&[]), "resume");
        let recorded = std::fs::read_to_string(&ran).unwrap();
        let mut want = vec![proj_b.as_str()];
        want.extend(&args);
        assert_eq!(recorded.lines().collect::<Vec<_>>(), want);
    }

    // `verify` holds every agent's sessions against the server, per agent.
    let verified = ok(b.sync(&["sync", "verify"]), "verify");
    for want in [
        "claude-code: 2 sessions, 10 entries here; 2 records on the server, 2 verified",
        "codex: 1 sessions, 9 entries here; 1 records on the server, 1 verified",
        "no problems found",
    ] {
        assert!(
            verified.contains(want),
            "verify lacks {want:?}:\n{verified}"
        );
    }
}

/// A and B with `[agents]` on, and A's Claude Code session of the fixture
/// (not written yet): the project, A's file of it, and its bytes.
pub(crate) fn claude_on_two() -> (TestServer, Device, Device, String, PathBuf, String) {
    let (server, a, b) = two_devices();
    let proj = project(&a, "home/a/proj");
    enable(&a, "");
    enable(&b, "");
    let cc_a = claude_file(&a, &proj);
    let whole = fixture("claude-code.jsonl", &proj);
    (server, a, b, proj, cc_a, whole)
}

/// The fixture's next line: the user says `content`.
pub(crate) fn next_user_line(proj: &str, content: &str) -> String {
    format!(
        r#"{{"parentUuid":"5a1c7e0b-3f7e-4d55-9a57-0c1e2f3a4b5c","isSidechain":false,"cwd":"{proj}","sessionId":"{CLAUDE_ID}","type":"user","message":{{"role":"user","content":"{content}"}},"uuid":"cccccccc-0000-4000-8000-000000000003","timestamp":"2026-02-03T18:12:00.000Z"}}"#
    )
}

#[test]
fn a_line_being_written_is_not_pushed_until_finished_and_never_lands_torn() {
    let (_server, a, b, proj, cc_a, whole) = claude_on_two();
    let next = next_user_line(&proj, "and the tests");
    let (head, tail) = next.split_at(next.len() / 2);
    put(&cc_a, &format!("{whole}{head}"));
    assert!(
        a.sync_ok(&["push"])
            .starts_with("pushed 3 entries in 1 sessions"),
        "the line being written is not an entry yet"
    );
    b.sync_ok(&["pull"]);
    let cc_b = claude_file(&b, &proj);
    assert_eq!(std::fs::read_to_string(&cc_b).unwrap(), whole);

    // Claude Code finishes the line: it goes, whole.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&cc_a)
        .unwrap();
    writeln!(f, "{tail}").unwrap();
    drop(f);
    assert!(
        a.sync_ok(&["push"])
            .starts_with("pushed 1 entries in 1 sessions"),
        "the finished line"
    );
    b.sync_ok(&["pull"]);
    assert_eq!(
        std::fs::read_to_string(&cc_b).unwrap(),
        std::fs::read_to_string(&cc_a).unwrap()
    );
    let shown = ok(b.evi(&["sessions", "show", CLAUDE_ID]), "show");
    assert!(shown.contains("and the tests"), "{shown}");
}

/// A pull killed inside its write to a Claude Code session (the test hook
/// `EVI_PULL_CUT_AT`: the bytes up to the first page boundary, then the
/// process ends) leaves a line cut short; the next pull finishes it, where a
/// line Claude Code is writing would make the entry wait.
#[test]
fn a_line_a_killed_pull_cut_short_in_an_agents_file_is_finished_by_the_next_pull() {
    let (_server, a, b, proj, cc_a, whole) = claude_on_two();
    let long = next_user_line(&proj, &"and the tests ".repeat(600));
    put(&cc_a, &format!("{whole}{long}\n"));
    a.sync_ok(&["push"]);
    let cc_b = claude_file(&b, &proj);
    let run: crate::common::Run = b
        .sync_cmd()
        .env("EVI_PULL_CUT_AT", "1")
        .args(["sync", "pull"])
        .output()
        .unwrap()
        .into();
    assert_ne!(run.code, 0, "the pull was to be cut short: {}", run.stdout);
    let cut = std::fs::read(&cc_b).unwrap();
    assert!(
        cut.len().is_multiple_of(4096) && cut.last() != Some(&b'\n'),
        "the pull left its line cut at a page boundary: {} bytes",
        cut.len()
    );
    b.sync_ok(&["pull"]);
    assert!(
        std::fs::read(&cc_b).unwrap() == std::fs::read(&cc_a).unwrap(),
        "B's file is A's, its cut line finished"
    );
    let pending = b.home().join("sync/pending-agents");
    for f in std::fs::read_dir(&pending).into_iter().flatten() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(!text.contains("and the tests"), "nothing waits: {text}");
    }
}

/// `evi sync watch` carries other agents' sessions as they are written: a
/// Claude Code and a Codex session started on A after both watchers run
/// land on B (in the folders of B's checkout) by file events and the long
/// poll alone, and a line B's Claude Code adds comes back to A in A's paths.
#[test]
fn watchers_carry_claude_code_and_codex_sessions_as_they_are_written() {
    use crate::watch::{until, watch_with};
    let (_server, a, b, proj_a, proj_b) = mapped_devices();
    // The agents are installed (their folders exist), with no session yet.
    for d in [&a, &b] {
        std::fs::create_dir_all(claude(d).join("projects")).unwrap();
        std::fs::create_dir_all(codex(d).join("sessions")).unwrap();
    }
    // No periodic scan: only the agents' folders' file events bring these.
    let flags = ["--scan-secs", "600", "--backoff-max-secs", "1"];
    let wa = watch_with(&a, &flags);
    let wb = watch_with(&b, &flags);

    let (cc_a, cx_a) = write_fixture_sessions(&a, &proj_a);

    let (cc_b, cx_b) = (claude_file(&b, &proj_b), codex(&b).join(CODEX_REL));
    let mapped = |text: String, from: &str, to: &str| text.replace(&cwd(from), &cwd(to));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    until(
        "B's watcher lands both sessions where its agents look",
        30,
        || {
            read(&cx_b) == mapped(read(&cx_a), &proj_a, &proj_b)
                && read(&cc_b) == mapped(read(&cc_a), &proj_a, &proj_b)
        },
    );

    // B's Claude Code continues the session; A's watcher brings the line
    // back with A's project path.
    append(
        &cc_b,
        &format!(
            r#"{{"parentUuid":"5a1c7e0b-3f7e-4d55-9a57-0c1e2f3a4b5c","isSidechain":false,"cwd":"{proj_b}","sessionId":"{CLAUDE_ID}","type":"user","message":{{"role":"user","content":"go on from the desktop"}},"uuid":"bbbbbbbb-0000-4000-8000-0000000000b2","timestamp":"2026-02-03T18:13:00.000Z"}}"#
        ),
    );
    until("A's watcher brings B's line back in A's paths", 30, || {
        read(&cc_a) == mapped(read(&cc_b), &proj_b, &proj_a)
    });
    assert!(
        !claude_file(&b, &proj_a).exists(),
        "not under A's path on B"
    );
    for w in [&wa, &wb] {
        assert!(!w.stderr().contains("error"), "{}", w.stderr());
    }
}
