//! OpenCode itself resumes what sync carried: a session of two turns on A
//! is resumed on B (its checkout elsewhere, found by its git remote) by id
//! (`opencode run --session`) and as the latest in its folder (`opencode
//! run --continue`), with every earlier turn in the model's request; B's
//! turns come back and A resumes with them; C (A's path, no map) resumes it
//! both ways too; and the message and part rows on each device are the
//! ones OpenCode wrote, byte for byte but for the mapped paths
//! (`real_clients.rs` has the fixture).

use std::path::Path;

use crate::agents::{enable, project};
use crate::real_clients::{Host, World, assert_same_lines};

/// The message and part rows of `session` in OpenCode's database under
/// `dir`, one line each in id order.
fn rows(dir: &Path, session: &str) -> String {
    let conn = rusqlite::Connection::open(dir.join("opencode.db")).unwrap();
    let mut out = String::new();
    for sql in [
        "SELECT id, session_id, time_created, time_updated, data FROM message \
         WHERE session_id = ?1 ORDER BY id",
        "SELECT id, message_id || ' ' || session_id, time_created, time_updated, data \
         FROM part WHERE session_id = ?1 ORDER BY id",
    ] {
        let mut st = conn.prepare(sql).unwrap();
        let rows = st
            .query_map([session], |r| {
                Ok(format!(
                    "{} {} {} {} {}\n",
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?
                ))
            })
            .unwrap();
        for r in rows {
            out.push_str(&r.unwrap());
        }
    }
    out
}

/// `session`'s `directory` in the database under `dir`.
fn directory(dir: &Path, session: &str) -> Option<String> {
    let conn = rusqlite::Connection::open(dir.join("opencode.db")).unwrap();
    conn.query_row(
        "SELECT directory FROM session WHERE id = ?1",
        [session],
        |r| r.get(0),
    )
    .ok()
}

/// OpenCode turned on in `[agents]` on `h`'s device, configured, and its
/// database made (OpenCode makes it at its first start; evi never does).
fn set_up(h: &Host<'_>, paths: &str) {
    enable(
        h.dev,
        &format!(
            "opencode = true\nopencode-dir = \"{}\"\n{paths}",
            h.opencode_dir().display()
        ),
    );
    h.configure_opencode();
    h.opencode_raw(&h.project, &["session", "list"]);
}

#[test]
#[cfg_attr(
    evi_no_agent_clients,
    ignore = "needs the agents' clients: `cd .ci/agents && npm ci` (node and npm), \
              or EVI_AGENT_CLIENTS naming a folder with `claude`, `codex` and `opencode`"
)]
fn opencode_resumes_a_synced_session_by_id_and_by_continue_on_every_device() {
    let w = World::new();
    let [a, b, c] = w.hosts();
    set_up(&a, "");
    set_up(
        &b,
        &format!("[paths]\nsearch = [\"{}\"]\n", project(&w.b, "code")),
    );
    set_up(&c, "");

    // 1. Two turns on A; A pushes.
    let id = a.opencode(&a.project, &["A1-where-is-the-parser"]);
    let again = a.opencode(&a.project, &["--continue", "A2-and-the-lexer"]);
    assert_eq!(again, id, "--continue went on with the session");
    w.assert_carried("A2-and-the-lexer", &["A1-where-is-the-parser"]);
    a.sync(&["push"]);

    // 2. B pulls: the session is in B's database, in B's checkout; its
    // OpenCode resumes it by id, then as the latest in that folder.
    b.sync(&["pull"]);
    assert_eq!(
        directory(&b.opencode_dir(), &id).as_deref(),
        Some(b.project.as_str()),
        "the session is B's checkout's"
    );
    let mut said = vec!["A1-where-is-the-parser", "A2-and-the-lexer"];
    b.assert_seen_everywhere("opencode", &id, &said, "parser");
    w.resume_each(
        "B",
        &id,
        &mut said,
        [
            (&["--session", &id], "B1-on-the-desktop-now"),
            (&["--continue"], "B2-the-desktop-again"),
        ],
        |args, p| b.opencode(&b.project, &[args, &[p]].concat()),
    );
    b.sync(&["push"]);

    // 3. A pulls B's turns and resumes with them.
    a.sync(&["pull"]);
    let run = a.opencode(&a.project, &["--session", &id, "A3-back-on-the-laptop"]);
    assert_eq!(run, id);
    w.assert_carried("A3-back-on-the-laptop", &said);
    said.push("A3-back-on-the-laptop");
    a.sync(&["push"]);

    // 4. C, at A's path with no map, pulls and resumes both ways.
    c.sync(&["pull"]);
    c.assert_seen_everywhere("opencode", &id, &said, "parser");
    w.resume_each(
        "C",
        &id,
        &mut said,
        [
            (&["--continue"], "C1-from-the-server"),
            (&["--session", &id], "C2-the-server-again"),
        ],
        |args, p| c.opencode(&c.project, &[args, &[p]].concat()),
    );
    c.sync(&["push"]);
    for h in [&a, &b] {
        h.sync(&["pull"]);
    }

    // 5. Every device holds the message and part rows the clients wrote:
    // C's are A's, byte for byte; B's are A's with B's checkout for A's
    // project in the paths they name.
    let (ra, rb, rc) = (
        rows(&a.opencode_dir(), &id),
        rows(&b.opencode_dir(), &id),
        rows(&c.opencode_dir(), &id),
    );
    for p in &said {
        assert!(ra.contains(p), "A's rows lack {p:?}");
    }
    assert_same_lines(&rc, &ra, "C's rows against A's");
    assert_same_lines(
        &rb,
        &ra.replace(&a.project, &b.project),
        "B's rows against A's with B's paths",
    );

    // 6. B reads every device's turns in every face.
    b.assert_seen_everywhere("opencode", &id, &said, "parser");
}

/// Whether `opencode session list` in `h`'s project lists `session`.
fn lists(h: &Host<'_>, session: &str) -> bool {
    let run = h.opencode_raw(&h.project, &["session", "list"]);
    run.stdout.contains(session)
}

#[test]
#[cfg_attr(
    evi_no_agent_clients,
    ignore = "needs the agents' clients: `cd .ci/agents && npm ci` (node and npm), \
              or EVI_AGENT_CLIENTS naming a folder with `claude`, `codex` and `opencode`"
)]
fn a_forgotten_opencode_session_leaves_opencode_on_every_device_and_comes_back_with_undo() {
    let w = World::new();
    let [a, b, _] = w.hosts();
    set_up(&a, "");
    set_up(
        &b,
        &format!("[paths]\nsearch = [\"{}\"]\n", project(&w.b, "code")),
    );
    let id = a.opencode(&a.project, &["A1-forget-me"]);
    let kept = a.opencode(&a.project, &["A2-keep-me"]);
    assert_ne!(kept, id);
    a.sync(&["push"]);
    b.sync(&["pull"]);
    for h in [&a, &b] {
        assert!(lists(h, &id) && lists(h, &kept), "{}: both listed", h.name);
    }

    // A forgets it; B pulls the forget. Neither OpenCode lists it, and
    // further commands (which export OpenCode's rows) do not bring it back.
    let stream = format!("opencode/{id}");
    let run = a.dev.evi(&["sessions", "forget", "--yes", &stream]);
    assert_eq!(run.code, 0, "forget: {}{}", run.stdout, run.stderr);
    b.sync(&["pull"]);
    for h in [&a, &b] {
        h.sync(&["push"]);
        h.sync(&["pull"]);
        assert!(
            !lists(h, &id),
            "{}: the forgotten session is listed",
            h.name
        );
        assert!(lists(h, &kept), "{}: the other session stays", h.name);
        assert_eq!(rows(&h.opencode_dir(), &id), "", "{}: rows left", h.name);
    }

    // The undo brings it back on A, and then on B, with every row.
    let run = a.dev.evi(&["sessions", "forget", "--undo", &stream]);
    assert_eq!(run.code, 0, "undo: {}{}", run.stdout, run.stderr);
    b.sync(&["pull"]);
    for h in [&a, &b] {
        assert!(lists(h, &id), "{}: the session is back", h.name);
    }
    let (ra, rb) = (rows(&a.opencode_dir(), &id), rows(&b.opencode_dir(), &id));
    assert!(ra.contains("A1-forget-me"), "A's rows: {ra}");
    assert_same_lines(
        &rb,
        &ra.replace(&a.project, &b.project),
        "B's rows against A's with B's paths",
    );
    // And it resumes with its turn.
    let run = b.opencode(&b.project, &["--session", &id, "B1-back-again"]);
    assert_eq!(run, id);
    w.assert_carried("B1-back-again", &["A1-forget-me"]);
}
