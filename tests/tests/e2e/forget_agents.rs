//! `evi sessions forget` for other agents' sessions: a Claude Code session
//! (with its subagent's transcript) and a Codex rollout forgotten on A
//! leave B's copies, at B's own mapped paths, for B's trash; the server
//! keeps only their tombstones; B pushes nothing of them back; an undo on
//! A puts every file back where it was on both devices. `--agent` alone is
//! a usage error; with `--older-than` it picks that agent's old sessions.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::agents::{
    CLAUDE_ID, CODEX_ID, CODEX_REL, SUB_STEM, TOOLS_ID, claude_file, claude_session, codex,
    fixture, mapped_devices, put, write_fixture_sessions,
};
use crate::common::Device;
use crate::forget::stream_records;

fn trash_dirs(d: &Device) -> Vec<String> {
    std::fs::read_dir(d.home().join("sync/trash"))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn age(p: &Path, days: u64) {
    let old = SystemTime::now() - Duration::from_secs(days * 86_400);
    std::fs::File::options()
        .append(true)
        .open(p)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

#[test]
fn claude_code_and_codex_sessions_are_forgotten_on_every_device_and_come_back_with_undo() {
    let (server, a, b, proj_a, proj_b) = mapped_devices();
    let (kept_a, cx_a) = write_fixture_sessions(&a, &proj_a);
    let cc_a = claude_session(&a, &proj_a, TOOLS_ID);
    let sub = |d: &Device, p: &str| {
        claude_session(d, p, TOOLS_ID)
            .with_file_name(TOOLS_ID)
            .join(format!("subagents/{SUB_STEM}.jsonl"))
    };
    put(&cc_a, &fixture("claude-code-tools.jsonl", &proj_a));
    put(
        &sub(&a, &proj_a),
        &fixture("claude-code-subagent.jsonl", &proj_a),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let (cc_b, sub_b, cx_b) = (
        claude_session(&b, &proj_b, TOOLS_ID),
        sub(&b, &proj_b),
        codex(&b).join(CODEX_REL),
    );
    let before_b: Vec<String> = [&cc_b, &sub_b, &cx_b].iter().map(|p| read(p)).collect();
    assert!(before_b.iter().all(|t| !t.is_empty()), "B has all three");
    let cc_stream = format!("claude-code/{TOOLS_ID}");
    let sub_stream = format!("{cc_stream}/{SUB_STEM}");
    let cx_stream = format!("codex/{CODEX_ID}");
    assert!(!stream_records(&server, &a, &sub_stream).is_empty());

    // --agent names no session by itself.
    let run = a.evi(&["sessions", "forget", "--agent", "claude-code"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--older-than"), "{}", run.stderr);
    let run = a.evi(&["sessions", "forget", "--agent", "nope", "x"]);
    assert_eq!(run.code, 2, "{}", run.stderr);

    // A forgets the Claude Code session by a prefix (with its subagent's
    // transcript), and the Codex rollout by its stream name.
    let run = a.evi(&[
        "sessions",
        "forget",
        "--yes",
        "--agent",
        "claude-code",
        &TOOLS_ID[..8],
        "--json",
    ]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["sent"], true, "{}", run.stdout);
    assert_eq!(out["sessions"][0]["session"], cc_stream.as_str());
    assert_eq!(out["sessions"][0]["agent"], "claude-code");
    assert_eq!(out["sessions"][0]["files"], 2, "{}", run.stdout);
    let run = a.evi(&["sessions", "forget", "--yes", &cx_stream]);
    assert_eq!(run.code, 0, "forget codex: {}", run.stderr);
    assert!(!cc_a.exists() && !sub(&a, &proj_a).exists() && !cx_a.exists());
    assert!(kept_a.exists(), "the other Claude Code session stays");
    // The subagent's transcript is in its session's trash folder.
    let mut trash = trash_dirs(&a);
    trash.sort();
    let want: Vec<String> = [&cc_stream, &cx_stream]
        .iter()
        .map(|s| s.replace('/', "+"))
        .collect();
    assert_eq!(trash, want);

    // The server holds their tombstones alone.
    for s in [&cc_stream, &sub_stream, &cx_stream] {
        let held = stream_records(&server, &a, s);
        assert_eq!(held.len(), 1, "{s}: {held:?}");
        assert_eq!(held[0]["kind"], "forget");
    }

    // B drops its copies, where it keeps them, into its trash.
    let pulled: Value = serde_json::from_str(&b.sync_ok(&["pull", "--json"])).unwrap();
    assert_eq!(
        pulled["forget"]["trashed"],
        serde_json::json!([cc_stream, cx_stream]),
        "{pulled}"
    );
    // Fewer records on the server is the forget, not a history that went
    // back (neither here nor on the device that forgot).
    assert!(pulled["server_went_back"].is_null(), "{pulled}");
    let own: Value = serde_json::from_str(&a.sync_ok(&["pull", "--json"])).unwrap();
    assert!(own["server_went_back"].is_null(), "{own}");
    assert!(!cc_b.exists() && !sub_b.exists() && !cx_b.exists());
    assert!(
        claude_file(&b, &proj_b).exists(),
        "B keeps the other session"
    );
    assert_eq!(trash_dirs(&b).len(), 2, "{:?}", trash_dirs(&b));
    // B sends nothing of them back.
    let pushed: Value = serde_json::from_str(&b.sync_ok(&["push", "--json"])).unwrap();
    assert!(
        pushed["forgotten"].as_array().unwrap().is_empty(),
        "{pushed}"
    );
    for s in [&cc_stream, &sub_stream, &cx_stream] {
        assert_eq!(stream_records(&server, &a, s).len(), 1, "{s}");
    }

    // Undo on A: back where they were on A, and on B at B's paths.
    let run = a.evi(&[
        "sessions",
        "forget",
        "--undo",
        "--agent",
        "claude-code",
        TOOLS_ID,
    ]);
    assert_eq!(run.code, 0, "undo: {}", run.stderr);
    let run = a.evi(&["sessions", "forget", "--undo", &cx_stream]);
    assert_eq!(run.code, 0, "undo codex: {}", run.stderr);
    assert_eq!(read(&cc_a), fixture("claude-code-tools.jsonl", &proj_a));
    assert_eq!(
        read(&sub(&a, &proj_a)),
        fixture("claude-code-subagent.jsonl", &proj_a)
    );
    assert_eq!(read(&cx_a), fixture("codex-rollout.jsonl", &proj_a));
    b.sync_ok(&["pull"]);
    let after_b: Vec<String> = [&cc_b, &sub_b, &cx_b].iter().map(|p| read(p)).collect();
    assert_eq!(after_b, before_b, "B has its copies back, as they were");
    assert!(trash_dirs(&b).is_empty(), "{:?}", trash_dirs(&b));

    // --agent with --older-than: that agent's sessions last written
    // before AGE, a Claude Code one by the newest of its files.
    age(&kept_a, 30);
    age(&cc_a, 30);
    let run = a.evi(&[
        "sessions",
        "forget",
        "--agent",
        "claude-code",
        "--older-than",
        "7d",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    let names: Vec<&str> = out["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [format!("claude-code/{CLAUDE_ID}")],
        "the session whose subagent wrote lately stays: {}",
        run.stdout
    );
    assert!(kept_a.exists(), "a dry run moves nothing");
}

/// Where `d` keeps the subagent transcript `stem` of the Claude Code
/// session `TOOLS_ID` of `project`.
fn subagent(d: &Device, project: &str, stem: &str) -> std::path::PathBuf {
    claude_session(d, project, TOOLS_ID)
        .with_file_name(TOOLS_ID)
        .join(format!("subagents/{stem}.jsonl"))
}

/// The fixture's subagent transcript as another subagent `tag` (eight hex
/// digits) of the same session wrote it: its own agent id and uuids.
fn other_subagent(project: &str, tag: &str) -> String {
    fixture("claude-code-subagent.jsonl", project)
        .replace("a1b2c3d4", tag)
        .replace("c2d3e4f5a6", &format!("{tag}aa"))
}

/// Records of `stream` on the server that are not its tombstones.
fn content_records(server: &crate::common::TestServer, d: &Device, stream: &str) -> Vec<Value> {
    stream_records(server, d, stream)
        .into_iter()
        .filter(|r| r["kind"] != "forget" && r["kind"] != "unforget")
        .collect()
}

#[test]
fn a_forgotten_claude_code_session_takes_subagent_transcripts_the_forgetting_device_never_saw() {
    let (server, a, b, proj_a, proj_b) = mapped_devices();
    // A third device, offline for a while later.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "travel");
    let proj_c = crate::agents::project(&c, "work/c/proj");
    crate::agents::enable(&c, &format!("[paths]\n\"{proj_a}\" = \"{proj_c}\"\n"));
    put(
        &claude_session(&a, &proj_a, TOOLS_ID),
        &fixture("claude-code-tools.jsonl", &proj_a),
    );
    put(
        &subagent(&a, &proj_a, SUB_STEM),
        &fixture("claude-code-subagent.jsonl", &proj_a),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    c.sync_ok(&["pull"]);
    assert!(subagent(&c, &proj_c, SUB_STEM).is_file());
    let session = format!("claude-code/{TOOLS_ID}");

    // B's Claude Code runs another subagent in the session and B pushes
    // it; A never pulls it. C, offline, runs one of its own.
    let (b_stem, c_stem) = ("agent-b0b0b0b0", "agent-c0c0c0c0");
    let b_sub = subagent(&b, &proj_b, b_stem);
    put(&b_sub, &other_subagent(&proj_b, "b0b0b0b0"));
    b.sync_ok(&["push"]);
    let b_stream = format!("{session}/{b_stem}");
    let c_stream = format!("{session}/{c_stem}");
    assert!(!content_records(&server, &a, &b_stream).is_empty());
    let c_sub = subagent(&c, &proj_c, c_stem);
    put(&c_sub, &other_subagent(&proj_c, "c0c0c0c0"));

    // A forgets the session: the server keeps nothing of B's subagent.
    let run = a.evi(&["sessions", "forget", "--yes", &session]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    assert!(
        content_records(&server, &a, &b_stream).is_empty(),
        "{:?}",
        stream_records(&server, &a, &b_stream)
    );
    // B drops it with the rest; A never gets it.
    b.sync_ok(&["pull"]);
    assert!(!b_sub.exists(), "B keeps its subagent's transcript");
    assert!(!claude_session(&b, &proj_b, TOOLS_ID).exists());
    a.sync_ok(&["pull"]);
    assert!(!subagent(&a, &proj_a, b_stem).exists());
    // C comes back and pushes: its subagent is refused, and goes to its
    // trash with the rest.
    let pushed: Value = serde_json::from_str(&c.sync_ok(&["push", "--json"])).unwrap();
    assert!(
        content_records(&server, &a, &c_stream).is_empty(),
        "the server stored the offline device's subagent: {pushed}"
    );
    c.sync_ok(&["pull"]);
    assert!(!c_sub.exists(), "C keeps its subagent's transcript");
    assert!(!claude_session(&c, &proj_c, TOOLS_ID).exists());
    for d in [&a, &b, &c] {
        d.sync_ok(&["push"]);
    }
    for d in [&a, &b, &c] {
        d.sync_ok(&["pull"]);
    }
    for (d, p) in [(&a, &proj_a), (&b, &proj_b), (&c, &proj_c)] {
        for stem in [SUB_STEM, b_stem, c_stem] {
            assert!(!subagent(d, p, stem).exists(), "{stem} came back");
        }
        let listed = d.evi(&["sessions", "list", "--agent", "claude-code", "--json"]);
        assert!(!listed.stdout.contains(TOOLS_ID), "{}", listed.stdout);
    }
    for s in [&b_stream, &c_stream] {
        assert!(content_records(&server, &a, s).is_empty(), "{s}");
    }

    // The undo brings every subagent back, on every device that had it,
    // and then to the others.
    let run = a.evi(&["sessions", "forget", "--undo", &session]);
    assert_eq!(run.code, 0, "undo: {}", run.stderr);
    assert!(subagent(&a, &proj_a, SUB_STEM).is_file());
    b.sync_ok(&["pull"]);
    c.sync_ok(&["pull"]);
    assert_eq!(read(&b_sub), other_subagent(&proj_b, "b0b0b0b0"));
    assert_eq!(read(&c_sub), other_subagent(&proj_c, "c0c0c0c0"));
    b.sync_ok(&["push"]);
    c.sync_ok(&["push"]);
    for d in [&a, &b, &c] {
        d.sync_ok(&["pull"]);
    }
    for (d, p) in [(&a, &proj_a), (&b, &proj_b), (&c, &proj_c)] {
        assert!(claude_session(d, p, TOOLS_ID).is_file());
        for stem in [SUB_STEM, b_stem, c_stem] {
            assert!(subagent(d, p, stem).is_file(), "{stem} is missing");
        }
    }
}
