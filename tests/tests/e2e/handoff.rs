//! `evi sessions handoff`, `resume` and `continue`: moving a conversation to
//! another device, with the first device gone by the time the second resumes.

use crate::common::{Device, TestServer};

const S: &str = "01JHANDOFF0000000000000000";

/// A two-day session with tool calls that carry no ids.
fn session_lines() -> (Vec<u8>, Vec<u8>) {
    let day1 = [
        r#"{"role":"user","content":"[ongoing goal: fix CI] why is the build red?","ts":"2026-06-08T09:00:00Z"}"#,
        r#"{"role":"assistant","content":"let me look","ts":"2026-06-08T09:00:05Z","tool_calls":[{"function":{"name":"bash","arguments":"{\"cmd\":\"cargo test\"}"}},{"function":{"name":"read","arguments":"{\"path\":\"ci.yml\"}"}}]}"#,
        r#"{"role":"tool","tool_name":"bash","content":"1 failed","ts":"2026-06-08T09:00:09Z"}"#,
        r#"{"role":"tool","tool_name":"read","content":"on: push","ts":"2026-06-08T09:00:10Z"}"#,
    ];
    let day2 = [
        r#"{"role":"assistant","content":"the flaky test is fixed","ts":"2026-06-09T10:00:00Z"}"#,
        "a line that is not json",
        r#"{"role":"user","content":"thanks","ts":"2026-06-09T10:01:00Z"}"#,
    ];
    let join = |ls: &[&str]| {
        ls.iter()
            .flat_map(|l| format!("{l}\n").into_bytes())
            .collect()
    };
    (join(&day1), join(&day2))
}

#[test]
fn handoff_then_resume_on_a_device_that_never_pulled() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join(&a, &server, "pat", "desktop");
    let (d1, d2) = session_lines();
    a.write("2026-06-08", S, &d1);
    a.write("2026-06-09", S, &d2);

    let run = a.evi(&["sessions", "handoff", "01JHANDOFF"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "handoff {S} (7 messages)\n\
             \x20 1. sync this device:   evi sync push   (done)\n\
             \x20 2. on the other device: evi sync pull, then either\n\
             \x20      evi sessions resume {S}\n\
             \x20      or open http://127.0.0.1:7878/?session={S} in the web UI\n\
             \x20 deep link: evi://session/{S}\n"
        )
    );
    let on_a = a.evi(&["sessions", "resume", S, "--print"]);
    assert_eq!(on_a.code, 0, "{}", on_a.stderr);
    assert_eq!(on_a.stderr, format!("resumed {S} (6 messages restored)\n"));
    // The first device is gone before the second starts.
    drop(a);

    let on_b = b.evi(&["sessions", "resume", S, "--print"]);
    assert_eq!(on_b.code, 0, "{}", on_b.stderr);
    assert_eq!(
        on_b.stdout, on_a.stdout,
        "the same conversation, byte for byte"
    );
    assert!(
        on_b.stderr
            .ends_with(&format!("resumed {S} (6 messages restored)\n")),
        "{}",
        on_b.stderr
    );

    let v: serde_json::Value = serde_json::from_str(&on_b.stdout).unwrap();
    let msgs = v["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "tool", "assistant", "user"]
    );
    assert_eq!(v["skipped_lines"], 1);
    // Synthesized call ids, each tool result pointing at its own call.
    let calls = msgs[1]["tool_calls"].as_array().unwrap();
    let id0 = calls[0]["id"].as_str().unwrap();
    let id1 = calls[1]["id"].as_str().unwrap();
    assert!(id0.starts_with("call_") && id0 != id1);
    assert_eq!(msgs[2]["tool_call_id"], id0);
    assert_eq!(msgs[3]["tool_call_id"], id1);
    assert_eq!(msgs[2]["content"], "1 failed");
}

#[test]
fn handoff_json_url_config_and_no_push() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    a.write_config("[web]\nurl = \"https://evi.example.net:9000/\"\n");
    let (d1, _) = session_lines();
    a.write("2026-06-08", S, &d1);
    let run = a.evi(&["sessions", "handoff", S, "--json", "--no-push"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "{{\n  \"session\": \"{S}\",\n  \"messages\": 4,\n  \"push\": \"skipped\",\n  \
             \"pull_command\": \"evi sync pull\",\n  \"resume_command\": \"evi sessions resume {S}\",\n  \
             \"url\": \"https://evi.example.net:9000/?session={S}\",\n  \"deep_link\": \"evi://session/{S}\"\n}}\n"
        )
    );
    // Nothing was pushed.
    let status = a.sync(&["sync", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(v["last_push"], serde_json::Value::Null);

    // A URL without a host is never used.
    a.write_config("[web]\nurl = \"/relative\"\n");
    let run = a.evi(&["sessions", "handoff", S, "--no-push"]);
    assert!(
        run.stdout
            .contains("or open http://127.0.0.1:7878/?session="),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("(skipped: --no-push)"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stderr,
        "warning: [web] url = \"/relative\" has no host; using http://127.0.0.1:7878\n"
    );
}

#[test]
fn handoff_errors_say_what_to_do() {
    let a = Device::new();
    a.write("2026-06-08", S, &session_lines().0);
    let run = a.evi(&["sessions", "handoff", S]);
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "error: handoff needs sync, and this eVi home is not set up for it\n\
         hint: run `evi sync init --server URL --user NAME` (first device) or \
         `evi sync login --server URL --user NAME` (another device), then try again\n"
    );

    let server = TestServer::start();
    a.init(&server, "pat", "laptop");
    let run = a.evi(&["sessions", "handoff", "nosuchsession"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: no session matches `nosuchsession`\n\
         hint: `evi sessions list --days 3650` shows the ids of every session\n"
    );
    // Resume of an id that is nowhere, even on the server: what the server
    // can be asked for (a whole id), and how to use a prefix.
    let run = a.evi(&["sessions", "resume", "nosuchsession", "--print"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "session nosuchsession is not on this device; fetching it from the server\n\
         error: no session `nosuchsession` on this device or on the server\n\
         hint: the server finds a session by its whole id only (as `evi sessions handoff` \
         prints it); for a prefix, run `evi sync pull` first to fetch every session\n"
    );
}

#[test]
fn continue_picks_the_newest_session_across_days() {
    let dev = Device::new();
    let line = |content: &str, ts: &str| {
        format!("{{\"role\":\"user\",\"content\":\"{content}\",\"ts\":\"{ts}\"}}\n")
    };
    // `spans` began first but went on two days later; `middle` lives on the
    // day between; `stale` shares the last day but its entries are older.
    dev.write(
        "2026-06-08",
        "spans",
        line("day one", "2026-06-08T08:00:00Z").as_bytes(),
    );
    dev.write(
        "2026-06-09",
        "middle",
        line("middle", "2026-06-09T23:00:00Z").as_bytes(),
    );
    dev.write(
        "2026-06-10",
        "spans",
        line("day three", "2026-06-10T12:00:00Z").as_bytes(),
    );
    dev.write(
        "2026-06-10",
        "stale",
        line("stale", "2026-06-10T07:00:00Z").as_bytes(),
    );
    let run = dev.evi(&["sessions", "continue", "--print"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "resumed spans (2 messages restored)\n");
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["messages"][1]["content"], "day three");
}

#[test]
fn resume_runs_the_agent_which_appends_to_the_same_session() {
    let dev = Device::new();
    dev.write(
        "2026-06-08",
        "S1",
        b"{\"role\":\"user\",\"content\":\"hi\",\"ts\":\"2026-06-08T08:00:00Z\"}\n",
    );
    dev.write_config(
        "[agent]\ncommand = \"echo '{\\\"role\\\":\\\"assistant\\\",\\\"content\\\":\\\"back again\\\"}' >> {home}/transcripts/2026-06-08/{session}.jsonl\"\n",
    );
    let run = dev.evi(&["sessions", "resume", "S1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "resumed S1 (1 messages restored)\n");
    let show = dev.evi(&["sessions", "show", "S1"]);
    assert!(show.stdout.contains("#2 assistant"), "{}", show.stdout);
    assert!(show.stdout.contains("back again"), "{}", show.stdout);

    dev.write_config("");
    let run = dev.evi(&["sessions", "resume", "S1"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .starts_with("error: no agent command is configured: "),
        "{}",
        run.stderr
    );
}
