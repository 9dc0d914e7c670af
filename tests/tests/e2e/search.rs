//! `evi sessions search`: what it finds, in which lines, across devices, and
//! how its index (`sync/search.db`) survives being deleted, corrupted,
//! outgrown and attacked with query syntax.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::common::{Device, Run, today, two_devices};

const DAY: &str = "2026-06-08";

const USER: &str = r#"{"role":"user","content":"please fix the auth middleware, it drops tokens","ts":"2026-06-08T10:00:00Z"}"#;
const ASSISTANT: &str = r#"{"role":"assistant","content":[{"type":"text","text":"The middleware reads the wrong header."}],"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"grep -rn bearer src\"}"}}],"ts":"2026-06-08T10:00:05Z"}"#;
const TOOL: &str = r#"{"role":"tool","tool_call_id":"c1","tool_name":"bash","content":"src/auth.rs:12: let token = header(\"x-zanzibar\");","ts":"2026-06-08T10:00:06Z"}"#;
const REVERSED: &str = r#"{"role":"user","content":"middleware for auth is a separate thing","ts":"2026-06-08T11:00:00Z"}"#;

fn lines(ls: &[&str]) -> Vec<u8> {
    ls.iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

/// `evi sessions search <args> --json`, which must succeed.
fn search(dev: &Device, args: &[&str]) -> Vec<Value> {
    let run = dev.evi(&[&["sessions", "search", "--json"], args].concat());
    assert_eq!(run.code, 0, "search {args:?}: {}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).expect("search --json prints JSON");
    v["hits"].as_array().expect("hits").clone()
}

/// (session, entry, role) of every hit.
fn found(hits: &[Value]) -> Vec<(String, String, String)> {
    hits.iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap_or_default().to_owned();
            (s("session"), s("entry"), s("role"))
        })
        .collect()
}

/// The entry ids `sessions show --json` gives the active branch.
fn shown_ids(dev: &Device, session: &str) -> Vec<String> {
    let run = dev.evi(&["sessions", "show", session, "--json"]);
    assert_eq!(run.code, 0, "show: {}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

fn index_file(dev: &Device) -> std::path::PathBuf {
    dev.home().join("sync/search.db")
}

#[test]
fn finds_words_in_user_assistant_and_tool_lines_with_the_readers_ids() {
    let dev = Device::new();
    dev.write(DAY, "S1", &lines(&[USER, ASSISTANT, TOOL]));
    let ids = shown_ids(&dev, "S1");
    let hit = |q: &str| found(&search(&dev, &[q]));
    let one = |id: &str, role: &str| vec![("S1".to_owned(), id.to_owned(), role.to_owned())];
    assert_eq!(hit("tokens"), one(&ids[0], "user"));
    assert_eq!(hit("wrong"), one(&ids[1], "assistant"));
    // A tool call's argument values are text a person reads; its keys not.
    assert_eq!(hit("bearer"), one(&ids[1], "assistant"));
    assert_eq!(hit("function"), vec![]);
    assert_eq!(hit("zanzibar"), one(&ids[2], "tool"));
    // The snippet marks the match, in a pipe with «».
    let run = dev.evi(&["sessions", "search", "zanzibar"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!("S1  {}  tool", &ids[2][..12])),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("«zanzibar»"), "{}", run.stdout);
}

#[test]
fn a_phrase_matches_only_in_order_and_role_and_days_filter() {
    let dev = Device::new();
    dev.write(DAY, "S1", &lines(&[USER, ASSISTANT, TOOL, REVERSED]));
    let ids = shown_ids(&dev, "S1");
    let phrase = found(&search(&dev, &[r#""auth middleware""#]));
    assert_eq!(phrase.len(), 1, "{phrase:?}");
    assert_eq!(phrase[0].1, ids[0]);
    let words: BTreeSet<_> = found(&search(&dev, &["auth", "middleware"]))
        .into_iter()
        .map(|h| h.1)
        .collect();
    assert_eq!(words, BTreeSet::from([ids[0].clone(), ids[3].clone()]));

    let roles = |args: &[&str]| {
        found(&search(&dev, args))
            .into_iter()
            .map(|h| h.2)
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        roles(&["bash"]),
        BTreeSet::from(["assistant".into(), "tool".into()])
    );
    assert_eq!(
        roles(&["bash", "--role", "tool"]),
        BTreeSet::from(["tool".into()])
    );
    assert_eq!(roles(&["bash", "--role", "user"]), BTreeSet::new());

    // --days: the 2026-06-08 lines are out of a week's window, today's in.
    dev.write(
        &today(),
        "S2",
        &lines(&[r#"{"role":"user","content":"bash again today"}"#]),
    );
    let recent = found(&search(&dev, &["bash", "--days", "7"]));
    assert_eq!(recent.len(), 1, "{recent:?}");
    assert_eq!(recent[0].0, "S2");
    assert_eq!(found(&search(&dev, &["bash", "--limit", "2"])).len(), 2);
}

#[test]
fn finds_a_line_pulled_from_another_devices_branch() {
    let (_server, a, b) = two_devices();
    a.write(DAY, "S1", &lines(&[USER, ASSISTANT]));
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    // b's index exists before the branch arrives: the pull brings it up to
    // date, and the search after finds the new line with a's id.
    assert_eq!(found(&search(&b, &["header"])).len(), 1);
    a.write(
        DAY,
        "S1",
        &lines(&[
            USER,
            ASSISTANT,
            r#"{"role":"user","content":"written on the laptop: quokka","ts":"2026-06-08T12:00:00Z"}"#,
        ]),
    );
    b.write(
        DAY,
        "S1",
        &lines(&[
            USER,
            ASSISTANT,
            r#"{"role":"user","content":"written on the desktop","ts":"2026-06-08T11:00:00Z"}"#,
        ]),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let hits = found(&search(&b, &["quokka"]));
    let a_ids = shown_ids(&a, "S1");
    assert_eq!(
        hits,
        vec![("S1".into(), a_ids[2].clone(), "user".into())],
        "the laptop's branch line, under the laptop's id"
    );
    // And it opens in context on the desktop, on the laptop's branch.
    let run = b.evi(&["sessions", "show", "S1", "--through", &a_ids[2][..12]]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("quokka"), "{}", run.stdout);
    assert!(
        !run.stdout.contains("\nwritten on the desktop\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!("◀ {}", &a_ids[2][..8])),
        "{}",
        run.stdout
    );
}

#[test]
fn an_appended_line_is_found_by_the_next_search_with_the_right_id() {
    let dev = Device::new();
    let first = dev.write(DAY, "S1", &lines(&[USER]));
    assert_eq!(found(&search(&dev, &["tokens"])).len(), 1);
    let append = |path: &std::path::Path, bytes: &[u8]| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    };
    // A line still being written is not an entry yet.
    append(&first, br#"{"role":"assistant","content":"narwhal"#);
    assert_eq!(found(&search(&dev, &["narwhal"])), vec![]);
    append(&first, b"\"}\n");
    let ids = shown_ids(&dev, "S1");
    assert_eq!(found(&search(&dev, &["narwhal"]))[0].1, ids[1]);
    // A next day's file continues the chain.
    dev.write(
        "2026-06-09",
        "S1",
        &lines(&[r#"{"role":"user","content":"ocelot next day"}"#]),
    );
    assert_eq!(
        found(&search(&dev, &["ocelot"]))[0].1,
        shown_ids(&dev, "S1")[2]
    );
    // A line added to the earlier day moves every later implicit id: the
    // index reads the session again and agrees with the reader.
    append(
        &first,
        b"{\"role\":\"user\",\"content\":\"late pangolin\"}\n",
    );
    let ids = shown_ids(&dev, "S1");
    assert_eq!(found(&search(&dev, &["pangolin"]))[0].1, ids[2]);
    assert_eq!(found(&search(&dev, &["ocelot"]))[0].1, ids[3]);
    // A file rewritten in place (same inode, longer: no append) is read
    // again whole: the old line goes.
    dev.write(
        "2026-06-09",
        "S1",
        &lines(&[r#"{"role":"user","content":"a wombat instead, a longer line"}"#]),
    );
    assert_eq!(found(&search(&dev, &["ocelot"])), vec![]);
    assert_eq!(
        found(&search(&dev, &["wombat"]))[0].1,
        shown_ids(&dev, "S1")[3]
    );
}

#[test]
fn the_index_is_rebuilt_when_deleted_or_corrupt_and_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dev = Device::new();
    dev.write(DAY, "S1", &lines(&[USER, ASSISTANT, TOOL]));
    assert_eq!(found(&search(&dev, &["zanzibar"])).len(), 1);
    let file = index_file(&dev);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the index holds plaintext");

    std::fs::remove_file(&file).unwrap();
    assert_eq!(
        found(&search(&dev, &["zanzibar"])).len(),
        1,
        "rebuilt when deleted"
    );

    std::fs::write(&file, vec![0x5a; 64 * 1024]).unwrap();
    assert_eq!(
        found(&search(&dev, &["zanzibar"])).len(),
        1,
        "rebuilt when garbage"
    );
    // Garbage past a valid header: SQLite finds it when it reads the pages.
    let mut bytes = std::fs::read(&file).unwrap();
    let half = bytes.len() / 2;
    for b in &mut bytes[100..half.max(4096)] {
        *b = 0xa5;
    }
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(
        found(&search(&dev, &["zanzibar"])).len(),
        1,
        "rebuilt when corrupt"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_broken_index_never_fails_a_push_or_pull() {
    let (_server, a, b) = two_devices();
    a.write(DAY, "S1", &lines(&[USER]));
    assert_eq!(found(&search(&a, &["tokens"])).len(), 1);
    std::fs::write(index_file(&a), b"not a database, not at all").unwrap();
    let push = a.sync(&["sync", "push"]);
    assert_eq!(push.code, 0, "{}", push.stderr);
    assert!(
        push.stderr.contains("warning: search index") && push.stderr.contains("rebuilt"),
        "{}",
        push.stderr
    );
    assert!(a.home().join("sync/search.rebuild").exists());
    a.write(DAY, "S1", &lines(&[USER, TOOL]));
    assert_eq!(found(&search(&a, &["zanzibar"])).len(), 1);
    b.sync_ok(&["pull"]);
    assert_eq!(found(&search(&b, &["tokens"])).len(), 1);
}

#[test]
fn hostile_queries_search_literally_or_exit_with_a_usage_error() {
    let dev = Device::new();
    dev.write(
        DAY,
        "S1",
        &lines(&[
            USER,
            r#"{"role":"user","content":"rock AND roll, NEAR the stage; SELECT * FROM users"}"#,
        ]),
    );
    let long = "x".repeat(100 * 1024);
    let many = "w ".repeat(200);
    for q in [
        "AND",
        "OR",
        "NOT",
        "NEAR(",
        "NEAR(rock roll)",
        "*",
        "rock*",
        "\"",
        "\"rock",
        "rock\"",
        "\"\"",
        "body:rock",
        "^rock",
        "-rock",
        "(",
        ")",
        "'",
        "' OR 1=1 --",
        "{rock}",
        "rock + roll",
        &long,
        &many,
        "\u{202e}",
        "🦀",
        "a\u{7f}b",
    ] {
        let run: Run = dev.evi(&["sessions", "search", "--json", q]);
        assert!(
            run.code == 0 || run.code == 2,
            "{q:.40}: exit {} {}",
            run.code,
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{q:.40}: {}", run.stderr);
        if run.code == 0 {
            serde_json::from_str::<Value>(&run.stdout).expect("JSON");
        } else {
            assert!(run.stderr.starts_with("error: "), "{q:.40}: {}", run.stderr);
        }
    }
    // Query syntax is searched for as the words it is.
    let hits = |q: &str| found(&search(&dev, &[q])).len();
    assert_eq!(hits("AND"), 1);
    assert_eq!(
        hits("NEAR(rock roll)"),
        0,
        "a phrase `near rock roll`: not there"
    );
    assert_eq!(hits("rock AND roll"), 1);
    assert_eq!(hits("\"rock and roll"), 1, "an open quote runs to the end");
    assert_eq!(hits("' OR 1=1 --"), 0);
    let run = dev.evi(&["sessions", "search", &long]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("at most 1000"), "{}", run.stderr);
    let run = dev.evi(&["sessions", "search", "*"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no word"), "{}", run.stderr);
}

#[test]
fn a_filter_finds_a_role_that_is_rare_among_many_matches() {
    // Unfiltered, only the newest 10,000 matches are ranked; a filter must
    // still see every match, or the one old user line would be lost.
    let dev = Device::new();
    let mut bytes = lines(&[r#"{"role":"user","content":"the needle, said once"}"#]);
    for n in 0..10_050 {
        bytes.extend(format!("{{\"role\":\"tool\",\"content\":\"needle {n}\"}}\n").into_bytes());
    }
    dev.write(DAY, "S1", &bytes);
    let users = found(&search(&dev, &["needle", "--role", "user"]));
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(found(&search(&dev, &["needle"])).len(), 20);
}

/// (agent, session, entry, role) of every hit.
fn found_by_agent(hits: &[Value]) -> BTreeSet<(String, String, String, String)> {
    hits.iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap_or_default().to_owned();
            (s("agent"), s("session"), s("entry"), s("role"))
        })
        .collect()
}

/// (id, role) of every message `sessions show --json` gives the active
/// branch of `session`.
fn shown_messages(dev: &Device, session: &str) -> Vec<(String, String)> {
    let run = dev.evi(&["sessions", "show", session, "--json"]);
    assert_eq!(run.code, 0, "show {session}: {}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap().to_owned();
            (s("id"), s("role"))
        })
        .collect()
}

#[test]
fn finds_claude_code_and_codex_sessions_pulled_from_another_device_never_their_secrets() {
    use crate::agents::{
        CODEX_TOOLS_ID, CODEX_TOOLS_REL, SECRETS, SUB_STEM, TOOLS_ID, claude_session, codex,
        enable, fixture, project, put,
    };
    let (_server, a, b) = two_devices();
    let proj_a = project(&a, "home/a/proj");
    let proj_b = project(&b, "srv/b/proj");
    std::fs::create_dir_all(&proj_b).unwrap();
    enable(&a, "");
    enable(&b, &format!("[paths]\n\"{proj_a}\" = \"{proj_b}\"\n"));
    let cc = claude_session(&a, &proj_a, TOOLS_ID);
    put(&cc, &fixture("claude-code-tools.jsonl", &proj_a));
    put(
        &cc.parent()
            .unwrap()
            .join(format!("{TOOLS_ID}/subagents/{SUB_STEM}.jsonl")),
        &fixture("claude-code-subagent.jsonl", &proj_a),
    );
    put(
        &codex(&a).join(CODEX_TOOLS_REL),
        &fixture("codex-tools.jsonl", &proj_a),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    // B's own eVi session, sharing a word with each.
    b.write(
        &today(),
        "S1",
        &lines(&[r#"{"role":"user","content":"list the files the lexer reads"}"#]),
    );

    // Each hit names its agent, the session as `sessions list` does, and
    // the entry and role `show` gives it on this device (the `cwd`
    // rewrite of B's copy changes no id).
    let cc_ids = shown_messages(&b, TOOLS_ID);
    let cx_ids = shown_messages(&b, CODEX_TOOLS_ID);
    let hit = |args: &[&str]| found_by_agent(&search(&b, args));
    let one = |agent: &str, session: &str, m: &(String, String)| {
        (
            agent.to_owned(),
            session.to_owned(),
            m.0.clone(),
            m.1.clone(),
        )
    };
    // Thinking, a tool call's argument, a tool's output.
    assert_eq!(
        hit(&["bound"]),
        BTreeSet::from([one("claude-code", TOOLS_ID, &cc_ids[1])])
    );
    assert_eq!(
        hit(&["emit"]),
        BTreeSet::from([one("claude-code", TOOLS_ID, &cc_ids[2])])
    );
    assert_eq!(cc_ids[2].1, "tool");
    // A reasoning summary, a call's output and the answer.
    assert_eq!(
        hit(&["checking"]),
        BTreeSet::from([one("codex", CODEX_TOOLS_ID, &cx_ids[2])])
    );
    // The second line of the shell tool's output (JSON-wrapped by Codex)
    // is a word of its own, not `nfile2`.
    assert_eq!(
        hit(&["file2"]),
        BTreeSet::from([
            one("codex", CODEX_TOOLS_ID, &cx_ids[4]),
            one("codex", CODEX_TOOLS_ID, &cx_ids[5]),
        ])
    );
    assert_eq!(
        hit(&["file1"]),
        BTreeSet::from([
            one("codex", CODEX_TOOLS_ID, &cx_ids[4]),
            one("codex", CODEX_TOOLS_ID, &cx_ids[5]),
        ])
    );
    // A subagent's transcript, by the stream name `show` opens it by.
    let sub = format!("claude-code/{TOOLS_ID}/{SUB_STEM}");
    let sub_ids = shown_messages(&b, &sub);
    assert_eq!(
        hit(&["parse_expr"]),
        BTreeSet::from([one("claude-code", &sub, &sub_ids[1])])
    );

    // --agent keeps one agent's hits.
    let agents =
        |args: &[&str]| -> BTreeSet<String> { hit(args).into_iter().map(|h| h.0).collect() };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(agents(&["lexer"]), set(&["claude-code", "evi"]));
    assert_eq!(agents(&["lexer", "--agent", "evi"]), set(&["evi"]));
    assert_eq!(
        agents(&["lexer", "--agent", "claude-code"]),
        set(&["claude-code"])
    );
    assert_eq!(agents(&["lexer", "--agent", "codex"]), set(&[]));
    assert_eq!(agents(&["files"]), set(&["codex", "evi"]));
    assert_eq!(agents(&["files", "--agent", "codex"]), set(&["codex"]));
    // --days: another agent's lines by their time (the fixtures' are
    // months old), eVi's by their day file.
    assert_eq!(agents(&["lexer", "--days", "7"]), set(&["evi"]));
    let run = b.evi(&["sessions", "search", "lexer", "--agent", "cursor"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("claude-code, codex, gemini or opencode"),
        "{}",
        run.stderr
    );

    // The JSON and the table say whose session a hit is in.
    let hits = search(&b, &["bound"]);
    assert_eq!(hits[0]["short_id"], &TOOLS_ID[..8]);
    assert_eq!(hits[0]["day"], "2026-02-04");
    let run = b.evi(&["sessions", "search", "bound"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let head = format!(
        "claude-code  {}  {}  assistant",
        &TOOLS_ID[..8],
        &cc_ids[1].0[..12]
    );
    assert!(run.stdout.contains(&head), "{}", run.stdout);
    assert!(run.stdout.contains("«bound»"), "{}", run.stdout);

    // Encrypted reasoning (Claude Code's signature and redacted thinking,
    // Codex's encrypted_content) is never indexed: neither the whole value
    // nor the token it holds, nor the keys around it, finds anything.
    for secret in SECRETS {
        for q in [secret, secret.trim_end_matches('=')] {
            assert_eq!(hit(&[q]), BTreeSet::new(), "{q} was found");
        }
    }
    for key in [
        "signature",
        "redacted_thinking",
        "encrypted_content",
        "data",
    ] {
        assert_eq!(hit(&[key]), BTreeSet::new(), "{key} was found");
    }

    // B continues both sessions: the next search reads only what was
    // appended, and gives the new lines the ids `show` gives them (Claude
    // Code's own uuid; Codex's derived from the line before).
    crate::agents::append(
        &claude_session(&b, &proj_b, TOOLS_ID),
        &format!(
            r#"{{"parentUuid":"7a1e0c52-1b3d-4e6f-8a90-b1c2d3e4f506","isSidechain":false,"userType":"external","cwd":"{proj_b}","sessionId":"{TOOLS_ID}","version":"2.0.76","gitBranch":"main","type":"user","message":{{"role":"user","content":"now add a wombat test"}},"uuid":"7a1e0c52-1b3d-4e6f-8a90-b1c2d3e4f599","timestamp":"2026-02-04T09:05:00.000Z"}}"#
        ),
    );
    crate::agents::append(
        &codex(&b).join(CODEX_TOOLS_REL),
        r#"{"timestamp":"2026-01-20T10:05:00.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"and a wombat for codex"}]}}"#,
    );
    let cc_last = shown_messages(&b, TOOLS_ID).pop().unwrap();
    let cx_last = shown_messages(&b, CODEX_TOOLS_ID).pop().unwrap();
    assert_eq!(cc_last.0, "7a1e0c52-1b3d-4e6f-8a90-b1c2d3e4f599");
    assert_eq!(
        hit(&["wombat"]),
        BTreeSet::from([
            one("claude-code", TOOLS_ID, &cc_last),
            one("codex", CODEX_TOOLS_ID, &cx_last),
        ])
    );

    // Agents turned off: their sessions leave the index, and a search for
    // one says how to turn it on.
    b.write_config("");
    assert_eq!(agents(&["lexer"]), set(&["evi"]));
    let run = b.evi(&["sessions", "search", "bound", "--agent", "claude-code"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("[agents] claude-code = true"),
        "{}",
        run.stderr
    );
}
