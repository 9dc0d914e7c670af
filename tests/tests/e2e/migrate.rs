//! `evi-server migrate` (issue 22): an embedded server with two devices'
//! history moved, while it and its devices are stopped, into a real
//! Postgres and a real S3-compatible bucket (s3s-fs); a new server on them,
//! at the old address, then takes the devices' pushes and pulls with the
//! tokens and cursors they had: no new login, no full pull. A move killed
//! half-way goes on when run again (and no server starts on its target
//! meanwhile); a finished one is not run again, so nothing the new server
//! deleted comes back.
//!
//! Needs `EVI_TEST_POSTGRES_URL` (a database where this test may create
//! and drop its own), `psql`, and `EVI_TEST_S3_SERVER` (the s3s-fs binary);
//! `.ci/run` provides all three. Outside CI a missing one skips the test
//! with a line saying so.

use std::path::Path;
use std::process::Command;

use crate::common::{Device, TestServer, bin, session_files, spawn_server, today, tool_present};
use crate::s3::S3Server;

/// A database of its own on the test Postgres, from the pool of
/// [`crate::pg_pool`].
struct Database {
    slot: crate::pg_pool::PooledDb,
}

impl Database {
    fn create() -> Option<Self> {
        let Some(admin) = std::env::var("EVI_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            assert!(
                std::env::var_os("CI").is_none(),
                "EVI_TEST_POSTGRES_URL must be set in CI (.ci/run sets it)"
            );
            eprintln!("skipped: EVI_TEST_POSTGRES_URL is not set");
            return None;
        };
        if !tool_present("psql", "--version", "apt-get install postgresql-client") {
            return None;
        }
        Some(Self {
            slot: crate::pg_pool::PooledDb::take(&admin),
        })
    }

    fn url(&self) -> String {
        self.slot.url.clone()
    }

    fn query(&self, sql: &str) -> String {
        psql(&self.url(), sql)
    }
}

fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-q", "-X", "-A", "-t", url, "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Every object's bytes in the test bucket, by path.
fn objects(bucket: &S3Server) -> Vec<(String, Vec<u8>)> {
    crate::common::tree(&bucket.root.path().join(crate::s3::BUCKET))
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

fn migrate(
    data: &Path,
    db: &Database,
    bucket: &S3Server,
    fault: Option<&str>,
) -> std::process::Output {
    let (store, env) = bucket.server_args("moved");
    let mut c = Command::new(bin("evi-server"));
    c.arg("--data")
        .arg(data)
        .args(["migrate", "--to-database", &db.url(), "--to-store", &store])
        .envs(env);
    if let Some(f) = fault {
        c.env("EVI_SERVER_FAULT", f);
    }
    c.output().expect("run evi-server migrate")
}

/// The new server, killed at the end.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get_json(url: &str, token: &str, path: &str) -> serde_json::Value {
    crate::common::http()
        .get(format!("{url}/api/v1/{path}"))
        .bearer_auth(token)
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .expect("GET from the new server")
}

/// Starts the server with `args` and `env` where it must refuse to start:
/// its exit code and stderr. One that starts anyway is killed after a while
/// (and has no exit code).
fn refused_start(args: &[&str], env: &[(&str, String)]) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin("evi-server"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(data.path())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn line(text: &str, n: usize) -> String {
    format!(
        "{{\"role\":\"user\",\"content\":\"{text} {n}\",\"ts\":\"{}T10:00:{n:02}Z\"}}\n",
        today()
    )
}

fn file(session: &str) -> String {
    format!("transcripts/{}/{session}.jsonl", today())
}

#[test]
fn a_moved_server_takes_its_devices_pushes_and_pulls_with_no_login_and_no_full_pull() {
    let (Some(db), Some(bucket)) = (Database::create(), S3Server::start()) else {
        return;
    };
    let mut old = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&old, "pat", "laptop");
    b.join_copying_key(&a, &old.url, "pat", "desktop");
    for n in 0..20 {
        a.append(
            &file("01JMOVEAAAAAAAAAAAAAAAAAAA"),
            line("before the move", n).as_bytes(),
        );
    }
    a.add_checkpoints(&today(), 6, 300_000, 7);
    a.sync_ok(&["push"]);
    b.append(
        &file("01JMOVEBBBBBBBBBBBBBBBBBBB"),
        line("from the desktop", 0).as_bytes(),
    );
    b.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    a.sync_ok(&["pull"]);
    let tokens = (a.token(), b.token());
    let cursor_before = b.state()["cursor"].clone();
    let old_status = old.get_json(&tokens.0, "status");
    old.kill();
    let addr = old.addr().to_owned();

    // Killed after the bodies, blobs, accounts and devices went over.
    let run = migrate(old.data.path(), &db, &bucket, Some("crash-mid-migrate"));
    assert!(!run.status.success(), "the fault did not stop the move");
    assert_eq!(db.query("SELECT count(*) FROM devices"), "2");
    assert_eq!(db.query("SELECT count(*) FROM records"), "0");
    let packs_after_crash = objects(&bucket).len();
    assert!(
        packs_after_crash > 0,
        "nothing went to the bucket before the crash"
    );
    // No server starts on the half-moved database: what it changed there
    // the move, run again, would undo.
    let (store, env) = bucket.server_args("moved");
    let url = db.url();
    let (code, out) = refused_start(&["--database", &url, "--store", &store], &env);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("into this database began at") && out.contains("did not finish"),
        "{out}"
    );
    assert!(
        out.contains("hint: run `evi-server migrate --data"),
        "{out}"
    );

    // Run again: it goes on, and checks everything.
    let run = migrate(old.data.path(), &db, &bucket, None);
    let out = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "migrate: {out}{err}");
    assert!(out.contains("verified:"), "{out}");
    // What the first run stored is not sent again.
    assert!(
        out.contains(&format!(
            "copied 0 packs (0 bytes) and 0 blobs (0 bytes), {} packs and 6 blobs were there already",
            packs_after_crash - 6
        )),
        "{out}"
    );
    assert!(
        err.contains("devices: 2 rows, 0 new in the target"),
        "{err}"
    );
    // Ciphertext only in the bucket: no session id or line text.
    for (path, bytes) in objects(&bucket) {
        for needle in [
            "01JMOVEAAAAAAAAAAAAAAAAAAA",
            "before the move",
            "from the desktop",
        ] {
            assert!(
                !path.contains(needle) && memchr::memmem::find(&bytes, needle.as_bytes()).is_none(),
                "{needle} in {path}"
            );
        }
    }

    // The new server: Postgres and the bucket, at the old address, with an
    // empty data folder.
    let fresh = tempfile::tempdir().unwrap();
    let (store, env) = bucket.server_args("moved");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = db.url();
    let (child, new_url) = spawn_server(
        fresh.path(),
        &addr,
        &["--database", &url, "--store", &store],
        &env,
        None,
    );
    let _new = Killed(child);
    assert_eq!(new_url, old.url);
    let status = get_json(&new_url, &tokens.0, "status");
    for k in ["newest_seq", "records", "entries", "blobs"] {
        assert_eq!(status[k], old_status[k], "{k} after the move");
    }

    // Both devices go on with their tokens; the desktop's pull brings only
    // what is new.
    a.append(
        &file("01JMOVEAAAAAAAAAAAAAAAAAAA"),
        line("after the move", 30).as_bytes(),
    );
    let pushed = a.sync_ok(&["push"]);
    assert!(pushed.contains("1 new records"), "{pushed}");
    let pulled = b.sync_ok(&["pull"]);
    assert!(pulled.contains("pulled 1 entries"), "{pulled}");
    assert_eq!(a.token(), tokens.0);
    assert_eq!(b.token(), tokens.1);
    assert!(b.state()["cursor"].as_u64() > cursor_before.as_u64());
    let want = std::fs::read(a.home().join(file("01JMOVEAAAAAAAAAAAAAAAAAAA"))).unwrap();
    let got = std::fs::read(b.home().join(file("01JMOVEAAAAAAAAAAAAAAAAAAA"))).unwrap();
    assert_eq!(got, want);
    // A new device gets the whole history, blobs too, from the new server.
    let c = Device::new();
    c.join_copying_key(&a, &new_url, "pat", "third");
    c.sync_ok(&["pull"]);
    crate::common::assert_converged(&a, &c, "a fresh device on the moved server");
    assert_eq!(
        c.tree("checkpoints/blobs").len(),
        6,
        "the blobs came from the bucket"
    );
}

#[test]
fn a_second_migrate_is_refused_and_brings_back_nothing_the_new_server_deleted() {
    const GONE: &str = "01JMOVEGONEAAAAAAAAAAAAAAA";
    const KEPT: &str = "01JMOVEKEPTAAAAAAAAAAAAAAA";
    let (Some(db), Some(bucket)) = (Database::create(), S3Server::start()) else {
        return;
    };
    let mut old = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&old, "pat", "laptop");
    b.join_copying_key(&a, &old.url, "pat", "desktop");
    a.append(&file(GONE), line("forget this", 0).as_bytes());
    a.append(&file(KEPT), line("keep this", 0).as_bytes());
    a.sync_ok(&["push"]);
    old.kill();
    let addr = old.addr().to_owned();
    let run = migrate(old.data.path(), &db, &bucket, None);
    assert!(
        run.status.success(),
        "migrate: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    // On the new server: the desktop, stolen, is revoked, and a session is
    // forgotten.
    let fresh = tempfile::tempdir().unwrap();
    let (store, env) = bucket.server_args("moved");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = db.url();
    let args = ["--database", url.as_str(), "--store", store.as_str()];
    let (child, new_url) = spawn_server(fresh.path(), &addr, &args, &env, None);
    let new = Killed(child);
    let run = a.sync(&["sync", "revoke", "desktop"]);
    assert_eq!(run.code, 0, "revoke: {}", run.stderr);
    let run = a.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    drop(new);
    let rows = |db: &Database| {
        [
            "SELECT count(*) FROM devices",
            "SELECT count(*) FROM records",
            "SELECT count(*) FROM entries",
        ]
        .map(|q| db.query(q))
    };
    let (rows_before, objects_before) = (rows(&db), objects(&bucket));

    // The operator runs migrate again: refused, and nothing changed.
    let run = migrate(old.data.path(), &db, &bucket, None);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "migrate ran again: {err}");
    assert!(
        err.contains("already holds the finished migrate of")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(rows(&db), rows_before, "the second run changed rows");
    assert!(
        objects(&bucket) == objects_before,
        "the second run changed the bucket"
    );

    // The new server again: the desktop stays revoked, and a new device
    // gets no byte of the forgotten session.
    let (child, new_url_again) = spawn_server(fresh.path(), &addr, &args, &env, None);
    let _new = Killed(child);
    assert_eq!(new_url_again, new_url);
    let run = b.sync(&["sync", "pull"]);
    assert_ne!(run.code, 0, "the revoked desktop pulled: {}", run.stdout);
    let listed = a.sync_ok(&["devices"]);
    assert!(!listed.contains("desktop"), "{listed}");
    let c = Device::new();
    c.join_copying_key(&a, &new_url, "pat", "third");
    c.sync_ok(&["pull"]);
    assert!(
        session_files(&c, GONE).is_empty(),
        "the forgotten session came back"
    );
    assert!(!session_files(&c, KEPT).is_empty());
}
