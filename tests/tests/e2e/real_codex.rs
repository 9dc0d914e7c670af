//! Codex itself resumes what sync carried: a session of two turns on A is
//! resumed on B (its checkout elsewhere, found by its git remote; Codex
//! never ran there) as the latest in its folder (`codex exec resume
//! --last`) and by id, with every earlier turn in the model's request; B's
//! turns come back and A resumes with them; C (A's path, no map; Codex ran
//! there before, so its state database exists and sync enters the session
//! in it) resumes it both ways too. Each device's rollout is named as its
//! own Codex names files (its local time) and holds what the clients wrote,
//! byte for byte but for the mapped `cwd`s; the row sync wrote in C's index
//! is the one Codex's own import writes (`real_clients.rs` has the
//! fixture).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::agents::{codex, project};
use crate::common::Device;
use crate::real_clients::{Host, World, assert_same_lines, cwd_swapped};

/// The rollout of `id` in `dev`'s Codex folder, relative to it.
fn rollout(dev: &Device, id: &str) -> PathBuf {
    let root = codex(dev);
    let found: Vec<PathBuf> = crate::common::tree(&root.join("sessions"))
        .into_iter()
        .filter(|(rel, bytes)| bytes.is_some() && rel.ends_with(&format!("-{id}.jsonl")))
        .map(|(rel, _)| Path::new("sessions").join(rel))
        .collect();
    assert_eq!(found.len(), 1, "rollouts of {id}: {found:?}");
    found.into_iter().next().unwrap()
}

/// Where `h`'s Codex puts a rollout that started at `started` (RFC 3339):
/// `sessions/YYYY/MM/DD/rollout-YYYY-MM-DDTHH-MM-SS-<id>.jsonl` in its
/// local time.
fn named_by_local_time(h: &Host<'_>, started: &str, id: &str) -> PathBuf {
    let zone = chrono::FixedOffset::east_opt(h.offset).unwrap();
    let t = chrono::DateTime::parse_from_rfc3339(started)
        .unwrap()
        .with_timezone(&zone);
    Path::new("sessions")
        .join(t.format("%Y/%m/%d").to_string())
        .join(format!(
            "rollout-{}-{id}.jsonl",
            t.format("%Y-%m-%dT%H-%M-%S")
        ))
}

/// The `threads` row of `id` in `dev`'s Codex state database, column by
/// column (`rollout_path` relative to the Codex folder).
fn thread_row(dev: &Device, id: &str) -> BTreeMap<String, String> {
    let root = codex(dev);
    let db = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("state_") && n.ends_with(".sqlite")
        })
        .expect("Codex's state database");
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut st = conn.prepare("SELECT * FROM threads WHERE id = ?1").unwrap();
    let names: Vec<String> = st.column_names().iter().map(|s| s.to_string()).collect();
    st.query_row([id], |r| {
        let mut row = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let v: rusqlite::types::Value = r.get(i)?;
            let mut text = format!("{v:?}");
            if name == "rollout_path" {
                text = text.replace(&root.display().to_string(), "<codex>");
            }
            row.insert(name.clone(), text);
        }
        Ok(row)
    })
    .unwrap_or_else(|e| panic!("no row for {id} in Codex's index: {e}"))
}

/// The row Codex's own import writes for the rollout `rel` of `h`: a Codex
/// folder of its own holding only that rollout (same place, same time of
/// last change), and Codex started there once, which imports it.
fn imported_by_codex(w: &World, h: &Host<'_>, rel: &Path, id: &str) -> BTreeMap<String, String> {
    let fresh = Device::new();
    let r = w.host(
        &fresh,
        "reference",
        (h.tz, h.offset),
        project(&fresh, "elsewhere"),
    );
    r.configure_codex();
    let from = codex(h.dev).join(rel);
    let to = codex(&fresh).join(rel);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(&from, &to).unwrap();
    let mtime = std::fs::metadata(&from).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(&to)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::create_dir_all(&r.project).unwrap();
    r.codex(&r.project, &["--skip-git-repo-check", "R0: start once"]);
    thread_row(&fresh, id)
}

#[test]
#[cfg_attr(
    evi_no_agent_clients,
    ignore = "needs the agents' clients: `cd .ci/agents && npm ci` (node and npm), \
              or EVI_AGENT_CLIENTS naming a folder with `claude` and `codex`"
)]
fn codex_resumes_a_synced_session_by_id_and_as_the_latest_on_every_device() {
    let w = World::new();
    let [a, b, c] = w.hosts();
    for h in [&a, &b, &c] {
        h.configure_codex();
    }
    // C has used Codex before, in another folder: its index exists.
    let elsewhere = project(&w.c, "other");
    std::fs::create_dir_all(&elsewhere).unwrap();
    c.codex(&elsewhere, &["--skip-git-repo-check", "C0: something else"]);

    // 1. Two turns on A; A pushes.
    let id = a.codex(&a.project, &["A1: where is the parser?"]);
    let again = a.codex(&a.project, &["resume", "--last", "A2: and the lexer?"]);
    assert_eq!(again, id, "resume --last went on with the session");
    w.assert_carried("A2: and the lexer?", &["A1: where is the parser?"]);
    a.sync(&["push"]);
    let rel_a = rollout(&w.a, &id);
    let first = std::fs::read_to_string(codex(&w.a).join(&rel_a)).unwrap();
    let meta: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    let started = meta["payload"]["timestamp"].as_str().unwrap().to_owned();
    assert_eq!(rel_a, named_by_local_time(&a, &started, &id));

    // 2. B pulls: the rollout is named by B's local time. Its Codex, which
    // never ran there, imports it, and resumes it as the latest in B's
    // checkout, then by id, each time with everything before.
    b.sync(&["pull"]);
    let rel_b = rollout(&w.b, &id);
    assert_eq!(rel_b, named_by_local_time(&b, &started, &id));
    let mut said = vec!["A1: where is the parser?", "A2: and the lexer?"];
    b.assert_seen_everywhere("codex", &id, &said, "parser");
    w.resume_each(
        "B",
        &id,
        &mut said,
        [
            (&["resume", "--last"], "B1: on the desktop now"),
            (&["resume", &id], "B2: the desktop again"),
        ],
        |args, p| b.codex(&b.project, &[args, &[p]].concat()),
    );
    b.sync(&["push"]);

    // 3. A pulls B's turns and resumes with them.
    a.sync(&["pull"]);
    let run = a.codex(&a.project, &["resume", &id, "A3: back on the laptop"]);
    assert_eq!(run, id);
    w.assert_carried("A3: back on the laptop", &said);
    said.push("A3: back on the laptop");
    a.sync(&["push"]);

    // 4. C, at A's path with no map, pulls: the session is entered in its
    // index as Codex's own import would have, and resumes by id and as the
    // latest in the folder.
    c.sync(&["pull"]);
    let rel_c = rollout(&w.c, &id);
    assert_eq!(rel_c, named_by_local_time(&c, &started, &id));
    let row = thread_row(&w.c, &id);
    let want = imported_by_codex(&w, &c, &rel_c, &id);
    let differ: Vec<String> = want
        .iter()
        .filter(|(k, v)| row.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: sync wrote {:?}, Codex {v}", row.get(k)))
        .collect();
    assert!(
        differ.is_empty(),
        "C's row differs from Codex's own import:\n  {}",
        differ.join("\n  ")
    );
    c.assert_seen_everywhere("codex", &id, &said, "parser");
    w.resume_each(
        "C",
        &id,
        &mut said,
        [
            (&["resume", &id], "C1: from the server"),
            (&["resume", "--last"], "C2: the server again"),
        ],
        |args, p| c.codex(&c.project, &[args, &[p]].concat()),
    );
    c.sync(&["push"]);
    for h in [&a, &b] {
        h.sync(&["pull"]);
    }

    // 5. Every device holds what the clients wrote, in the order they wrote
    // it: C's rollout is A's, byte for byte; B's is A's with B's checkout as
    // every `cwd`.
    let read = |d: &Device, rel: &Path| std::fs::read_to_string(codex(d).join(rel)).unwrap();
    let (fa, fb, fc) = (read(&w.a, &rel_a), read(&w.b, &rel_b), read(&w.c, &rel_c));
    for p in &said {
        assert!(fa.contains(p), "A's rollout lacks {p:?}");
    }
    assert_same_lines(&fc, &fa, "C's rollout against A's");
    assert_same_lines(
        &fb,
        &cwd_swapped(&fa, &a.project, &b.project),
        "B's rollout against A's with B's paths",
    );
    assert!(!fb.contains(&format!("\"cwd\":\"{}", a.project)));

    // 6. B reads every device's turns in every face.
    b.assert_seen_everywhere("codex", &id, &said, "parser");
}
