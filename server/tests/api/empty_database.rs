//! `evi-server invite --database URL` is how an operator of a new Postgres
//! deployment makes the first user's code, often before any replica has
//! started: on an empty database it creates the schema (the migrations a
//! start would run) and stores the code, which a server started on that
//! database afterwards accepts, once.

use std::process::Command;

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{Api, PASSWORD, TestDb, pg_exec, spawn};

#[tokio::test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn invite_on_an_empty_database_creates_the_schema_and_a_code_that_works() {
    let db = TestDb::create();
    let tables = |db: &TestDb| {
        pg_exec(
            &db.url,
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'invites'",
        )[0][0]
            .clone()
    };
    assert_eq!(
        tables(&db).as_deref(),
        Some("0"),
        "the database starts empty"
    );
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args(["invite", "--data"])
        .arg(root.path().join("data"))
        .args(["--database", &db.url])
        .env("EVI_SERVER_REGISTRATION", "invite")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let code = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(
        code.len() == 32 && code.bytes().all(|b| b.is_ascii_hexdigit()),
        "stdout holds the code alone: {code:?} ({stderr})"
    );
    assert_eq!(tables(&db).as_deref(), Some("1"), "the schema was created");
    let stored = pg_exec(&db.url, "SELECT count(*) FROM invites");
    assert_eq!(stored[0][0].as_deref(), Some("1"));

    // A server started on that database afterwards takes the code, once.
    let args: Vec<String> = ["--registration", "invite", "--database", &db.url]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (mut child, addr) = spawn(root.path(), &args, &[]);
    let anon = Api {
        http: crate::common::http(),
        base: format!("http://{addr}"),
        token: None,
    };
    let body =
        |user: &str| json!({"user": user, "password": PASSWORD, "device": "d", "invite": code});
    let (st, v) = anon.post("/api/v1/register", body("first")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = anon.post("/api/v1/register", body("second")).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "a code works once: {v}");
    let _ = child.kill();
    let _ = child.wait();
}
