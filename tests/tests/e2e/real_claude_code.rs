//! Claude Code itself resumes what sync carried: a session of two turns on
//! A is resumed on B (its checkout elsewhere, found by its git remote) by id
//! and by `--continue`, with every earlier turn in the model's request; B's
//! turns come back and A resumes with them; C (A's path, no map) resumes it
//! both ways too; and each device's file is what Claude Code wrote there,
//! byte for byte but for the mapped `cwd`s (`real_clients.rs` has the
//! fixture).

use crate::agents::claude_session;
use crate::real_clients::{World, assert_same_lines, cwd_swapped};

#[test]
#[cfg_attr(
    evi_no_agent_clients,
    ignore = "needs the agents' clients: `cd .ci/agents && npm ci` (node and npm), \
              or EVI_AGENT_CLIENTS naming a folder with `claude` and `codex`"
)]
fn claude_code_resumes_a_synced_session_by_id_and_by_continue_on_every_device() {
    let w = World::new();
    let [a, b, c] = w.hosts();

    // 1. Two turns on A; A pushes.
    let id = a.claude(&a.project, &["A1: where is the parser?"]);
    let again = a.claude(&a.project, &["--continue", "A2: and the lexer?"]);
    assert_eq!(again, id, "--continue went on with the session");
    w.assert_carried("A2: and the lexer?", &["A1: where is the parser?"]);
    a.sync(&["push"]);
    let on_a = claude_session(&w.a, &a.project, &id);

    // 2. B pulls; its Claude Code resumes by id, then as the latest in its
    // checkout's folder, each time with everything before.
    b.sync(&["pull"]);
    let on_b = claude_session(&w.b, &b.project, &id);
    assert!(on_b.is_file(), "in the folder of B's checkout");
    let mut said = vec!["A1: where is the parser?", "A2: and the lexer?"];
    b.assert_seen_everywhere("claude-code", &id, &said, "parser");
    w.resume_each(
        "B",
        &id,
        &mut said,
        [
            (&["--resume", &id], "B1: on the desktop now"),
            (&["--continue"], "B2: the desktop again"),
        ],
        |args, p| b.claude(&b.project, &[args, &[p]].concat()),
    );
    b.sync(&["push"]);

    // 3. A pulls B's turns and resumes with them.
    a.sync(&["pull"]);
    let run = a.claude(&a.project, &["--resume", &id, "A3: back on the laptop"]);
    assert_eq!(run, id);
    w.assert_carried("A3: back on the laptop", &said);
    said.push("A3: back on the laptop");
    a.sync(&["push"]);

    // 4. C, at A's path with no map, pulls and resumes both ways.
    c.sync(&["pull"]);
    c.assert_seen_everywhere("claude-code", &id, &said, "parser");
    w.resume_each(
        "C",
        &id,
        &mut said,
        [
            (&["--continue"], "C1: from the server"),
            (&["--resume", &id], "C2: the server again"),
        ],
        |args, p| c.claude(&c.project, &[args, &[p]].concat()),
    );
    c.sync(&["push"]);
    for h in [&a, &b] {
        h.sync(&["pull"]);
    }

    // 5. Every device holds what the clients wrote, in the order they wrote
    // it: C's file is A's, byte for byte; B's is A's with B's checkout as
    // the `cwd` of every line.
    let on_c = claude_session(&w.c, &c.project, &id);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    let (fa, fb, fc) = (read(&on_a), read(&on_b), read(&on_c));
    for p in &said {
        assert!(fa.contains(p), "A's file lacks {p:?}");
    }
    assert_same_lines(&fc, &fa, "C's file against A's");
    assert_same_lines(
        &fb,
        &cwd_swapped(&fa, &a.project, &b.project),
        "B's file against A's with B's paths",
    );
    assert!(!fb.contains(&format!("\"cwd\":\"{}", a.project)));

    // 6. B reads every device's turns in every face.
    b.assert_seen_everywhere("claude-code", &id, &said, "parser");
}
