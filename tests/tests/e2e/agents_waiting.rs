//! Other agents' entries that must wait, as eVi's do ("Waiting never blocks
//! others" in DESIGN.md): kept in `sync/pending-agents/` while the agent's
//! file ends in a line it is writing (or, for a subagent transcript, while
//! its session's file is not here), listed by `evi sync status`, applied by
//! the next pull or push once they can be, and written after a line the
//! agent left unfinished for a day.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::agents::{
    CLAUDE_ID, CODEX_ID, CODEX_REL, SUB_STEM, TOOLS_ID, append, claude, claude_file, claude_on_two,
    claude_session, codex, enable, entry_set, fixture, folder, mapped_devices, next_user_line,
    project, put, write_fixture_sessions,
};
use crate::common::{Device, two_devices};

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Appends in one `write`, as an agent appends (no newline added).
fn write_once(path: &Path, bytes: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes.as_bytes()).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `status --json`'s waiting list as (session, agent, entries, reason).
fn waiting(d: &Device) -> Vec<(String, String, u64, String)> {
    let st = json(&d.sync_ok(&["status", "--json"]));
    let mut out: Vec<_> = st["waiting"]
        .as_array()
        .unwrap_or_else(|| panic!("status --json has no \"waiting\" list: {st}"))
        .iter()
        .map(|w| {
            let s = |k: &str| w[k].as_str().unwrap_or_default().to_owned();
            (
                s("session"),
                s("agent"),
                w["entries"].as_u64().unwrap(),
                s("reason"),
            )
        })
        .collect();
    out.sort();
    out
}

/// The files left in `sync/pending-agents/`.
fn pending_files(d: &Device) -> Vec<PathBuf> {
    std::fs::read_dir(d.home().join("sync/pending-agents"))
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .collect()
}

/// A Codex line: the user says `text`.
fn codex_line(text: &str, minute: u32) -> String {
    format!(
        r#"{{"timestamp":"2026-01-19T15:{minute:02}:00.000Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"{text}"}}]}}}}"#
    )
}

/// B's Claude Code's own next line: the user says `content`.
fn desktop_line(proj: &str, content: &str) -> String {
    format!(
        r#"{{"parentUuid":"5a1c7e0b-3f7e-4d55-9a57-0c1e2f3a4b5c","isSidechain":false,"cwd":"{proj}","sessionId":"{CLAUDE_ID}","type":"user","message":{{"role":"user","content":"{content}"}},"uuid":"dddddddd-0000-4000-8000-00000000000d","timestamp":"2026-02-03T18:14:00.000Z"}}"#
    )
}

#[test]
fn entries_that_waited_for_an_agents_line_go_in_with_the_next_pull_or_push_and_status_lists_them() {
    let (_server, a, b) = two_devices();
    let proj = project(&a, "home/a/proj");
    enable(&a, "");
    enable(&b, "");
    let (cc_a, cx_a) = write_fixture_sessions(&a, &proj);
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let (cc_b, cx_b) = (claude_file(&b, &proj), codex(&b).join(CODEX_REL));

    // B's Claude Code and Codex are each half way through a line of their
    // own when A's next lines of both sessions arrive.
    let cc_mine = desktop_line(&proj, "from the desktop");
    let cx_mine = codex_line("on the desktop", 23);
    let (cc_head, cc_tail) = cc_mine.split_at(cc_mine.len() / 2);
    let (cx_head, cx_tail) = cx_mine.split_at(cx_mine.len() / 2);
    write_once(&cc_b, cc_head);
    write_once(&cx_b, cx_head);
    let cc_theirs = next_user_line(&proj, "and the tests");
    append(&cc_a, &cc_theirs);
    append(&cx_a, &codex_line("on the laptop", 22));
    a.sync_ok(&["push"]);
    let (cc_before, cx_before) = (read(&cc_b), read(&cx_b));
    let pulled = json(&b.sync_ok(&["pull", "--json"]));
    assert_eq!(pulled["waiting_agents"], 2, "both entries wait: {pulled}");
    assert_eq!(
        read(&cc_b),
        cc_before,
        "nothing glued to Claude Code's line"
    );
    assert_eq!(read(&cx_b), cx_before, "nothing glued to Codex's line");

    // `evi sync status` says what waits and why.
    let cc_stream = format!("claude-code/{CLAUDE_ID}");
    let cx_stream = format!("codex/{CODEX_ID}");
    assert_eq!(
        waiting(&b),
        vec![
            (
                cc_stream.clone(),
                "claude-code".into(),
                1,
                "partial_line".into()
            ),
            (cx_stream.clone(), "codex".into(), 1, "partial_line".into()),
        ]
    );
    let status = b.sync_ok(&["status"]);
    assert!(
        status.contains(&format!(
            "waiting:   {cc_stream} (1 entries): its file ends in a line Claude Code is still writing"
        )),
        "{status}"
    );

    // Claude Code finishes its line: the next pull applies A's, though
    // nothing new is on the server.
    write_once(&cc_b, &format!("{cc_tail}\n"));
    b.sync_ok(&["pull"]);
    assert_eq!(
        read(&cc_b),
        format!("{cc_before}{cc_tail}\n{cc_theirs}\n"),
        "A's line after B's finished one"
    );
    // Codex finishes its line: the next push applies A's first.
    write_once(&cx_b, &format!("{cx_tail}\n"));
    b.sync_ok(&["push"]);
    assert!(
        read(&cx_b).starts_with(&format!("{cx_before}{cx_tail}\n"))
            && read(&cx_b).contains("on the laptop"),
        "A's line after B's finished one:\n{}",
        read(&cx_b)
    );
    assert_eq!(waiting(&b), vec![], "nothing waits");
    assert_eq!(pending_files(&b), Vec::<PathBuf>::new());

    // Both devices hold both sessions' every entry, once.
    a.sync_ok(&["pull"]);
    for (pa, pb, n) in [(&cc_a, &cc_b, 5), (&cx_a, &cx_b, 5)] {
        assert_eq!(entry_set(pa).len(), n, "{}", read(pa));
        assert_eq!(entry_set(pa), entry_set(pb), "converged");
    }
}

#[test]
fn entries_for_an_agents_line_left_unfinished_for_a_day_go_in_after_that_line_is_ended() {
    let (_server, a, b, proj, cc_a, whole) = claude_on_two();
    put(&cc_a, &whole);
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let cc_b = claude_file(&b, &proj);
    // B's Claude Code died in the middle of a line.
    let dead = &desktop_line(&proj, "never finished")[..90];
    write_once(&cc_b, dead);
    let theirs = next_user_line(&proj, "and the tests");
    append(&cc_a, &theirs);
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert_eq!(read(&cc_b), format!("{whole}{dead}"), "A's entry waits");
    let stream = format!("claude-code/{CLAUDE_ID}");
    assert_eq!(
        waiting(&b),
        vec![(
            stream.clone(),
            "claude-code".into(),
            1,
            "partial_line".into()
        )]
    );

    // A day later, nobody came back to it.
    let touched = std::process::Command::new("touch")
        .args(["-d", "2 days ago"])
        .arg(&cc_b)
        .status()
        .unwrap();
    assert!(touched.success());
    assert_eq!(
        waiting(&b),
        vec![(stream.clone(), "claude-code".into(), 1, "abandoned".into())]
    );
    let status = b.sync_ok(&["status"]);
    assert!(
        status.contains("left unfinished over 24 hours ago"),
        "{status}"
    );
    // The next pull ends the dead line where it stopped (its bytes kept)
    // and appends A's entry after it.
    b.sync_ok(&["pull"]);
    assert_eq!(read(&cc_b), format!("{whole}{dead}\n{theirs}\n"));
    assert_eq!(waiting(&b), vec![], "nothing waits");

    // The ended line is a line now, synced as any line that is not JSON:
    // both devices hold the same lines.
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    let lines = |p: &Path| {
        let mut v: Vec<String> = read(p).lines().map(str::to_owned).collect();
        v.sort();
        v
    };
    assert_eq!(lines(&cc_a), lines(&cc_b));
    for d in [&a, &b] {
        let run = d.sync(&["sync", "verify"]);
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    }
}

/// The subagent fixture of `session`, written by Claude Code while the
/// session's directory was `cwd`.
fn subagent(session: &str, cwd: &str) -> String {
    fixture("claude-code-subagent.jsonl", cwd).replace(TOOLS_ID, session)
}

#[test]
fn a_subagent_transcript_lands_beside_its_session_whenever_the_session_arrives() {
    let (_server, a, b, proj_a, proj_b) = mapped_devices();
    // Both sessions moved into a subfolder before their subagents ran.
    let (deep_a, deep_b) = (
        format!("{proj_a}/crates/lexer"),
        format!("{proj_b}/crates/lexer"),
    );
    let beside = |d: &Device, proj: &str, session: &str, stem: &str| {
        claude_session(d, proj, session)
            .parent()
            .unwrap()
            .join(format!("{session}/subagents/{stem}.jsonl"))
    };
    let mapped = |p: &Path| read(p).replace(&proj_a, &proj_b);

    // A session and its subagent arrive in one pull; another session's
    // subagent arrives before the session.
    let plain_a = claude_session(&a, &proj_a, CLAUDE_ID);
    put(&plain_a, &fixture("claude-code.jsonl", &proj_a));
    let early = "agent-e0e0e0e0";
    let plain_sub_a = beside(&a, &proj_a, CLAUDE_ID, early);
    put(&plain_sub_a, &subagent(CLAUDE_ID, &deep_a));
    let tools_sub_a = beside(&a, &proj_a, TOOLS_ID, SUB_STEM);
    put(&tools_sub_a, &subagent(TOOLS_ID, &deep_a));
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let plain_sub_b = beside(&b, &proj_b, CLAUDE_ID, early);
    assert_eq!(
        read(&plain_sub_b),
        mapped(&plain_sub_a),
        "beside its session"
    );
    let tools_sub_b = beside(&b, &proj_b, TOOLS_ID, SUB_STEM);
    assert!(!tools_sub_b.exists(), "its session is not here yet");
    assert_eq!(
        waiting(&b),
        vec![(
            format!("claude-code/{TOOLS_ID}/{SUB_STEM}"),
            "claude-code".into(),
            2,
            "not_placed".into()
        )]
    );

    // The session arrives: its subagent lands beside it.
    let tools_a = claude_session(&a, &proj_a, TOOLS_ID);
    put(&tools_a, &fixture("claude-code-tools.jsonl", &proj_a));
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert_eq!(
        read(&tools_sub_b),
        mapped(&tools_sub_a),
        "beside its session"
    );
    assert_eq!(waiting(&b), vec![]);

    // A subagent that runs later lands beside its session here.
    let late = "agent-f1f1f1f1";
    let late_a = beside(&a, &proj_a, TOOLS_ID, late);
    put(&late_a, &subagent(TOOLS_ID, &deep_a));
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert_eq!(read(&beside(&b, &proj_b, TOOLS_ID, late)), mapped(&late_a));

    assert!(
        !claude(&b).join("projects").join(folder(&deep_b)).exists()
            && !claude(&b).join("projects").join(folder(&deep_a)).exists(),
        "nothing in the subfolder's project folder"
    );
}
