//! One session fetched alone: `evi sessions resume ID` and `evi sync pull
//! --session ID` on a device that lacks the rest of the history, and the
//! full pull after them, which must neither miss nor double anything.

use crate::common::{Device, TestServer, assert_converged, held, sessions};

const DAY: &str = "2026-06-08";
const WANTED: &str = "01JONESESSIONWANTED";
const OTHER: &str = "01JONESESSIONOTHER";
const THIRD: &str = "01JONESESSIONTHIRD";

fn lines(what: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"role\":\"user\",\"content\":\"{what} {i}\",\"ts\":\"{DAY}T10:00:{i:02}Z\"}}\n"
            )
        })
        .collect()
}

fn no_entry_twice(dev: &Device, session: &str) {
    let all = held(dev, session);
    let mut ids: Vec<&str> = all.iter().map(|e| e.id.as_str()).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "{session}: an entry is there twice");
}

#[test]
fn resume_fetches_one_session_alone_and_the_next_pull_the_rest() {
    let (_server, a, b) = crate::common::two_devices();
    a.write(DAY, OTHER, lines("other", 5).as_bytes());
    a.write(DAY, WANTED, lines("wanted", 7).as_bytes());
    a.write(DAY, THIRD, lines("third", 3).as_bytes());
    a.sync_ok(&["push"]);

    let run = b.evi(&["sessions", "resume", WANTED, "--print"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        format!(
            "session {WANTED} is not on this device; fetching it from the server\n\
             pulled 7 entries in 1 sessions\n\
             resumed {WANTED} (7 messages restored)\n"
        )
    );
    // That session alone, and the global cursor where it was.
    assert_eq!(sessions(&b), [WANTED.to_owned()].into());
    assert_eq!(b.state()["cursor"], 0);

    // A prefix of a session that is not here cannot be looked up.
    let run = b.evi(&["sessions", "resume", "01JONESESSIONOTH", "--print"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.ends_with(
            "error: no session `01JONESESSIONOTH` on this device or on the server\n\
             hint: the server finds a session by its whole id only (as `evi sessions handoff` \
             prints it); for a prefix, run `evi sync pull` first to fetch every session\n"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(sessions(&b), [WANTED.to_owned()].into());

    // The laptop goes on with two sessions; `pull --session` by a local
    // prefix brings that one's new entries only.
    a.append(
        &format!("transcripts/{DAY}/{WANTED}.jsonl"),
        lines("wanted later", 2).as_bytes(),
    );
    a.append(
        &format!("transcripts/{DAY}/{OTHER}.jsonl"),
        lines("other later", 2).as_bytes(),
    );
    a.sync_ok(&["push"]);
    let out = b.sync_ok(&["pull", "--session", "01JONESESSIONWAN"]);
    assert_eq!(
        out,
        format!("pulled 2 entries of session {WANTED}; none diverged (both branches kept)\n")
    );
    assert_eq!(sessions(&b), [WANTED.to_owned()].into());
    // Fetched again: nothing new, nothing doubled.
    let out = b.sync_ok(&["pull", "--session", WANTED]);
    assert!(out.starts_with("pulled 0 entries"), "{out}");
    assert_eq!(held(&b, WANTED).len(), 9);

    // The full pull brings the rest and passes over what is here by id.
    let out = b.sync_ok(&["pull"]);
    assert!(
        out.starts_with("pulled 10 entries in 2 sessions"),
        "5 + 2 of one, 3 of the other: {out}"
    );
    assert_converged(&a, &b, "after the full pull");
    for s in [WANTED, OTHER, THIRD] {
        no_entry_twice(&b, s);
    }
    // The session cursor was passed, so it is forgotten.
    assert!(b.state().get("session_cursors").is_none(), "{}", b.state());
    // And pushing from here sends back nothing that came from the laptop.
    let out = b.sync_ok(&["push", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["entries"], 0, "{out}");
}

#[test]
fn a_session_on_no_device_and_a_bad_id_say_what_to_do() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let run = a.sync(&["sync", "pull", "--session", "NOSUCH"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: no session `NOSUCH` on this device or on the server\n\
         hint: the server finds a session by its whole id only (as `evi sessions handoff` \
         prints it); for a prefix, run `evi sync pull` first to fetch every session\n"
    );
    let run = a.sync(&["sync", "pull", "--session", "../x"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with("error: `../x` is not a session id"),
        "{}",
        run.stderr
    );
}
