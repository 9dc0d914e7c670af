//! Tests that read or rewrite the SQLite file behind the server's back:
//! only the SQLite target runs them.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{PASSWORD, TestServer, segment};

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
         ALTER TABLE records DROP COLUMN entry_id_bytes;",
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
