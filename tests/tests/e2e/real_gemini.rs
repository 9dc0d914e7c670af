//! Gemini CLI itself resumes what sync carried: a session of two turns on A
//! is resumed on B (its checkout elsewhere, found by its git remote) by id
//! and by `--resume latest`, with every earlier turn in the model's
//! request; B's turns come back and A resumes with them; C (A's path, no
//! map) resumes it both ways too; and each device's file is what Gemini
//! wrote, byte for byte, in the chats folder Gemini itself uses for the
//! project there (`real_clients.rs` has the fixture). And a session older
//! than Gemini's 30 days, which Gemini deletes at start-up on the device it
//! arrives on, stays on every other device and on the server.

use std::path::{Path, PathBuf};

use crate::agents::gemini;
use crate::common::Device;
use crate::real_clients::{World, assert_same_lines};

/// The slug Gemini gives the fixture's project (`…/app`) on every device.
const SLUG: &str = "app";

/// The session files of `id` in `dev`'s chats folder of the project,
/// sorted by name (Gemini names them by start time, in UTC).
fn session_files(dev: &Device, id: &str) -> Vec<PathBuf> {
    let chats = gemini(dev).join("tmp").join(SLUG).join("chats");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&chats)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&format!("-{}.jsonl", &id[..8])))
    });
    v.sort();
    v
}

/// The session's own file: the first of its id (a resume first starts a
/// file of the current minute with the session's context, then appends to
/// the session's own).
fn session_file(dev: &Device, id: &str) -> PathBuf {
    session_files(dev, id)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no file of {id} in {}", gemini(dev).display()))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
#[cfg_attr(
    evi_no_agent_clients,
    ignore = "needs the agents' clients: `cd .ci/agents && npm ci` (node and npm), \
              or EVI_AGENT_CLIENTS naming a folder with `claude`, `codex` and `gemini`"
)]
fn gemini_resumes_a_synced_session_by_id_and_by_latest_on_every_device() {
    let w = World::new();
    let [a, b, c] = w.hosts();
    for h in [&a, &b, &c] {
        h.configure_gemini();
    }

    // 1. Two turns on A; A pushes.
    let id = a.gemini(&a.project, &["-p", "A1: where is the parser?"]);
    let again = a.gemini(
        &a.project,
        &["--resume", "latest", "-p", "A2: and the lexer?"],
    );
    assert_eq!(again, id, "--resume latest went on with the session");
    w.assert_carried("A2: and the lexer?", &["A1: where is the parser?"]);
    a.sync(&["push"]);
    let on_a = session_file(&w.a, &id);

    // 2. B pulls: the session is in the chats folder of B's checkout, by
    // the marker Gemini finds its project's folder by; B's Gemini resumes
    // it by id, then as the latest in the checkout, with everything before.
    b.sync(&["pull"]);
    let on_b = session_file(&w.b, &id);
    assert_eq!(
        on_b.file_name(),
        on_a.file_name(),
        "named as Gemini names it"
    );
    assert_eq!(
        read(&gemini(&w.b).join("tmp").join(SLUG).join(".project_root")),
        b.project,
        "the slug's marker names B's checkout"
    );
    let mut said = vec!["A1: where is the parser?", "A2: and the lexer?"];
    b.assert_seen_everywhere("gemini", &id, &said, "parser");
    w.resume_each(
        "B",
        &id,
        &mut said,
        [
            (&["--resume", &id], "B1: on the desktop now"),
            (&["--resume", "latest"], "B2: the desktop again"),
        ],
        |args, p| b.gemini(&b.project, &[args, &["-p", p]].concat()),
    );
    let registry = read(&gemini(&w.b).join("projects.json"));
    assert!(
        registry.contains(&format!("\"{}\": \"{SLUG}\"", b.project)),
        "Gemini took the slug for B's checkout as its own: {registry}"
    );
    b.sync(&["push"]);

    // 3. A pulls B's turns and resumes with them.
    a.sync(&["pull"]);
    let run = a.gemini(
        &a.project,
        &["--resume", &id, "-p", "A3: back on the laptop"],
    );
    assert_eq!(run, id);
    w.assert_carried("A3: back on the laptop", &said);
    said.push("A3: back on the laptop");
    a.sync(&["push"]);

    // 4. C, at A's path with no map, pulls and resumes both ways.
    c.sync(&["pull"]);
    c.assert_seen_everywhere("gemini", &id, &said, "parser");
    w.resume_each(
        "C",
        &id,
        &mut said,
        [
            (&["--resume", "latest"], "C1: from the server"),
            (&["--resume", &id], "C2: the server again"),
        ],
        |args, p| c.gemini(&c.project, &[args, &["-p", p]].concat()),
    );
    c.sync(&["push"]);
    for h in [&a, &b] {
        h.sync(&["pull"]);
    }

    // 5. Every device holds what the clients wrote, in the order they wrote
    // it, byte for byte (Gemini's lines name no path it resumes by).
    let on_c = session_file(&w.c, &id);
    assert_eq!(on_c.file_name(), on_a.file_name());
    let (fa, fb, fc) = (read(&on_a), read(&on_b), read(&on_c));
    for p in &said {
        assert!(fa.contains(p), "A's file lacks {p:?}");
    }
    assert_same_lines(&fb, &fa, "B's file against A's");
    assert_same_lines(&fc, &fa, "C's file against A's");

    // 6. B reads every device's turns in every face.
    b.assert_seen_everywhere("gemini", &id, &said, "parser");
}

/// A session as Gemini CLI 0.61 writes one, last updated on 2 January
/// 2026, long before its 30 days.
const OLD_ID: &str = "0a0a0a0a-1111-4222-8333-444455556666";
const OLD: &str = r#"{"sessionId":"0a0a0a0a-1111-4222-8333-444455556666","projectHash":"9eff2cb9d264136cdcd1a4e63bdab3d89398cec741f1fd457a09e4e2db494959","startTime":"2026-01-02T10:00:00.000Z","lastUpdated":"2026-01-02T10:00:00.000Z","kind":"main"}
{"id":"0dc4f663-607d-40ab-a367-299dff26e1dc","timestamp":"2026-01-02T10:00:01.000Z","type":"user","content":[{"text":"O1: an old question"}]}
{"$set":{"lastUpdated":"2026-01-02T10:00:01.000Z"}}
{"id":"8cadc50b-f284-4d3b-9327-22e392bf7aff","timestamp":"2026-01-02T10:00:02.000Z","type":"gemini","content":"answer to: O1: an old question","thoughts":[],"tokens":{"input":10,"output":5,"cached":0,"thoughts":0,"tool":0,"total":15},"model":"gemini-2.5-flash"}
{"$set":{"lastUpdated":"2026-01-02T10:00:02.000Z"}}
"#;

#[test]
#[cfg_attr(
    evi_no_agent_clients,
    ignore = "needs the agents' clients: `cd .ci/agents && npm ci` (node and npm), \
              or EVI_AGENT_CLIENTS naming a folder with `claude`, `codex` and `gemini`"
)]
fn a_session_gemini_deletes_as_too_old_on_arrival_is_no_forget() {
    let w = World::new();
    let [a, b, c] = w.hosts();
    for h in [&a, &b, &c] {
        h.configure_gemini();
    }
    // A's old session, where A's Gemini keeps the project's chats.
    let slug_dir = gemini(&w.a).join("tmp").join(SLUG);
    std::fs::create_dir_all(slug_dir.join("chats")).unwrap();
    std::fs::write(slug_dir.join(".project_root"), &a.project).unwrap();
    let on_a = slug_dir
        .join("chats")
        .join("session-2026-01-02T10-00-0a0a0a0a.jsonl");
    std::fs::write(&on_a, OLD).unwrap();
    a.sync(&["push"]);
    // C has it from the start, in the chats folder of A's path there.
    c.sync(&["pull"]);

    // B pulls it; B's Gemini, started in the checkout, deletes it as expired.
    b.sync(&["pull"]);
    assert_eq!(read(&session_file(&w.b, OLD_ID)), OLD, "pulled to B");
    let fresh = b.gemini(&b.project, &["-p", "B1: something new"]);
    assert_ne!(fresh, OLD_ID);
    assert!(
        session_files(&w.b, OLD_ID).is_empty(),
        "Gemini's start-up cleanup deleted the old session on B"
    );
    b.sync(&["push"]);
    b.sync(&["pull"]);

    // Nothing of it was forgotten: A keeps it as it was, and C, pulling
    // from the server, gets it whole.
    a.sync(&["pull"]);
    assert_eq!(read(&on_a), OLD, "A's file is untouched");
    c.sync(&["pull"]);
    assert_eq!(read(&session_file(&w.c, OLD_ID)), OLD, "C keeps it");
    let d = Device::new();
    d.join_copying_key(&w.a, &w.server_url(), "pat", "tablet");
    crate::agents::enable(&d, "");
    let run = d.sync_cmd().args(["sync", "pull"]).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        read(&session_file(&d, OLD_ID)),
        OLD,
        "a new device gets it from the server"
    );
    let trash = w.a.home().join("sync/trash");
    assert!(
        !trash.exists() || std::fs::read_dir(&trash).unwrap().next().is_none(),
        "nothing went into A's trash"
    );
    // And B's own new session travels as usual: on C into the chats of
    // the checkout C's sessions are in (its remote is B's checkout's).
    assert!(
        !session_files(&w.c, &fresh).is_empty(),
        "B's new session reached C, in its checkout's chats"
    );
}
