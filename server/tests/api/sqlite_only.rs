//! Tests that read or rewrite the SQLite file behind the server's back:
//! only the SQLite target runs them.

use evi_server::store::{blob_cost, record_cost};
use reqwest::StatusCode;
use serde_json::json;
use sha2::Digest as _;

use crate::common::{PASSWORD, TestServer, kid, segment};
use crate::wire::seg;

/// Device names of the account `user` logs in to with `password`.
async fn devices_of(srv: &TestServer, user: &str) -> (StatusCode, Vec<String>) {
    let anon = srv.anon();
    let (st, v) = anon
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": "probe"}),
        )
        .await;
    if st != StatusCode::OK {
        return (st, Vec::new());
    }
    let (_, d) = anon
        .with_token(v["token"].as_str().unwrap())
        .get("/api/v1/devices")
        .await;
    let names = d["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    (st, names)
}

#[tokio::test]
async fn accounts_from_before_that_differ_only_in_case_keep_working() {
    let mut srv = TestServer::start(&["--auth-rate-per-user", "100"]);
    srv.register("bob").await;
    srv.stop();
    // An older server let `Bob` register beside `bob`; make that database
    // (as it was before the case rule: that migration and the later ones
    // undone).
    let db = rusqlite::Connection::open(srv.data().join("evi-server.sqlite3")).unwrap();
    db.execute_batch(
        "INSERT INTO users (name, password_hash, created_at)
             SELECT 'Bob', password_hash, created_at FROM users WHERE name = 'bob';
         DROP INDEX IF EXISTS users_by_name_nocase;
         ALTER TABLE records DROP COLUMN entry_id_bytes;
         DROP INDEX IF EXISTS users_staging;
         ALTER TABLE users DROP COLUMN key_generation;
         ALTER TABLE users DROP COLUMN rotated_at;
         ALTER TABLE users DROP COLUMN rotated_by;
         ALTER TABLE users DROP COLUMN staging_of;
         ALTER TABLE users DROP COLUMN retired_at;
         ALTER TABLE devices DROP COLUMN key_generation;
         DROP INDEX IF EXISTS blobs_by_part_of;
         ALTER TABLE blobs DROP COLUMN part_of;
         ALTER TABLE forget_compactions DROP COLUMN repointed_at;
         ALTER TABLE users DROP COLUMN staging_by;
         DROP INDEX IF EXISTS records_by_group;
         ALTER TABLE records DROP COLUMN group_stream;
         ALTER TABLE pair_slots DROP COLUMN minted_at;
         ALTER TABLE pair_slots DROP COLUMN minted_device;
         ALTER TABLE users DROP COLUMN key_proof_hash;
         ALTER TABLE users DROP COLUMN disabled_at;
         ALTER TABLE users DROP COLUMN quota_bytes;
         ALTER TABLE invites DROP COLUMN expires_at;
         DROP TABLE server_settings;",
    )
    .unwrap();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    db.pragma_update(None, "user_version", version.min(3))
        .unwrap();
    drop(db);
    srv.start_again();

    // Each logs in under its exact name, to its own devices.
    assert_eq!(
        devices_of(&srv, "bob").await,
        (StatusCode::OK, vec!["first".to_owned(), "probe".to_owned()])
    );
    assert_eq!(
        devices_of(&srv, "Bob").await,
        (StatusCode::OK, vec!["probe".to_owned()])
    );
    // A spelling that matches both is neither.
    assert_eq!(devices_of(&srv, "BOB").await.0, StatusCode::UNAUTHORIZED);
    // And no third spelling can register.
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/register",
            json!({"user": "BoB", "password": PASSWORD, "device": "d"}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("user_exists")),
        "{v}"
    );
}

#[tokio::test]
async fn a_stream_is_read_through_its_index() {
    let srv = TestServer::start(&[]);
    let a = srv.register("plan").await;
    a.push(vec![segment(1, 1, 10)]).await;
    let db = rusqlite::Connection::open(srv.data().join("evi-server.sqlite3")).unwrap();
    let plan: Vec<String> = db
        .prepare(
            "EXPLAIN QUERY PLAN SELECT seq FROM records WHERE user_id = 1 AND stream = 'x'
             AND seq > 0 ORDER BY seq LIMIT 10",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("records_by_stream") && !plan.contains("TEMP B-TREE"),
        "a full scan or a sort: {plan}"
    );
}

// A database from before packs, as bodies.rs once held: the SQLite file is
// what such a server left. A Postgres database was never without packs
// (`evi-server migrate` carries such inline bodies over into its rows).

const TOKEN: &str = "evi_0000000000000000000000000000000000000000000000000000000000000001";

/// A data folder as the server before packs left it: the first two
/// migrations, one user with a device (token [`TOKEN`]) and `n` records of
/// inline ciphertext `[i; 100 + i]`, entry ids as [`segment`] makes them.
fn old_data_folder(n: u64) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = rusqlite::Connection::open(data.join("evi-server.sqlite3")).unwrap();
    db.execute_batch(include_str!("../../migrations/sqlite/0001_init.sql"))
        .unwrap();
    db.execute_batch(include_str!(
        "../../migrations/sqlite/0002_record_device.sql"
    ))
    .unwrap();
    db.pragma_update(None, "user_version", 2).unwrap();
    let hash: [u8; 32] = sha2::Sha256::digest(TOKEN.as_bytes()).into();
    let mut bytes = 0;
    db.execute(
        "INSERT INTO users (id, name, password_hash, created_at) VALUES (1, 'old', 'x', 0)",
        [],
    )
    .unwrap();
    db.execute(
        "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at)
         VALUES ('dev-old', 1, 'old', ?1, 0, 0)",
        [&hash[..]],
    )
    .unwrap();
    for i in 1..=n {
        let s = segment(1, i, 0);
        let entry = s["entry_ids"][0].as_str().unwrap();
        let ct = vec![i as u8; 100 + i as usize];
        bytes += ct.len() as i64;
        db.execute(
            "INSERT INTO records (user_id, seq, stream, kind, entry_ids, ciphertext, created_at, device_id)
             VALUES (1, ?1, ?2, 'entries', ?3, ?4, 0, 'dev-old')",
            rusqlite::params![i as i64, s["stream"].as_str().unwrap(), entry, ct],
        )
        .unwrap();
        db.execute(
            "INSERT INTO entries (user_id, entry_id, seq) VALUES (1, ?1, ?2)",
            rusqlite::params![hex::decode(entry).unwrap(), i as i64],
        )
        .unwrap();
    }
    // And one blob of 1000 bytes (its row: status only reads the counters).
    db.execute(
        "INSERT INTO blobs (user_id, name, size, created_at) VALUES (1, ?1, 1000, 0)",
        [kid(4, 1)],
    )
    .unwrap();
    bytes += 1000;
    db.execute(
        "UPDATE users SET newest_seq = ?1, record_count = ?1, entry_count = ?1, blob_count = 1,
         bytes_used = ?2",
        rusqlite::params![n as i64, bytes],
    )
    .unwrap();
    root
}

#[tokio::test]
async fn a_database_from_before_packs_still_serves_its_records() {
    let srv = TestServer::start_in(old_data_folder(5), &[], &[]);
    let a = srv.anon().with_token(TOKEN);
    let (st, status) = a.get("/api/v1/status").await;
    assert_eq!(st, StatusCode::OK, "{status}");
    assert_eq!(status["records"], 5);
    // Usage counted again as the quota counts it now: rows and ids too.
    let bodies: u64 = (1..=5).map(|i| 100 + i).sum();
    assert_eq!(
        status["bytes_used"],
        bodies + 5 * record_cost(0, 1) + blob_cost(1000)
    );

    // Old records, inline in their rows, on both wires.
    let (json_all, _) = a.pull_all(None).await;
    assert_eq!(json_all.len(), 5);
    let p = a.pull_frames_page(0, None).await;
    assert_eq!(p.records.len(), 5);
    for (i, (h, body)) in p.records.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(h.seq, n);
        assert_eq!(h.device.as_deref(), Some("dev-old"));
        assert_eq!(body, &vec![n as u8; 100 + n as usize]);
    }

    // Their entry ids are still known: a retry of an old one is dropped, a
    // new one goes into a pack after them.
    let v = a.push(vec![segment(1, 3, 10), segment(1, 6, 10)]).await;
    assert_eq!(
        (
            v["stored"].as_u64(),
            v["dropped"].as_u64(),
            v["newest_seq"].as_u64()
        ),
        (Some(1), Some(1), Some(6))
    );
    let mut new = seg(1, 7, 50);
    new.body = vec![0xee; 50];
    a.push_frames(&[new]).await;
    let (all, _) = a.pull_all_frames().await;
    let seqs: Vec<u64> = all.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    assert_eq!(all[5].1, vec![6u8; 10]);
    assert_eq!(all[6].1, vec![0xee; 50]);
    assert_eq!(srv.packs().len(), 2);
    assert_eq!(srv.assert_every_row_has_its_body(), 2);
    // Old rows keep their ids as hex text; new ones hold the raw MACs, half
    // the bytes.
    let db = rusqlite::Connection::open(srv.data().join("evi-server.sqlite3")).unwrap();
    let forms: Vec<(i64, i64, Option<i64>)> = db
        .prepare("SELECT seq, length(entry_ids), length(entry_id_bytes) FROM records ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut want: Vec<(i64, i64, Option<i64>)> = (1..=5).map(|i| (i, 64, None)).collect();
    want.extend([(6, 0, Some(32)), (7, 0, Some(32))]);
    assert_eq!(forms, want);
}

/// A data folder whose database a newer server migrated past what this
/// binary knows is refused at start, saying so, as a Postgres database is
/// (`replicas::a_database_migrated_by_a_newer_server_is_refused_at_start`),
/// and left as it was; `invite` refuses it too.
#[test]
fn a_database_migrated_by_a_newer_server_is_refused_at_start() {
    let mut srv = TestServer::start(&[]);
    srv.stop();
    let file = srv.data().join("evi-server.sqlite3");
    let version = |db: &rusqlite::Connection| -> i64 {
        db.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    };
    let db = rusqlite::Connection::open(&file).unwrap();
    let known = version(&db);
    db.pragma_update(None, "user_version", known + 30).unwrap();
    drop(db);
    let want = format!(
        "was migrated by a newer evi-server (schema version {}; this one knows up to \
         {known}); upgrade this one",
        known + 30
    );
    // Spawned, not run to its end: a server that starts anyway is killed
    // after a while (and the test fails) instead of holding the test.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(srv.data())
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
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.stdout.is_empty(),
        "it started: {}{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&want), "{err}");
    let out = srv.invite_cmd().output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&want), "{err}");
    let db = rusqlite::Connection::open(&file).unwrap();
    assert_eq!(version(&db), known + 30, "the database was changed");
}
