//! A Claude Code session placed by its project's git remote: the project is
//! a clone of one repository at different paths on two devices, cloned
//! over SSH on one and HTTPS on the other, and no `[paths]` prefix maps it.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::agents::{
    CLAUDE_ID, append, claude_file, cwd, enable, entries, entry_set, entry_set_as, fixture, project,
};
use crate::common::{Device, two_devices};
use crate::handoff_git::git;

/// A new repository at `dir` whose `origin` is `url`.
fn checkout(dir: &str, url: &str) {
    std::fs::create_dir_all(dir).unwrap();
    git(Path::new(dir), &["init", "-q"]);
    git(Path::new(dir), &["remote", "add", "origin", url]);
}

/// `evi sessions handoff --no-push --json` of the session on `d`.
fn handoff(d: &Device) -> Value {
    let run = d.sync(&[
        "sessions",
        "handoff",
        &CLAUDE_ID[..8],
        "--no-push",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

#[test]
fn a_session_lands_in_the_checkout_with_the_same_origin_and_converges() {
    let (server, a, b) = two_devices();
    let proj_a = project(&a, "a/proj");
    let code_b = project(&b, "b/code");
    let proj_b = format!("{code_b}/app");
    checkout(&proj_a, "git@github.com:pat/app.git");
    checkout(&proj_b, "https://github.com/pat/app");
    // A checkout of another repository under the search folder, found first.
    checkout(&format!("{code_b}/aaa"), "https://github.com/pat/other");
    enable(&a, "");
    enable(&b, &format!("[paths]\nsearch = [\"{code_b}\"]\n"));

    let cc_a = claude_file(&a, &proj_a);
    std::fs::create_dir_all(cc_a.parent().unwrap()).unwrap();
    std::fs::write(&cc_a, fixture("claude-code.jsonl", &proj_a)).unwrap();
    a.sync_ok(&["push"]);
    // The session's lines, not the project entry, are what B's file gets.
    assert_eq!(
        b.sync_ok(&["pull"]),
        "pulled 3 entries in 1 sessions, 0 blobs; 0 sessions diverged (both branches kept)\n"
    );
    let cc_b = claude_file(&b, &proj_b);
    assert_eq!(
        std::fs::read_to_string(&cc_b).unwrap(),
        std::fs::read_to_string(&cc_a)
            .unwrap()
            .replace(&cwd(&proj_a), &cwd(&proj_b)),
        "in the folder Claude Code uses for B's checkout, naming it as `cwd`"
    );
    assert!(!claude_file(&b, &proj_a).exists(), "not under A's path");
    let h = handoff(&b);
    assert_eq!(h["project"], proj_b.as_str(), "{h}");
    assert_eq!(
        h["resume_command"],
        format!("cd {proj_b} && claude --resume {CLAUDE_ID}")
    );
    // What pull wrote is what push skips, the project entry too.
    assert_eq!(
        b.sync_ok(&["push"]),
        "pushed 0 entries in 0 sessions, 0 journal lines, 0 blobs (0 new records, 0 already on the server)\n"
    );

    // Both continue from the same point.
    let last = "5a1c7e0b-3f7e-4d55-9a57-0c1e2f3a4b5c";
    let line = |who: &str, n: u8, p: &str| {
        format!(
            r#"{{"parentUuid":"{last}","isSidechain":false,"cwd":"{p}","sessionId":"{CLAUDE_ID}","type":"user","message":{{"role":"user","content":"on {who}"}},"uuid":"{who:0>8}-0000-4000-8000-00000000000{n}","timestamp":"2026-02-03T18:1{n}:00.000Z"}}"#
        )
    };
    append(&cc_a, &line("a", 1, &proj_a));
    append(&cc_b, &line("b", 2, &proj_b));
    for _ in 0..2 {
        for d in [&a, &b] {
            d.sync_ok(&["push"]);
        }
        for d in [&a, &b] {
            d.sync_ok(&["pull"]);
        }
    }
    let (ea, eb) = (entries(&cc_a), entries(&cc_b));
    assert_eq!(ea.len(), 5, "{}", std::fs::read_to_string(&cc_a).unwrap());
    assert_eq!(eb.len(), 5, "{}", std::fs::read_to_string(&cc_b).unwrap());
    let ids: BTreeSet<_> = ea.iter().map(|e| e.0.clone()).collect();
    assert_eq!(ids.len(), 5, "nothing doubled");
    assert_eq!(
        entry_set(&cc_a),
        entry_set_as(&cc_b, (&proj_b, &proj_a)),
        "converged"
    );
    let on_b = std::fs::read_to_string(&cc_b).unwrap();
    assert!(!on_b.contains(&proj_a), "{on_b}");
    let on_a = std::fs::read_to_string(&cc_a).unwrap();
    assert!(!on_a.contains(&proj_b), "{on_a}");

    // A third device with neither a map nor a checkout: the original path.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "server");
    enable(&c, "");
    c.sync_ok(&["pull"]);
    let cc_c = claude_file(&c, &proj_a);
    assert_eq!(entry_set(&cc_c), entry_set(&cc_a));
    let h = handoff(&c);
    assert_eq!(h["project"], proj_a.as_str(), "{h}");
}

/// `evi sync verify` on `d`: its exit code and what it printed.
fn verify(d: &Device, extra: &[&str]) -> (i32, String) {
    let run = d.sync(&[&["sync", "verify"], extra].concat());
    (run.code, format!("{}{}", run.stdout, run.stderr))
}

/// Push adds a project entry to a session whose project has an `origin`
/// remote; pull keeps it out of the agent's file. Verify counts it as here
/// on both devices (it is in `sync/projects.json`), and still finds a file
/// that is gone.
#[test]
fn verify_holds_agent_sessions_of_a_git_project_clean_on_both_devices() {
    use crate::agents::{CODEX_ID, CODEX_REL, codex, write_fixture_sessions};
    let (_server, a, b) = two_devices();
    let proj_a = project(&a, "a/proj");
    let code_b = project(&b, "b/code");
    let proj_b = format!("{code_b}/app");
    checkout(&proj_a, "git@github.com:pat/app.git");
    checkout(&proj_b, "https://github.com/pat/app");
    enable(&a, "");
    enable(&b, &format!("[paths]\nsearch = [\"{code_b}\"]\n"));
    write_fixture_sessions(&a, &proj_a);
    a.sync_ok(&["push"]);
    let (code, out) = verify(&a, &[]);
    assert_eq!(code, 0, "right after a clean push:\n{out}");
    assert!(out.contains("no problems found"), "{out}");

    b.sync_ok(&["pull"]);
    let cc_b = claude_file(&b, &proj_b);
    assert!(cc_b.is_file(), "placed in B's checkout");
    let (code, out) = verify(&b, &[]);
    assert_eq!(code, 0, "right after a clean pull:\n{out}");

    // A real gap is still one, and `--repair` mends it.
    std::fs::remove_file(&cc_b).unwrap();
    std::fs::remove_file(codex(&b).join(CODEX_REL)).unwrap();
    let (code, out) = verify(&b, &[]);
    assert_eq!(code, 1, "{out}");
    for want in [
        format!("session claude-code/{CLAUDE_ID}: 3 entries on the server are not here"),
        format!("session codex/{CODEX_ID}: 3 entries on the server are not here"),
    ] {
        assert!(out.contains(&want), "verify lacks {want:?}:\n{out}");
    }
    let (code, out) = verify(&b, &["--repair"]);
    assert_eq!(code, 0, "{out}");
    assert!(cc_b.is_file() && codex(&b).join(CODEX_REL).is_file());
    let (code, out) = verify(&b, &[]);
    assert_eq!(code, 0, "after the repair:\n{out}");
}
