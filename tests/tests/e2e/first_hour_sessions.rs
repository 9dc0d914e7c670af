//! The first hour (issue 9), sessions, devices and status: a missing home is
//! named and left alone, id prefixes ignore case, `--limit 0` is misuse,
//! `sync status` counts only what a pull would bring and shows local times,
//! and `resume` pulls first.

use std::time::{Duration, Instant};

use crate::common::{Device, TestServer, tree};

const NOT_SET_UP_HINT: &str = "hint: run `evi sync init --server URL --user NAME` on your first \
                               device, or `evi sync login --server URL --user NAME` on another\n";

fn user(text: &str, ts: &str) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{text}\",\"ts\":\"{ts}\"}}\n")
}

fn assistant(text: &str, ts: &str) -> String {
    format!("{{\"role\":\"assistant\",\"content\":\"{text}\",\"ts\":\"{ts}\"}}\n")
}

#[test]
fn a_missing_home_is_named_and_reading_creates_nothing() {
    let dev = Device::new();
    let home = dev.home();
    assert!(!home.exists());
    let absent = "EVI_HOME points to a folder that does not exist";
    let not_set_up = format!(
        "error: the eVi home {} is not set up for sync: {absent}\n{NOT_SET_UP_HINT}",
        home.display()
    );
    for args in [
        &["sync", "status"][..],
        &["sync", "status", "--json"],
        &["sync", "devices"],
        &["sync", "push"],
    ] {
        let run = dev.evi(args);
        assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{args:?}");
        assert_eq!(run.stderr, not_set_up, "{args:?}");
    }
    let warning = format!(
        "warning: there is no eVi home at {} ({absent})\n",
        home.display()
    );
    let run = dev.evi(&["sessions", "list"]);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""));
    assert_eq!(run.stderr, warning);
    for args in [
        &["sessions", "show", "01je"][..],
        &["sessions", "export", "01je"],
    ] {
        let run = dev.evi(args);
        assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{args:?}");
        assert_eq!(
            run.stderr,
            format!(
                "{warning}error: no session matches `01je`\n\
                 hint: `evi sessions list --days 3650` shows the ids of every session\n"
            ),
            "{args:?}"
        );
    }
    assert!(!home.exists(), "nothing was created at {}", home.display());
    assert!(tree(dev.dir.path()).is_empty());

    // A home that exists but is not set up: named, and no `sync/` made.
    dev.write_config("");
    let run = dev.evi(&["sync", "status"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error: the eVi home {} is not set up for sync\n{NOT_SET_UP_HINT}",
            home.display()
        )
    );
    assert!(!home.join("sync").exists());
}

const A: &str = "01JEA7Q2N8C3VQ7ZK0D5R4M9XA";
const B: &str = "01JEB1C2D3E4F5G6H7J8K9M0NB";

#[test]
fn session_id_prefixes_ignore_case() {
    let dev = Device::new();
    let ts = "2026-06-08T21:14:00Z";
    dev.write("2026-06-08", A, user("first", ts).as_bytes());
    dev.write("2026-06-08", B, user("second", ts).as_bytes());

    let run = dev.evi(&["sessions", "show", "01jea"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "session {A} (1 messages, 1 branch, 2026-06-08 21:14 → 2026-06-08 21:14)\n\
             \n#1 user  2026-06-08 21:14:00\nfirst\n"
        )
    );
    let run = dev.evi(&["sessions", "export", "01jeb", "-f", "md"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("second"), "{}", run.stdout);
    let run = dev.evi(&["sessions", "resume", "01jeb", "--print"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, format!("resumed {B} (1 messages restored)\n"));
    // The exact id, in any case, and a mixed-case prefix.
    for id in [&A.to_lowercase()[..], "01JeA7"] {
        let run = dev.evi(&["sessions", "show", id]);
        assert_eq!(run.code, 0, "{id}: {}", run.stderr);
        assert!(run.stdout.starts_with(&format!("session {A} ")), "{id}");
    }

    let run = dev.evi(&["sessions", "show", "01je"]);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""));
    assert_eq!(
        run.stderr,
        format!(
            "error: `01je` matches 2 sessions:\n  {A}\n  {B}\n\
             hint: type more characters of the id\n"
        )
    );
}

#[test]
fn sessions_list_limit_zero_is_a_usage_error() {
    let dev = Device::new();
    dev.write(
        "2026-06-08",
        A,
        user("first", "2026-06-08T21:14:00Z").as_bytes(),
    );
    let run = dev.evi(&["sessions", "list", "--limit", "0"]);
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "error: --limit must be at least 1\n");
}

/// `sync devices --json` as (id, name), in the server's order.
fn devices(dev: &Device) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(&dev.sync_ok(&["devices", "--json"])).unwrap();
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap().to_owned(),
                d["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The shortest prefix (at least 12 characters) of `id` no other id shares.
fn unique_prefix(id: &str, all: &[(String, String)]) -> String {
    (12..=id.len())
        .map(|n| &id[..n])
        .find(|p| all.iter().filter(|(i, _)| i.starts_with(p)).count() == 1)
        .unwrap()
        .to_owned()
}

#[test]
fn revoke_takes_a_device_id_prefix_in_any_case() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    let c = Device::new();
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    c.join_copying_key(&a, &server.url, "pat", "tablet");
    let all = devices(&a);
    assert_eq!(all.len(), 3);

    // Every id starts with the same two characters (a ULID's time): ambiguous.
    let run = a.evi(&["sync", "revoke", "01"]);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""));
    let mut want = "error: `01` matches 3 device ids:\n".to_owned();
    for (id, name) in &all {
        want.push_str(&format!("  {id}  {name}\n"));
    }
    want.push_str("hint: type more characters of the id\n");
    assert_eq!(run.stderr, want);

    let run = a.evi(&["sync", "revoke", "zz9"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: no device is named \"zz9\" or has an id starting with it\n\
         hint: `evi sync devices` lists them\n"
    );

    // An upper-case prefix of the (lower-case) id of `desktop`.
    let (desktop, _) = all.iter().find(|(_, n)| n == "desktop").unwrap();
    let prefix = unique_prefix(desktop, &all).to_uppercase();
    let run = a.evi(&["sync", "revoke", &prefix]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("revoked desktop ({desktop})\n"));
    // Names still work.
    let (tablet, _) = all.iter().find(|(_, n)| n == "tablet").unwrap();
    let run = a.evi(&["sync", "revoke", "tablet"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("revoked tablet ({tablet})\n"));
    assert_eq!(devices(&a).len(), 1);
}

/// The `to pull:` line of `sync status`, and its `--json` count.
fn to_pull(dev: &Device) -> (String, u64) {
    let text = dev.sync_ok(&["status"]);
    let line = text
        .lines()
        .find(|l| l.starts_with("to pull:"))
        .unwrap()
        .to_owned();
    let v: serde_json::Value = serde_json::from_str(&dev.sync_ok(&["status", "--json"])).unwrap();
    (line, v["remote_pending_records"].as_u64().unwrap())
}

#[test]
fn status_counts_only_other_devices_records_and_shows_local_time() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let ts = "2026-06-08T21:14:00Z";
    a.write("2026-06-08", A, user("from a", ts).as_bytes());
    a.sync_ok(&["push"]);
    assert_eq!(to_pull(&a), ("to pull:   0 records".to_owned(), 0));

    b.write("2026-06-08", B, user("from b", ts).as_bytes());
    b.sync_ok(&["push"]);
    let pushed_by = |dev: &Device| {
        let id = dev.state()["account"]["device_id"].clone();
        let n = server
            .records(&dev.token())
            .iter()
            .filter(|r| r["device"] == id)
            .count() as u64;
        assert!(n > 0);
        n
    };
    let (from_a, from_b) = (pushed_by(&a), pushed_by(&b));
    assert_eq!(
        to_pull(&a),
        (format!("to pull:   {from_b} records"), from_b)
    );
    // b never pulled: a's records are b's to pull, its own are not.
    assert_eq!(
        to_pull(&b),
        (format!("to pull:   {from_a} records"), from_a)
    );
    a.sync_ok(&["pull"]);
    assert_eq!(to_pull(&a).1, 0);
    // The count is the server's, documented in its OpenAPI.
    let api = server.get_json(&a.token(), "openapi.json");
    let status = &api["paths"]["/api/v1/status"]["get"];
    assert_eq!(status["parameters"][0]["name"], "after");
    let schema = &api["components"]["schemas"]["StatusResponse"];
    assert!(schema["properties"]["pending_for_device"].is_object());

    // Local time to the minute, as `sessions list`; `--json` keeps RFC 3339.
    let v: serde_json::Value = serde_json::from_str(&a.sync_ok(&["status", "--json"])).unwrap();
    let at = |k: &str| {
        let raw = v[k].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(raw).is_ok(), "{raw}");
        chrono::DateTime::parse_from_rfc3339(raw).unwrap()
    };
    let kolkata = chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap();
    let run = a
        .sync_cmd()
        .env("TZ", "Asia/Kolkata")
        .args(["sync", "status"])
        .output()
        .unwrap();
    let text = String::from_utf8(run.stdout).unwrap();
    for (label, key) in [("last push: ", "last_push"), ("last pull: ", "last_pull")] {
        let want = format!(
            "{label}{}",
            at(key).with_timezone(&kolkata).format("%Y-%m-%d %H:%M")
        );
        assert!(text.lines().any(|l| l == want), "{want:?} in\n{text}");
    }
}

#[test]
fn resume_pulls_a_stale_copy_first_and_says_when_it_cannot() {
    let mut server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    a.write(
        "2026-06-08",
        A,
        (user("hello", "2026-06-08T21:14:00Z") + &assistant("hi", "2026-06-08T21:14:01Z"))
            .as_bytes(),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    // a goes on with the conversation; b's copy is now behind.
    a.append(
        &format!("transcripts/2026-06-08/{A}.jsonl"),
        user("one more thing", "2026-06-08T21:15:00Z").as_bytes(),
    );
    a.sync_ok(&["push"]);

    let run = b.evi(&["sessions", "resume", "01jea", "--print"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        format!("pulled 1 entries in 1 sessions\nresumed {A} (3 messages restored)\n")
    );
    assert!(run.stdout.contains("one more thing"), "{}", run.stdout);

    // Up to date: nothing said about the pull.
    let run = b.evi(&["sessions", "resume", A, "--print"]);
    assert_eq!(run.stderr, format!("resumed {A} (3 messages restored)\n"));

    // The server is gone: said, quickly, and the local copy resumes.
    server.kill();
    let start = Instant::now();
    let run = b.evi(&["sessions", "resume", A, "--print"]);
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (warning, resumed) = run.stderr.split_once('\n').unwrap();
    assert!(
        warning.starts_with(&format!(
            "warning: could not pull first (cannot reach {}",
            server.url
        )),
        "{warning}"
    );
    assert!(
        warning.ends_with("): resuming the copy on this device, which may be older"),
        "{warning}"
    );
    assert_eq!(resumed, format!("resumed {A} (3 messages restored)\n"));
    assert!(run.stdout.contains("one more thing"));

    // Something on the port takes the connection and never answers: the
    // pull gives up after its short timeout and says that it timed out.
    let addr = server.url.trim_start_matches("http://");
    let hole = std::net::TcpListener::bind(addr).expect("bind the server's old port");
    let held = std::thread::spawn(move || {
        let conn = hole.accept();
        std::thread::sleep(Duration::from_secs(15));
        drop(conn);
    });
    let start = Instant::now();
    let run = b.evi(&["sessions", "resume", A, "--print"]);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        format!(
            "warning: could not pull first (cannot reach {}: timed out): \
             resuming the copy on this device, which may be older\n\
             resumed {A} (3 messages restored)\n",
            server.url
        )
    );
    drop(held);
}
