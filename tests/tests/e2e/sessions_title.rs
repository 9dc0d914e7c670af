//! `evi sessions title` (issue 14): a title from the `[title] command` (a
//! test script standing in for the model) or `--set`, kept as an entry of
//! the session, shown by `list`, `show` and the web viewer, synced to
//! another device and shown there; a failing, silent or slow command is a
//! clear error that writes nothing.

use crate::common::{Device, TestServer, Tree, assert_converged, assert_only_appended};

const S: &str = "01JTITLE000000000000000000";

fn lines(ls: &[&str]) -> Vec<u8> {
    ls.iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

/// A session of three messages (and a tool turn) on 2026-06-08.
fn session(dev: &Device) {
    dev.write(
        "2026-06-08",
        S,
        &lines(&[
            r#"{"role":"user","content":"[ongoing goal: ship it] the sync test is flaky, fix it","ts":"2026-06-08T10:00:00Z"}"#,
            r#"{"role":"assistant","content":"Looking at sync_kill.rs.","ts":"2026-06-08T10:00:05Z"}"#,
            r#"{"role":"tool","tool_name":"bash","content":"secret tool output","ts":"2026-06-08T10:00:06Z"}"#,
            r#"{"role":"user","content":"and add a test","ts":"2026-06-08T10:01:00Z"}"#,
        ]),
    );
}

/// Writes an executable script into the device's folder; its path.
fn script(dev: &Device, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dev.dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn with_command(dev: &Device, command: &str, timeout: u64) {
    dev.write_config(&format!(
        "[title]\ncommand = {}\ntimeout = {timeout}\n",
        toml_string(command)
    ));
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn json(dev: &Device, args: &[&str]) -> serde_json::Value {
    let r = dev.evi(args);
    assert_eq!(r.code, 0, "evi {args:?}: {}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

const ALL: [&str; 2] = ["--days", "36500"];

#[test]
fn a_title_from_the_configured_command_is_an_entry_readers_show() {
    let dev = Device::new();
    session(&dev);
    let seen = dev.dir.path().join("stdin.txt");
    let model = script(
        &dev,
        "model.sh",
        &format!(
            "cat > '{}'\necho \"session=$EVI_SESSION_ID\" >> '{}'\nprintf '\\n  \"Fix the flaky sync test\"\\nmore words\\n'",
            seen.display(),
            seen.display()
        ),
    );
    with_command(&dev, &model, 10);
    let before: Tree = dev.tree("transcripts");

    let r = dev.evi(&["sessions", "title", &S[..10]]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "Fix the flaky sync test\n");
    // The model read the first messages, goal prefix off, no tool output.
    let input = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(
        input,
        format!(
            "user: the sync test is flaky, fix it\n\nassistant: Looking at sync_kill.rs.\n\n\
             user: and add a test\n\nsession={S}\n"
        )
    );

    // One line appended to the session's file, with explicit ids.
    let after = dev.tree("transcripts");
    assert_only_appended(&before, &after, "sessions title");
    let file = format!("2026-06-08/{S}.jsonl");
    let old = before[&file].clone().unwrap();
    let new = after[&file].clone().unwrap();
    let added: serde_json::Value = serde_json::from_slice(&new[old.len()..new.len() - 1]).unwrap();
    assert_eq!(added["role"], "system");
    assert_eq!(added["type"], "title");
    assert_eq!(added["content"], "Fix the flaky sync test");
    assert_eq!(added["id"].as_str().map(str::len), Some(32));

    // Readers show the title, and the tree is as it was: no message more,
    // no new branch.
    let r = dev.evi(&["sessions", "list", ALL[0], ALL[1]]);
    assert_eq!(
        r.stdout,
        format!(
            "ID        START             END                MSGS   BR  TITLE / FIRST MESSAGE\n\
             {}  2026-06-08 10:00  2026-06-08 10:01      4    1  Fix the flaky sync test\n",
            &S[..8]
        )
    );
    let listed = json(&dev, &["sessions", "list", ALL[0], ALL[1], "--json"]);
    assert_eq!(listed["sessions"][0]["title"], "Fix the flaky sync test");
    assert_eq!(listed["sessions"][0]["messages"], 4);
    assert_eq!(listed["sessions"][0]["branches"], 1);
    let shown = dev.evi(&["sessions", "show", S]);
    let head: Vec<&str> = shown.stdout.lines().take(2).collect();
    assert_eq!(
        head,
        [
            format!("session {S} (4 messages, 1 branch, 2026-06-08 10:00 → 2026-06-08 10:01)"),
            "title: Fix the flaky sync test".to_owned()
        ]
    );
    assert!(!shown.stdout.contains("system"), "{}", shown.stdout);
    let page = json(&dev, &["sessions", "show", S, "--json"]);
    assert_eq!(page["session"]["title"], "Fix the flaky sync test");
    assert_eq!(page["messages"].as_array().unwrap().len(), 4);

    // eVi goes on writing: its next line hangs from the last message, not
    // from the title.
    dev.write(
        "2026-06-08",
        S,
        &[
            new.clone(),
            lines(&[r#"{"role":"assistant","content":"Test added.","ts":"2026-06-08T10:02:00Z"}"#]),
        ]
        .concat(),
    );
    let page = json(&dev, &["sessions", "show", S, "--json"]);
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 5);
    assert_eq!(msgs[4]["parentId"], msgs[3]["id"]);
    assert_eq!(page["session"]["title"], "Fix the flaky sync test");
}

#[test]
fn set_works_without_a_command_and_the_newest_title_wins() {
    let dev = Device::new();
    session(&dev);
    let r = dev.evi(&["sessions", "title", S]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("error: no title command is configured"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("[title]\n  command = "), "{}", r.stderr);
    assert!(r.stderr.contains("--set"), "{}", r.stderr);

    let r = dev.evi(&["sessions", "title", S, "--set", "  First   name "]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "First name\n"),
        "{}",
        r.stderr
    );
    let r = dev.evi(&["sessions", "title", S, "--set", "Second name"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let listed = json(&dev, &["sessions", "list", ALL[0], ALL[1], "--json"]);
    assert_eq!(listed["sessions"][0]["title"], "Second name");

    let before = dev.tree("transcripts");
    for bad in ["", "   ", &"x".repeat(201)] {
        let r = dev.evi(&["sessions", "title", S, "--set", bad]);
        assert_eq!(r.code, 1, "{bad:?}");
        assert!(r.stderr.starts_with("error: the title is"), "{}", r.stderr);
    }
    assert!(before == dev.tree("transcripts"), "a refused title wrote");

    // eVi is in the middle of a line: the title never cuts into it.
    dev.append(
        &format!("transcripts/2026-06-08/{S}.jsonl"),
        br#"{"role":"assistant","content":"half"#,
    );
    let before = dev.tree("transcripts");
    let r = dev.evi(&["sessions", "title", S, "--set", "Third name"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("ends in a line eVi is still writing"),
        "{}",
        r.stderr
    );
    assert!(before == dev.tree("transcripts"), "a title cut into a line");
}

#[test]
fn a_failing_silent_or_slow_command_is_a_clear_error_and_writes_nothing() {
    let dev = Device::new();
    session(&dev);
    let before = dev.tree("transcripts");
    let cases = [
        (
            script(
                &dev,
                "fail.sh",
                "cat >/dev/null; echo 'no API key' >&2; exit 3",
            ),
            1,
            "failed (exit status: 3): no API key",
            "run it by hand",
        ),
        (
            script(&dev, "silent.sh", "cat >/dev/null"),
            1,
            "printed nothing on stdout",
            "run it by hand",
        ),
        (
            script(&dev, "slow.sh", "sleep 30"),
            1,
            "did not finish within 1 s and was stopped",
            "raise `[title] timeout`",
        ),
    ];
    for (cmd, timeout, what, hint) in cases {
        with_command(&dev, &cmd, timeout);
        let r = dev.evi(&["sessions", "title", S]);
        assert_eq!(r.code, 1, "{cmd}");
        assert!(r.stderr.contains(what), "{cmd}: {}", r.stderr);
        assert!(r.stderr.contains(hint), "{cmd}: {}", r.stderr);
        assert_eq!(r.stdout, "");
    }
    assert!(before == dev.tree("transcripts"), "a failed title wrote");
}

#[test]
fn a_title_syncs_to_another_device_and_shows_there_and_in_its_web_viewer() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "alice", "laptop");
    b.join_copying_key(&a, &server.url, "alice", "desk");
    session(&a);
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let r = a.evi(&["sessions", "title", S, "--set", "Named on the laptop"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert_converged(&a, &b, "after the title");
    let listed = json(&b, &["sessions", "list", ALL[0], ALL[1], "--json"]);
    assert_eq!(listed["sessions"][0]["title"], "Named on the laptop");
    assert_eq!(listed["sessions"][0]["branches"], 1);
    let page = json(&b, &["sessions", "show", S, "--json"]);
    assert_eq!(page["session"]["title"], "Named on the laptop");

    let web = b.web("127.0.0.1:0");
    let api: serde_json::Value = crate::common::get(format!("{}/api/sessions", web.base))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(api["sessions"][0]["title"], "Named on the laptop");
    let found: serde_json::Value =
        crate::common::get(format!("{}/api/sessions?q=laptop", web.base))
            .unwrap()
            .json()
            .unwrap();
    assert_eq!(found["total"], 1, "the viewer's search finds the title");
    let one: serde_json::Value = crate::common::get(format!("{}/api/sessions/{S}", web.base))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(one["session"]["title"], "Named on the laptop");

    // The desk names it anew; the laptop shows the newer title after a pull.
    let r = b.evi(&["sessions", "title", S, "--set", "Renamed on the desk"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    assert_converged(&a, &b, "after the second title");
    let shown = a.evi(&["sessions", "show", S]);
    assert!(
        shown.stdout.lines().nth(1) == Some("title: Renamed on the desk"),
        "{}",
        shown.stdout
    );
}
